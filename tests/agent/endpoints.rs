//! `/healthz`, `/readyz`, `/metrics`, `/pods` over real HTTP.

use std::net::SocketAddr;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{SAFETY, World};

/// A minimal HTTP/1.0 GET (no client dependency needed): status code and body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .unwrap_or_else(|e| panic!("read: {e}"));
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_pods_endpoints_describe_the_running_agent() {
    let world = World::start_with(|c| c.listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let addr = world
        .with_agent(|a| a.http_addr())
        .await
        .unwrap_or_else(|| panic!("no listener"));
    assert_eq!(get(addr, "/healthz").await, (200, "ok".to_owned()));
    assert_eq!(get(addr, "/readyz").await.0, 200);

    // A pod with one configMap volume.
    let h = world.server.handle();
    h.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "v"}}))
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": crate::support::NODE,
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cm"}}]}}))
        .unwrap_or_else(|e| panic!("{e}"));
    let pods = tokio::time::timeout(SAFETY, async {
        loop {
            let (_, body) = get(addr, "/pods").await;
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let mounted = v["pods"][0]["volumes"][0]["state"] == "Mounted"
                && v["pods"][0]["lastSync"].is_string();
            if mounted {
                return v;
            }
            crate::support::poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("/pods never showed the mounted volume"));
    let pod = &pods["pods"][0];
    assert_eq!(pod["name"], "p");
    assert_eq!(pod["phase"], "Syncing");
    assert_eq!(pod["volumes"][0]["plugin"], "kubernetes.io/configmap");
    assert_eq!(pod["volumes"][0]["objects"][0]["name"], "cm");
    assert!(pod["volumes"][0]["objects"][0]["resourceVersion"].is_string());

    let (code, text) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    for needle in [
        "nodelet_pods{phase=\"Syncing\"} 1",
        "nodelet_watches_open{resource=\"configmaps\"} 1",
        "nodelet_watches_open{resource=\"pods\"} 1",
        "nodelet_volumes{",
        "nodelet_api_requests_total{verb=\"patch\"}",
        "nodelet_api_requests_total{verb=\"watch\"}",
        "nodelet_api_requests_total{verb=\"list\"}",
        "nodelet_propagation_latency_seconds_bucket",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    world.stop().await;
}
