//! `--manifests` mode: the embedded API server is seeded from a directory, the agent runs
//! against it over HTTP with a node identity, and editing a file changes the projected file.

use std::path::Path;

use nodelet::Agent;

use crate::support::{NODE, SAFETY, agent_config, wait_for_content};

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
}

fn config_map(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: default\ndata:\n  greeting: {value}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_manifest_file_updates_the_projected_file() {
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(manifests.path(), "cm.yaml", &config_map("hello"));
    write(
        manifests.path(),
        "pod.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\nspec:\n  nodeName: {NODE}\n  containers:\n  - name: c\n    image: x\n    volumeMounts: [{{name: v, mountPath: /v}}]\n  volumes:\n  - name: v\n    configMap: {{name: app}}\n"
        ),
    );
    let embedded = nodelet::start_embedded(manifests.path(), NODE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let agent = Agent::start(agent_config(root.path()), embedded.node_client.clone())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let uid = embedded
        .server
        .handle()
        .get("v1", "Pod", Some("default"), "p")
        .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("pod not loaded from the manifests"));
    let file = root.path().join(format!(
        "pods/{uid}/volumes/kubernetes.io~configmap/v/greeting"
    ));
    wait_for_content(&file, b"hello").await;

    write(manifests.path(), "cm.yaml", &config_map("edited"));
    wait_for_content(&file, b"edited").await;
    let _ = SAFETY;
    agent.shutdown().await;
    drop(embedded.sync);
    embedded.server.shutdown().await;
}
