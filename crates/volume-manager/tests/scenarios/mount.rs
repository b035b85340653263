//! First mounts (PL-1 … PL-13, VM-10, VM-11, E2E-1 … E2E-14).

use std::fs;
use std::os::unix::fs::MetadataExt;

use nodelet_core::PodUid;
use nodelet_core::events::reasons;
use nodelet_volume_manager::{Error, VolumeState, WaitCause};
use serde_json::json;

use crate::support::*;

// PL-1, AW-11, E2E-1: layout and default mode 0644.
#[tokio::test]
async fn a_config_map_volume_is_laid_out_exactly_as_the_kubelet_does() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;

    let dir = env.dir(&pod, CM, "cfg");
    assert!(dir.ends_with(format!(
        "pods/{}/volumes/kubernetes.io~configmap/cfg",
        pod.metadata.uid.as_deref().unwrap()
    )));
    assert_eq!(
        files(&dir),
        text(&[
            ("data-1", "value-1"),
            ("data-2", "value-2"),
            ("data-3", "value-3")
        ])
    );
    assert!(modes(&dir).values().all(|m| *m == 0o644));
    assert_eq!(
        fs::read_link(dir.join("data-1")).unwrap().to_str(),
        Some("..data/data-1")
    );
    assert!(
        fs::symlink_metadata(dir.join("..data"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o777);
    // The path a container mounts is the volume's directory.
    let mounted = env.vm.mounted_volumes(&PodUid::from_pod(&pod).unwrap());
    assert_eq!(mounted.keys().collect::<Vec<_>>(), ["cfg"]);
    assert_eq!(mounted["cfg"], dir);
    assert!(env.events.events().is_empty());
}

// E2E-2, E2E-6, E2E-7, E2E-15: defaultMode, key-to-path mappings and item modes.
#[tokio::test]
async fn default_modes_mappings_and_item_modes_are_applied() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    env.create(secret(
        "s",
        &[("data-1", "value-1\n"), ("data-2", "value-2\n")],
    ));
    let pod = env.create_pod(
        "p",
        json!([
            {"name": "secret", "secret": {"secretName": "s", "defaultMode": 0o400}},
            {"name": "mapped", "configMap": {"name": "cm", "items": [
                {"key": "data-2", "path": "path/to/data-2"},
                {"key": "data-1", "path": "new-path-data-1", "mode": 0o400}]}}
        ]),
    );
    env.add_and_mount(&pod).await;

    let secret_dir = env.dir(&pod, SECRET, "secret");
    assert_eq!(
        files(&secret_dir),
        text(&[("data-1", "value-1\n"), ("data-2", "value-2\n")])
    );
    assert!(modes(&secret_dir).values().all(|m| *m == 0o400));
    let mapped = env.dir(&pod, CM, "mapped");
    assert_eq!(
        files(&mapped),
        text(&[
            ("new-path-data-1", "value-1"),
            ("path/to/data-2", "value-2")
        ])
    );
    assert_eq!(modes(&mapped)["new-path-data-1"], 0o400);
    assert_eq!(modes(&mapped)["path/to/data-2"], 0o644);
    assert_eq!(
        fs::read_link(mapped.join("path")).unwrap().to_str(),
        Some("..data/path")
    );
}

// E2E-10: binaryData is projected byte-exact next to text data.
#[tokio::test]
async fn binary_data_is_projected_byte_exact() {
    let env = Env::start().await;
    env.create(
        ConfigMapBuilder::new("default", "cm")
            .data("data-1", "value-1")
            .binary_data("dump.bin", &[0xde, 0xca, 0xfe, 0xba, 0xd0, 0xfe, 0xff])
            .json(),
    );
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, CM, "cfg");
    assert_eq!(
        fs::read(dir.join("dump.bin")).unwrap(),
        [0xde, 0xca, 0xfe, 0xba, 0xd0, 0xfe, 0xff]
    );
    assert_eq!(fs::read(dir.join("data-1")).unwrap(), b"value-1");
}

fn short_wait(config: &mut nodelet_volume_manager::Config) {
    config.wait_timeout = std::time::Duration::from_secs(2);
}

