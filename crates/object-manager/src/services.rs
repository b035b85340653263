//! [`ServiceLister`]: the node's one cluster-wide Service watch, which the kubelet keeps for the
//! service environment of every container (spec PW-15).
//!
//! The kubelet runs a Service informer over every namespace with the field selector
//! `spec.clusterIP!=None` (headless services give no variables, so it never holds them). Here
//! the watch starts with the first read, so a node that never builds an environment never asks;
//! reads wait for its first complete list. Only what the variables need is kept: a service's
//! cluster IP and its ports.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use nodelet_core::backoff::{Backoff, Schedule};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

/// The field selector of the kubelet's service watch: headless services are never read.
pub const SERVICE_FIELD_SELECTOR: &str = "spec.clusterIP!=None";

/// Options of a [`ServiceLister`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceListerConfig {
    /// How long a read waits for the first complete list before it fails with
    /// [`ServiceListError::NotSynced`]. Default 10 s (the kubelet does not wait: its informer
    /// started with the node, long before the first pod).
    pub first_list_wait: Duration,
    /// The pause after a failed request (a LIST or a WATCH), reset by the next event.
    /// Default [`Schedule::SERVICE_WATCH`]: 1 s (a restarting server is not asked again and
    /// again while it comes up) doubling to 30 s (client-go's informer's cap), plus up to a
    /// half.
    pub backoff: Schedule,
}

impl Default for ServiceListerConfig {
    fn default() -> Self {
        Self {
            first_list_wait: Duration::from_secs(10),
            backoff: Schedule::SERVICE_WATCH,
        }
    }
}

/// What the lister keeps of a Service: what its environment variables are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.clusterIP` (never empty or `None`: such services are not kept).
    pub cluster_ip: String,
    /// `spec.ports`, in order.
    pub ports: Vec<ServicePortInfo>,
}

/// One port of a [`ServiceInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortInfo {
    /// `name`; empty when unnamed.
    pub name: String,
    /// `port`.
    pub port: i32,
    /// `protocol`, `TCP` when unset.
    pub protocol: String,
}

impl ServiceInfo {
    /// The parts of `service` the variables use; `None` for a service without a cluster IP
    /// (headless, `ExternalName`) or without a name.
    pub fn from_service(service: &Service) -> Option<Self> {
        let spec = service.spec.as_ref()?;
        let cluster_ip = spec
            .cluster_ip
            .as_deref()
            .filter(|ip| !ip.is_empty() && *ip != "None")?;
        Some(Self {
            namespace: service.metadata.namespace.clone().unwrap_or_default(),
            name: service.metadata.name.clone()?,
            cluster_ip: cluster_ip.to_owned(),
            ports: spec
                .ports
                .iter()
                .flatten()
                .map(|p| ServicePortInfo {
                    name: p.name.clone().unwrap_or_default(),
                    port: p.port,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                })
                .collect(),
        })
    }
}

/// Why a read found no services.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceListError {
    /// The first list did not complete within [`ServiceListerConfig::first_list_wait`].
    #[error("services have not yet been read at least once{}", last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
    NotSynced {
        /// The watch's last error, if it had one.
        last_error: Option<String>,
    },
    /// The lister was shut down.
    #[error("the service lister is shut down")]
    ShutDown,
}

/// Services by namespace, then name.
type Index = HashMap<String, BTreeMap<String, Arc<ServiceInfo>>>;

/// The node's Service watch (cluster-wide, `spec.clusterIP!=None`), started by the first read.
/// Cheap to clone: clones share the watch and its store.
#[derive(Clone)]
pub struct ServiceLister {
    shared: Arc<Shared>,
}

struct Shared {
    /// `None` for the fakes of `test-util`: nothing is ever requested.
    client: Option<Client>,
    config: ServiceListerConfig,
    services: Mutex<Index>,
    started: Mutex<bool>,
    synced: watch::Sender<bool>,
    last_error: Mutex<Option<String>>,
    /// LISTs the watch has made: each complete list received and each failed attempt.
    lists: AtomicU64,
    shutdown: CancellationToken,
    /// The owner's task tracker: the watch task runs on it, so the owner can wait for its end.
    tasks: TaskTracker,
}

