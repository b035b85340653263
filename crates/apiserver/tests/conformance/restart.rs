//! Failures a real kube-apiserver shows on its own, on demand: a restart (refused connections,
//! a not-ready window, watch history forgotten), GOAWAY on HTTP/2 connections, 429 under load,
//! and a server without streaming lists. Raw HTTP/1.1 and HTTP/2 (hyper's client connections)
//! where the kube client would hide the status, the headers or the connection.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use nodelet_apiserver::{Config, Restart};
use serde_json::{Value, json};

use super::watch::next;
use super::{PATIENCE, cm, cms, start, start_with};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const STREAMING_LIST: &str =
    "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/// Sends one request on a new HTTP/1.1 connection; the response head and its body, unread.
async fn open(addr: SocketAddr, method: &str, path: &str) -> http::Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1.1 handshake");
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .expect("request");
    tokio::time::timeout(PATIENCE, send.send_request(req))
        .await
        .expect("answered in time")
        .expect("response")
}

/// One request on a new HTTP/1.1 connection: status, headers and the whole body.
async fn call(addr: SocketAddr, method: &str, path: &str) -> (u16, http::HeaderMap, Bytes) {
    let (head, body) = open(addr, method, path).await.into_parts();
    let body = tokio::time::timeout(PATIENCE, body.collect())
        .await
        .expect("body in time")
        .expect("body")
        .to_bytes();
    (head.status.as_u16(), head.headers, body)
}

/// Reads newline-delimited watch events from `body` until `last` matches one; all of them.
async fn events_until(body: &mut Incoming, last: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut buf = Vec::new();
    let mut events = Vec::new();
    loop {
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            let event: Value = serde_json::from_slice(&line).expect("a JSON watch event");
            let done = last(&event);
            events.push(event);
            if done {
                return events;
            }
        }
        let frame = tokio::time::timeout(PATIENCE, body.frame())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
}

/// Waits (within [`PATIENCE`]) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(PATIENCE, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: not within {PATIENCE:?}");
}

/// An HTTP/2 connection with prior knowledge (h2c): its request sender and the task driving it.
async fn h2(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("HTTP/2 handshake");
    (send, tokio::spawn(conn))
}

/// A GET for `path` on an HTTP/2 connection to `addr` (h2 wants scheme and authority).
fn h2_get(addr: SocketAddr, path: &str) -> http::Request<Empty<Bytes>> {
    http::Request::get(format!("http://{addr}{path}"))
        .body(Empty::new())
        .expect("request")
}

#[tokio::test]
async fn after_a_restart_a_watch_from_an_older_version_gets_one_expired_error_and_lists_work() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    let a = api
        .create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    let seen = a.metadata.resource_version.expect("rv");

    handle.restart(Restart::default()).await.expect("restart");
    assert_eq!(handle.restarts(), 1);

    // A watch resumed from what the client saw before: HTTP 200, then exactly one event.
    let (code, _, body) = call(
        server.addr(),
        "GET",
        &format!("{CONFIGMAPS}?watch=true&resourceVersion={seen}"),
    )
    .await;
    assert_eq!(code, 200);
    let lines: Vec<Value> = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("JSON event"))
        .collect();
    let oldest = handle.resource_version();
    assert_eq!(
        lines,
        vec![json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {seen} ({oldest})"),
            "reason": "Expired", "code": 410}})]
    );

    // A list works at once, and so does a streaming list (empty resourceVersion).
    let list = api.list(&ListParams::default()).await.expect("list");
    let names: Vec<_> = list.items.iter().map(|c| c.metadata.name.clone()).collect();
    assert_eq!(names, vec![Some("a".to_string())]);
    let resp = open(
        server.addr(),
        "GET",
        &format!("{CONFIGMAPS}?{STREAMING_LIST}"),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let events = events_until(&mut body, |e| {
        e["type"] == "BOOKMARK"
            && e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
    })
    .await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        (&events[0]["type"], &events[0]["object"]["metadata"]["name"]),
        (&json!("ADDED"), &json!("a"))
    );
    // A watch from the version the new list gave resumes normally.
    let mut w = api
        .watch(
            &WatchParams::default(),
            &list.metadata.resource_version.expect("rv"),
        )
        .await
        .expect("watch")
        .boxed();
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .expect("create");
    assert!(
        matches!(next(&mut w).await, Ok(WatchEvent::Added(o)) if o.metadata.name.as_deref() == Some("b"))
    );
}

