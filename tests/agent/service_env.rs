//! The service environment in running containers (PW-15 … PW-17): a process-runtime container
//! gets the kubelet's service variables, and an in-cluster client (kube-rs, the
//! `in-cluster` example) lists ConfigMaps with its ServiceAccount token once the master
//! service's variables point at the agent's own API server address. Needs root, as every
//! process-runtime test.

use std::path::PathBuf;

use nodelet_runtime::{ImageEntry, ImageTable};
use nodelet_testutil::ConfigMapBuilder;
use serde_json::json;

use crate::process_runtime::{create, pod, shell, start_on, wait_for_log, wait_for_phase};

/// The `in-cluster` example, built beside the `nodelet` binary by `cargo test` (which builds
/// every example of the package).
fn in_cluster_example() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_nodelet"));
    let example = bin
        .parent()
        .map(|dir| dir.join("examples").join("in-cluster"))
        .unwrap_or_default();
    assert!(
        example.is_file(),
        "{} is missing: this test runs the `in-cluster` example, which `cargo test` builds \
         with the package's tests (or run `cargo build --example in-cluster`)",
        example.display()
    );
    example
}

#[tokio::test]
async fn a_container_gets_the_service_variables_and_references_to_them_expand() {
    let server = nodelet_apiserver::Config::default().like_a_cluster();
    let (world, _reaper) = start_on(server, true, |_, _| {}).await;
    let web = create(
        &world,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web-front", "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": 8080}]}}),
    );
    let web_ip = web["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut container = shell(
        "echo host=$KUBERNETES_SERVICE_HOST port=$KUBERNETES_SERVICE_PORT; \
         echo web=$WEB_FRONT_SERVICE_HOST:$WEB_FRONT_SERVICE_PORT_HTTP link=$WEB_FRONT_PORT; \
         echo api=$API",
    );
    container["env"] = json!([
        {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}
    ]);
    let p = create(
        &world,
        pod("svc-env")
            .spec(json!({"restartPolicy": "Never"}))
            .container(container)
            .json(),
    );
    let log = wait_for_log(&world.root_dir(), &p, &["host=", "web=", "api="]).await;
    assert!(log.contains("host=10.96.0.1 port=443"), "{log}");
    assert!(
        log.contains(&format!("web={web_ip}:8080 link=tcp://{web_ip}:8080")),
        "{log}"
    );
    assert!(log.contains("api=https://10.96.0.1:443"), "{log}");
    wait_for_phase(&world, "svc-env", "Succeeded").await;
}

#[tokio::test]
async fn an_in_cluster_kube_client_lists_config_maps_through_the_agents_api_server_address() {
    let example = in_cluster_example();
    // In-cluster clients speak HTTPS and check the server against the pod's `ca.crt`.
    let server = nodelet_apiserver::Config::default()
        .like_a_cluster()
        .with_tls();
    let (world, _reaper) = start_on(server, true, |c, server| {
        // What `nodelet --kubernetes-service api-server` (the offline default) gives the agent.
        c.kubernetes_service = nodelet_config::service_endpoint_of(&server.url());
        c.images = ImageTable::new(vec![ImageEntry {
            image: "example.com/in-cluster:*".to_owned(),
            entrypoint: vec![example.display().to_string()],
            args: Vec::new(),
            path: Vec::new(),
            user: None,
            group: None,
            working_dir: None,
            files: Default::default(),
        }]);
    })
    .await;
    let url = world.server.url();
    create(
        &world,
        ConfigMapBuilder::new("default", "settings")
            .data("mode", "fast")
            .json(),
    );
    let p = create(
        &world,
        pod("in-cluster")
            .spec(json!({"restartPolicy": "Never"}))
            .container(json!({"name": "c", "image": "example.com/in-cluster:1"}))
            .json(),
    );
    let log = wait_for_log(
        &world.root_dir(),
        &p,
        &["configmap settings", "configmap kube-root-ca.crt"],
    )
    .await;
    assert!(log.contains(&format!("api server {url}")), "{log}");
    wait_for_phase(&world, "in-cluster", "Succeeded").await;
}

/// The env-file runtime (the default: no processes) writes the same service variables into
/// `containers/<name>/env.json`, the master service's pointed where the agent was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_env_files_hold_the_service_variables_too() {
    let world = crate::support::World::start_on_server(
        nodelet_apiserver::Config::default().like_a_cluster(),
        |_| {},
        |c, server| c.kubernetes_service = nodelet_config::service_endpoint_of(&server.url()),
    )
    .await;
    let port = world.server.addr().port().to_string();
    create(
        &world,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"ports": [{"port": 5432}]}}),
    );
    let p = create(
        &world,
        pod("env-file")
            .container(json!({"name": "c", "image": "x"}))
            .json(),
    );
    let dir = world.pod_dir(&p);
    let wait = crate::support::wait_for_env_var;
    assert_eq!(
        wait(&dir, "c", "KUBERNETES_SERVICE_HOST").await,
        "127.0.0.1"
    );
    assert_eq!(wait(&dir, "c", "KUBERNETES_SERVICE_PORT").await, port);
    assert!(
        wait(&dir, "c", "DB_SERVICE_HOST").await.starts_with("10.9"),
        "a cluster IP of the service range"
    );
    // One watch, listed once, whatever the number of pods.
    let metrics = world.with_agent(|a| a.metrics_text()).await;
    assert!(
        metrics.contains("nodelet_watches_open{resource=\"services\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodelet_service_watch_lists 1\n"),
        "{metrics}"
    );
    world.stop().await;
}
