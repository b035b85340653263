//! Helpers of this crate's unit tests: secret managers over a [`FakeSource`], the pods and
//! secrets they are fed, [`settle`]. The builders come from `nodelet-testutil`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodelet_testutil::{PodBuilder, SecretBuilder};

use crate::source::FakeSource;
use crate::{ManagerConfig, SecretManager, Strategy};

/// A pod `ns/name` with UID `uid` mounting one secret volume `v-<secret>` per name (the pods of
/// this crate's unit tests).
pub(crate) fn pod(ns: &str, name: &str, uid: &str, secrets: &[&str]) -> Pod {
    secrets
        .iter()
        .fold(PodBuilder::new(ns, name).uid(uid), |p, s| {
            p.secret_volume(&format!("v-{s}"), s)
        })
        .build()
}

/// A secret `name` (no namespace: [`FakeSource::apply`] sets it) with one key `k` = `value`.
pub(crate) fn secret(name: &str, value: &str, immutable: bool) -> Secret {
    let s = SecretBuilder::new("", name).data("k", value);
    if immutable { s.immutable() } else { s }.build()
}

/// The value of key `k` (empty if absent).
pub(crate) fn value(s: &Secret) -> String {
    let bytes = s
        .data
        .as_ref()
        .and_then(|d| d.get("k"))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A node `name` with an optional TTL annotation ([`TTL_ANNOTATION`](crate::TTL_ANNOTATION)).
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

/// A secret manager with `config` over `fake` (and `nodes` for the TTL).
pub(crate) fn manager_with(
    config: ManagerConfig,
    fake: &FakeSource<Secret>,
    nodes: Option<&FakeSource<Node>>,
) -> SecretManager {
    let nodes = nodes.map(|n| Arc::new(n.clone()) as _);
    SecretManager::with_sources(Arc::new(fake.clone()), nodes, config)
        .unwrap_or_else(|e| panic!("manager: {e}"))
}

/// Lets every background task run until it waits again (current-thread runtime).
pub(crate) async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}
