//! Integration tests: the managers with the real kube client against `nodelet-apiserver` over
//! HTTP on loopback. Waits are on notifications, bounded by a generous safety
//! time-out; nothing sleeps and nothing asserts a duration.

// Watch strategy: request counts (OM-16), propagation, immutable objects (OM-20).
mod watch;
// Cache (OM-11 … OM-13) and Get (OM-6) strategies over HTTP.
mod cache_and_get;
// Dropped watches, 410 Gone, 500s, a restarted server: nothing missed, cache served meanwhile.
mod faults;
// The Node authorizer: every request is allowed for system:node:<name> and names one object.
mod node_identity;
// The HTTP/2 transport over TLS: multiplexing, sharding at a low stream limit, short requests
// beside full watch connections, connection loss, auth, the HTTP/1.1 fallback, idle closing.
mod transport;
// HTTP/2 flow control: watches not read never stall the others on their connection; 1 MiB
// objects arrive whole; notifications never wait for a subscriber.
mod flow_control;
// The shared watch driver: one task follows every open watch; every change reaches every
// watcher, through connection loss; a watch closes when its last pod goes.
mod driver;
// A node's first reads: the shared bucket's burst (OM-30), one scout per new pod while the
// Node authorizer lags (OM-31); established watches never wait.
mod first_reads;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use nodelet_apiserver::{ApiServer, Config, ServerHandle};
use nodelet_core::ObjectRef;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, Strategy};
use nodelet_testutil::{ConfigMapBuilder, PATIENCE, PodBuilder, SecretBuilder};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// A started server and its handle.
pub(crate) async fn server() -> (ApiServer, ServerHandle) {
    let server = ApiServer::start(Config::default())
        .await
        .unwrap_or_else(|e| panic!("start apiserver: {e}"));
    let handle = server.handle();
    (server, handle)
}

/// Test config: the kubelet's defaults except a fast reconnect back-off.
pub(crate) fn config(strategy: Strategy) -> ManagerConfig {
    let mut config = ManagerConfig::new(strategy);
    config.initial_backoff = Duration::from_millis(20);
    config.max_backoff = Duration::from_millis(200);
    config
}

pub(crate) fn manager(server: &ApiServer, config: ManagerConfig) -> ConfigMapManager {
    ConfigMapManager::new(server.client(), config).unwrap_or_else(|e| panic!("manager: {e}"))
}

/// ConfigMap `default/<name>` with `k` = `value`, as the manifest the server takes.
pub(crate) fn config_map(name: &str, value: &str, immutable: bool) -> Value {
    let cm = ConfigMapBuilder::new("default", name).data("k", value);
    if immutable { cm.immutable() } else { cm }.json()
}

pub(crate) fn create(handle: &ServerHandle, obj: Value) {
    handle.create(obj).unwrap_or_else(|e| panic!("create: {e}"));
}

pub(crate) fn update(handle: &ServerHandle, obj: Value) {
    handle.update(obj).unwrap_or_else(|e| panic!("update: {e}"));
}

/// A pod `default/<name>` (UID `uid-<name>`) mounting one configMap volume `v-<c>` per name.
pub(crate) fn pod(name: &str, config_maps: &[&str]) -> Pod {
    let pod = PodBuilder::new("default", name).uid(&format!("uid-{name}"));
    config_maps
        .iter()
        .fold(pod, |p, c| p.config_map_volume(&format!("v-{c}"), c))
        .build()
}

pub(crate) fn value(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get("k"))
        .cloned()
        .unwrap_or_default()
}

pub(crate) async fn read(m: &ConfigMapManager, name: &str) -> Result<String, String> {
    m.get("default", name)
        .await
        .map(|c| value(&c))
        .map_err(|e| e.to_string())
}

/// Waits until ConfigMap `default/name`'s change notification arrives.
pub(crate) async fn changed(changes: &mut broadcast::Receiver<ObjectRef>, name: &str) {
    notified(changes, ObjectRef::config_map("default", name)).await;
}

/// Waits until `want`'s change notification arrives.
pub(crate) async fn notified(changes: &mut broadcast::Receiver<ObjectRef>, want: ObjectRef) {
    let wait = async {
        loop {
            match changes.recv().await {
                Ok(key) if key == want => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("notifications closed"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .unwrap_or_else(|_| panic!("no change notification for {want}"));
}
