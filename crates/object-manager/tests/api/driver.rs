//! The shared watch driver over real TLS + HTTP/2: every open watch is followed by one task
//! (`ManagerStats::followed_watches`), and that changes nothing a watcher sees.

use std::collections::BTreeSet;

use nodelet_object_manager::{ManagerStats, Strategy};
use nodelet_transport::TransportConfig;

use super::transport::{h2_client, tls_server, wait_for};
use super::*;

/// Tasks of a Watch manager whose watches are all open: the driver and the idle sweeper.
const TASKS_AT_REST: usize = 2;

fn at_rest(stats: ManagerStats, followed: usize) -> bool {
    stats.followed_watches == followed && stats.background_tasks == TASKS_AT_REST
}

/// Waits until a notification for each of `names` arrived.
async fn all_notified(changes: &mut broadcast::Receiver<ObjectRef>, names: &BTreeSet<String>) {
    let mut pending = names.clone();
    let wait = async {
        while !pending.is_empty() {
            match changes.recv().await {
                Ok(key) => {
                    pending.remove(&key.name);
                }
                Err(broadcast::error::RecvError::Lagged(n)) => panic!("{n} notifications lost"),
                Err(broadcast::error::RecvError::Closed) => panic!("notifications closed"),
            }
        }
    };
    if tokio::time::timeout(PATIENCE, wait).await.is_err() {
        panic!("no notification for {pending:?}");
    }
}

#[tokio::test]
async fn the_shared_watch_driver_delivers_every_change_to_every_watcher() {
    const N: usize = 200;
    let (server, handle) = tls_server(250).await;
    let (client, _t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    let mut config = config(Strategy::Watch);
    config.notify_capacity = 4 * N;
    let names: BTreeSet<String> = (0..N).map(|i| format!("cm-{i}")).collect();
    for name in &names {
        create(&handle, config_map(name, "v0", false));
    }
    let m = ConfigMapManager::new(client, config).unwrap_or_else(|e| panic!("manager: {e}"));
    let mut changes = m.subscribe();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    m.register_pod(&nodelet_core::AdmittedPod::new(pod("many", &refs)).unwrap());
    for name in &names {
        assert_eq!(read(&m, name).await.as_deref(), Ok("v0"), "{name}");
    }
    // Every watch is open and followed by the driver: no task of its own.
    wait_for(
        || at_rest(m.stats(), N),
        "every watch followed by the driver",
    )
    .await;
    assert_eq!(handle.open_watches("configmaps", None, None), N);

    for round in 1..=3 {
        let value = format!("v{round}");
        for name in &names {
            update(&handle, config_map(name, &value, false));
        }
        all_notified(&mut changes, &names).await;
        for name in &names {
            assert_eq!(
                read(&m, name).await,
                Ok(value.clone()),
                "{name}, round {round}"
            );
        }
    }

    // Connection loss: every follower ends, its run reconnects in a task of its own and hands
    // the watch back; no change made meanwhile is missed.
    handle.stop_listener().await;
    for name in &names {
        update(&handle, config_map(name, "after", false));
    }
    handle
        .restart_listener()
        .await
        .unwrap_or_else(|e| panic!("restart: {e}"));
    all_notified(&mut changes, &names).await;
    for name in &names {
        assert_eq!(read(&m, name).await.as_deref(), Ok("after"), "{name}");
    }
    wait_for(|| at_rest(m.stats(), N), "every watch followed again").await;
    m.shutdown().await;
    assert_eq!(m.stats().background_tasks, 0);
    assert_eq!(m.stats().followed_watches, 0);
}

/// Pod `name` referencing `cm-<i>` for each `i` of `range`.
fn admitted(name: &str, range: std::ops::Range<usize>) -> nodelet_core::AdmittedPod {
    let names: Vec<String> = range.map(|i| format!("cm-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    nodelet_core::AdmittedPod::new(pod(name, &refs)).unwrap()
}

#[tokio::test]
async fn a_followed_watch_stops_when_its_last_pod_goes() {
    let (server, handle) = tls_server(100).await;
    let (client, _t) = h2_client(server.kube_config(), TransportConfig::default()).await;
    for i in 0..15 {
        create(&handle, config_map(&format!("cm-{i}"), "v1", false));
    }
    let m = ConfigMapManager::new(client, config(Strategy::Watch))
        .unwrap_or_else(|e| panic!("manager: {e}"));
    let mut changes = m.subscribe();
    // Pod a references cm-0..9, pod b cm-5..14.
    let (a, b) = (admitted("a", 0..10), admitted("b", 5..15));
    m.register_pod(&a);
    m.register_pod(&b);
    for i in 0..15 {
        assert_eq!(read(&m, &format!("cm-{i}")).await.as_deref(), Ok("v1"));
    }
    wait_for(|| at_rest(m.stats(), 15), "15 watches followed").await;

    // Pod a goes: the 5 objects only it referenced stop being watched on the server.
    m.unregister_pod(a.uid());
    let open =
        |i: usize| handle.open_watches("configmaps", Some("default"), Some(&format!("cm-{i}")));
    wait_for(
        || (0..5).all(|i| open(i) == 0),
        "cm-0..4 closed on the server",
    )
    .await;
    assert!(
        (5..15).all(|i| open(i) == 1),
        "the shared objects stay watched"
    );
    wait_for(|| at_rest(m.stats(), 10), "10 watches followed").await;
    // The others still deliver.
    update(&handle, config_map("cm-7", "v2", false));
    changed(&mut changes, "cm-7").await;
    assert_eq!(read(&m, "cm-7").await.as_deref(), Ok("v2"));

    // The last pod goes: no watch is left open, on the server or in the driver.
    m.unregister_pod(b.uid());
    wait_for(
        || handle.open_watches("configmaps", None, None) == 0,
        "every watch closed on the server",
    )
    .await;
    wait_for(|| at_rest(m.stats(), 0), "no watch followed").await;
    m.shutdown().await;
}
