//! Cache and Get strategies over HTTP.

use nodelet_object_manager::{Error, Strategy};

use super::*;

#[tokio::test]
async fn om11_cache_serves_from_memory_within_the_ttl_and_caches_not_found() {
    let (server, handle) = server().await;
    create(&handle, config_map("cm", "v1", false));
    let m = manager(&server, config(Strategy::Cache));
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("p", &["cm", "missing"])).unwrap());
    for _ in 0..5 {
        assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    }
    assert_eq!(
        handle.count("get", "configmaps", Some("default"), Some("cm")),
        1
    );

    for _ in 0..3 {
        let err = m.get("default", "missing").await.err();
        assert!(err.as_ref().is_some_and(Error::is_not_found));
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some(r#"configmaps "missing" not found"#)
        );
    }
    assert_eq!(
        handle.count("get", "configmaps", Some("default"), Some("missing")),
        3
    );
    assert!(matches!(
        m.get("default", "other").await,
        Err(Error::NotRegistered { .. })
    ));
}

#[tokio::test]
async fn om11_cache_serves_the_stale_object_when_the_api_fails() {
    let (server, handle) = server().await;
    create(&handle, config_map("cm", "v1", false));
    let mut config = config(Strategy::Cache);
    config.default_ttl = Duration::ZERO;
    let m = manager(&server, config);
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("p", &["cm"])).unwrap());
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    handle.fail_next(1, 500);
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    update(&handle, config_map("cm", "v2", false));
    let mut changes = m.subscribe();
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));
    changed(&mut changes, "cm").await;
}

#[tokio::test]
async fn om6_get_reads_live_without_registration() {
    let (server, handle) = server().await;
    create(&handle, config_map("cm", "v1", false));
    let m = manager(&server, config(Strategy::Get));
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    update(&handle, config_map("cm", "v2", false));
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));
    assert_eq!(
        read(&m, "nope").await,
        Err(r#"configmaps "nope" not found"#.to_owned())
    );
    // 500, not 503: kube's client retries 429/503/504 itself.
    handle.fail_next(1, 500);
    let err = m.get("default", "cm").await.err();
    assert!(matches!(err, Some(Error::Api { code: 500, .. })), "{err:?}");
    assert_eq!(handle.count("get", "configmaps", Some("default"), None), 4);
}

/// Node `n1` annotated with `ttl` and a Cache manager reading it.
async fn cache_with_node_ttl(ttl: &str) -> (ApiServer, ServerHandle, ConfigMapManager) {
    let (server, handle) = server().await;
    create(
        &handle,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "n1", "annotations": {"node.alpha.kubernetes.io/ttl": ttl}}}),
    );
    create(&handle, config_map("cm", "v1", false));
    let m = manager(&server, config(Strategy::Cache).with_node_name("n1"));
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("p", &["cm"])).unwrap());
    (server, handle, m)
}

#[tokio::test]
async fn om12_a_node_ttl_of_zero_makes_every_get_a_get() {
    let (_server, handle, m) = cache_with_node_ttl("0").await;
    for _ in 0..4 {
        assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    }
    assert_eq!(
        handle.count("get", "configmaps", Some("default"), Some("cm")),
        4
    );
    // The node's TTL annotation comes from one watch-list of the node.
    assert_eq!(handle.count("list", "nodes", None, Some("n1")), 0);
    assert_eq!(handle.count("watch", "nodes", None, Some("n1")), 1);
    m.shutdown().await;
}

#[tokio::test]
async fn om12_an_unparsable_node_ttl_falls_back_to_the_one_minute_default() {
    let (_server, handle, m) = cache_with_node_ttl("60s").await;
    for _ in 0..4 {
        assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    }
    assert_eq!(
        handle.count("get", "configmaps", Some("default"), Some("cm")),
        1
    );
    m.shutdown().await;
}