impl fmt::Debug for ServiceLister {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceLister")
            .field("config", &self.shared.config)
            .field("started", &self.is_started())
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl ServiceLister {
    /// A lister reading through `client`; nothing is requested until the first read, which
    /// starts the watch task on `tasks` (the owner's tracker: after
    /// [`shutdown`](Self::shutdown), or once every clone of the lister is dropped, the task
    /// ends, and waiting for the tracker waits for it).
    pub fn new(client: Client, config: ServiceListerConfig, tasks: &TaskTracker) -> Self {
        Self::with_client(Some(client), config, tasks.clone())
    }

    fn with_client(
        client: Option<Client>,
        config: ServiceListerConfig,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                config,
                services: Mutex::default(),
                started: Mutex::new(false),
                synced: watch::Sender::new(false),
                last_error: Mutex::default(),
                lists: AtomicU64::new(0),
                shutdown: CancellationToken::new(),
                tasks,
            }),
        }
    }

    /// A lister that holds `services` (those with a cluster IP), listed once and never
    /// changing, with no API server behind it.
    #[cfg(any(test, feature = "test-util"))]
    pub fn fixed(services: &[Service]) -> Self {
        let lister = Self::with_client(None, ServiceListerConfig::default(), TaskTracker::new());
        {
            let mut index = lister.shared.services.lock();
            for info in services.iter().filter_map(ServiceInfo::from_service) {
                insert(&mut index, info);
            }
        }
        *lister.shared.started.lock() = true;
        lister.shared.synced.send_replace(true);
        lister
    }

    /// A lister whose first list never completes: every read fails with
    /// [`ServiceListError::NotSynced`] after `config`'s wait.
    #[cfg(any(test, feature = "test-util"))]
    pub fn never_synced(config: ServiceListerConfig) -> Self {
        let lister = Self::with_client(None, config, TaskTracker::new());
        *lister.shared.started.lock() = true;
        lister
    }

    /// The services (with a cluster IP) of each of `namespaces`, sorted by namespace as given,
    /// then by name. The first call starts the watch; every call waits for its first complete
    /// list. Possibly stale by the watch's delay, as any informer read.
    ///
    /// # Errors
    /// [`ServiceListError::NotSynced`] when the first list has not completed within
    /// [`ServiceListerConfig::first_list_wait`]; [`ServiceListError::ShutDown`] after
    /// [`shutdown`](Self::shutdown).
    ///
    /// # Cancel safety
    /// Cancel-safe: a cancelled read leaves the watch running.
    pub async fn services(
        &self,
        namespaces: &[&str],
    ) -> Result<Vec<Arc<ServiceInfo>>, ServiceListError> {
        self.ready().await?;
        let index = self.shared.services.lock();
        Ok(namespaces
            .iter()
            .filter_map(|ns| index.get(*ns))
            .flat_map(|by_name| by_name.values().cloned())
            .collect())
    }

    /// Whether the watch was started (by a first read).
    pub fn is_started(&self) -> bool {
        *self.shared.started.lock()
    }

    /// LISTs the watch has made so far: its first list, every relist (after the server
    /// forgot the watch's resourceVersion) and every failed attempt at one.
    pub fn lists(&self) -> u64 {
        self.shared.lists.load(Ordering::Relaxed)
    }

    /// Stops the watch; later reads fail with [`ServiceListError::ShutDown`].
    pub fn shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    async fn ready(&self) -> Result<(), ServiceListError> {
        if self.shared.shutdown.is_cancelled() {
            return Err(ServiceListError::ShutDown);
        }
        self.start();
        let mut synced = self.shared.synced.subscribe();
        let wait = synced.wait_for(|s| *s);
        match tokio::time::timeout(self.shared.config.first_list_wait, wait).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ServiceListError::ShutDown),
            Err(_) => Err(ServiceListError::NotSynced {
                last_error: self.shared.last_error.lock().clone(),
            }),
        }
    }

    fn start(&self) {
        let mut started = self.shared.started.lock();
        if *started {
            return;
        }
        let Some(client) = self.shared.client.clone() else {
            return;
        };
        *started = true;
        let api: Api<Service> = Api::all(client);
        let config = watcher::Config::default().fields(SERVICE_FIELD_SELECTOR);
        // The watcher retries at once when polled after an error: `run` pauses first.
        let stream = watcher::watcher(api, config).boxed();
        let backoff = self.shared.config.backoff.backoff();
        debug!("starting the service watch");
        self.shared.tasks.spawn(run(
            Arc::downgrade(&self.shared),
            stream,
            backoff,
            self.shared.shutdown.clone(),
        ));
    }
}

