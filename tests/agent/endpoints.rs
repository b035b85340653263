//! `/healthz`, `/readyz`, `/metrics`, `/pods` over real HTTP.

use std::net::SocketAddr;

use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{PATIENCE, World};

/// A minimal HTTP/1.0 GET (no client dependency needed): status code and body.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
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

/// A pod on the test node with ConfigMap `cm` as volume `v`, mounted at `/v`.
fn mounting_pod() -> Value {
    PodBuilder::new("default", "p")
        .node(crate::support::NODE)
        .container(
            json!({"name": "c", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}),
        )
        .config_map_volume("v", "cm")
        .json()
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
    h.create(ConfigMapBuilder::new("default", "cm").data("k", "v").json())
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(mounting_pod()).unwrap_or_else(|e| panic!("{e}"));
    let pods = tokio::time::timeout(PATIENCE, async {
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
        "nodelet_request_window{figure=\"limit\"}",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    // The first read and the node's requests so far were answered: samples of the window
    // (OM-35).
    let samples = text
        .lines()
        .find_map(|l| l.strip_prefix("nodelet_request_window{figure=\"samples\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(
        samples.is_some_and(|n| n >= 1.0),
        "window samples {samples:?} in:\n{text}"
    );
    assert!(
        text.contains("nodelet_propagation_latency_seconds_count 0"),
        "the first mount is not a propagation:\n{text}"
    );

    // A change of the object reaches the volume: one propagation sample (from the volume
    // manager's update seam, no polling).
    h.update(
        ConfigMapBuilder::new("default", "cm")
            .data("k", "v2")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut last = String::new();
    let sampled = tokio::time::timeout(PATIENCE, async {
        loop {
            last = get(addr, "/metrics").await.1;
            if last.contains("nodelet_propagation_latency_seconds_count 1") {
                return;
            }
            crate::support::poll_pause().await;
        }
    })
    .await;
    assert!(sampled.is_ok(), "no propagation sample:\n{last}");
    world.stop().await;
}

/// Waits until `/pods` satisfies `cond`; returns that document.
async fn wait_for_pods(addr: SocketAddr, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let (_, body) = get(addr, "/pods").await;
            last = serde_json::from_str(&body).unwrap_or(Value::Null);
            if cond(&last) {
                return last.clone();
            }
            crate::support::poll_pause().await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("/pods never showed {what}; last: {last:#}"))
}

/// `/metrics` once `cond` holds of it, or the last text read after [`PATIENCE`].
async fn wait_for_metrics(addr: SocketAddr, cond: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    let _ = tokio::time::timeout(PATIENCE, async {
        loop {
            last = get(addr, "/metrics").await.1;
            if cond(&last) {
                return;
            }
            crate::support::poll_pause().await;
        }
    })
    .await;
    last
}

fn metric(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(String::from))
}

/// An API outage must not make the agent unready: while the API server is down, `/readyz` stays 200
/// (readiness is the agent's
/// own loops, as the kubelet's `/healthz`), and `/metrics` and `/pods` show the outage: the API
/// is unreachable, which watches fail since when, and when each was last answered; all of it
/// clears once the server answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_shows_in_metrics_and_pods_while_readyz_stays_ok() {
    let world = World::start_with(|c| c.listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let addr = world
        .with_agent(|a| a.http_addr())
        .await
        .unwrap_or_else(|| panic!("no listener"));
    let h = world.server.handle();
    h.create(ConfigMapBuilder::new("default", "cm").data("k", "v").json())
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(mounting_pod()).unwrap_or_else(|e| panic!("{e}"));
    let healthy = wait_for_pods(addr, "a mounted volume and a healthy API", |v| {
        v["pods"][0]["volumes"][0]["state"] == "Mounted" && v["api"]["reachable"] == true
    })
    .await;
    let watches = healthy["api"]["watches"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let cm = watches
        .iter()
        .find(|w| w["resource"] == "configmaps")
        .unwrap_or_else(|| panic!("no configmap watch in {healthy:#}"));
    assert_eq!(
        (cm["namespace"].as_str(), cm["name"].as_str()),
        (Some("default"), Some("cm"))
    );
    assert!(
        cm["lastSuccess"].is_string() && cm["failingSince"].is_null(),
        "{cm:#}"
    );
    let (_, text) = get(addr, "/metrics").await;
    assert_eq!(
        metric(&text, "nodelet_api_reachable").as_deref(),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        metric(&text, "nodelet_watches_failing{resource=\"configmaps\"}").as_deref(),
        Some("0")
    );
    let since = metric(
        &text,
        "nodelet_watch_last_success_timestamp_seconds{resource=\"configmaps\"}",
    )
    .and_then(|v| v.parse::<i64>().ok())
    .unwrap_or(0);
    assert!(since > 0, "{text}");

    h.stop_listener().await;
    let down = wait_for_pods(addr, "the outage", |v| {
        v["api"]["reachable"] == false
            && v["api"]["watches"].as_array().is_some_and(|ws| {
                ["pods", "configmaps"].iter().all(|r| {
                    ws.iter()
                        .any(|w| w["resource"] == *r && w["failingSince"].is_string())
                })
            })
    })
    .await;
    assert!(
        down["api"]["watches"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|w| w["failingSince"].is_null() || w["lastError"].is_string()),
        "{down:#}"
    );
    assert_eq!(get(addr, "/readyz").await, (200, "ok".to_owned()));
    // The stand-in closes its open connections asynchronously: until every one is gone, a
    // probe may still be answered on one of them, and the pod watch counts as answered again.
    let text = wait_for_metrics(addr, |text| {
        metric(text, "nodelet_api_reachable").as_deref() == Some("0")
            && metric(text, "nodelet_watches_failing{resource=\"configmaps\"}").as_deref()
                == Some("1")
            && metric(text, "nodelet_watches_failing{resource=\"pods\"}").as_deref() == Some("1")
    })
    .await;
    assert_eq!(
        metric(&text, "nodelet_api_reachable").as_deref(),
        Some("0"),
        "{text}"
    );
    assert_eq!(
        metric(&text, "nodelet_watches_failing{resource=\"configmaps\"}").as_deref(),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        metric(&text, "nodelet_watches_failing{resource=\"pods\"}").as_deref(),
        Some("1"),
        "{text}"
    );

    h.restart_listener()
        .await
        .unwrap_or_else(|e| panic!("restart: {e}"));
    let up = wait_for_pods(addr, "the API reachable again", |v| {
        v["api"]["reachable"] == true
    })
    .await;
    assert!(
        up["api"]["watches"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|w| w["failingSince"].is_null() && w["lastError"].is_null()),
        "{up:#}"
    );
    let (_, text) = get(addr, "/metrics").await;
    assert_eq!(
        metric(&text, "nodelet_api_reachable").as_deref(),
        Some("1"),
        "{text}"
    );
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_address_in_use_is_refused_naming_the_address_and_its_holder() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = held.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let server =
        nodelet_apiserver::ApiServer::start(nodelet_apiserver::Config::default().with_auth())
            .await
            .unwrap_or_else(|e| panic!("api server: {e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = crate::support::agent_config(root.path());
    config.listen = Some(addr);
    let client = crate::support::client_for(
        &server,
        &nodelet_apiserver::User::node(crate::support::NODE),
    )
    .await;
    let err = match nodelet::Agent::start(config, client).await {
        Ok(agent) => {
            agent.shutdown().await;
            panic!("the agent started on an address in use");
        }
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains(&format!("binding --listen {addr}: the address is in use")),
        "{err}"
    );
    assert!(
        err.contains(&format!("held by pid {}", std::process::id())),
        "{err}"
    );
    drop(held);
    server.shutdown().await;
}

#[test]
fn the_default_listen_port_is_none_of_kubernetes_own() {
    let port: u16 = nodelet_config::DEFAULT_LISTEN
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_default();
    for taken in [
        10248, 10249, 10250, 10255, 10256, 10257, 10258, 10259, 6443, 2379, 2380,
    ] {
        assert_ne!(port, taken);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodelet_pods_shows_the_running_agents_pods_as_a_table_and_as_json() {
    let world = World::start_with(|c| c.listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let addr = world
        .with_agent(|a| a.http_addr())
        .await
        .unwrap_or_else(|| panic!("no HTTP address"));
    let h = world.server.handle();
    h.create(
        ConfigMapBuilder::new("default", "cfg")
            .data("k", "v")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    h.create(
        PodBuilder::new("default", "web")
            .node(crate::support::NODE)
            .container(json!({"name": "c", "image": "x",
                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}))
            .spec(json!({"volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}))
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let run = |args: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_nodelet"))
                .args(&args)
                .output()
                .unwrap_or_else(|e| panic!("running nodelet pods: {e}"))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let listen = addr.to_string();
    let table = tokio::time::timeout(PATIENCE, async {
        loop {
            let out = run(vec!["pods".into(), "--listen".into(), listen.clone()]).await;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && text.contains("ConfigMap/cfg@") && text.contains("1/1") {
                return text;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("nodelet pods never showed the mounted pod"));
    assert!(table.starts_with("POD"), "{table}");
    assert!(table.contains("default/web"), "{table}");

    let out = run(vec![
        "pods".into(),
        "--listen".into(),
        listen.clone(),
        "-o".into(),
        "json".into(),
    ])
    .await;
    assert!(out.status.success());
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed["pods"][0]["name"], "web");

    // Nothing listening: exit 1 naming the address.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("{e}"));
    let out = run(vec!["pods".into(), "--listen".into(), closed.to_string()]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no nodelet answers on {closed}")),
        "{err}"
    );
    world.stop().await;
}
