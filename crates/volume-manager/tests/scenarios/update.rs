//! Live updates: an object change reaches every volume that reads it without a pod resync
//! (UP-1 … UP-4 and beyond; E2E-9, E2E-11, E2E-12, E2E-13, E2E-18).

use std::fs;

use nodelet_core::ObjectKind;
use nodelet_core::events::reasons;
use serde_json::json;

use crate::support::*;

fn no_resync(config: &mut nodelet_volume_manager::Config) {
    // Prove that the change notification, not the safety-net resync, moves the content.
    config.resync_interval = None;
}

fn options() -> Options {
    Options {
        configure: no_resync,
        ..Options::default()
    }
}

// E2E-9: an update is reflected in the volume.
#[tokio::test]
async fn a_content_change_reaches_the_volume_without_a_pod_resync() {
    let env = Env::start_with(options()).await;
    env.create(config_map("cm", json!({"data-1": "value-1"})));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, CM, "cfg");
    let before = fs::read_link(dir.join("..data")).unwrap();

    env.update(config_map("cm", json!({"data-1": "value-2"})));
    env.until("value-2 visible", || {
        files(&dir) == text(&[("data-1", "value-2")])
    })
    .await;
    assert_ne!(fs::read_link(dir.join("..data")).unwrap(), before);
}

// Keys added and removed appear and disappear; a secret too.
#[tokio::test]
async fn keys_added_and_removed_appear_and_disappear() {
    let env = Env::start_with(options()).await;
    env.create(config_map("cm", fixture_data()));
    env.create(secret("s", &[("a", "1")]));
    let pod = env.create_pod(
        "p",
        json!([{"name": "cfg", "configMap": {"name": "cm"}},
               {"name": "sec", "secret": {"secretName": "s"}}]),
    );
    env.add_and_mount(&pod).await;
    let cfg = env.dir(&pod, CM, "cfg");
    let sec = env.dir(&pod, SECRET, "sec");

    env.update(config_map(
        "cm",
        json!({"data-1": "value-1", "data-4": "value-4"}),
    ));
    env.update(secret("s", &[("b", "2")]));
    // The visible files change at the `..data` swap; the top-level symlinks of removed keys go
    // a moment later (AW-5), so wait for both rather than asserting right after the swap.
    env.until("keys changed and removed keys' symlinks gone", || {
        files(&cfg) == text(&[("data-1", "value-1"), ("data-4", "value-4")])
            && files(&sec) == text(&[("b", "2")])
            && fs::symlink_metadata(cfg.join("data-2")).is_err()
            && fs::symlink_metadata(sec.join("a")).is_err()
    })
    .await;
}

// E2E-11 (configMap) and E2E-18 (secret): delete / update / create of optional objects after
// the pod started.
#[tokio::test]
async fn optional_objects_deleted_updated_and_created_after_mount_are_reflected() {
    let env = Env::start_with(options()).await;
    env.create(config_map("cm-del", json!({"data-1": "value-1"})));
    env.create(config_map("cm-upd", json!({"data-1": "value-1"})));
    env.create(secret("s-del", &[("data-1", "value-1")]));
    env.create(secret("s-upd", &[("data-1", "value-1")]));
    let pod = env.create_pod(
        "p",
        json!([
            {"name": "delete-cm", "configMap": {"name": "cm-del", "optional": true}},
            {"name": "update-cm", "configMap": {"name": "cm-upd", "optional": true}},
            {"name": "create-cm", "configMap": {"name": "cm-new", "optional": true}},
            {"name": "delete-s", "secret": {"secretName": "s-del", "optional": true}},
            {"name": "update-s", "secret": {"secretName": "s-upd", "optional": true}},
            {"name": "create-s", "secret": {"secretName": "s-new", "optional": true}}
        ]),
    );
    env.add_and_mount(&pod).await;
    assert!(files(&env.dir(&pod, CM, "create-cm")).is_empty());

    env.delete("ConfigMap", "cm-del");
    env.delete("Secret", "s-del");
    env.update(config_map("cm-upd", json!({"data-3": "value-3"})));
    env.update(secret("s-upd", &[("data-3", "value-3")]));
    env.create(config_map("cm-new", json!({"data-1": "value-1"})));
    env.create(secret("s-new", &[("data-1", "value-1")]));

    let d = |plugin: &str, name: &str| env.dir(&pod, plugin, name);
    env.until("all six volumes updated", || {
        files(&d(CM, "delete-cm")).is_empty()
            && files(&d(SECRET, "delete-s")).is_empty()
            && files(&d(CM, "update-cm")) == text(&[("data-3", "value-3")])
            && files(&d(SECRET, "update-s")) == text(&[("data-3", "value-3")])
            && files(&d(CM, "create-cm")) == text(&[("data-1", "value-1")])
            && files(&d(SECRET, "create-s")) == text(&[("data-1", "value-1")])
    })
    .await;
    assert!(env.events.with_reason(reasons::FAILED_MOUNT).is_empty());
}

// UP-4: deleting a non-optional object keeps the last content and reports FailedMount.
#[tokio::test]
async fn deleting_a_non_optional_object_keeps_the_last_content_and_reports_it() {
    let env = Env::start_with(options()).await;
    env.create(config_map("cm", fixture_data()));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    env.delete("ConfigMap", "cm");
    let event = env.event(|e| e.reason == reasons::FAILED_MOUNT).await;
    assert_eq!(
        event.message,
        r#"MountVolume.SetUp failed for volume "cfg" : configmap "cm" not found"#
    );
    let dir = env.dir(&pod, CM, "cfg");
    assert_eq!(files(&dir).len(), 3);
    // A mounted volume stays mounted (VM-11 does not wait for remounts).
    within(env.vm.wait_for_attach_and_mount(&admitted(&pod)))
        .await
        .unwrap();
}

