//! Test controls through the kube client: injected errors, latency, listener stop/restart,
//! request counting and direct store access.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use super::{cm, cm_json, cms, start, status};

#[tokio::test]
async fn injected_errors_answer_the_next_requests_with_a_status_body() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    handle.fail_next(1, 500);
    let e = status(api.get_opt("x").await.expect_err("500"));
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    assert!(
        api.get_opt("x")
            .await
            .expect("next request is served")
            .is_none()
    );
    let codes: Vec<u16> = handle.requests().iter().map(|r| r.status).collect();
    assert_eq!(codes, vec![500, 404]);
}

#[tokio::test(start_paused = true)]
async fn a_429_carries_retry_after_and_the_kube_client_retries_it() {
    let (server, client) = start().await;
    let handle = server.handle();
    handle.fail_next(2, 429);
    let list = cms(&client)
        .list(&ListParams::default())
        .await
        .expect("retried until served");
    assert!(list.items.is_empty());
    let codes: Vec<u16> = handle.requests().iter().map(|r| r.status).collect();
    assert_eq!(codes, vec![429, 429, 200]);
    assert_eq!(handle.count("list", "configmaps", Some("default"), None), 3);
}

#[tokio::test(start_paused = true)]
async fn injected_latency_delays_requests_without_failing_them() {
    let (server, client) = start().await;
    server.handle().set_latency(Duration::from_secs(5));
    let before = tokio::time::Instant::now();
    cms(&client)
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(
        before.elapsed() >= Duration::from_secs(5),
        "paused clock advanced by the latency"
    );
    server.handle().set_latency(Duration::ZERO);
}

#[tokio::test]
async fn a_stopped_listener_refuses_connections_and_a_restart_serves_the_same_store() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .expect("create");
    let url = server.url();
    handle.stop_listener().await;
    assert!(
        tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
            .await
            .is_err()
    );
    handle
        .restart_listener()
        .await
        .expect("restart on the same port");
    assert_eq!(server.url(), url);
    assert!(api.get_opt("a").await.expect("served again").is_some());
}

#[tokio::test]
async fn requests_are_counted_by_verb_resource_namespace_and_name() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .expect("create");
    api.get("a").await.expect("get");
    api.get("a").await.expect("get");
    api.list(&ListParams::default()).await.expect("list");
    api.delete("a", &Default::default()).await.expect("delete");
    assert_eq!(
        handle.count("create", "configmaps", Some("default"), None),
        1
    );
    assert_eq!(
        handle.count("get", "configmaps", Some("default"), Some("a")),
        2
    );
    assert_eq!(handle.count("get", "configmaps", None, Some("b")), 0);
    assert_eq!(handle.count("list", "configmaps", None, None), 1);
    assert_eq!(
        handle.count("delete", "configmaps", Some("default"), Some("a")),
        1
    );
    assert_eq!(handle.count_by_user("system:admin"), 5);
    handle.reset_requests();
    assert!(handle.requests().is_empty());
}

#[tokio::test]
async fn the_store_can_be_seeded_and_read_without_http() {
    let (server, client) = start().await;
    let handle = server.handle();
    let created = handle.create(cm_json("", "s", "k", "1")).expect("create");
    assert_eq!(created["metadata"]["namespace"], "default");
    let via_http: ConfigMap = cms(&client).get("s").await.expect("visible over HTTP");
    assert_eq!(
        via_http.metadata.uid.as_deref(),
        created["metadata"]["uid"].as_str()
    );
    let mut changed = created.clone();
    changed["data"]["k"] = json!("2");
    handle.update(changed).expect("update");
    assert_eq!(
        handle
            .get("v1", "ConfigMap", Some("default"), "s")
            .map(|c| c["data"]["k"].clone()),
        Some(json!("2"))
    );
    let e = handle
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}}))
        .expect_err("exists");
    assert_eq!(
        e.api_error().map(|a| a.reason().to_string()).as_deref(),
        Some("AlreadyExists")
    );
    handle
        .delete("v1", "ConfigMap", Some("default"), "s")
        .expect("delete");
    assert!(
        handle
            .get("v1", "ConfigMap", Some("default"), "s")
            .is_none()
    );
    assert!(
        handle
            .create(json!({"apiVersion": "apps/v1", "kind": "Deployment"}))
            .is_err()
    );
}

#[tokio::test]
async fn open_watches_are_counted_by_resource_and_field_selected_name() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    let params = kube::api::WatchParams::default().fields("metadata.name=a");
    let w = api.watch(&params, "0").await.expect("watch");
    assert_eq!(
        handle.open_watches("configmaps", Some("default"), Some("a")),
        1
    );
    assert_eq!(handle.open_watches("configmaps", None, Some("b")), 0);
    assert_eq!(handle.open_watches("secrets", None, None), 0);
    drop(w);
    // The server notices the closed connection asynchronously; closing watches is immediate.
    handle.close_watches();
    while handle.open_watches("configmaps", None, None) > 0 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn faults_can_target_one_verb_and_resource() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .expect("create");
    handle.fail_next_matching(1, 500, Some("get"), Some("configmaps"));
    api.list(&ListParams::default())
        .await
        .expect("a list is not targeted");
    let e = status(api.get("a").await.expect_err("the get fails"));
    assert_eq!(e.code, 500);
    api.get("a").await.expect("only one get fails");
}
