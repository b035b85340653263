//! [`Manager`]: registration bookkeeping (spec OM-7 … OM-9) and dispatch to the strategy's
//! store; the public face of the crate.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use nodelet_core::{AdmittedPod, ObjectKind, ObjectRef, PodUid};
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::broadcast;

use crate::kind::ManagedObject;
use crate::limiter::Limited;
use crate::reflector::BackoffConfig;
use crate::source::{KubeSource, ObjectSource, ReadFrom};
use crate::tasks::Tasks;
use crate::ttl::{NodeTtl, TtlStore};
use crate::watch::{WatchOptions, WatchStore};
use crate::{Error, ManagerConfig, ReadLimiter, Strategy};

/// The ConfigMap manager the volume plugins and env-var resolution share.
pub type ConfigMapManager = Manager<ConfigMap>;
/// The Secret manager the volume plugins, env-var resolution and pull secrets share.
pub type SecretManager = Manager<Secret>;

/// The kubelet's ConfigMap or Secret manager (spec OM-1) for one strategy.
///
/// Cheap to clone (an `Arc`); every clone is the same manager. Background tasks (reflectors,
/// the idle sweeper, the node-TTL watch) stop on [`shutdown`](Self::shutdown) or when the last
/// clone is dropped.
pub struct Manager<K: ManagedObject> {
    shared: Arc<Shared<K>>,
}

/// Counters for metrics, health endpoints and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ManagerStats {
    /// Pods currently registered (always 0 for [`Strategy::Get`]).
    pub registered_pods: usize,
    /// Objects referenced by at least one registered pod.
    pub referenced_objects: usize,
    /// Watch: reflectors that are running (referenced objects minus idle-stopped and
    /// immutable ones).
    pub running_watches: usize,
    /// Background tasks alive right now (reflectors that are listing, backing off or winding
    /// down, the shared watch driver, the idle sweeper and the node-TTL watch). A reflector
    /// whose watch is open has no task: it is counted in `followed_watches`; one queued for a
    /// start slot (`ManagerConfig::requests_in_flight`) is in neither count.
    pub background_tasks: usize,
    /// Watch: open watches followed by the shared watch driver (one task for all of them).
    pub followed_watches: usize,
}

struct Shared<K: ManagedObject> {
    strategy: Strategy,
    source: Arc<dyn ObjectSource<K>>,
    backend: Backend<K>,
    /// Pod UID → the namespace and the names the stored pod references (OM-7).
    pods: Mutex<HashMap<PodUid, Registered>>,
    notify: broadcast::Sender<ObjectRef>,
    tasks: Tasks,
    /// First reads take a token (OM-30).
    first_reads: ReadLimiter,
}

enum Backend<K: ManagedObject> {
    Get,
    Cache(TtlStore<K>),
    Watch(WatchStore<K>),
}

/// What a registered pod references: its namespace and the object names (OM-7).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Registered {
    namespace: String,
    names: Vec<String>,
}

impl<K: ManagedObject> Drop for Shared<K> {
    fn drop(&mut self) {
        self.tasks.root.cancel();
    }
}

impl<K: ManagedObject> Clone for Manager<K> {
    fn clone(&self) -> Self {
        Manager {
            shared: self.shared.clone(),
        }
    }
}

