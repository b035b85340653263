//! `pods/{name}/log` proxied to a (fake) kubelet, as kube-apiserver does: the options and
//! container forwarded, the client certificate presented, the upstream error texts, follow
//! streaming, and `kubectl logs` through it.

use bytes::Bytes;
use futures::{AsyncBufReadExt as _, StreamExt as _};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;
use nodelet_apiserver::{ApiServer, Config, ServerHandle, User};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::fake_kubelet::{Answer, FakeKubelet};
use super::{PATIENCE, client_for, pod_json, start, status};

/// Node `n1` reporting these addresses and kubelet port.
fn node(h: &ServerHandle, addresses: Value, port: u16) {
    h.create(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {
            "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        },
    }))
    .expect("node");
}

/// Pod `default/p` on `n1` with these containers (and `extra` spec keys).
fn pod_on_n1(h: &ServerHandle, containers: Value, extra: Value) {
    let mut spec = json!({"nodeName": "n1", "containers": containers});
    if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
        s.extend(e);
    }
    h.create(pod_json("default", "p", spec)).expect("pod");
}

fn loopback() -> Value {
    json!([{"type": "InternalIP", "address": "127.0.0.1"}])
}

/// A server, its fake kubelet answering `answer`, node `n1` pointing at it.
async fn bed(config: Config, answer: Answer) -> (ApiServer, FakeKubelet) {
    let server = start(config).await;
    let kubelet = FakeKubelet::start(&server.kubelet_client_ca_pem(), answer).await;
    node(&server.handle(), loopback(), kubelet.port);
    (server, kubelet)
}

/// `GET path` as admin: status, content type and body.
async fn get(server: &ApiServer, path: &str) -> (u16, String, String) {
    let req = http::Request::get(path)
        .body(kube::client::Body::empty())
        .expect("request");
    let resp = server.client().send(req).await.expect("send");
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (code, ct, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_options_and_container_reach_the_kubelet_with_the_servers_client_certificate() {
    let (server, kubelet) = bed(Config::default(), Answer::Text(200, "one\ntwo\n")).await;
    pod_on_n1(
        &server.handle(),
        json!([{"name": "app", "image": "busybox"}]),
        json!({}),
    );
    let (code, ct, body) = get(
        &server,
        "/api/v1/namespaces/default/pods/p/log?tailLines=3&timestamps=true&previous=1&sinceSeconds=10&limitBytes=100&insecureSkipTLSVerifyBackend=true&pretty=true",
    )
    .await;
    assert_eq!(
        (code, ct.as_str(), body.as_str()),
        (200, "text/plain", "one\ntwo\n")
    );
    let seen = kubelet.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].path_and_query,
        "/containerLogs/default/p/app?limitBytes=100&previous=true&sinceSeconds=10&tailLines=3&timestamps=true"
    );
    assert_eq!(seen[0].host, format!("127.0.0.1:{}", kubelet.port));
    // The kubelet verified the chain against the stand-in's CA before it served anything.
    assert_eq!(seen[0].cn, "kube-apiserver-kubelet-client");
    assert_eq!(seen[0].orgs, ["system:masters"]);
    assert_eq!(kubelet.handshakes_refused(), 0);

    // The typed client reads the same text, and a sinceTime travels as RFC 3339 UTC.
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let lp = LogParams {
        container: Some("app".into()),
        follow: false,
        ..LogParams::default()
    };
    assert_eq!(pods.logs("p", &lp).await.expect("logs"), "one\ntwo\n");
    get(
        &server,
        "/api/v1/namespaces/default/pods/p/log?sinceTime=2024-05-06T07%3A08%3A09%2B02%3A00",
    )
    .await;
    assert_eq!(
        kubelet.seen().last().map(|s| s.path_and_query.clone()),
        Some("/containerLogs/default/p/app?sinceTime=2024-05-06T05%3A08%3A09Z".into())
    );
}

#[tokio::test]
async fn the_address_follows_kube_apiservers_preferred_types_order() {
    let (server, kubelet) = bed(Config::default(), Answer::Text(200, "x")).await;
    let h = server.handle();
    h.delete_now("v1", "Node", None, "n1").expect("delete node");
    // ExternalIP is listed first but Hostname is preferred.
    node(
        &h,
        json!([
            {"type": "ExternalIP", "address": "192.0.2.1"},
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": "localhost"},
        ]),
        kubelet.port,
    );
    pod_on_n1(&h, json!([{"name": "app", "image": "busybox"}]), json!({}));
    let (code, _, body) = get(&server, "/api/v1/namespaces/default/pods/p/log").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        kubelet.seen()[0].host,
        format!("localhost:{}", kubelet.port)
    );
}

