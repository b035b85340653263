//! The pod condition `nodelet.io/ConfigCurrent` (FC-20) under the process runtime, against
//! `nodelet-apiserver`: True for a pod that follows changes after its start and after each
//! update, False naming the object when a subPath cannot follow an update, absent for a pod
//! that asks for nothing (its status is the kubelet's) and removed when a pod stops asking.
//! Needs root (mount namespaces); CI runs as root.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::{Value, json};

use crate::process_runtime::{
    BUSYBOX, NS, container_status, create, delete_and_wait, event_is, get_pod, start,
    wait_for_event, wait_for_pod,
};
use crate::support::{NODE, PATIENCE, World, poll_pause};

const CONDITION: &str = "nodelet.io/ConfigCurrent";

/// The pod's `nodelet.io/ConfigCurrent` condition, if it has one.
fn config_current(pod: &Value) -> Option<Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == CONDITION)
        .cloned()
}

/// Waits until pod `name`'s condition has `status`; returns it.
async fn wait_for_condition(world: &World, name: &str, status: &str) -> Value {
    let pod = wait_for_pod(world, name, &format!("{CONDITION} {status}"), |p| {
        config_current(p).is_some_and(|c| c["status"] == status)
    })
    .await;
    config_current(&pod).unwrap_or_default()
}

async fn patch_data(world: &World, data: Value) -> String {
    let api: Api<ConfigMap> = Api::namespaced(world.admin.clone(), NS);
    api.patch(
        "cfg",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": data })),
    )
    .await
    .unwrap_or_else(|e| panic!("patching the ConfigMap: {e}"))
    .metadata
    .resource_version
    .unwrap_or_default()
}

/// Waits until container `container` of pod `name` shows version `rv` through `mount_path`
/// in `/pods`, current.
async fn wait_seen(world: &World, name: &str, container: &str, mount_path: &str, rv: &str) {
    let mut last = None;
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let view = world.with_agent(|a| a.pods_view()).await;
            let m = view
                .pods
                .iter()
                .filter(|p| p.name == name)
                .flat_map(|p| p.containers.iter().filter(|c| c.name == container))
                .flat_map(|c| c.mounts.iter().filter(|m| m.mount_path == mount_path))
                .next()
                .cloned();
            let shown = m
                .as_ref()
                .and_then(|m| m.objects.first()?.resource_version.clone());
            if shown.as_deref() == Some(rv) && m.as_ref().is_some_and(|m| m.current) {
                return;
            }
            last = m;
            poll_pause().await;
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "{container} of {name} never showed {rv} current at {mount_path}: {last:?}"
    );
}

const SLEEPER: &str = "echo ready; while true; do sleep 1 & wait $!; done";

/// A container `name` mounting volume `cfg` whole at `/cfg` and its key `k` at `/etc/k`.
fn container(name: &str) -> Value {
    json!({"name": name, "image": BUSYBOX, "command": ["sh", "-c", SLEEPER],
    "volumeMounts": [
        {"name": "cfg", "mountPath": "/cfg"},
        {"name": "cfg", "mountPath": "/etc/k", "subPath": "k"},
    ]})
}

fn pod(name: &str, annotations: &[(&str, &str)]) -> Value {
    let mut b = PodBuilder::new(NS, name)
        .node(NODE)
        .spec(json!({"securityContext": {"runAsUser": 1000}}))
        .container(container("app"))
        .volume(json!({"name": "cfg", "configMap": {"name": "cfg"}}));
    for (k, v) in annotations {
        b = b.annotation(k, v);
    }
    b.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_current_is_true_after_start_and_updates_and_absent_without_opt_in() {
    let (world, _reaper) = start(false).await;
    create(
        &world,
        ConfigMapBuilder::new(NS, "cfg").data("k", "v0").json(),
    );
    create(
        &world,
        pod("follows", &[("nodelet.io/follow-subpath.app", "true")]),
    );
    create(&world, pod("plain", &[]));
    for name in ["follows", "plain"] {
        wait_for_pod(&world, name, "running", |p| {
            container_status(p, "app")["state"]["running"].is_object()
        })
        .await;
    }
    let first = wait_for_condition(&world, "follows", "True").await;
    assert_eq!(first["reason"], Value::Null, "{first}");
    assert_eq!(first["message"], Value::Null, "{first}");
    assert!(first["lastTransitionTime"].is_string(), "{first}");

    for n in 1..=5 {
        let rv = patch_data(&world, json!({"k": format!("v{n}")})).await;
        wait_seen(&world, "follows", "app", "/etc/k", &rv).await;
        wait_seen(&world, "follows", "app", "/cfg", &rv).await;
        wait_for_condition(&world, "follows", "True").await;
        // The kubelet's status for a pod that asks for nothing: no such condition, ever.
        let plain = get_pod(&world, "plain").unwrap_or_default();
        assert_eq!(config_current(&plain), None, "{plain}");
    }
    let plain = wait_for_pod(&world, "plain", "ready", |p| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
    .await;
    assert_eq!(config_current(&plain), None, "{plain}");

    // A pod that stops asking loses the condition (deleted by type).
    let pods: Api<Pod> = Api::namespaced(world.admin.clone(), NS);
    pods.patch(
        "follows",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"nodelet.io/follow-subpath.app": null}}}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("patching the pod: {e}"));
    let gone = wait_for_pod(&world, "follows", "without the condition", |p| {
        config_current(p).is_none()
    })
    .await;
    assert!(
        gone["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|c| c.get("$patch").is_none()),
        "{gone}"
    );

    delete_and_wait(&world, "follows", 1).await;
    delete_and_wait(&world, "plain", 1).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_current_is_false_naming_the_object_a_sub_path_could_not_follow() {
    let (world, _reaper) = start(false).await;
    create(
        &world,
        ConfigMapBuilder::new(NS, "cfg")
            .data("k", "v0")
            .data("j", "j0")
            .json(),
    );
    let created = create(
        &world,
        pod("stale", &[("nodelet.io/follow-subpath", "true")]),
    );
    wait_for_pod(&world, "stale", "running", |p| {
        container_status(p, "app")["state"]["running"].is_object()
    })
    .await;
    wait_for_condition(&world, "stale", "True").await;

    // Key `k` removed: its subPath keeps the old bind (FC-4), so `app` sees an old ConfigMap.
    patch_data(&world, json!({"k": null, "j": "j1"})).await;
    wait_for_event(&world.admin, &created, "FailedSubPathUpdate", |e| {
        event_is(e, "Warning", "FailedSubPathUpdate")
    })
    .await;
    let stale = wait_for_condition(&world, "stale", "False").await;
    assert_eq!(stale["reason"], "StaleConfiguration", "{stale}");
    assert_eq!(
        stale["message"], "container app sees an old ConfigMap default/cfg",
        "{stale}"
    );
    assert!(stale["lastTransitionTime"].is_string(), "{stale}");

    // The key back: the subPath follows again and the condition is True again.
    let rv = patch_data(&world, json!({"k": "v2"})).await;
    wait_seen(&world, "stale", "app", "/etc/k", &rv).await;
    wait_for_condition(&world, "stale", "True").await;

    delete_and_wait(&world, "stale", 1).await;
    world.stop().await;
}
