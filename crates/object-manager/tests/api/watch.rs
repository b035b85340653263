//! Watch strategy over HTTP.

use nodelet_object_manager::{Error, Strategy};

use super::*;

#[tokio::test]
async fn om16_twenty_one_registrations_cost_one_watch_list() {
    let (server, handle) = server().await;
    create(&handle, config_map("cm", "v1", false));
    let m = manager(&server, config(Strategy::Watch));
    let mut changes = m.subscribe();
    let pods: Vec<_> = (0..21).map(|i| pod(&format!("p{i}"), &["cm"])).collect();
    for p in &pods {
        m.register_pod(&nodelet_core::AdmittedPod::new(p.clone()).unwrap());
    }
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    for p in &pods[..20] {
        m.unregister_pod(nodelet_core::AdmittedPod::new(p.clone()).unwrap().uid());
    }
    // An update seen through the watch proves the watch request was made.
    update(&handle, config_map("cm", "v2", false));
    changed(&mut changes, "cm").await;
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));
    // One watch-list (the object's state, then its changes, on one request); no LIST.
    assert_eq!(
        handle.count("list", "configmaps", Some("default"), Some("cm")),
        0
    );
    assert_eq!(
        handle.count("watch", "configmaps", Some("default"), Some("cm")),
        1
    );
    assert_eq!(
        handle.count("get", "configmaps", None, None),
        0,
        "no GET per read"
    );
    // Served from the watch cache as it is: no wait for the cache to catch up.
    let watch_list = handle
        .requests()
        .into_iter()
        .find(|r| r.verb == "watch" && r.send_initial_events)
        .expect("the watch-list was recorded");
    assert_eq!(watch_list.resource_version.as_deref(), Some("0"));

    m.unregister_pod(
        nodelet_core::AdmittedPod::new(pods[20].clone())
            .unwrap()
            .uid(),
    );
    assert!(!m.is_watching("default", "cm"));
    assert!(matches!(
        m.get("default", "cm").await,
        Err(Error::NotRegistered { .. })
    ));
    m.shutdown().await;
}

#[tokio::test]
async fn an_api_write_reaches_subscribers_and_get() {
    let (server, handle) = server().await;
    create(&handle, config_map("cm", "v1", false));
    let m = manager(&server, config(Strategy::Watch));
    let mut changes = m.subscribe();
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("p", &["cm", "later"])).unwrap());
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    assert_eq!(
        read(&m, "later").await,
        Err(r#"configmap "later" not found"#.to_owned())
    );

    update(&handle, config_map("cm", "v2", false));
    changed(&mut changes, "cm").await;
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));

    create(&handle, config_map("later", "here", false));
    changed(&mut changes, "later").await;
    assert_eq!(read(&m, "later").await.as_deref(), Ok("here"));

    handle
        .delete("v1", "ConfigMap", Some("default"), "cm")
        .unwrap_or_else(|e| panic!("{e}"));
    changed(&mut changes, "cm").await;
    assert_eq!(
        read(&m, "cm").await,
        Err(r#"configmap "cm" not found"#.to_owned())
    );
    m.shutdown().await;
}

#[tokio::test]
async fn om20_an_immutable_config_map_stops_its_watch_and_is_served_from_memory() {
    let (server, handle) = server().await;
    create(&handle, config_map("mutable", "v1", false));
    create(&handle, config_map("frozen", "v1", true));
    let m = manager(&server, config(Strategy::Watch));
    let mut changes = m.subscribe();
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("p", &["mutable", "frozen"])).unwrap());
    assert_eq!(read(&m, "frozen").await.as_deref(), Ok("v1"));
    assert_eq!(read(&m, "mutable").await.as_deref(), Ok("v1"));
    assert!(!m.is_watching("default", "frozen"));
    assert!(m.is_watching("default", "mutable"));

    update(&handle, config_map("mutable", "v2", true));
    changed(&mut changes, "mutable").await;
    assert_eq!(read(&m, "mutable").await.as_deref(), Ok("v2"));
    assert!(
        !m.is_watching("default", "mutable"),
        "modified to immutable"
    );
    m.shutdown().await;
    assert_eq!(m.stats().background_tasks, 0);
}

#[tokio::test]
async fn om18_a_slow_first_list_fails_get_with_the_kubelet_text() {
    let (server, handle) = server().await;
    create(&handle, config_map("cm", "v1", false));
    handle.set_latency(Duration::from_secs(3));
    let m = manager(&server, config(Strategy::Watch));
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("p", &["cm"])).unwrap());
    assert_eq!(
        read(&m, "cm").await,
        Err("failed to sync configmap cache: timed out waiting for the condition".to_owned())
    );
    handle.set_latency(Duration::ZERO);
    m.shutdown().await;
}