// E2E-13, UP-4: an immutable object cannot change; its volume keeps its content.
#[tokio::test]
async fn an_immutable_object_keeps_its_volume_content() {
    let env = Env::start_with(options()).await;
    env.create(
        ConfigMapBuilder::new("default", "frozen")
            .data("k", "v1")
            .immutable()
            .json(),
    );
    let pod = env.create_pod(
        "p",
        json!([{"name": "cfg", "configMap": {"name": "frozen"}}]),
    );
    env.add_and_mount(&pod).await;
    let rejected = env.api.update(
        ConfigMapBuilder::new("default", "frozen")
            .data("k", "v2")
            .immutable()
            .json(),
    );
    assert!(rejected.is_err());
    env.vm.update_pod(&admitted(&pod));
    within(env.vm.wait_for_attach_and_mount(&admitted(&pod)))
        .await
        .unwrap();
    assert_eq!(files(&env.dir(&pod, CM, "cfg")), text(&[("k", "v1")]));
}

// VM-2, E2E-12: one object in two volumes of one pod and in a second pod; all follow.
#[tokio::test]
async fn one_object_in_several_volumes_and_pods_updates_all_of_them() {
    let env = Env::start_with(options()).await;
    env.create(config_map("cm", json!({"data-1": "value-1"})));
    let volumes = json!([{"name": "one", "configMap": {"name": "cm"}},
                         {"name": "two", "configMap": {"name": "cm"}}]);
    let a = env.create_pod("a", volumes.clone());
    let b = env.create_pod("b", json!([{"name": "one", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&a).await;
    env.add_and_mount(&b).await;
    env.update(config_map("cm", json!({"data-1": "value-2"})));
    let dirs = [
        env.dir(&a, CM, "one"),
        env.dir(&a, CM, "two"),
        env.dir(&b, CM, "one"),
    ];
    env.until("three volumes updated", || {
        dirs.iter()
            .all(|d| files(d) == text(&[("data-1", "value-2")]))
    })
    .await;
}

// Regression (a reload signal lost under load): a remount for a pod sync can read an object's
// new content before the object's change notification reaches the reconciler; the
// notification's own remount then finds nothing to write. The write itself is reported (with
// no change time), so an observer acting on new content misses none; a remount that wrote
// nothing and took in no change is not reported. The Get strategy sends no notifications: the
// pod sync alone moves the content here.
#[tokio::test]
async fn a_remount_that_wrote_new_content_is_reported_even_without_a_change_notification() {
    let env = Env::start_with(Options {
        strategy: nodelet_object_manager::Strategy::Get,
        ..options()
    })
    .await;
    let mut updates = env.vm.subscribe_updates();
    env.create(config_map("cm", json!({"data-1": "value-1"})));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    let uid = nodelet_core::PodUid::from_pod(&pod).unwrap();
    let dir = env.dir(&pod, CM, "cfg");
    let remounted = || !env.vm.snapshot()[0].volumes[0].remount_pending;

    // A sync with nothing new: the remount writes nothing and is not reported.
    assert!(env.vm.reprocess_pod(&uid));
    env.until("the remount done", remounted).await;
    assert!(updates.try_recv().is_err(), "nothing was written");

    let changed = env.update(config_map("cm", json!({"data-1": "value-2"})));
    assert!(env.vm.reprocess_pod(&uid));
    let update = within(updates.recv()).await.unwrap();
    assert_eq!(files(&dir), text(&[("data-1", "value-2")]));
    assert!(update.written);
    assert_eq!(
        update.change_seen, None,
        "no change notification was taken in"
    );
    assert_eq!(update.volume, "cfg");
    let [object] = update.objects.as_slice() else {
        panic!("one object expected: {:?}", update.objects)
    };
    assert_eq!(
        object.resource_version.as_deref(),
        changed["metadata"]["resourceVersion"].as_str()
    );
}

// The observer seam (`VolumeManager::subscribe_updates`): a remount caused by an object change
// is reported once its `..data` swap is on disk, with the object's new resourceVersion and the
// time the change was seen; the first mount is not an update and is not reported.
#[tokio::test]
async fn a_remount_after_an_object_change_is_reported_to_update_subscribers() {
    let env = Env::start_with(options()).await;
    let mut updates = env.vm.subscribe_updates();
    env.create(config_map("cm", json!({"data-1": "value-1"})));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    assert!(
        updates.try_recv().is_err(),
        "the first mount is not an update"
    );
    let dir = env.dir(&pod, CM, "cfg");

    let changed = env.update(config_map("cm", json!({"data-1": "value-2"})));
    let update = within(updates.recv()).await.unwrap();
    // Sent after the write: the new content is already visible.
    assert_eq!(files(&dir), text(&[("data-1", "value-2")]));
    assert_eq!(Some(update.pod_uid.as_str()), pod.metadata.uid.as_deref());
    assert_eq!(update.namespace, "default");
    assert_eq!(update.volume, "cfg");
    assert!(update.written);
    assert!(update.change_seen.is_some_and(|seen| seen <= update.at));
    let [object] = update.objects.as_slice() else {
        panic!("one object expected: {:?}", update.objects)
    };
    assert_eq!(object.object.kind, ObjectKind::ConfigMap);
    assert_eq!(object.object.name, "cm");
    assert_eq!(
        object.resource_version.as_deref(),
        changed["metadata"]["resourceVersion"].as_str()
    );
}
