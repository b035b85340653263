//! One node allocatable, so env, volumes and the Node agree: a `limits.ephemeral-storage` the
//! container does not
//! set is the same in an env var and in a downwardAPI volume, and the Node reports it.

use serde_json::json;

use nodelet_e2e::wait_for_content;
use nodelet_testutil::PodBuilder;

use crate::support::{NODE, PATIENCE, World, poll_pause, wait_for_env_var};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unset_ephemeral_storage_limit_is_node_allocatable_in_env_volume_and_node_status() {
    let world = World::start_with(|c| c.register_node = true).await;
    let h = world.server.handle();
    let field = json!({"containerName": "c", "resource": "limits.ephemeral-storage"});
    let pod = h
        .create(
            PodBuilder::new("default", "p")
                .node(NODE)
                .container(json!({"name": "c", "image": "x",
                    "volumeMounts": [{"name": "info", "mountPath": "/info"}],
                    "env": [{"name": "STORAGE", "valueFrom": {"resourceFieldRef": field}}]}))
                .spec(
                    json!({"volumes": [{"name": "info", "downwardAPI": {"items": [
                    {"path": "storage", "resourceFieldRef": field}]}}]}),
                )
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let pod_dir = world.pod_dir(&pod);
    let from_env = wait_for_env_var(&pod_dir, "c", "STORAGE").await;
    assert_ne!(from_env, "0", "an unset limit is node allocatable, not 0");
    wait_for_content(
        &pod_dir.join("volumes/kubernetes.io~downward-api/info/storage"),
        from_env.as_bytes(),
    )
    .await
    .unwrap_or_else(|e| panic!("the volume disagrees with the env var {from_env}: {e}"));

    let reported = tokio::time::timeout(PATIENCE, async {
        loop {
            let node = h.get("v1", "Node", None, NODE);
            if let Some(v) = node
                .as_ref()
                .and_then(|n| n["status"]["allocatable"]["ephemeral-storage"].as_str())
            {
                return v.to_owned();
            }
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the Node never reported ephemeral-storage"));
    assert_eq!(reported, from_env);
    world.stop().await;
}
