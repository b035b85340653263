//! Probes under the process runtime (needs root, as `process_runtime`): the agent probes
//! containers that run as local processes with exec, httpGet, tcpSocket and grpc checks —
//! against servers this test runs on loopback (containers share the host's network, and the
//! pods' IP is the node's, 127.0.0.1 here) — and the API sees the results: readiness in the
//! containers' `ready` and the pod's `ContainersReady` / `Ready` (readiness gates included), a
//! failed liveness probe as `Unhealthy` and `Killing` events and a restart (PW-30 … PW-35).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::process_runtime::{
    NS, container_status, create, event_is, pod, shell_with, start, wait_for_event, wait_for_pod,
};
use crate::support::World;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The status of condition `type_` of `pod` (`Null` when absent).
fn condition<'a>(pod: &'a Value, type_: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// Waits until pod `name` is Ready (its `Ready` condition true and container `c` ready).
async fn wait_ready(world: &World, name: &str) -> Value {
    wait_for_pod(world, name, "became Ready", |p| {
        condition(p, "Ready")["status"] == "True" && container_status(p, "c")["ready"] == true
    })
    .await
}

/// Waits until container `c` of pod `name` restarted at least once.
async fn wait_restarted(world: &World, name: &str) -> Value {
    wait_for_pod(world, name, "restarted its container", |p| {
        container_status(p, "c")["restartCount"].as_u64() >= Some(1)
    })
    .await
}

/// Waits for the `Unhealthy` event of `kind` (`Liveness`, `Readiness`) about `pod`; its message.
async fn unhealthy(world: &World, pod: &Value, kind: &str) -> String {
    let prefix = format!("{kind} probe failed: ");
    let e = wait_for_event(
        &world.admin,
        pod,
        &format!("Unhealthy ({kind})"),
        |e: &Event| {
            event_is(e, "Warning", "Unhealthy")
                && e.message.as_deref().is_some_and(|m| m.starts_with(&prefix))
        },
    )
    .await;
    e.message.unwrap_or_default()
}

/// Checks what every failing-liveness pod shows: the `Killing` event with the kubelet's text,
/// a restart, and the killed instance as its last state.
async fn assert_killed_and_restarted(world: &World, created: &Value, name: &str) {
    let killing = wait_for_event(&world.admin, created, "Killing", |e| {
        event_is(e, "Normal", "Killing")
    })
    .await;
    assert_eq!(
        killing.message.as_deref(),
        Some("Container c failed liveness probe, will be restarted")
    );
    let restarted = wait_restarted(world, name).await;
    let c = container_status(&restarted, "c");
    assert!(
        c["lastState"]["terminated"]["exitCode"].as_i64().is_some(),
        "the killed instance is the last state: {c}"
    );
}

/// A probe of `handler` (a JSON object such as `{"exec": …}`) checked every second, failing
/// at once.
fn probe(handler: Value) -> Value {
    let mut p = json!({"periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 2});
    if let (Some(p), Value::Object(h)) = (p.as_object_mut(), handler) {
        p.extend(h);
    }
    p
}

/// A pod `name` whose container `c` sleeps, with the container fields `extra`.
fn sleeper(name: &str, extra: Value) -> Value {
    pod(name).container(shell_with("sleep 600", extra)).json()
}

/// One request an [`HttpServer`] answered: its path and headers (lower-case names).
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
}

/// A loopback HTTP/1.1 server: `/healthz` answers 200, anything else 500; it records what it
/// was asked.
struct HttpServer {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl HttpServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{e}"))
            .port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let mut lines = text.split("\r\n");
                    let path = lines
                        .next()
                        .and_then(|l| l.split(' ').nth(1))
                        .unwrap_or_default()
                        .to_owned();
                    let headers = lines
                        .filter_map(|l| l.split_once(": "))
                        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
                        .collect();
                    let status = if path == "/healthz" {
                        "200 OK"
                    } else {
                        "500 Internal Server Error"
                    };
                    record.lock().push(Seen { path, headers });
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Self { port, seen }
    }

    fn seen(&self, path: &str) -> Option<Seen> {
        self.seen.lock().iter().find(|s| s.path == path).cloned()
    }
}

