//! Beyond the kubelet: a pod whose sync failed is retried as soon as an object it references
//! changes, not only after the sync back-off (PW-3 keeps its 10 s as the fallback).

use std::time::Duration;

use serde_json::json;

use nodelet_e2e::wait_for_content;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};

use crate::support::{NODE, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_failing_on_a_missing_env_key_is_retried_when_its_configmap_changes() {
    // A back-off far longer than the test's safety bound: only the change can retry the pod.
    let world = World::start_with(|c| c.sync_error_backoff = Duration::from_secs(3600)).await;
    let h = world.server.handle();
    h.create(
        ConfigMapBuilder::new("default", "cm")
            .data("other", "x")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let pod = h
        .create(
            PodBuilder::new("default", "p")
                .node(NODE)
                .container(json!({"name": "c", "image": "x", "env": [
                    {"name": "V", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}
                ]}))
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    // PW-10 / PW-12: the first sync fails on the missing key.
    let failed = || async {
        world
            .with_agent(|a| a.pods_json())
            .await
            .to_string()
            .contains("couldn't find key k in ConfigMap default/cm")
    };
    tokio::time::timeout(crate::support::PATIENCE, async {
        while !failed().await {
            crate::support::poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the pod never failed on the missing key"));

    // The failure's own status patch comes back as a pod update and resyncs the pod once more;
    // let that settle (the sync count stays put for a while) so only the change can retry it.
    let syncs = || async {
        world.with_agent(|a| a.pods_json()).await["pods"][0]["syncs"]
            .as_u64()
            .unwrap_or_default()
    };
    let mut last = syncs().await;
    let mut stable = 0;
    while stable < 40 {
        crate::support::poll_pause().await;
        let now = syncs().await;
        stable = if now == last { stable + 1 } else { 0 };
        last = now;
    }

    h.update(ConfigMapBuilder::new("default", "cm").data("k", "v").json())
        .unwrap_or_else(|e| panic!("{e}"));
    let env = world
        .root_dir()
        .join("pods")
        .join(&uid)
        .join("containers/c/env");
    wait_for_content(&env, b"V=v\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    world.stop().await;
}