#[tokio::test]
async fn a_container_must_be_named_when_the_pod_has_several_and_must_exist() {
    let (server, kubelet) = bed(Config::default(), Answer::Text(200, "x")).await;
    pod_on_n1(
        &server.handle(),
        json!([{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]),
        json!({"initContainers": [{"name": "setup", "image": "busybox"}]}),
    );
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let s = status(pods.logs("p", &LogParams::default()).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        s.message,
        "a container name must be specified for pod p, choose one of: [setup a b]"
    );
    let lp = LogParams {
        container: Some("nope".into()),
        ..LogParams::default()
    };
    let s = status(pods.logs("p", &lp).await.unwrap_err());
    assert_eq!(
        (s.code, s.message.as_str()),
        (400, "container nope is not valid for pod p")
    );
    let lp = LogParams {
        container: Some("setup".into()),
        ..LogParams::default()
    };
    assert_eq!(pods.logs("p", &lp).await.expect("init logs"), "x");
    assert_eq!(
        kubelet.seen()[0].path_and_query,
        "/containerLogs/default/p/setup"
    );
}

#[tokio::test]
async fn bad_options_are_refused_before_the_pod_is_read() {
    let server = start(Config::default()).await;
    let (code, _, body) = get(
        &server,
        "/api/v1/namespaces/default/pods/nope/log?tailLines=-1",
    )
    .await;
    let s: Value = serde_json::from_str(&body).expect("status");
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "PodLogOptions \"nope\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
    );
    assert_eq!(
        s["details"],
        json!({"name": "nope", "kind": "PodLogOptions", "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: -1: must be greater than or equal to 0", "field": "tailLines"}]})
    );
    let (code, _, body) = get(
        &server,
        "/api/v1/namespaces/default/pods/nope/log?sinceSeconds=1&sinceTime=2024-01-01T00:00:00Z",
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains(
            "[]: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        ),
        "{body}"
    );
    let (code, _, body) = get(
        &server,
        "/api/v1/namespaces/default/pods/nope/log?tailLines=x",
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        body.contains(r#"strconv.ParseInt: parsing \"x\": invalid syntax"#),
        "{body}"
    );
    // Valid options: now the pod is looked up.
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let s = status(pods.logs("nope", &LogParams::default()).await.unwrap_err());
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "pods \"nope\" not found")
    );
}

#[tokio::test]
async fn an_unscheduled_pod_has_no_content() {
    let server = start(Config::default()).await;
    server
        .handle()
        .create(pod_json("default", "p", json!({})))
        .expect("pod");
    let (code, _, body) = get(&server, "/api/v1/namespaces/default/pods/p/log").await;
    assert_eq!((code, body.as_str()), (204, ""));
}

#[tokio::test]
async fn a_node_without_a_preferred_address_or_gone_is_an_upstream_error() {
    let server = start(Config::default()).await;
    let h = server.handle();
    pod_on_n1(&h, json!([{"name": "app", "image": "busybox"}]), json!({}));
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let s = status(pods.logs("p", &LogParams::default()).await.unwrap_err());
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "nodes \"n1\" not found")
    );
    node(&h, json!([{"type": "PodIP", "address": "10.0.0.1"}]), 10250);
    let (code, _, body) = get(&server, "/api/v1/namespaces/default/pods/p/log").await;
    let s: Value = serde_json::from_str(&body).expect("status");
    assert_eq!(code, 500);
    assert_eq!(
        s["message"],
        "no preferred addresses found; known addresses: [{PodIP 10.0.0.1}]"
    );
    // Upstream's `StatusReasonUnknown`: no reason.
    assert!(s.get("reason").is_none(), "{s}");
}

#[tokio::test]
async fn a_kubelet_that_does_not_answer_is_a_500_with_gos_dial_error() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    node(&h, loopback(), port);
    pod_on_n1(&h, json!([{"name": "app", "image": "busybox"}]), json!({}));
    let (code, _, body) = get(&server, "/api/v1/namespaces/default/pods/p/log?follow=true").await;
    let s: Value = serde_json::from_str(&body).expect("status");
    assert_eq!(code, 500);
    assert_eq!(
        s["message"],
        format!(
            "Get \"https://127.0.0.1:{port}/containerLogs/default/p/app?follow=true\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
}

#[tokio::test]
async fn a_kubelet_error_answer_becomes_upstreams_status_for_it() {
    let (server, _kubelet) =
        bed(Config::default(), Answer::Text(404, "404 page not found\n")).await;
    pod_on_n1(
        &server.handle(),
        json!([{"name": "app", "image": "busybox"}]),
        json!({}),
    );
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let s = status(pods.logs("p", &LogParams::default()).await.unwrap_err());
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (
            404,
            "NotFound",
            "the server could not find the requested resource ( pods/log p)"
        )
    );
}

#[tokio::test]
async fn a_kubelet_that_does_not_trust_the_servers_ca_refuses_its_certificate() {
    let server = start(Config::default()).await;
    let other = start(Config::default()).await;
    let kubelet = FakeKubelet::start(&other.kubelet_client_ca_pem(), Answer::Text(200, "x")).await;
    let h = server.handle();
    node(&h, loopback(), kubelet.port);
    pod_on_n1(&h, json!([{"name": "app", "image": "busybox"}]), json!({}));
    let (code, _, body) = get(&server, "/api/v1/namespaces/default/pods/p/log").await;
    assert_eq!(code, 500, "{body}");
    // rustls's kubelet names the issuer unknown (a Go kubelet says `bad certificate`).
    assert!(
        body.contains("remote error: tls: unknown certificate authority"),
        "{body}"
    );
    assert!(kubelet.seen().is_empty());
    assert_eq!(kubelet.handshakes_refused(), 1);
}