/// A gRPC health server on loopback (`grpc.health.v1.Health/Check` over plain HTTP/2):
/// service `down` is `NOT_SERVING`, every other one `SERVING`.
async fn grpc_health_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = conn.accept().await {
                    let path = request.uri().path().to_owned();
                    let mut body = request.into_body();
                    let mut data = Vec::new();
                    while let Some(Ok(chunk)) = body.data().await {
                        data.extend_from_slice(&chunk);
                    }
                    // A length-prefixed HealthCheckRequest: field 1 is the service.
                    let service = match data.get(5..) {
                        Some([0x0a, _, rest @ ..]) => String::from_utf8_lossy(rest).into_owned(),
                        _ => String::new(),
                    };
                    let response = http::Response::builder()
                        .status(200)
                        .header("content-type", "application/grpc")
                        .body(())
                        .unwrap_or_default();
                    let Ok(mut stream) = respond.send_response(response, false) else {
                        continue;
                    };
                    let status = if service == "down" { 2 } else { 1 };
                    let ok = path == "/grpc.health.v1.Health/Check";
                    if ok {
                        let message = bytes::Bytes::from(vec![0, 0, 0, 0, 2, 0x08, status]);
                        let _ = stream.send_data(message, false);
                    }
                    let mut trailers = http::HeaderMap::new();
                    let code = if ok { "0" } else { "12" };
                    trailers.insert("grpc-status", http::HeaderValue::from_static(code));
                    let _ = stream.send_trailers(trailers);
                }
            });
        }
    });
    port
}