impl<K: ManagedObject> fmt::Debug for Manager<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Counters only: never an object (Secret payloads print raw bytes).
        f.debug_struct("Manager")
            .field("kind", &K::SINGULAR)
            .field("strategy", &self.shared.strategy)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<K: ManagedObject> Manager<K> {
    /// A manager reading through `client`; for [`Strategy::Cache`] with a `node_name` it also
    /// watches that Node for the TTL annotation.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio runtime.
    pub fn new(client: kube::Client, config: ManagerConfig) -> Result<Self, Error> {
        let source: Arc<dyn ObjectSource<K>> =
            Arc::new(KubeSource::<K>::namespaced(client.clone()));
        let nodes: Option<Arc<dyn ObjectSource<Node>>> = match config.node_name {
            Some(_) => Some(Arc::new(KubeSource::<Node>::cluster(client))),
            None => None,
        };
        Self::with_sources(source, nodes, config)
    }

    /// A manager over any [`ObjectSource`] (a fake in tests); `nodes` serves the Node whose TTL
    /// annotation the Cache strategy reads (ignored without `config.node_name`).
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio runtime.
    pub fn with_sources(
        source: Arc<dyn ObjectSource<K>>,
        nodes: Option<Arc<dyn ObjectSource<Node>>>,
        config: ManagerConfig,
    ) -> Result<Self, Error> {
        let handle = Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let tasks = Tasks::new(handle);
        let (notify, _) = broadcast::channel(config.notify_capacity.max(1));
        let backoff = BackoffConfig {
            initial: config.initial_backoff,
            max: config.max_backoff,
            relationship_grace: config.relationship_grace,
        };
        // Get and Cache: every GET takes a first-read token (OM-30); Watch: its reflectors do.
        let source: Arc<dyn ObjectSource<K>> = match (config.strategy, config.first_reads.limits())
        {
            (Strategy::Get | Strategy::Cache, Some(_)) => Arc::new(Limited {
                inner: source,
                limiter: config.first_reads.clone(),
                classes: match K::KIND {
                    ObjectKind::ConfigMap => ["GET configmaps", "LIST configmaps"],
                    ObjectKind::Secret => ["GET secrets", "LIST secrets"],
                },
            }),
            _ => source,
        };
        let backend = match config.strategy {
            Strategy::Get => Backend::Get,
            Strategy::Cache => {
                let ttl = match (nodes, &config.node_name) {
                    (Some(nodes), Some(node)) => Some(NodeTtl::start(
                        nodes,
                        node,
                        backoff,
                        config.sync_timeout,
                        &tasks,
                    )),
                    _ => None,
                };
                Backend::Cache(TtlStore::new(
                    source.clone(),
                    ttl,
                    config.default_ttl,
                    notify.clone(),
                ))
            }
            Strategy::Watch => {
                let options = WatchOptions {
                    sync_timeout: config.sync_timeout,
                    max_idle: config.max_idle_time(),
                    idle_check_interval: config.idle_check_interval,
                    backoff,
                    recovery: crate::recovery::RecoveryConfig {
                        probe_interval: config.recovery_probe_interval,
                        spread: config.recovery_spread,
                        concurrency: config.recovery_concurrency,
                        requests_in_flight: config.requests_in_flight,
                    },
                };
                Backend::Watch(WatchStore::new(
                    source.clone(),
                    options,
                    tasks.clone(),
                    notify.clone(),
                    config.first_reads.clone(),
                ))
            }
        };
        let shared = Shared {
            first_reads: config.first_reads.clone(),
            strategy: config.strategy,
            source,
            backend,
            pods: Mutex::default(),
            notify,
            tasks,
        };
        Ok(Manager {
            shared: Arc::new(shared),
        })
    }

    /// The strategy this manager runs.
    pub fn strategy(&self) -> Strategy {
        self.shared.strategy
    }

    /// The bucket its first reads take tokens from (OM-30; shared with the managers it was
    /// given to).
    pub fn first_reads(&self) -> &ReadLimiter {
        &self.shared.first_reads
    }

    /// The object `namespace/name`, as fresh as the strategy makes it (see the crate docs).
    ///
    /// Watch waits up to `sync_timeout` (1 s) for a reflector's first list; Cache may issue one
    /// GET; Get always issues one GET.
    ///
    /// # Errors
    /// * [`Error::NotRegistered`] (Watch, Cache) when no registered pod references the object;
    /// * [`Error::NotFound`] when it does not exist ([`Error::is_not_found`]);
    /// * [`Error::SyncTimeout`] (Watch) when the first list did not complete in time;
    /// * [`Error::Api`] / [`Error::Request`] (Get, Cache) for other API failures — Cache serves
    ///   a stale cached object instead when it has one;
    /// * [`Error::ShutDown`] (Watch) after [`shutdown`](Self::shutdown).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future leaves the cache consistent (an in-flight GET's result
    /// is discarded).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Arc<K>, Error> {
        match &self.shared.backend {
            Backend::Get => match self
                .shared
                .source
                .get(namespace, name, ReadFrom::Quorum)
                .await
            {
                Ok(object) => Ok(Arc::new(object)),
                Err(err) => Err(Error::from_source(err, K::PLURAL, namespace, name)),
            },
            Backend::Cache(store) => store.get(&ObjectRef::new(K::KIND, namespace, name)).await,
            Backend::Watch(store) => store.get(&ObjectRef::new(K::KIND, namespace, name)).await,
        }
    }

    /// Record that `pod` references the objects named in its spec (OM-3/OM-4, OM-8).
    ///
    /// Never blocks on the network; idempotent. Re-registering a pod (same UID) adds
    /// references only for new names and drops those that disappeared; unchanged names keep
    /// their cache entries. A no-op for [`Strategy::Get`]. References are counted per
    /// [`PodUid`], which the [`AdmittedPod`] carries validated.
    pub fn register_pod(&self, pod: &AdmittedPod) {
        if matches!(self.shared.backend, Backend::Get) {
            return;
        }
        let uid = pod.uid();
        let new = Registered {
            namespace: pod.namespace().to_owned(),
            names: K::referenced_names(pod),
        };
        let mut pods = self.shared.pods.lock();
        let old = pods.insert(uid.clone(), new.clone()).unwrap_or_default();
        for name in new.names.iter().filter(|n| !old.names.contains(n)) {
            self.add_reference(uid, &new.namespace, name);
        }
        for name in old.names.iter().filter(|n| !new.names.contains(n)) {
            self.delete_reference(uid, &old.namespace, name);
        }
        drop(pods);
        // The pod watch confirmed a pod: the server's authorizer has likely linked it by now.
        if let Backend::Watch(store) = &self.shared.backend {
            store.pod_confirmed();
        }
    }

    /// Forget the references of pod `uid`: those of the pod as last registered (OM-9). Never
    /// blocks on the network; unknown pods are a no-op.
    pub fn unregister_pod(&self, uid: &PodUid) {
        if matches!(self.shared.backend, Backend::Get) {
            return;
        }
        let mut pods = self.shared.pods.lock();
        if let Some(old) = pods.remove(uid) {
            for name in &old.names {
                self.delete_reference(uid, &old.namespace, name);
            }
            nodelet_core::capacity::shrink_when_sparse(&mut pods);
        }
    }

    /// The registered pods that reference `object`, sorted by UID: whom a change of `object`
    /// concerns, answered from the manager's own index of references (OM-7) instead of each
    /// caller walking every pod's spec again. Empty for an object of another kind, and always
    /// for [`Strategy::Get`] (which registers nothing). Never blocks; possibly stale by the
    /// time the caller acts on it (a pod may register or unregister meanwhile).
    pub fn referencing_pods(&self, object: &ObjectRef) -> Vec<PodUid> {
        if object.kind != K::KIND {
            return Vec::new();
        }
        let pods = self.shared.pods.lock();
        let mut uids: Vec<PodUid> = pods
            .iter()
            .filter(|(_, r)| r.namespace == object.namespace && r.names.contains(&object.name))
            .map(|(uid, _)| uid.clone())
            .collect();
        drop(pods);
        uids.sort();
        uids
    }

    /// Change notifications: the key of every object whose content changed — a new
    /// resourceVersion seen by a watch or a TTL refresh, a deletion, or the creation of a
    /// referenced object that was missing. Not sent for an object's first load. Nothing is
    /// sent with [`Strategy::Get`] (it keeps no state).
    pub fn subscribe(&self) -> broadcast::Receiver<ObjectRef> {
        self.shared.notify.subscribe()
    }

    /// Whether a reflector runs for `namespace/name` right now (Watch only).
    pub fn is_watching(&self, namespace: &str, name: &str) -> bool {
        match &self.shared.backend {
            Backend::Watch(store) => store.is_watching(&ObjectRef::new(K::KIND, namespace, name)),
            _ => false,
        }
    }

    /// The health of every watched object (Watch only; empty for Get and Cache): when the API
    /// server last answered its watch and whether the latest request failed, so an outage is
    /// visible while `get` keeps serving the last seen objects. Sorted by object.
    pub fn watch_health(&self) -> Vec<crate::WatchHealth> {
        match &self.shared.backend {
            Backend::Watch(store) => store.health(),
            _ => Vec::new(),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> ManagerStats {
        let registered_pods = self.shared.pods.lock().len();
        let (referenced_objects, running_watches, followed_watches) = match &self.shared.backend {
            Backend::Get => (0, 0, 0),
            Backend::Cache(store) => (store.referenced(), 0, 0),
            Backend::Watch(store) => store.counts(),
        };
        ManagerStats {
            registered_pods,
            referenced_objects,
            running_watches,
            background_tasks: self.shared.tasks.len(),
            followed_watches,
        }
    }

    /// Stop every background task and wait until all have ended (OM-21). Afterwards Watch
    /// `get`s fail with [`Error::ShutDown`] except for immutable objects already in memory;
    /// Get and Cache keep working (they need no task). Idempotent.
    pub async fn shutdown(&self) {
        let tasks = &self.shared.tasks;
        tasks.root.cancel();
        if let Backend::Watch(store) = &self.shared.backend {
            store.stop_all();
        }
        tasks.close_and_wait().await;
    }

    fn add_reference(&self, uid: &PodUid, namespace: &str, name: &str) {
        let key = ObjectRef::new(K::KIND, namespace, name);
        match &self.shared.backend {
            Backend::Get => {}
            Backend::Cache(store) => store.add_reference(&key),
            Backend::Watch(store) => store.add_reference(&key, uid),
        }
    }

    fn delete_reference(&self, uid: &PodUid, namespace: &str, name: &str) {
        let key = ObjectRef::new(K::KIND, namespace, name);
        match &self.shared.backend {
            Backend::Get => {}
            Backend::Cache(store) => store.delete_reference(&key),
            Backend::Watch(store) => store.delete_reference(&key, uid),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use k8s_openapi::api::core::v1::{Pod, Secret};
    use proptest::prelude::{ProptestConfig, Strategy as _, prop_oneof, proptest};
    use proptest::strategy::BoxedStrategy;

    use nodelet_core::ObjectKind;

    use super::*;
    use crate::source::{FakeSource, Verb};
    use crate::testutil::{manager, pod, secret, settle, value};

    #[tokio::test(start_paused = true)]
    async fn om6_get_strategy_issues_a_live_get_per_call_and_needs_no_registration() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = manager(Strategy::Get, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert_eq!(
            m.get("ns", "s1").await.map(|s| value(&s)).ok().as_deref(),
            Some("v1")
        );
        fake.apply("ns", secret("s1", "v2", false));
        assert_eq!(
            m.get("ns", "s1").await.map(|s| value(&s)).ok().as_deref(),
            Some("v2")
        );
        let err = m.get("ns", "nope").await.err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some(r#"secrets "nope" not found"#));
        assert_eq!(fake.total(Verb::Get), 3);
        assert_eq!(fake.watch_cache_gets(), 0, "default (quorum) GETs");
        assert_eq!(m.stats(), ManagerStats::default());
    }

    #[tokio::test(start_paused = true)]
    async fn referencing_pods_names_the_registered_pods_that_reference_an_object() {
        for strategy in [Strategy::Watch, Strategy::Cache] {
            let fake = FakeSource::new();
            let m = manager(strategy, &fake, None);
            let admitted = |ns: &str, name: &str, uid: &str, refs: &[&str]| {
                nodelet_core::AdmittedPod::new(pod(ns, name, uid, refs)).unwrap()
            };
            m.register_pod(&admitted("ns", "a", "u-a", &["s1", "s2"]));
            m.register_pod(&admitted("ns", "b", "u-b", &["s2"]));
            m.register_pod(&admitted("other", "c", "u-c", &["s1"]));
            let s = |ns: &str, name: &str| ObjectRef::new(ObjectKind::Secret, ns, name);
            let uids = |object: &ObjectRef| -> Vec<String> {
                m.referencing_pods(object)
                    .iter()
                    .map(|u| u.as_str().to_owned())
                    .collect()
            };
            assert_eq!(uids(&s("ns", "s1")), ["u-a"], "{strategy}");
            assert_eq!(uids(&s("ns", "s2")), ["u-a", "u-b"], "{strategy}");
            assert_eq!(uids(&s("other", "s1")), ["u-c"], "{strategy}");
            assert!(uids(&s("ns", "s3")).is_empty(), "{strategy}");
            let config_map = ObjectRef::new(ObjectKind::ConfigMap, "ns", "s1");
            assert!(uids(&config_map).is_empty(), "{strategy}: another kind");
            // Re-registered without s2, then gone: the answer follows.
            m.register_pod(&admitted("ns", "a", "u-a", &["s1"]));
            assert_eq!(uids(&s("ns", "s2")), ["u-b"], "{strategy}");
            m.unregister_pod(&PodUid::new("u-b").unwrap());
            assert!(uids(&s("ns", "s2")).is_empty(), "{strategy}");
            m.shutdown().await;
        }
        let get = manager(Strategy::Get, &FakeSource::new(), None);
        get.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "a", "u-a", &["s1"])).unwrap());
        let object = ObjectRef::new(ObjectKind::Secret, "ns", "s1");
        assert!(
            get.referencing_pods(&object).is_empty(),
            "Get keeps no state"
        );
    }

    #[tokio::test]
    async fn manager_debug_output_shows_counters_and_never_payloads() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "hunter2", false));
        let m = manager(Strategy::Watch, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        let debug = format!("{m:?}");
        assert!(debug.contains("registered_pods: 1"), "{debug}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("104, 117"),
            "{debug}"
        );
        m.shutdown().await;
    }

    // A pod without a usable UID used to be counted under "" — two such pods
    // shared one reference and unregistering either dropped the other's. Now such a pod is
    // never admitted, so `register_pod` (which takes an `AdmittedPod`) cannot be handed one:
    // it references nothing and starts no watch.
    #[tokio::test(start_paused = true)]
    async fn a_pod_without_a_usable_uid_is_not_registered_and_counts_nothing() {
        for strategy in [Strategy::Watch, Strategy::Cache] {
            let fake = FakeSource::new();
            fake.apply("ns", secret("s1", "v1", false));
            let m = manager(strategy, &fake, None);
            for uid in [None, Some(""), Some("../x"), Some(".."), Some("a/b")] {
                let mut p = pod("ns", "p", "ignored", &["s1"]);
                p.metadata.uid = uid.map(str::to_owned);
                assert!(
                    nodelet_core::AdmittedPod::new(p).is_err(),
                    "{strategy} {uid:?}"
                );
                assert_eq!(m.stats().registered_pods, 0, "{strategy} {uid:?}");
                assert_eq!(m.stats().referenced_objects, 0, "{strategy} {uid:?}");
                assert!(!m.is_watching("ns", "s1"), "{strategy} {uid:?}");
                assert!(
                    matches!(m.get("ns", "s1").await, Err(Error::NotRegistered { .. })),
                    "{strategy} {uid:?}"
                );
            }
            // A pod with a UID still registers as before.
            let good = pod("ns", "p", "u1", &["s1"]);
            m.register_pod(&nodelet_core::AdmittedPod::new(good.clone()).unwrap());
            assert_eq!(m.stats().registered_pods, 1, "{strategy}");
            assert!(m.get("ns", "s1").await.is_ok(), "{strategy}");
            m.shutdown().await;
        }
    }

    #[test]
    fn building_a_manager_outside_a_runtime_is_an_error() {
        let fake = FakeSource::<Secret>::new();
        let r = SecretManager::with_sources(Arc::new(fake), None, ManagerConfig::default());
        assert!(matches!(r, Err(Error::NoRuntime)));
    }

    const PODS: usize = 6;
    const OBJECTS: usize = 5;

    #[derive(Debug, Clone)]
    enum Op {
        Register { pod: usize, names: BTreeSet<usize> },
        Unregister { pod: usize },
        Get { object: usize },
    }

    fn op() -> BoxedStrategy<Op> {
        prop_oneof![
            3 => (0..PODS, proptest::collection::btree_set(0..OBJECTS, 0..4))
                .prop_map(|(pod, names)| Op::Register { pod, names }),
            2 => (0..PODS).prop_map(|pod| Op::Unregister { pod }),
            1 => (0..OBJECTS).prop_map(|object| Op::Get { object }),
        ]
        .boxed()
    }

    fn test_pod(i: usize, names: &BTreeSet<usize>) -> Pod {
        let names: Vec<String> = names.iter().map(|n| format!("o{n}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        pod("ns", &format!("p{i}"), &format!("u{i}"), &refs)
    }

    /// Watch strategy against a `HashMap` model: a watch runs exactly while some registered
    /// pod references the object, counts never go negative, no task outlives its watch.
    async fn run_model(ops: Vec<Op>) {
        let fake = FakeSource::new();
        for o in (0..OBJECTS).step_by(2) {
            fake.apply("ns", secret(&format!("o{o}"), "v", false));
        }
        let m = manager(Strategy::Watch, &fake, None);
        let mut model: HashMap<usize, BTreeSet<usize>> = HashMap::new();
        for op in ops {
            match &op {
                Op::Register { pod, names } => {
                    m.register_pod(&nodelet_core::AdmittedPod::new(test_pod(*pod, names)).unwrap());
                    model.insert(*pod, names.clone());
                }
                Op::Unregister { pod } => {
                    // The argument's spec is irrelevant (OM-9): pass an empty one.
                    m.unregister_pod(
                        nodelet_core::AdmittedPod::new(test_pod(*pod, &BTreeSet::new()))
                            .unwrap()
                            .uid(),
                    );
                    model.remove(pod);
                }
                Op::Get { object } => {
                    let referenced = model.values().any(|n| n.contains(object));
                    let got = m.get("ns", &format!("o{object}")).await;
                    match (referenced, object % 2 == 0) {
                        (false, _) => assert!(matches!(got, Err(Error::NotRegistered { .. }))),
                        (true, true) => assert!(got.is_ok(), "{op:?}: {got:?}"),
                        (true, false) => assert!(got.err().is_some_and(|e| e.is_not_found())),
                    }
                }
            }
            let referenced: BTreeSet<usize> = model.values().flatten().copied().collect();
            for o in 0..OBJECTS {
                let watching = m.is_watching("ns", &format!("o{o}"));
                assert_eq!(
                    watching,
                    referenced.contains(&o),
                    "object o{o} after {op:?}"
                );
            }
            let stats = m.stats();
            assert_eq!(stats.registered_pods, model.len());
            assert_eq!(stats.referenced_objects, referenced.len());
            settle().await;
            let stats = m.stats();
            // Every running watch is a task or a follower; plus the sweeper and the driver.
            assert_eq!(
                stats.background_tasks + stats.followed_watches,
                stats.running_watches + 2,
                "leak after {op:?}"
            );
            assert_eq!(
                stats.followed_watches, stats.running_watches,
                "an open watch keeps no task after {op:?}"
            );
            assert_eq!(fake.open_watches(), stats.running_watches);
        }
        for pod in 0..PODS {
            m.unregister_pod(
                nodelet_core::AdmittedPod::new(test_pod(pod, &BTreeSet::new()))
                    .unwrap()
                    .uid(),
            );
        }
        assert_eq!(m.stats().referenced_objects, 0);
        m.shutdown().await;
        assert_eq!(m.stats().background_tasks, 0);
        assert_eq!(fake.open_watches(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn random_register_unregister_sequences_match_the_model(
            ops in proptest::collection::vec(op(), 1..40)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"));
            rt.block_on(run_model(ops));
        }
    }
}