#[tokio::test(start_paused = true)]
async fn readyz_fails_during_the_not_ready_window_while_requests_are_served() {
    let (server, client) = start().await;
    let handle = server.handle();
    handle
        .create(super::cm_json("default", "a", "k", "1"))
        .expect("seed");
    // Paused clock: the window is long enough that nothing but the sleep below ends it.
    let window = Duration::from_secs(3600);
    handle
        .restart(Restart::like_kube_apiserver().not_ready(window))
        .await
        .expect("restart");

    let (code, headers, body) = call(server.addr(), "GET", "/readyz").await;
    assert_eq!(code, 500);
    assert_eq!(
        headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes()),
        Some(&b"text/plain; charset=utf-8"[..])
    );
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.lines().any(|l| l == "[-]etcd failed: reason withheld"),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("readyz check failed"));
    for probe in ["/livez", "/healthz"] {
        let (code, _, body) = call(server.addr(), "GET", probe).await;
        assert_eq!((code, &body[..]), (200, &b"ok"[..]), "{probe}");
    }
    let got = cms(&client).get("a").await.expect("served while not ready");
    assert_eq!(got.metadata.name.as_deref(), Some("a"));

    tokio::time::sleep(window).await;
    let (code, _, body) = call(server.addr(), "GET", "/readyz").await;
    assert_eq!((code, &body[..]), (200, &b"ok"[..]));
}

#[test]
fn like_kube_apiserver_is_ready_two_seconds_after_it_listens() {
    let r = Restart::like_kube_apiserver();
    assert_eq!(
        (r.down, r.not_ready, r.graph_rebuild),
        (
            Duration::ZERO,
            Duration::from_secs(2),
            Duration::from_secs(1)
        )
    );
    assert_eq!(
        Restart::default(),
        Restart::new(Duration::ZERO, Duration::ZERO)
    );
}

