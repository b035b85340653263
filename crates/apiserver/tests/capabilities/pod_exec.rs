//! `pods/{name}/exec` proxied to a (fake) kubelet as a WebSocket upgrade: the 101 and the
//! subprotocol relayed, bytes spliced both ways, the query and client certificate the kubelet
//! sees, the upstream error texts, authorization, and `kubectl exec` through it.

use nodelet_apiserver::{ApiServer, Config, ServerHandle, User};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::fake_kubelet::{Answer, FakeKubelet, Session, websocket_accept};
use super::{PATIENCE, pod_json, start};

/// What kubectl ≥ 1.30 offers.
const PROTOCOLS: &str =
    "v5.channel.k8s.io, v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io, channel.k8s.io";
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// A server, its fake kubelet answering `answer`, node `n1` pointing at it, and pod
/// `default/p` on `n1` with `containers`.
async fn bed(config: Config, answer: Answer, containers: Value) -> (ApiServer, FakeKubelet) {
    let server = start(config).await;
    let kubelet = FakeKubelet::start(&server.kubelet_client_ca_pem(), answer).await;
    let h: ServerHandle = server.handle();
    h.create(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port}},
        },
    }))
    .expect("node");
    h.create(pod_json(
        "default",
        "p",
        json!({"nodeName": "n1", "containers": containers}),
    ))
    .expect("pod");
    (server, kubelet)
}

fn one_container() -> Value {
    json!([{"name": "app", "image": "busybox"}])
}

/// An answer read off a raw connection: status, head (lower-cased), body.
struct Raw {
    status: u16,
    head: String,
    body: String,
    stream: TcpStream,
}

/// Sends `GET path` over plain HTTP/1.1, as a WebSocket upgrade when `upgrade`, with a bearer
/// `token`; reads the head and a `Content-Length` body.
async fn raw(server: &ApiServer, path: &str, upgrade: bool, token: Option<&str>) -> Raw {
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n", server.addr());
    if upgrade {
        req.push_str(&format!(
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Protocol: {PROTOCOLS}\r\n"
        ));
    }
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    let read = async {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            let n = stream.read(&mut b).await.expect("read head");
            assert_eq!(n, 1, "connection closed in the head: {head:?}");
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let status: u16 = head[9..12].parse().expect("status code");
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().expect("length"));
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await.expect("body");
        (status, head, String::from_utf8_lossy(&body).into_owned())
    };
    let (status, head, body) = tokio::time::timeout(PATIENCE, read).await.expect("answer");
    Raw {
        status,
        head,
        body,
        stream,
    }
}

/// A masked client frame (RFC 6455 §5.3).
fn client_frame(payload: &[u8]) -> Vec<u8> {
    let mask = [7u8, 1, 2, 3];
    let mut f = vec![0x82, 0x80 | u8::try_from(payload.len()).expect("short")];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[tokio::test]
async fn a_websocket_client_gets_the_kubelets_101_and_its_bytes_round_trip() {
    let (server, kubelet) = bed(
        Config::default(),
        Answer::Upgrade(Session::Echo),
        one_container(),
    )
    .await;
    let mut r = raw(
        &server,
        "/api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true&stdout=true&tty=true",
        true,
        None,
    )
    .await;
    assert_eq!(r.status, 101, "{}{}", r.head, r.body);
    assert!(r.head.contains("upgrade: websocket"), "{}", r.head);
    assert!(
        r.head.contains(&format!(
            "sec-websocket-accept: {}",
            websocket_accept(KEY).to_ascii_lowercase()
        )),
        "{}",
        r.head
    );
    assert!(
        r.head
            .contains("sec-websocket-protocol: v5.channel.k8s.io\r\n"),
        "{}",
        r.head
    );
    let frame = client_frame(b"\x00hello");
    r.stream.write_all(&frame).await.expect("write");
    let mut echoed = vec![0u8; frame.len()];
    tokio::time::timeout(PATIENCE, r.stream.read_exact(&mut echoed))
        .await
        .expect("echo in time")
        .expect("echo");
    assert_eq!(echoed, frame);
    let seen = kubelet.seen();
    assert_eq!(seen[0].cn, "kube-apiserver-kubelet-client");
    assert_eq!(seen[0].orgs, ["system:masters"]);
}

#[tokio::test]
async fn the_kubelet_gets_the_command_repeated_in_order_and_the_streams_under_upstreams_names() {
    let (server, kubelet) = bed(
        Config::default(),
        Answer::Upgrade(Session::Echo),
        json!([{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]),
    )
    .await;
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/p/exec?command=cat&command=%2Fx&container=b&stdout=true&stderr=true",
        true,
        None,
    )
    .await;
    assert_eq!(r.status, 101, "{}", r.body);
    assert_eq!(
        kubelet.seen()[0].path_and_query,
        "/exec/default/p/b?command=cat&command=%2Fx&error=1&output=1"
    );
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/p/attach?container=a&stdin=1&tty=1",
        true,
        None,
    )
    .await;
    assert_eq!(r.status, 101, "{}", r.body);
    assert_eq!(
        kubelet.seen()[1].path_and_query,
        "/attach/default/p/a?input=1&tty=1"
    );
}

