//! Restarts: a pod deleted while the agent was down is cleaned up by the next agent.

use serde_json::json;

use nodelet_e2e::wait_for_content;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};

use crate::support::{NODE, PATIENCE, World, poll_pause};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_the_agent_was_down_is_cleaned_up_at_the_next_start() {
    let world = World::start().await;
    let h = world.server.handle();
    h.create(ConfigMapBuilder::new("default", "cm").data("k", "v").json())
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = h
        .create(
            PodBuilder::new("default", "p")
                .node(NODE)
                .container(json!({"name": "c", "image": "x",
                    "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                    "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}))
                .config_map_volume("v", "cm")
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let pod_dir = world.pod_dir(&pod);
    wait_for_content(&pod_dir.join("volumes/kubernetes.io~configmap/v/k"), b"v")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for_content(&pod_dir.join("containers/c/env"), b"K=v\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    world.stop_agent().await;
    h.delete_now("v1", "Pod", Some("default"), "p")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        pod_dir.exists(),
        "the stopped agent left the volumes in place"
    );
    world.start_agent().await;

    let gone = tokio::time::timeout(PATIENCE, async {
        while pod_dir.exists() {
            poll_pause().await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{} was never removed", pod_dir.display());
    world.stop().await;
}
