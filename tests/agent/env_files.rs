//! `env[].valueFrom.fileKeyRef` through the agent (PW-10; Kubernetes' `EnvFiles`, on by default
//! since 1.35): a variable read from an env file in the pod's emptyDir, which on a nodelet node
//! whatever writes into the pod's emptyDir provides.

use std::time::Duration;

use serde_json::json;

use nodelet_testutil::PodBuilder;

use crate::support::{NODE, PATIENCE, World, poll_pause, wait_for_env_var};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_key_ref_fails_until_the_env_file_is_written_then_sets_the_variable() {
    let world = World::start_with(|c| c.sync_error_backoff = Duration::from_millis(200)).await;
    let h = world.server.handle();
    let pod = h
        .create(
            PodBuilder::new("default", "p")
                .node(NODE)
                .container(json!({"name": "c", "image": "x",
                    "volumeMounts": [{"name": "envfiles", "mountPath": "/envfiles"}],
                    "env": [
                    {"name": "DB_HOST", "valueFrom": {"fileKeyRef":
                        {"volumeName": "envfiles", "path": "vars.env", "key": "DB"}}}
                ]}))
                .spec(json!({"volumes": [{"name": "envfiles", "emptyDir": {}}]}))
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    // No file yet: the container is not created, with the kubelet's text.
    tokio::time::timeout(PATIENCE, async {
        while !world
            .with_agent(|a| a.pods_json())
            .await
            .to_string()
            .contains("couldn't parse env file")
        {
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the pod never failed on the missing env file"));

    let pod_dir = world.pod_dir(&pod);
    std::fs::write(
        pod_dir.join("volumes/kubernetes.io~empty-dir/envfiles/vars.env"),
        "# written by an init container\nDB='db.internal'\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        wait_for_env_var(&pod_dir, "c", "DB_HOST").await,
        "db.internal"
    );
    world.stop().await;
}
