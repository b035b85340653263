//! The consumer against `nodelet-apiserver` over real HTTP with the real kube client: the
//! objects are projected, and an update reaches the files.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use nodelet_apiserver::{ApiServer, Config};
use nodelet_consumer_example::{Settings, run};
use tokio::sync::oneshot;

/// How long the projection may take to reach the disk on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until `path` holds `expected`, or fails naming what it held last.
async fn wait_for_content(path: &Path, expected: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = std::fs::read_to_string(path).ok();
        if seen.as_deref() == Some(expected) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} holds {seen:?}, not {expected:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn projects_both_objects_and_follows_an_update() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let handle = server.handle();
    handle
        .create(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "app", "namespace": "default"},
            "data": {"app.conf": "port = 8080\n"}}))
        .unwrap();
    handle
        .create(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"},
            "stringData": {"password": "hunter2"}}))
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        namespace: "default".into(),
        config_map: "app".into(),
        secret: "db".into(),
        dir: dir.path().to_path_buf(),
    };
    let client = server.client();
    let (stop, stopped) = oneshot::channel::<()>();
    let consumer = tokio::spawn(run(client.clone(), settings, async {
        let _ = stopped.await;
    }));

    let app_conf = dir.path().join("configmap/app.conf");
    let password = dir.path().join("secret/password");
    wait_for_content(&app_conf, "port = 8080\n").await;
    wait_for_content(&password, "hunter2").await;
    assert!(dir.path().join("configmap/..data").is_symlink());

    let config_maps: Api<ConfigMap> = Api::namespaced(client, "default");
    config_maps
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"app.conf": "port = 9090\n"}})),
        )
        .await
        .unwrap();
    wait_for_content(&app_conf, "port = 9090\n").await;
    assert_eq!(std::fs::read_to_string(&password).unwrap(), "hunter2");

    stop.send(()).unwrap();
    consumer.await.unwrap().unwrap();
}