// PL-6 step 3, PL-9, VM-10, VM-11, E2E-14: a missing object fails the mount with the
// kubelet's event text and nothing is written; the wait reports the unmounted volume.
#[tokio::test]
async fn a_missing_object_fails_with_the_kubelet_event_and_nothing_is_written() {
    let env = Env::start_with(Options {
        configure: short_wait,
        ..Options::default()
    })
    .await;
    let pod = env.create_pod(
        "p",
        json!([{"name": "cfg", "configMap": {"name": "missing"}}]),
    );
    env.add_pod(&pod);
    let event = env.event(|e| e.reason == reasons::FAILED_MOUNT).await;
    assert_eq!(
        event.message,
        r#"MountVolume.SetUp failed for volume "cfg" : configmap "missing" not found"#
    );
    assert!(!env.dir(&pod, CM, "cfg").exists());

    let err = within(env.vm.wait_for_attach_and_mount(&admitted(&pod)))
        .await
        .unwrap_err();
    assert!(matches!(
        &err,
        Error::VolumesNotMounted {
            cause: WaitCause::Timeout,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "unmounted volumes=[cfg], unattached volumes=[], failed to process volumes=[]: \
         timed out waiting for the condition"
    );
    let snapshot = env.vm.snapshot();
    let volume = &snapshot[0].volumes[0];
    assert_eq!(volume.state, VolumeState::Pending);
    assert_eq!(
        volume.last_error.as_deref(),
        Some(r#"configmap "missing" not found"#)
    );
}

// PL-7, PL-8, TestInvalidConfigMapSetup, E2E-14/E2E-20 key variants.
#[tokio::test]
async fn a_missing_key_fails_with_the_kubelet_text_and_creates_no_directory() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    env.create(secret("s", &[("data-1", "value-1\n")]));
    let pod = env.create_pod(
        "p",
        json!([
            {"name": "cfg", "configMap": {"name": "cm", "items": [{"key": "data-4", "path": "path/to/data-4"}]}},
            {"name": "sec", "secret": {"secretName": "s", "items": [{"key": "data_4", "path": "x"}]}}
        ]),
    );
    env.add_pod(&pod);
    let cm_event = env.event(|e| e.message.contains("\"cfg\"")).await;
    assert_eq!(
        cm_event.message,
        r#"MountVolume.SetUp failed for volume "cfg" : configmap references non-existent config key: data-4"#
    );
    let secret_event = env.event(|e| e.message.contains("\"sec\"")).await;
    assert_eq!(
        secret_event.message,
        r#"MountVolume.SetUp failed for volume "sec" : references non-existent secret key: data_4"#
    );
    assert!(!env.dir(&pod, CM, "cfg").exists());
    assert!(!env.dir(&pod, SECRET, "sec").exists());
}

// PL-7 TestPluginOptional, TestPluginKeysOptional: an optional missing object mounts an empty
// volume; optional missing keys are skipped.
#[tokio::test]
async fn optional_missing_objects_and_keys_mount_what_exists() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    let pod = env.create_pod(
        "p",
        json!([
            {"name": "absent", "configMap": {"name": "nope", "optional": true}},
            {"name": "keys", "secret": {"secretName": "nope", "optional": true,
                "items": [{"key": "a", "path": "a"}]}},
            {"name": "some", "configMap": {"name": "cm", "optional": true,
                "items": [{"key": "data-1", "path": "one"}, {"key": "data-9", "path": "nine"}]}}
        ]),
    );
    env.add_and_mount(&pod).await;
    let absent = env.dir(&pod, CM, "absent");
    assert!(files(&absent).is_empty());
    assert!(
        fs::symlink_metadata(absent.join("..data"))
            .unwrap()
            .is_symlink()
    );
    assert!(files(&env.dir(&pod, SECRET, "keys")).is_empty());
    assert_eq!(
        files(&env.dir(&pod, CM, "some")),
        text(&[("one", "value-1")])
    );
}

// PL-13: downwardAPI renders pod fields and follows label changes on pod updates.
#[tokio::test]
async fn downward_api_volumes_render_pod_fields_and_follow_label_changes() {
    let env = Env::start().await;
    let pod = env.create_pod(
        "p",
        json!([{"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "requests.cpu"}}
        ]}}]),
    );
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, DOWNWARD, "info");
    assert_eq!(
        files(&dir),
        text(&[
            ("app", "p"),
            ("cpu", "0"),
            ("labels", "app=\"p\""),
            ("name", "p")
        ])
    );

    let mut updated = (*pod).clone();
    updated
        .metadata
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "web".into());
    env.vm.update_pod(&admitted(&updated));
    env.until("labels file updated", || {
        files(&dir).get("labels").map(String::as_str) == Some("app=\"p\"\ntier=\"web\"")
    })
    .await;
}