/// Follows the watch into the store until shutdown or until every lister is gone; after a
/// failed request it pauses as `backoff` says before the watcher asks again.
async fn run(
    shared: Weak<Shared>,
    mut stream: futures::stream::BoxStream<'static, Result<Event<Service>, watcher::Error>>,
    mut backoff: Backoff,
    shutdown: CancellationToken,
) {
    // The list being received (`Init` … `InitDone`), swapped in whole when it completes.
    let mut listing: Option<Index> = None;
    loop {
        let item = tokio::select! {
            () = shutdown.cancelled() => return,
            item = stream.next() => item,
        };
        let Some(item) = item else { return };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if item.is_ok() {
            backoff.reset();
        }
        match item {
            Ok(Event::Init) => {
                shared.lists.fetch_add(1, Ordering::Relaxed);
                listing = Some(Index::new());
            }
            Ok(Event::InitApply(service)) => {
                if let (Some(index), Some(info)) =
                    (listing.as_mut(), ServiceInfo::from_service(&service))
                {
                    insert(index, info);
                }
            }
            Ok(Event::InitDone) => {
                if let Some(index) = listing.take() {
                    *shared.services.lock() = index;
                }
                *shared.last_error.lock() = None;
                shared.synced.send_replace(true);
            }
            Ok(Event::Apply(service)) => {
                let mut index = shared.services.lock();
                match ServiceInfo::from_service(&service) {
                    Some(info) => insert(&mut index, info),
                    // A service whose cluster IP went away (the selector hides it next time).
                    None => remove(&mut index, &service),
                }
            }
            Ok(Event::Delete(service)) => remove(&mut shared.services.lock(), &service),
            Err(error) => {
                if matches!(error, watcher::Error::InitialListFailed(_)) {
                    shared.lists.fetch_add(1, Ordering::Relaxed);
                }
                record_error(&shared, &error);
                drop(shared);
                let pause = backoff.next_delay();
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// Keeps `error` as the watch's last and logs it when it differs from the one before.
fn record_error(shared: &Shared, error: &watcher::Error) {
    let text = error.to_string();
    let mut last = shared.last_error.lock();
    if last.as_deref() != Some(text.as_str()) {
        warn!(%error, "service watch failed; retrying");
    }
    *last = Some(text);
}

fn insert(index: &mut Index, info: ServiceInfo) {
    index
        .entry(info.namespace.clone())
        .or_default()
        .insert(info.name.clone(), Arc::new(info));
}

fn remove(index: &mut Index, service: &Service) {
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    let Some(name) = service.metadata.name.as_deref() else {
        return;
    };
    if let Some(by_name) = index.get_mut(namespace) {
        by_name.remove(name);
        if by_name.is_empty() {
            index.remove(namespace);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(ns: &str, name: &str, spec: serde_json::Value) -> Service {
        serde_json::from_value(
            serde_json::json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}),
        )
        .expect("service")
    }

    // The watch task runs on the owner's tracker, so an owner that stops the lister and
    // waits for its tracker knows the watch is over: no task outlives it.
    #[tokio::test]
    async fn the_watch_runs_on_the_owners_tracker_and_ends_with_shutdown() {
        let server = nodelet_apiserver::ApiServer::start(nodelet_apiserver::Config::default())
            .await
            .expect("start apiserver");
        let tasks = TaskTracker::new();
        let lister = ServiceLister::new(server.client(), ServiceListerConfig::default(), &tasks);
        assert!(tasks.is_empty(), "nothing before the first read");
        let read = lister.services(&["default"]).await;
        assert!(read.is_ok(), "{read:?}");
        assert_eq!(tasks.len(), 1, "the watch is the tracker's");
        lister.shutdown();
        tasks.close();
        let ended = tokio::time::timeout(nodelet_testutil::PATIENCE, tasks.wait()).await;
        assert!(ended.is_ok(), "the watch task did not end");
    }

    #[test]
    fn a_service_without_a_cluster_ip_is_not_kept() {
        for ip in [serde_json::json!("None"), serde_json::json!("")] {
            let s = service("d", "h", serde_json::json!({"clusterIP": ip}));
            assert_eq!(ServiceInfo::from_service(&s), None);
        }
        let s = service(
            "d",
            "web",
            serde_json::json!({"clusterIP": "10.96.0.9", "ports": [{"port": 80}, {"name": "x", "port": 81, "protocol": "UDP"}]}),
        );
        let info = ServiceInfo::from_service(&s).expect("kept");
        assert_eq!(info.cluster_ip, "10.96.0.9");
        assert_eq!(info.ports[0].protocol, "TCP");
        assert_eq!(info.ports[1].name, "x");
        assert_eq!(info.ports[1].protocol, "UDP");
    }

    #[test]
    fn the_last_service_of_a_namespace_leaves_no_empty_entry() {
        let mut index = Index::new();
        let s = service("d", "web", serde_json::json!({"clusterIP": "10.96.0.9"}));
        insert(&mut index, ServiceInfo::from_service(&s).expect("kept"));
        remove(&mut index, &s);
        assert!(index.is_empty());
    }
}