#[tokio::test]
async fn follow_streams_as_the_kubelet_writes_and_hangs_up_on_it_when_the_reader_goes() {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let (server, kubelet) = bed(Config::default(), Answer::Stream(rx)).await;
    pod_on_n1(
        &server.handle(),
        json!([{"name": "app", "image": "busybox"}]),
        json!({}),
    );
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let lp = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let stream = pods.log_stream("p", &lp).await.expect("log stream");
    let mut lines = stream.lines();
    tx.send(Bytes::from_static(b"first\n")).await.expect("send");
    let first = tokio::time::timeout(PATIENCE, lines.next())
        .await
        .expect("first line");
    assert_eq!(first.expect("line").expect("read"), "first");
    tx.send(Bytes::from_static(b"second\n"))
        .await
        .expect("send");
    let second = tokio::time::timeout(PATIENCE, lines.next())
        .await
        .expect("second line");
    assert_eq!(second.expect("line").expect("read"), "second");
    assert_eq!(
        kubelet.seen()[0].path_and_query,
        "/containerLogs/default/p/app?follow=true"
    );
    // The reader goes away: the server closes its kubelet connection, which drops the
    // kubelet's side of the stream.
    drop(lines);
    tokio::time::timeout(PATIENCE, tx.closed())
        .await
        .expect("the kubelet's stream was closed");
}

#[tokio::test]
async fn follow_ends_when_the_kubelets_answer_ends() {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let (server, _kubelet) = bed(Config::default(), Answer::Stream(rx)).await;
    pod_on_n1(
        &server.handle(),
        json!([{"name": "app", "image": "busybox"}]),
        json!({}),
    );
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let lp = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let mut lines = pods.log_stream("p", &lp).await.expect("log stream").lines();
    tx.send(Bytes::from_static(b"last\n")).await.expect("send");
    drop(tx);
    let all = tokio::time::timeout(PATIENCE, async {
        let mut all = Vec::new();
        while let Some(l) = lines.next().await {
            all.push(l.expect("read"));
        }
        all
    })
    .await
    .expect("the stream ends");
    assert_eq!(all, ["last"]);
}

#[tokio::test]
async fn a_node_may_not_read_logs_and_an_admin_may() {
    let (server, _kubelet) = bed(Config::default().with_auth(), Answer::Text(200, "x")).await;
    pod_on_n1(
        &server.handle(),
        json!([{"name": "app", "image": "busybox"}]),
        json!({}),
    );
    let node: Api<Pod> = Api::namespaced(client_for(&server, &User::node("n1")).await, "default");
    let s = status(node.logs("p", &LogParams::default()).await.unwrap_err());
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "pods \"p\" is forbidden: User \"system:node:n1\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"default\""
        )
    );
    let admin: Api<Pod> = Api::namespaced(client_for(&server, &User::admin()).await, "default");
    assert_eq!(
        admin.logs("p", &LogParams::default()).await.expect("logs"),
        "x"
    );
}

/// `kubectl logs`: the default-container annotation is kubectl's choice, the server proxies
/// what it names; `--tail`/`--timestamps` reach the kubelet.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_logs_reads_the_kubelets_answer_through_the_server() {
    super::kubectl::require_kubectl();
    let (server, kubelet) = bed(
        Config::default().with_tls().with_auth(),
        Answer::Text(200, "hello from b\n"),
    )
    .await;
    let mut pod = pod_json(
        "default",
        "p",
        json!({"nodeName": "n1", "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]}),
    );
    pod["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/default-container": "b"});
    server.handle().create(pod).expect("pod");
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    server
        .write_kubeconfig(&kc, &User::admin())
        .expect("kubeconfig");
    let cache = dir.path().join("cache");
    let run = move |args: &'static [&'static str]| {
        let (kc, cache) = (kc.clone(), cache.clone());
        tokio::task::spawn_blocking(move || super::kubectl::kubectl(&kc, &cache, args))
    };
    let (ok, out) = run(&["logs", "p"]).await.expect("kubectl");
    assert!(ok, "{out}");
    assert_eq!(out, "hello from b\n");
    let (ok, out) = run(&["logs", "p", "-c", "a", "--tail=2", "--timestamps"])
        .await
        .expect("kubectl");
    assert!(ok, "{out}");
    let paths: Vec<String> = kubelet
        .seen()
        .into_iter()
        .map(|s| s.path_and_query)
        .collect();
    assert_eq!(
        paths,
        [
            "/containerLogs/default/p/b",
            "/containerLogs/default/p/a?tailLines=2&timestamps=true"
        ]
    );
    let (ok, out) = run(&["logs", "p", "-c", "nope"]).await.expect("kubectl");
    assert!(!ok);
    assert!(
        out.contains("container nope is not valid for pod p"),
        "{out}"
    );
}