#[tokio::test]
async fn container_and_host_errors_come_first_and_a_plain_request_must_upgrade() {
    let (server, kubelet) = bed(
        Config::default(),
        Answer::Upgrade(Session::Echo),
        json!([{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]),
    )
    .await;
    let message = |r: &Raw| -> (u16, String) {
        let s: Value = serde_json::from_str(&r.body).expect("status");
        (r.status, s["message"].as_str().unwrap_or("").to_string())
    };
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/p/exec?command=ls&stdout=1",
        true,
        None,
    )
    .await;
    assert_eq!(
        message(&r),
        (
            400,
            "a container name must be specified for pod p, choose one of: [a b]".into()
        )
    );
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/p/exec?command=ls&stdout=1&container=c",
        true,
        None,
    )
    .await;
    assert_eq!(
        message(&r),
        (400, "container c is not valid for pod p".into())
    );
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/nope/exec?command=ls",
        true,
        None,
    )
    .await;
    assert_eq!(message(&r), (404, "pods \"nope\" not found".into()));
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/p/exec?command=ls&stdout=1&container=a",
        false,
        None,
    )
    .await;
    assert_eq!(message(&r), (400, "Upgrade request required".into()));
    server
        .handle()
        .create(pod_json(
            "default",
            "floating",
            json!({"containers": one_container()}),
        ))
        .expect("pod");
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/floating/exec?command=ls",
        true,
        None,
    )
    .await;
    assert_eq!(
        message(&r),
        (400, "pod floating does not have a host assigned".into())
    );
    assert!(kubelet.seen().is_empty());
}

/// kube-apiserver checks neither the command nor the streams: the kubelet does, and its
/// refusal reaches the client as it was written.
#[tokio::test]
async fn a_kubelet_refusing_no_command_or_no_stream_is_relayed_as_it_answered() {
    let refusal = "you must specify at least 1 of stdin, stdout, stderr";
    let (server, kubelet) = bed(
        Config::default(),
        Answer::Text(400, refusal),
        one_container(),
    )
    .await;
    let r = raw(
        &server,
        "/api/v1/namespaces/default/pods/p/exec",
        true,
        None,
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (400, refusal));
    assert!(r.head.contains("content-type: text/plain"), "{}", r.head);
    assert_eq!(kubelet.seen()[0].path_and_query, "/exec/default/p/app");
}

#[tokio::test]
async fn a_node_may_not_exec_and_an_admin_may() {
    let (server, kubelet) = bed(
        Config::default().with_auth(),
        Answer::Upgrade(Session::Echo),
        one_container(),
    )
    .await;
    let path = "/api/v1/namespaces/default/pods/p/exec?command=ls&stdout=1";
    let node = server.token_for(&User::node("n1"));
    let r = raw(&server, path, true, Some(&node)).await;
    let s: Value = serde_json::from_str(&r.body).expect("status");
    assert_eq!(
        (r.status, s["message"].as_str().unwrap_or("")),
        (
            403,
            "pods \"p\" is forbidden: User \"system:node:n1\" cannot get resource \"pods/exec\" in API group \"\" in the namespace \"default\""
        )
    );
    assert!(kubelet.seen().is_empty());
    let admin = server.token_for(&User::admin());
    let r = raw(&server, path, true, Some(&admin)).await;
    assert_eq!(r.status, 101, "{}", r.body);
}

/// `kubectl exec` speaks `v5.channel.k8s.io` over the WebSocket: the kubelet's stdout
/// channel is printed and its `Success` status ends the command with exit code 0.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_exec_prints_what_the_kubelet_writes_on_stdout() {
    super::kubectl::require_kubectl();
    let (server, kubelet) = bed(
        Config::default().with_tls().with_auth(),
        Answer::Upgrade(Session::Stdout("contents of x\n")),
        one_container(),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    server
        .write_kubeconfig(&kc, &User::admin())
        .expect("kubeconfig");
    let cache = dir.path().join("cache");
    let (ok, out) = tokio::task::spawn_blocking(move || {
        super::kubectl::kubectl(&kc, &cache, &["exec", "p", "--", "cat", "/x"])
    })
    .await
    .expect("kubectl");
    assert!(ok, "{out}");
    assert_eq!(out, "contents of x\n");
    assert_eq!(
        kubelet.seen()[0].path_and_query,
        "/exec/default/p/app?command=cat&command=%2Fx&error=1&output=1"
    );
}