#[tokio::test]
async fn connections_are_refused_while_the_server_is_down_and_accepted_after() {
    let (server, _client) = start().await;
    let handle = server.handle();
    let addr = server.addr();
    let down = Duration::from_millis(300);
    // Both in this task: the probe runs as soon as the restart waits out `down`.
    // (A connection made as the listener closes may be reset instead: not what is asked.)
    let probe = tokio::time::timeout(PATIENCE, async {
        loop {
            match tokio::net::TcpStream::connect(addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
                _ => tokio::task::yield_now().await,
            }
        }
    });
    let (restarted, refused) = tokio::join!(handle.restart(Restart::default().down(down)), probe);
    restarted.expect("restart");
    assert!(refused.is_ok(), "no connection refused while down");
    tokio::net::TcpStream::connect(addr)
        .await
        .expect("accepted once restart returns");
    let (code, _, _) = call(addr, "GET", CONFIGMAPS).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn the_admin_endpoint_answers_then_restarts() {
    let (server, _client) = start().await;
    let handle = server.handle();
    let (code, _, body) = call(
        server.addr(),
        "POST",
        "/nodelet/restart?down=0&notReady=600000",
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    eventually("the restart asked over HTTP", || handle.restarts() == 1).await;
    let (code, _, _) = call(server.addr(), "GET", "/readyz").await;
    assert_eq!(code, 500);
    let (code, _, _) = call(server.addr(), "POST", "/nodelet/restart?down=soon").await;
    assert_eq!(code, 400);
    assert_eq!(handle.restarts(), 1);
}

#[tokio::test]
async fn with_goaway_chance_one_an_http2_connection_serves_its_request_then_closes() {
    let (server, client) = start_with(Config::default().goaway_chance(1.0)).await;
    let handle = server.handle();
    let (mut send, conn) = h2(server.addr()).await;
    let resp = send
        .send_request(h2_get(server.addr(), CONFIGMAPS))
        .await
        .expect("the first request is served");
    assert_eq!(resp.status(), 200);
    let list: Value =
        serde_json::from_slice(&resp.into_body().collect().await.expect("body").to_bytes())
            .expect("JSON");
    assert_eq!(list["kind"], "ConfigMapList");
    // The client's connection task ends on the GOAWAY (NO_ERROR); the server closes the
    // connection, which has no stream left.
    tokio::time::timeout(PATIENCE, conn)
        .await
        .expect("the client sees GOAWAY")
        .expect("connection task")
        .expect("a graceful GOAWAY");
    assert_eq!(handle.goaways_sent(), 1);
    eventually("the server closes the connection", || {
        handle.open_connections().http2 == 0
    })
    .await;
    let again = tokio::time::timeout(
        PATIENCE,
        send.send_request(h2_get(server.addr(), CONFIGMAPS)),
    )
    .await
    .expect("refused in time");
    assert!(again.is_err(), "a new stream is not served: {again:?}");

    // HTTP/1.1 (the kube client here) is never sent one; at chance 0 neither is HTTP/2.
    cms(&client)
        .list(&ListParams::default())
        .await
        .expect("list over HTTP/1.1");
    handle.set_goaway_chance(0.0);
    let (mut send, _conn) = h2(server.addr()).await;
    for _ in 0..3 {
        let resp = send
            .send_request(h2_get(server.addr(), CONFIGMAPS))
            .await
            .expect("served");
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(handle.goaways_sent(), 1);
}

#[tokio::test]
async fn a_watch_open_on_a_connection_sent_goaway_keeps_receiving_events() {
    let (server, _client) = start_with(Config::default().goaway_chance(1.0)).await;
    let handle = server.handle();
    let (mut send, conn) = h2(server.addr()).await;
    let resp = send
        .send_request(h2_get(
            server.addr(),
            &format!("{CONFIGMAPS}?watch=true&resourceVersion=0"),
        ))
        .await
        .expect("watch");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    eventually("GOAWAY after the watch's response", || {
        handle.goaways_sent() == 1
    })
    .await;

    handle
        .create(super::cm_json("default", "after", "k", "1"))
        .expect("create");
    let events = events_until(&mut body, |e| e["object"]["metadata"]["name"] == "after").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ADDED");

    // The client has read the GOAWAY (it came before the event): no new stream.
    let again = tokio::time::timeout(
        PATIENCE,
        send.send_request(h2_get(server.addr(), CONFIGMAPS)),
    )
    .await
    .expect("refused in time");
    assert!(again.is_err(), "a new stream is not served: {again:?}");
    // The connection closes once its last stream, the watch, ends.
    // The connection stays open while its last stream, the watch, runs; then it closes.
    assert_eq!(handle.open_connections().http2, 1);
    handle.close_watches();
    eventually("the server closes the connection", || {
        handle.open_connections().http2 == 0
    })
    .await;
    drop(conn);
}

#[tokio::test]
async fn over_the_in_flight_limit_requests_get_429_with_retry_after_and_probes_pass() {
    let (server, client) = start_with(Config::default().max_requests_in_flight(1)).await;
    let handle = server.handle();
    let addr = server.addr();
    // A watch holds no seat once it is set up.
    let _watch = cms(&client)
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch");
    let (code, _, _) = call(addr, "GET", CONFIGMAPS).await;
    assert_eq!(code, 200, "the open watch takes no seat");

    // Two slow requests: whichever takes the one seat keeps it (for an hour), the other is
    // refused at once.
    handle.set_latency(Duration::from_secs(3600));
    let slow = [(); 2].map(|()| tokio::spawn(call(addr, "GET", CONFIGMAPS)));
    eventually("one of two overlapping requests refused", || {
        handle.throttled() == 1
    })
    .await;
    handle.set_latency(Duration::ZERO);

    // The seat is taken: every further request is refused, with upstream's answer.
    for _ in 0..3 {
        let (code, headers, body) = call(addr, "GET", CONFIGMAPS).await;
        assert_eq!(code, 429);
        assert_eq!(
            headers.get(http::header::RETRY_AFTER).map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        let status: Value = serde_json::from_slice(&body).expect("Status");
        assert_eq!(
            status,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Too many requests, please try again later.",
                "reason": "TooManyRequests", "details": {"retryAfterSeconds": 1}, "code": 429})
        );
    }
    assert_eq!(handle.throttled(), 4);
    let recorded = handle.requests().iter().filter(|r| r.status == 429).count();
    assert_eq!(recorded, 4, "429s are recorded");
    // Health probes need no seat.
    for probe in ["/readyz", "/livez", "/healthz"] {
        let (code, _, _) = call(addr, "GET", probe).await;
        assert_eq!(code, 200, "{probe}");
    }

    // Unlimited again (at run time): served although the slow request still holds its seat.
    handle.set_max_requests_in_flight(0);
    let (code, _, _) = call(addr, "GET", CONFIGMAPS).await;
    assert_eq!(code, 200);
    assert_eq!(handle.throttled(), 4);
    for task in slow {
        task.abort();
    }
}

#[tokio::test]
async fn without_watch_list_a_streaming_list_is_invalid_and_a_plain_watch_works() {
    let (server, client) = start_with(Config::default().watch_list(false)).await;
    let addr = server.addr();
    let (code, _, body) = call(addr, "GET", &format!("{CONFIGMAPS}?{STREAMING_LIST}")).await;
    assert_eq!(code, 422);
    let detail =
        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
    let status: Value = serde_json::from_slice(&body).expect("Status");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["message"],
        format!("ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: {detail}")
    );
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldValueForbidden", "message": format!("Forbidden: {detail}"),
            "field": "sendInitialEvents"}])
    );

    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    let mut w = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("a plain watch")
        .boxed();
    assert!(
        matches!(next(&mut w).await, Ok(WatchEvent::Added(o)) if o.metadata.name.as_deref() == Some("a"))
    );

    // Turned back on at run time.
    server.handle().set_watch_list(true);
    let resp = open(addr, "GET", &format!("{CONFIGMAPS}?{STREAMING_LIST}")).await;
    assert_eq!(resp.status(), 200);
}