// PL-10: sources merged in order; a later source overwrites an earlier path.
#[tokio::test]
async fn projected_volumes_merge_their_sources_in_order() {
    let env = Env::start().await;
    env.create(config_map(
        "cm",
        json!({"shared": "from-cm", "only-cm": "c"}),
    ));
    env.create(secret("s", &[("shared", "from-secret")]));
    let pod = env.create_pod(
        "p",
        json!([{"name": "all", "projected": {"sources": [
            {"configMap": {"name": "cm"}},
            {"secret": {"name": "s"}},
            {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
        ]}}]),
    );
    env.add_and_mount(&pod).await;
    let seen = files(&env.dir(&pod, PROJECTED, "all"));
    assert_eq!(seen["shared"], "from-secret");
    assert_eq!(seen["only-cm"], "c");
    assert_eq!(seen["ns"], "default");
    assert_eq!(seen["token"].split('.').count(), 3, "a JWT");
}

// PL-10: errors of several sources are aggregated and nothing is written.
#[tokio::test]
async fn projected_source_errors_are_aggregated() {
    let env = Env::start().await;
    let pod = env.create_pod(
        "p",
        json!([{"name": "all", "projected": {"sources": [
            {"configMap": {"name": "a"}}, {"secret": {"name": "b"}}
        ]}}]),
    );
    env.add_pod(&pod);
    let event = env.event(|e| e.reason == reasons::FAILED_MOUNT).await;
    assert_eq!(
        event.message,
        r#"MountVolume.SetUp failed for volume "all" : [configmap "a" not found, secret "b" not found]"#
    );
    assert!(!env.dir(&pod, PROJECTED, "all").exists());
}

// Unsupported volume types are reported once and do not block the supported ones; emptyDir
// volumes are created and hostPath ones checked (PL-30, PL-33).
#[tokio::test]
async fn unsupported_volumes_are_reported_once_and_do_not_block_the_pod() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    let pod = env.create_pod(
        "p",
        json!([
            {"name": "claim", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "host", "hostPath": {"path": "/var/log", "type": "Directory"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "cfg", "configMap": {"name": "cm"}}
        ]),
    );
    env.add_and_mount(&pod).await;
    within(env.vm.wait_for_attach_and_mount(&admitted(&pod)))
        .await
        .unwrap();
    let unsupported = env.events.with_reason(reasons::UNSUPPORTED_VOLUME);
    assert_eq!(unsupported.len(), 1);
    assert!(unsupported[0].message.contains("\"claim\""));
    assert!(unsupported[0].message.contains("persistentVolumeClaim"));
    assert!(env.dir(&pod, "kubernetes.io/empty-dir", "scratch").is_dir());
    // A hostPath volume has no directory under the pod: it is the node's path.
    assert!(!env.dir(&pod, "kubernetes.io/host-path", "host").exists());
    let snapshot = env.vm.snapshot();
    let volume = |name: &str| {
        snapshot[0]
            .volumes
            .iter()
            .find(|v| v.name == name)
            .unwrap()
            .state
            .clone()
    };
    assert_eq!(
        volume("claim"),
        VolumeState::Unsupported {
            volume_type: "persistentVolumeClaim".into()
        }
    );
    assert!(
        !matches!(volume("host"), VolumeState::Unsupported { .. }),
        "{:?}",
        volume("host")
    );
}

// PL-11, E2E-3: fsGroup (the current gid, so no privilege is needed) adds group read and
// setgid; 0440 stays 0440; the volume root becomes 2777.
#[tokio::test]
async fn fs_group_ownership_is_applied_with_the_current_gid() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    let gid = nix::unistd::getegid().as_raw();
    let pod = env.create_pod_json(PodBuilder::new("default", "p").spec(json!({"securityContext": {"fsGroup": gid},
                 "containers": [{"name": "c", "image": "x",
                     "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
                 "volumes": [{"name": "cfg", "configMap": {"name": "cm", "defaultMode": 0o440,
                     "items": [{"key": "data-1", "path": "a"}, {"key": "data-2", "path": "b", "mode": 0o600}]}}]
    })).json());
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, CM, "cfg");
    let m = modes(&dir);
    assert_eq!((m["a"], m["b"]), (0o440, 0o640));
    assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o2777);
    let data = fs::canonicalize(dir.join("..data")).unwrap();
    assert_eq!(fs::metadata(&data).unwrap().mode() & 0o7777, 0o2755);
    assert_eq!(fs::metadata(dir.join("a")).unwrap().gid(), gid);
}

