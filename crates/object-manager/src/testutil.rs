//! Helpers shared by the unit tests: pods, objects, managers over a fake source.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::source::FakeSource;
use crate::{ManagerConfig, SecretManager, Strategy};

/// A pod `ns/name` with UID `uid` mounting one secret volume per name.
pub(crate) fn pod(ns: &str, name: &str, uid: &str, secrets: &[&str]) -> Pod {
    let volumes: Vec<serde_json::Value> = secrets
        .iter()
        .map(|s| serde_json::json!({"name": format!("v-{s}"), "secret": {"secretName": s}}))
        .collect();
    let value = serde_json::json!({
        "metadata": {"namespace": ns, "name": name, "uid": uid},
        "spec": {"containers": [{"name": "c"}], "volumes": volumes},
    });
    serde_json::from_value(value).unwrap_or_else(|e| panic!("bad test pod: {e}"))
}

/// A secret `name` with one key `k` = `value`.
pub(crate) fn secret(name: &str, value: &str, immutable: bool) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "k".to_owned(),
            ByteString(value.as_bytes().to_vec()),
        )])),
        immutable: immutable.then_some(true),
        ..Secret::default()
    }
}

/// The value of key `k`.
pub(crate) fn value(s: &Secret) -> String {
    let bytes = s
        .data
        .as_ref()
        .and_then(|d| d.get("k"))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A node `name` with an optional TTL annotation.
pub(crate) fn node(name: &str, ttl: Option<&str>) -> Node {
    let annotations =
        ttl.map(|t| BTreeMap::from([(crate::TTL_ANNOTATION.to_owned(), t.to_owned())]));
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations,
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

/// A secret manager with `strategy` over `fake` (and `nodes` for the TTL, node `n1`).
pub(crate) fn manager(
    strategy: Strategy,
    fake: &FakeSource<Secret>,
    nodes: Option<&FakeSource<Node>>,
) -> SecretManager {
    let config = ManagerConfig {
        strategy,
        node_name: nodes.map(|_| "n1".to_owned()),
        ..ManagerConfig::default()
    };
    manager_with(config, fake, nodes)
}

pub(crate) fn manager_with(
    config: ManagerConfig,
    fake: &FakeSource<Secret>,
    nodes: Option<&FakeSource<Node>>,
) -> SecretManager {
    let nodes = nodes.map(|n| Arc::new(n.clone()) as _);
    SecretManager::with_sources(Arc::new(fake.clone()), nodes, config)
        .unwrap_or_else(|e| panic!("manager: {e}"))
}

/// Let every background task run until it waits again (current-thread runtime).
pub(crate) async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}
