//! Declared ports on a node of host processes (needs root, as `process_runtime`): every
//! container listens on the host's network, so a pod declaring a port that a pod still
//! running here declares is rejected at admission with the kubelet's `NodePorts` reason
//! (PW-85), and the port is free again once that pod has finished or is gone.

use serde_json::json;

use crate::process_runtime::{
    create, delete_and_wait, event_is, pod, shell_with, start, wait_for_event, wait_for_phase,
    wait_for_running,
};

const TEXT: &str =
    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports";

/// A pod whose container `c` runs `script` and declares `ports`.
fn serving(name: &str, script: &str, ports: serde_json::Value, restart: &str) -> serde_json::Value {
    pod(name)
        .spec(json!({"restartPolicy": restart}))
        .container(shell_with(script, json!({"ports": ports})))
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw85_a_port_a_running_pod_declares_rejects_the_next_pod_until_it_is_gone() {
    let (world, _reaper) = start(true).await;
    let admin = world.admin.clone();
    let web = json!([{"containerPort": 18080}]);
    create(&world, serving("web", "sleep 600", web.clone(), "Always"));
    wait_for_running(&world, "web").await;

    let clash = create(&world, serving("clash", "sleep 600", web.clone(), "Always"));
    let failed = wait_for_phase(&world, "clash", "Failed").await;
    assert_eq!(failed["status"]["reason"], "NodePorts");
    assert_eq!(
        failed["status"]["message"],
        format!("Pod was rejected: {TEXT}")
    );
    wait_for_event(&admin, &clash, "NodePorts", |e| {
        event_is(e, "Warning", "NodePorts") && e.message.as_deref() == Some(TEXT)
    })
    .await;
    assert!(!world.pod_dir(&clash).exists(), "nothing of it ran");

    // Another port, or the same number over UDP, is free.
    let other = json!([{"containerPort": 18081}, {"containerPort": 18080, "protocol": "UDP"}]);
    create(&world, serving("other", "sleep 600", other, "Always"));
    wait_for_running(&world, "other").await;

    // Gone, the pod no longer holds its port.
    delete_and_wait(&world, "web", 0).await;
    create(&world, serving("after", "sleep 600", web, "Always"));
    wait_for_running(&world, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw85_a_pod_that_has_finished_holds_no_port() {
    let (world, _reaper) = start(true).await;
    let port = json!([{"containerPort": 18090}]);
    create(&world, serving("done", "true", port.clone(), "Never"));
    wait_for_phase(&world, "done", "Succeeded").await;
    create(&world, serving("next", "sleep 600", port, "Always"));
    wait_for_running(&world, "next").await;
}