// PL-12: a volume mounted inside another gets an empty directory in the outer volume.
#[tokio::test]
async fn nested_mountpoints_are_created_inside_the_outer_volume() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    env.create(secret("s", &[("k", "v")]));
    let pod = env.create_pod_json(
        PodBuilder::new("default", "p")
            .container(json!({"name": "c", "image": "x", "volumeMounts": [
                {"name": "cfg", "mountPath": "/etc/app"},
                {"name": "sec", "mountPath": "/etc/app/secrets"}]}))
            .config_map_volume("cfg", "cm")
            .secret_volume("sec", "s")
            .json(),
    );
    env.add_and_mount(&pod).await;
    let nested = env.dir(&pod, CM, "cfg").join("secrets");
    assert!(nested.is_dir() && !fs::symlink_metadata(&nested).unwrap().is_symlink());
    assert_eq!(fs::metadata(&nested).unwrap().mode() & 0o7777, 0o755);
}

// The snapshot lists each volume with its state and the resourceVersion it projected.
#[tokio::test]
async fn the_snapshot_shows_mounted_volumes_with_resource_versions() {
    let env = Env::start().await;
    let stored = env.create(config_map("cm", fixture_data()));
    let pod = env.create_pod("p", json!([{"name": "cfg", "configMap": {"name": "cm"}}]));
    env.add_and_mount(&pod).await;
    let snapshot = env.vm.snapshot();
    assert_eq!(snapshot.len(), 1);
    assert_eq!(snapshot[0].name, "p");
    let v = &snapshot[0].volumes[0];
    assert_eq!(v.state, VolumeState::Mounted);
    assert_eq!(
        v.unique_name.as_deref(),
        Some(
            format!(
                "kubernetes.io/configmap/{}-cfg",
                pod.metadata.uid.as_deref().unwrap()
            )
            .as_str()
        )
    );
    assert_eq!(
        v.objects[0].resource_version.as_deref(),
        stored["metadata"]["resourceVersion"].as_str()
    );
}

fn auto_medium(config: &mut nodelet_volume_manager::Config) {
    config.memory_medium = nodelet_volume_manager::MemoryMedium::Auto;
}

// PL-5, PL-14: with `Auto`, secret volumes are a tmpfs when the agent may mount (root with
// CAP_SYS_ADMIN) and node disk otherwise; either way teardown leaves nothing behind. The
// probe decides at run time, so this test holds privileged and unprivileged.
#[tokio::test]
async fn secret_volumes_use_tmpfs_exactly_when_the_agent_may_mount() {
    let env = Env::start_with(Options {
        configure: auto_medium,
        ..Options::default()
    })
    .await;
    env.create(secret("s", &[("k", "v")]));
    env.create(config_map("cm", fixture_data()));
    let pod = env.create_pod(
        "p",
        json!([{"name": "sec", "secret": {"secretName": "s"}},
               {"name": "cfg", "configMap": {"name": "cm"}}]),
    );
    env.add_and_mount(&pod).await;
    let sec = env.dir(&pod, SECRET, "sec");
    let cfg = env.dir(&pod, CM, "cfg");
    let dev = |p: &std::path::Path| fs::metadata(p).unwrap().dev();
    let parent_dev = dev(sec.parent().unwrap());
    assert_eq!(dev(&sec) != parent_dev, env.vm.uses_tmpfs());
    assert_eq!(
        dev(&cfg),
        dev(cfg.parent().unwrap()),
        "configMap is on disk"
    );
    assert_eq!(files(&sec), text(&[("k", "v")]));
    env.remove_pod(&pod).await;
    assert!(!sec.exists() && !cfg.exists());
}
