//! A node's first reads against nodelet-apiserver, counted by the server: they keep to the
//! shared bucket's burst (OM-30) and a new pod's objects wait for its scout while the Node
//! authorizer's graph lags (OM-31); an established watch never waits for the bucket.

use std::time::Duration;

use nodelet_apiserver::{RequestRecord, User};
use nodelet_core::AdmittedPod;
use nodelet_object_manager::{ReadLimiter, ReadLimits};

use super::*;

const NODE: &str = "n1";

/// The server with authentication and the Node authorizer (`lag`), `n` ConfigMaps
/// `cm-0 …`, and a client of `system:node:n1`.
async fn secured(n: usize, lag: Duration) -> (ApiServer, ServerHandle, kube::Client) {
    let server = ApiServer::start(Config::default().with_auth().node_authorizer_lag(lag))
        .await
        .unwrap_or_else(|e| panic!("start apiserver: {e}"));
    let handle = server.handle();
    for j in 0..n {
        create(&handle, config_map(&format!("cm-{j}"), "v1", false));
    }
    let mut config = server.kube_config();
    let token = server.token_for(&User::node(NODE));
    config.auth_info =
        serde_json::from_value(json!({ "token": token })).unwrap_or_else(|e| panic!("{e}"));
    let client = kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"));
    (server, handle, client)
}

/// Pod `name` bound to the node, mounting `cms`, created on the server: as admitted.
fn bound_pod(handle: &ServerHandle, name: &str, cms: &[String]) -> AdmittedPod {
    let pod = cms
        .iter()
        .fold(
            PodBuilder::new("default", name)
                .node(NODE)
                .container(json!({"name": "c", "image": "x"})),
            |p, cm| p.config_map_volume(cm, cm),
        )
        .json();
    let stored = handle
        .create(pod)
        .unwrap_or_else(|e| panic!("create pod: {e}"));
    let pod: Pod = serde_json::from_value(stored).unwrap_or_else(|e| panic!("pod: {e}"));
    AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"))
}

/// The node's ConfigMap requests the server has seen.
fn node_reads(handle: &ServerHandle) -> Vec<RequestRecord> {
    let user = User::node(NODE).name;
    handle
        .requests()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(user.as_str()) && r.resource == "configmaps")
        .collect()
}

fn names(n: std::ops::Range<usize>) -> Vec<String> {
    n.map(|j| format!("cm-{j}")).collect()
}

#[tokio::test]
async fn first_reads_keep_to_the_burst_and_the_rest_wait_for_their_tokens() {
    let (_server, handle, client) = secured(12, Duration::ZERO).await;
    // A burst of 4 and a rate that gives no other token while the test runs.
    let limiter = ReadLimiter::new(ReadLimits {
        qps: 0.001,
        burst: 4,
    });
    let m = ConfigMapManager::new(
        client,
        config(Strategy::Watch).with_first_reads(limiter.clone()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    m.register_pod(&bound_pod(&handle, "a", &names(0..6)));
    m.register_pod(&bound_pod(&handle, "b", &names(6..12)));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while node_reads(&handle).len() < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the burst never went out"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The other 8 have reserved their tokens and wait for them.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while limiter.stats().delayed < 8 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            limiter.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reads = node_reads(&handle);
    assert_eq!(reads.len(), 4, "only the burst: {reads:?}");
    let stats = limiter.stats();
    assert_eq!((stats.reads, stats.delayed), (12, 8));
    assert!(
        reads
            .iter()
            .all(|r| r.verb == "watch" && r.send_initial_events),
        "watch-lists: {reads:?}"
    );
    m.shutdown().await;
}

#[tokio::test]
async fn an_established_watch_never_waits_for_the_bucket() {
    let (_server, handle, client) = secured(6, Duration::ZERO).await;
    // Exactly the burst the pod needs; no token after it.
    let limiter = ReadLimiter::new(ReadLimits {
        qps: 0.001,
        burst: 6,
    });
    let m = ConfigMapManager::new(
        client,
        config(Strategy::Watch).with_first_reads(limiter.clone()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut changes = m.subscribe();
    m.register_pod(&bound_pod(&handle, "a", &names(0..6)));
    for name in names(0..6) {
        assert_eq!(read(&m, &name).await.as_deref(), Ok("v1"), "{name}");
    }
    // Every change reaches the manager over its open watch with the bucket empty.
    for name in names(0..6) {
        update(&handle, config_map(&name, "v2", false));
    }
    let mut seen = std::collections::BTreeSet::new();
    let all = async {
        while seen.len() < 6 {
            if let Ok(key) = changes.recv().await {
                seen.insert(key.name.clone());
            }
        }
    };
    assert!(
        tokio::time::timeout(PATIENCE, all).await.is_ok(),
        "every change notified"
    );
    for name in names(0..6) {
        assert_eq!(read(&m, &name).await.as_deref(), Ok("v2"), "{name}");
    }
    assert_eq!(limiter.stats().delayed, 0);
    m.shutdown().await;
}

#[tokio::test]
async fn a_new_pods_objects_wait_for_its_scout_while_the_authorizer_lags() {
    // The stand-in's graph links a pod 200 ms after it is bound.
    let (_server, handle, client) = secured(8, Duration::from_millis(200)).await;
    let m =
        ConfigMapManager::new(client, config(Strategy::Watch)).unwrap_or_else(|e| panic!("{e}"));
    m.register_pod(&bound_pod(&handle, "a", &names(0..8)));
    for name in names(0..8) {
        assert_eq!(read(&m, &name).await.as_deref(), Ok("v1"), "{name}");
    }
    let reads = node_reads(&handle);
    let refused: Vec<&RequestRecord> = reads.iter().filter(|r| r.status == 403).collect();
    assert!(
        !refused.is_empty(),
        "the lag refuses the scout at least once"
    );
    let scout = refused[0].name.clone();
    assert!(
        refused.iter().all(|r| r.name == scout),
        "only the scout is refused and retried: {refused:?}"
    );
    // Every other object asked once, after the scout was let in.
    for name in names(0..8).iter().filter(|n| Some(*n) != scout.as_ref()) {
        let asked = reads
            .iter()
            .filter(|r| r.name.as_deref() == Some(name))
            .count();
        assert_eq!(asked, 1, "{name}");
    }
    m.shutdown().await;
}
