//! The API seam of the `podCertificate` source: [`PodCertificateSource`], its Kubernetes
//! implementation [`KubePodCertificateSource`] (creates requests, one node-wide watch of
//! `spec.nodeName=<node>`) and a fake (feature `test-util`).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1beta1::PodCertificateRequest;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use nodelet_core::{PodUid, SourceChange};

use super::error::ApiError;

/// Where PodCertificateRequests are created and seen, and the UIDs that go into them.
///
/// Implementations: [`KubePodCertificateSource`] and, for tests, `FakePodCertificateSource`
/// (feature `test-util`).
#[async_trait]
pub trait PodCertificateSource: Send + Sync + fmt::Debug + 'static {
    /// This node's name (`spec.nodeName` of every request).
    fn node_name(&self) -> &str;

    /// This node's UID (`spec.nodeUID`).
    ///
    /// # Errors
    /// [`ApiError`] when the Node cannot be read.
    async fn node_uid(&self) -> Result<String, ApiError>;

    /// The UID of service account `namespace/name` (`spec.serviceAccountUID`).
    ///
    /// # Errors
    /// [`ApiError`] when the ServiceAccount cannot be read.
    async fn service_account_uid(&self, namespace: &str, name: &str) -> Result<String, ApiError>;

    /// Creates `request` (with `metadata.generateName`) and returns the stored object.
    ///
    /// # Errors
    /// [`ApiError`] when the API refuses or cannot be reached.
    async fn create(
        &self,
        request: &PodCertificateRequest,
    ) -> Result<PodCertificateRequest, ApiError>;

    /// The request `namespace/name` as last seen by the node's watch; `None` if not seen (not
    /// yet, or deleted). Never a request.
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<PodCertificateRequest>>;

    /// A [`SourceChange::PodCertificate`] (`spec.podUID`) for every request the watch sees
    /// added, changed or deleted.
    fn subscribe(&self) -> broadcast::Receiver<SourceChange>;
}

/// [`PodCertificateSource`] over the API: creates requests in the pod's namespace and keeps
/// one watch of this node's requests (`fieldSelector=spec.nodeName=<node>`, what the Node
/// authorizer allows), started with the first create; reads the Node and the ServiceAccount at
/// each create (the kubelet reads the Node from its informer).
/// The watch stops when the last clone is dropped.
#[derive(Clone)]
pub struct KubePodCertificateSource {
    inner: Arc<KubeInner>,
}

struct KubeInner {
    client: kube::Client,
    node_name: String,
    store: Store<PodCertificateRequest>,
    /// The store's writer until the watch starts.
    writer: Mutex<Option<Writer<PodCertificateRequest>>>,
    changes: broadcast::Sender<SourceChange>,
    stop: CancellationToken,
}

impl Drop for KubeInner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for KubePodCertificateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubePodCertificateSource")
            .field("node_name", &self.inner.node_name)
            .finish_non_exhaustive()
    }
}

impl KubePodCertificateSource {
    /// A source for node `node_name`, talking through `client` (the node's credentials).
    /// Makes no request until the first [`create`](PodCertificateSource::create).
    pub fn new(client: kube::Client, node_name: impl Into<String>) -> Self {
        let (store, writer) = reflector::store();
        Self {
            inner: Arc::new(KubeInner {
                client,
                node_name: node_name.into(),
                store,
                writer: Mutex::new(Some(writer)),
                changes: broadcast::channel(256).0,
                stop: CancellationToken::new(),
            }),
        }
    }

