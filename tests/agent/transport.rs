//! The agent on a node identity over TLS + HTTP/2: the pod watch and every object watch share
//! a few connections (counted by the server), and `/metrics` reports them by protocol.

use std::net::SocketAddr;

use nodelet::Agent;
use nodelet_apiserver::{ApiServer, User};
use serde_json::json;

use nodelet_e2e::wait_for_content;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};

use crate::support::{NODE, PATIENCE, agent_config, api_client_for, poll_pause};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_volumes_of_one_pod_are_watched_over_two_http2_connections() {
    let server = ApiServer::start(nodelet_apiserver::Config::default().with_auth().with_tls())
        .await
        .unwrap_or_else(|e| panic!("api server: {e}"));
    let h = server.handle();
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = agent_config(root.path());
    config.listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let agent = Agent::start(config, api_client_for(&server, &User::node(NODE)).await)
        .await
        .unwrap_or_else(|e| panic!("agent: {e:#}"));
    let mounts: Vec<_> = (0..30)
        .map(|i| json!({"name": format!("v{i}"), "mountPath": format!("/v{i}")}))
        .collect();
    let volumes: Vec<_> = (0..30)
        .map(|i| json!({"name": format!("v{i}"), "configMap": {"name": format!("cm-{i}")}}))
        .collect();
    for i in 0..30 {
        h.create(
            ConfigMapBuilder::new("default", &format!("cm-{i}"))
                .data("k", &format!("v{i}"))
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let pod = h
        .create(
            PodBuilder::new("default", "p")
                .node(NODE)
                .container(json!({"name": "c", "image": "x", "volumeMounts": mounts}))
                .spec(json!({"volumes": volumes}))
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let dir = root
        .path()
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~configmap");
    for i in 0..30 {
        wait_for_content(&dir.join(format!("v{i}/k")), format!("v{i}").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    tokio::time::timeout(PATIENCE, async {
        while h.open_watches("configmaps", None, None) < 30 {
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not every ConfigMap watched"));

    // 31 watches (the pod watch and 30 ConfigMaps): one HTTP/2 connection for watches, one for
    // short requests (status, events, lists), none over HTTP/1.1.
    let open = h.open_connections();
    assert_eq!(open.http1, 0, "{open:?}");
    assert_eq!(open.http2, 2, "{open:?}");

    // An update still arrives over the shared connection.
    h.update(
        ConfigMapBuilder::new("default", "cm-7")
            .data("k", "new")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    wait_for_content(&dir.join("v7/k"), b"new")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let text = agent.metrics_text();
    let line = text
        .lines()
        .find(|l| l.starts_with("nodelet_api_connections{protocol=\"HTTP/2\"}"))
        .unwrap_or_else(|| panic!("no HTTP/2 connection gauge in:\n{text}"));
    let n: i64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(n >= 2, "{line}");
    agent.shutdown().await;
    server.shutdown().await;
}