// ---------------------------------------------------------------------------------------------
// exec
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw33_an_exec_readiness_probe_makes_the_pod_ready_once_its_file_exists() {
    let (world, _reaper) = start(true).await;
    // The file appears two seconds after the start: until then the probe fails.
    let created = create(
        &world,
        pod("ready")
            .container(shell_with(
                "sleep 2; touch /tmp/ready; sleep 600",
                json!({"readinessProbe": probe(json!({"exec": {"command": ["cat", "/tmp/ready"]}}))}),
            ))
            .json(),
    );
    let unready = wait_for_pod(&world, "ready", "ran unready", |p| {
        container_status(p, "c")["state"]["running"].is_object()
            && condition(p, "ContainersReady")["status"] == "False"
    })
    .await;
    assert_eq!(container_status(&unready, "c")["ready"], false);
    assert_eq!(condition(&unready, "Ready")["reason"], "ContainersNotReady");
    assert_eq!(
        condition(&unready, "Ready")["message"],
        "containers with unready status: [c]"
    );
    let message = unhealthy(&world, &created, "Readiness").await;
    assert!(message.contains("/tmp/ready"), "{message}");
    let ready = wait_ready(&world, "ready").await;
    let c = container_status(&ready, "c");
    assert_eq!(
        (c["started"].clone(), c["restartCount"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(condition(&ready, "ContainersReady")["status"], "True");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw34_readiness_goes_on_while_the_pod_stops_and_liveness_does_not() {
    let (world, _reaper) = start(true).await;
    // On SIGTERM the container drops both files and takes its time to stop.
    let script = "trap 'rm -f /tmp/ready /tmp/alive; sleep 20; exit 0' TERM; \
                  touch /tmp/ready /tmp/alive; while true; do sleep 1; done";
    let created = create(
        &world,
        pod("stopping")
            .spec(json!({"terminationGracePeriodSeconds": 30}))
            .container(shell_with(
                script,
                json!({
                    "readinessProbe": probe(json!({"exec": {"command": ["cat", "/tmp/ready"]}})),
                    "livenessProbe": probe(json!({"exec": {"command": ["cat", "/tmp/alive"]}})),
                }),
            ))
            .json(),
    );
    wait_ready(&world, "stopping").await;
    crate::process_runtime::delete_pod(&world, "stopping", 30).await;
    let unready = wait_for_pod(&world, "stopping", "turned unready while stopping", |p| {
        condition(p, "Ready")["status"] == "False"
    })
    .await;
    assert!(
        unready["metadata"]["deletionTimestamp"].is_string(),
        "still there, being deleted: {}",
        unready["metadata"]
    );
    let events = crate::process_runtime::events_for(&world.admin, &created).await;
    let liveness_kills: Vec<&Event> = events
        .iter()
        .filter(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.contains("failed liveness probe"))
        })
        .collect();
    assert!(liveness_kills.is_empty(), "{liveness_kills:?}");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw34_a_failing_exec_liveness_probe_kills_and_restarts_the_container() {
    let (world, _reaper) = start(true).await;
    // The file goes away a second after the start: the next probe fails.
    let created = create(
        &world,
        pod("alive")
            .container(shell_with(
                "touch /tmp/alive; sleep 1; rm /tmp/alive; sleep 600",
                json!({"livenessProbe": probe(json!({"exec": {"command": ["cat", "/tmp/alive"]}}))}),
            ))
            .json(),
    );
    let message = unhealthy(&world, &created, "Liveness").await;
    assert!(
        message.contains("/tmp/alive"),
        "the command's output: {message}"
    );
    assert_killed_and_restarted(&world, &created, "alive").await;
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// httpGet, tcpSocket, grpc
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw32_http_get_probes_pass_on_200_with_their_headers_and_fail_on_500() {
    let server = HttpServer::start().await;
    let (world, _reaper) = start(true).await;
    // A named port, a path and a header of the probe's own.
    create(
        &world,
        sleeper(
            "http-ready",
            json!({
                "ports": [{"name": "web", "containerPort": server.port}],
                "readinessProbe": probe(json!({"httpGet": {
                    "path": "/healthz", "port": "web",
                    "httpHeaders": [{"name": "X-Probe", "value": "yes"}],
                }})),
            }),
        ),
    );
    let failing = create(
        &world,
        sleeper(
            "http-alive",
            json!({"livenessProbe": probe(json!({"httpGet": {"path": "/fail", "port": server.port}}))}),
        ),
    );
    wait_ready(&world, "http-ready").await;
    let seen = server
        .seen("/healthz")
        .unwrap_or_else(|| panic!("the probe never reached the server"));
    let header = |name: &str| {
        seen.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("x-probe").as_deref(), Some("yes"));
    assert_eq!(header("user-agent").as_deref(), Some("kube-probe/1.36"));
    assert_eq!(
        header("host"),
        Some(format!("127.0.0.1:{}", server.port)),
        "the pod's IP"
    );
    assert_eq!(
        unhealthy(&world, &failing, "Liveness").await,
        "Liveness probe failed: HTTP probe failed with statuscode: 500"
    );
    assert_killed_and_restarted(&world, &failing, "http-alive").await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw32_tcp_socket_probes_pass_on_an_open_port_and_fail_on_a_closed_one() {
    let open = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let open_port = open.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        l.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
    };
    let (world, _reaper) = start(true).await;
    create(
        &world,
        sleeper(
            "tcp-ready",
            json!({"readinessProbe": probe(json!({"tcpSocket": {"port": open_port}}))}),
        ),
    );
    let failing = create(
        &world,
        sleeper(
            "tcp-alive",
            json!({"livenessProbe": probe(json!({"tcpSocket": {"port": closed_port}}))}),
        ),
    );
    wait_ready(&world, "tcp-ready").await;
    assert_eq!(
        unhealthy(&world, &failing, "Liveness").await,
        format!(
            "Liveness probe failed: dial tcp 127.0.0.1:{closed_port}: connect: connection refused"
        )
    );
    assert_killed_and_restarted(&world, &failing, "tcp-alive").await;
    drop(open);
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw32_grpc_probes_pass_on_serving_and_fail_on_not_serving() {
    let port = grpc_health_server().await;
    let (world, _reaper) = start(true).await;
    create(
        &world,
        sleeper(
            "grpc-ready",
            json!({"readinessProbe": probe(json!({"grpc": {"port": port}}))}),
        ),
    );
    let failing = create(
        &world,
        sleeper(
            "grpc-alive",
            json!({"livenessProbe": probe(json!({"grpc": {"port": port, "service": "down"}}))}),
        ),
    );
    wait_ready(&world, "grpc-ready").await;
    assert_eq!(
        unhealthy(&world, &failing, "Liveness").await,
        "Liveness probe failed: service unhealthy (responded with \"NOT_SERVING\")"
    );
    assert_killed_and_restarted(&world, &failing, "grpc-alive").await;
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Readiness gates
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw35_a_readiness_gate_holds_ready_until_its_condition_is_true() {
    let (world, _reaper) = start(true).await;
    create(
        &world,
        pod("gated")
            .container(shell_with("sleep 600", json!({})))
            .spec(json!({"readinessGates": [{"conditionType": "example.com/lb"}]}))
            .json(),
    );
    let held = wait_for_pod(
        &world,
        "gated",
        "had ready containers behind its gate",
        |p| condition(p, "ContainersReady")["status"] == "True",
    )
    .await;
    assert_eq!(condition(&held, "Ready")["status"], "False");
    assert_eq!(
        condition(&held, "Ready")["reason"],
        "ReadinessGatesNotReady"
    );
    assert_eq!(
        condition(&held, "Ready")["message"],
        "corresponding condition of pod readiness gate \"example.com/lb\" does not exist."
    );
    // A controller sets the gate's condition (a strategic merge patch of the status, as
    // kubectl and the e2e framework send).
    let api: Api<Pod> = Api::namespaced(world.admin.clone(), NS);
    let set = |status: &str| json!({"status": {"conditions": [{"type": "example.com/lb", "status": status}]}});
    api.patch_status(
        "gated",
        &PatchParams::default(),
        &Patch::Strategic(set("True")),
    )
    .await
    .unwrap_or_else(|e| panic!("setting the gate's condition: {e}"));
    let ready = wait_for_pod(&world, "gated", "became Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(
        condition(&ready, "example.com/lb")["status"],
        "True",
        "the agent's patches keep the gate's condition"
    );
    api.patch_status(
        "gated",
        &PatchParams::default(),
        &Patch::Strategic(set("False")),
    )
    .await
    .unwrap_or_else(|e| panic!("clearing the gate's condition: {e}"));
    let unready = wait_for_pod(&world, "gated", "became unready again", |p| {
        condition(p, "Ready")["status"] == "False"
    })
    .await;
    assert_eq!(
        condition(&unready, "Ready")["message"],
        "the status of pod readiness gate \"example.com/lb\" is not \"True\", but False"
    );
    world.stop().await;
}