    /// Starts the node's watch once. The task holds no reference to `self`.
    fn ensure_watch(&self) {
        let Some(writer) = self.inner.writer.lock().take() else {
            return;
        };
        let api: Api<PodCertificateRequest> = Api::all(self.inner.client.clone());
        let config =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.inner.node_name));
        let changes = self.inner.changes.clone();
        let stop = self.inner.stop.clone();
        let span = tracing::debug_span!("pod certificate watch", node = %self.inner.node_name);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let stream = watcher::watcher(api, config)
                    .default_backoff()
                    .reflect(writer);
                let mut stream = std::pin::pin!(stream);
                loop {
                    let next = tokio::select! {
                        () = stop.cancelled() => break,
                        next = stream.next() => next,
                    };
                    match next {
                        Some(Ok(Event::Apply(r) | Event::Delete(r) | Event::InitApply(r))) => {
                            // Nobody listening is fine; a request naming no valid pod UID
                            // concerns no pod of this node.
                            if let Ok(pod_uid) = PodUid::new(&r.spec.pod_uid) {
                                let _ = changes.send(SourceChange::PodCertificate { pod_uid });
                            }
                        }
                        Some(Ok(Event::Init | Event::InitDone)) => {}
                        Some(Err(e)) => {
                            // A background task: nowhere to return to. The watcher retries
                            // with backoff.
                            tracing::debug!(error = %e, "PodCertificateRequest watch failed");
                        }
                        None => break,
                    }
                }
            },
            span,
        ));
    }
}

#[async_trait]
impl PodCertificateSource for KubePodCertificateSource {
    fn node_name(&self) -> &str {
        &self.inner.node_name
    }

    /// Read at every request (a few per certificate lifetime): a re-registered Node has a new
    /// UID, which NodeRestriction checks.
    async fn node_uid(&self) -> Result<String, ApiError> {
        let api: Api<Node> = Api::all(self.inner.client.clone());
        let node = api.get(&self.inner.node_name).await?;
        Ok(node.metadata.uid.unwrap_or_default())
    }

    async fn service_account_uid(&self, namespace: &str, name: &str) -> Result<String, ApiError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.inner.client.clone(), namespace);
        let sa = api.get(name).await?;
        Ok(sa.metadata.uid.unwrap_or_default())
    }

    async fn create(
        &self,
        request: &PodCertificateRequest,
    ) -> Result<PodCertificateRequest, ApiError> {
        self.ensure_watch();
        let namespace = request.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<PodCertificateRequest> = Api::namespaced(self.inner.client.clone(), namespace);
        Ok(api.create(&PostParams::default(), request).await?)
    }

    fn get(&self, namespace: &str, name: &str) -> Option<Arc<PodCertificateRequest>> {
        self.inner
            .store
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn subscribe(&self) -> broadcast::Receiver<SourceChange> {
        self.inner.changes.subscribe()
    }
}

#[cfg(any(test, feature = "test-util"))]
pub use fake::FakePodCertificateSource;

#[cfg(any(test, feature = "test-util"))]
mod fake {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::SystemTime;

