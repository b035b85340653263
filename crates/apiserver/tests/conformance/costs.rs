//! The cost model (`Config::cost_model`): reads and writes wait their latency before they
//! answer, and the server-wide concurrency serialises the reads' waits. Only
//! lower bounds are asserted (a wait never ends early); speed is the benchmarks' business.

use std::time::Duration;

use kube::api::{ListParams, PostParams};
use nodelet_apiserver::{Config, CostModel};

use super::{cm, cms, start_with};

const READ: Duration = Duration::from_millis(40);
const WRITE: Duration = Duration::from_millis(30);

#[tokio::test]
async fn reads_and_writes_wait_their_latency_and_one_place_serialises_them() {
    let model = CostModel::default()
        .read_latency(READ)
        .write_latency(WRITE)
        .concurrency(1);
    let (server, client) = start_with(Config::default().cost_model(model)).await;
    let h = server.handle();
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .expect("created");
    api.get("a").await.expect("get");
    api.list(&ListParams::default()).await.expect("list");
    let took = |verb: &str| {
        h.requests()
            .iter()
            .find(|r| r.verb == verb)
            .map(|r| r.answered - r.received)
            .unwrap_or_default()
    };
    assert!(took("create") >= WRITE, "create {:?}", took("create"));
    assert!(took("get") >= READ, "get {:?}", took("get"));
    assert!(took("list") >= READ, "list {:?}", took("list"));

    // Four GETs at once through one place: the last answers at least 4 reads after the first
    // arrived.
    h.reset_requests();
    let gets: Vec<_> = (0..4)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move { api.get("a").await })
        })
        .collect();
    for g in gets {
        g.await.expect("joined").expect("get");
    }
    let records = h.requests();
    let first = records.iter().map(|r| r.received).min().expect("records");
    let last = records.iter().map(|r| r.answered).max().expect("records");
    assert!(
        last - first >= READ * 4,
        "4 serialised reads took {:?}",
        last - first
    );
}

#[test]
fn the_preset_is_on_and_the_default_is_off() {
    assert!(CostModel::default().is_off());
    let real = CostModel::like_kube_apiserver();
    assert!(!real.is_off());
    assert!(real.concurrency > 0);
    assert_eq!(Config::default().cost_model, CostModel::default());
}
