//! Faults: dropped watches, 410, 500s and a restarted server.

use nodelet_object_manager::Strategy;

use super::*;

async fn watching(server: &ApiServer, handle: &ServerHandle) -> ConfigMapManager {
    create(handle, config_map("cm", "v1", false));
    let m = manager(server, config(Strategy::Watch));
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("p", &["cm"])).unwrap());
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    m
}

#[tokio::test]
async fn a_dropped_watch_resumes_without_a_relist_or_a_missed_update() {
    let (server, handle) = server().await;
    let m = watching(&server, &handle).await;
    let mut changes = m.subscribe();
    handle.close_watches();
    update(&handle, config_map("cm", "v2", false));
    changed(&mut changes, "cm").await;
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));
    // The watch-list, then one watch from its last resourceVersion: no second watch-list.
    assert_eq!(
        handle.count("watch", "configmaps", Some("default"), Some("cm")),
        2
    );
    assert_eq!(
        handle.count("list", "configmaps", Some("default"), Some("cm")),
        0
    );
    m.shutdown().await;
}

#[tokio::test]
async fn a_410_gone_relists_and_misses_no_update() {
    let (server, handle) = server().await;
    let m = watching(&server, &handle).await;
    let mut changes = m.subscribe();
    handle.compact();
    handle.close_watches();
    update(&handle, config_map("cm", "v2", false));
    changed(&mut changes, "cm").await;
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));
    // The watch-list, the resumed watch that got 410, and a second watch-list.
    assert_eq!(
        handle.count("watch", "configmaps", Some("default"), Some("cm")),
        3
    );
    assert_eq!(
        handle.count("list", "configmaps", Some("default"), Some("cm")),
        0
    );
    m.shutdown().await;
}

#[tokio::test]
async fn five_hundreds_are_retried_and_the_cached_object_is_served_meanwhile() {
    let (server, handle) = server().await;
    let m = watching(&server, &handle).await;
    let mut changes = m.subscribe();
    handle.fail_next(5, 500);
    handle.close_watches();
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v1"));
    update(&handle, config_map("cm", "v2", false));
    changed(&mut changes, "cm").await;
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));
    m.shutdown().await;
}

#[tokio::test]
async fn a_restarted_server_is_rewatched_and_the_outage_serves_the_cache() {
    let (server, handle) = server().await;
    let m = watching(&server, &handle).await;
    let mut changes = m.subscribe();
    handle.stop_listener().await;
    update(&handle, config_map("cm", "v2", false));
    assert_eq!(
        read(&m, "cm").await.as_deref(),
        Ok("v1"),
        "served during the outage"
    );
    handle
        .restart_listener()
        .await
        .unwrap_or_else(|e| panic!("restart: {e}"));
    changed(&mut changes, "cm").await;
    assert_eq!(read(&m, "cm").await.as_deref(), Ok("v2"));
    m.shutdown().await;
}