    use async_trait::async_trait;
    use k8s_openapi::api::certificates::v1beta1::{
        PodCertificateRequest, PodCertificateRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use nodelet_core::{PodUid, SourceChange};
    use parking_lot::Mutex;
    use tokio::sync::broadcast;

    use super::{ApiError, PodCertificateSource};

    /// A [`PodCertificateSource`] in memory (feature `test-util`): node `UID` `node-uid`, every
    /// service account's UID `sa-uid-<name>`; created requests are named `req-<n>` and seen by
    /// "the watch" at once; tests issue, deny, fail or delete them.
    #[derive(Debug, Clone)]
    pub struct FakePodCertificateSource {
        inner: Arc<FakeInner>,
    }

    #[derive(Debug)]
    struct FakeInner {
        node_name: String,
        visible: Mutex<BTreeMap<(String, String), Arc<PodCertificateRequest>>>,
        created: Mutex<Vec<PodCertificateRequest>>,
        changes: broadcast::Sender<SourceChange>,
    }

    impl FakePodCertificateSource {
        /// A fake for node `node_name`.
        pub fn new(node_name: &str) -> Self {
            Self {
                inner: Arc::new(FakeInner {
                    node_name: node_name.into(),
                    visible: Mutex::default(),
                    created: Mutex::default(),
                    changes: broadcast::channel(64).0,
                }),
            }
        }

        /// Every request created so far, oldest first, as created.
        pub fn created(&self) -> Vec<PodCertificateRequest> {
            self.inner.created.lock().clone()
        }

        /// The name of the newest request created.
        pub fn last_name(&self) -> Option<String> {
            let created = self.inner.created.lock();
            created.last().and_then(|r| r.metadata.name.clone())
        }

        /// Marks request `namespace/name` issued with `chain`.
        pub fn issue(
            &self,
            namespace: &str,
            name: &str,
            chain: &str,
            begin_refresh_at: SystemTime,
            not_after: SystemTime,
        ) {
            self.set_status(namespace, name, |s| {
                s.certificate_chain = Some(chain.into());
                s.begin_refresh_at = Some(time(begin_refresh_at));
                s.not_after = Some(time(not_after));
                s.conditions = Some(vec![condition("Issued", "Issued", "issued")]);
            });
        }

        /// Adds a `Denied` (or `Failed` when `failed`) condition to `namespace/name`.
        pub fn refuse(&self, namespace: &str, name: &str, failed: bool, reason: &str) {
            let type_ = if failed { "Failed" } else { "Denied" };
            self.set_status(namespace, name, |s| {
                s.conditions = Some(vec![condition(type_, reason, "refused by the test")]);
            });
        }

        /// The watch no longer sees `namespace/name` (it was deleted).
        pub fn delete(&self, namespace: &str, name: &str) {
            let removed = self
                .inner
                .visible
                .lock()
                .remove(&(namespace.into(), name.into()));
            if let Some(r) = removed {
                self.notify(&r);
            }
        }

        fn set_status(
            &self,
            namespace: &str,
            name: &str,
            f: impl FnOnce(&mut PodCertificateRequestStatus),
        ) {
            let updated = {
                let mut visible = self.inner.visible.lock();
                let Some(r) = visible.get_mut(&(namespace.into(), name.into())) else {
                    return;
                };
                let r = Arc::make_mut(r);
                f(r.status.get_or_insert_with(Default::default));
                r.clone()
            };
            self.notify(&updated);
        }

        fn notify(&self, r: &PodCertificateRequest) {
            if let Ok(pod_uid) = PodUid::new(&r.spec.pod_uid) {
                let _ = self
                    .inner
                    .changes
                    .send(SourceChange::PodCertificate { pod_uid });
            }
        }
    }

    fn time(t: SystemTime) -> Time {
        Time(k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or_default())
    }

    fn condition(type_: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: time(SystemTime::now()),
            observed_generation: None,
        }
    }

    #[async_trait]
    impl PodCertificateSource for FakePodCertificateSource {
        fn node_name(&self) -> &str {
            &self.inner.node_name
        }

        async fn node_uid(&self) -> Result<String, ApiError> {
            Ok("node-uid".into())
        }

        async fn service_account_uid(
            &self,
            _namespace: &str,
            name: &str,
        ) -> Result<String, ApiError> {
            Ok(format!("sa-uid-{name}"))
        }

        async fn create(
            &self,
            request: &PodCertificateRequest,
        ) -> Result<PodCertificateRequest, ApiError> {
            let mut stored = request.clone();
            let n = {
                let mut created = self.inner.created.lock();
                created.push(request.clone());
                created.len()
            };
            let prefix = request.metadata.generate_name.clone().unwrap_or_default();
            let name = format!("{prefix}{n}");
            stored.metadata.name = Some(name.clone());
            stored.metadata.creation_timestamp = Some(time(SystemTime::now()));
            if let Some(last) = self.inner.created.lock().last_mut() {
                last.metadata.name = Some(name.clone());
            }
            let namespace = stored.metadata.namespace.clone().unwrap_or_default();
            self.inner
                .visible
                .lock()
                .insert((namespace, name), Arc::new(stored.clone()));
            self.notify(&stored);
            Ok(stored)
        }

        fn get(&self, namespace: &str, name: &str) -> Option<Arc<PodCertificateRequest>> {
            self.inner
                .visible
                .lock()
                .get(&(namespace.into(), name.into()))
                .cloned()
        }

        fn subscribe(&self) -> broadcast::Receiver<SourceChange> {
            self.inner.changes.subscribe()
        }
    }
}
