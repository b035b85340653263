//! The Cache strategy's store: a TTL cache in front of GETs (spec OM-10 … OM-13), and the
//! node-annotation TTL (OM-12).
//!
//! `get` (OM-11), numbered as the spec:
//! 1. unknown key → `object "ns"/"name" not registered`;
//! 2. one fetch at a time per key (different keys in parallel);
//! 3. fetch when the entry holds an error or is not fresh (`now < last_update + ttl`);
//! 4. a good cached object → GET with `resourceVersion=0` (watch cache), else a quorum GET;
//! 5. keep the result unless its resourceVersion is older; cache NotFound; on other errors
//!    serve the stale entry if there is one;
//! 6. return the cached object or error.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::kind::ManagedObject;
use crate::reflector::{BackoffConfig, Cell, Reflector, Settings};
use crate::source::{ObjectSource, ReadFrom};
use crate::tasks::Tasks;
use crate::{Error, ObjectRef};

/// The node annotation holding the TTL in seconds (OM-12).
pub const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// Key → (reference count, item).
type Items<K> = HashMap<ObjectRef, (usize, Arc<TtlItem<K>>)>;

pub(crate) struct TtlStore<K> {
    source: Arc<dyn ObjectSource<K>>,
    items: Mutex<Items<K>>,
    ttl: Option<NodeTtl>,
    default_ttl: Duration,
    notify: broadcast::Sender<ObjectRef>,
}

struct TtlItem<K> {
    /// Serialises fetches of this key (2).
    fetch: tokio::sync::Mutex<()>,
    entry: Mutex<Entry<K>>,
}

struct Entry<K> {
    object: Option<Arc<K>>,
    error: Option<Error>,
    last_update: Option<Instant>,
    /// resourceVersion last handed out (`Some(None)`: NotFound); survives invalidation so
    /// that a re-fetch after `add_reference` only notifies on a real change.
    seen: Option<Option<String>>,
}

impl<K> Entry<K> {
    fn invalidate(&mut self) {
        self.object = None;
        self.error = None;
        self.last_update = None;
    }
}

impl<K: ManagedObject> TtlStore<K> {
    pub(crate) fn new(
        source: Arc<dyn ObjectSource<K>>,
        ttl: Option<NodeTtl>,
        default_ttl: Duration,
        notify: broadcast::Sender<ObjectRef>,
    ) -> Self {
        TtlStore {
            source,
            items: Mutex::default(),
            ttl,
            default_ttl,
            notify,
        }
    }

    /// OM-10: count the reference and drop cached data so the next `get` fetches.
    pub(crate) fn add_reference(&self, key: &ObjectRef) {
        let mut items = self.items.lock();
        let (count, item) = items.entry(key.clone()).or_insert_with(|| {
            let entry = Entry {
                object: None,
                error: None,
                last_update: None,
                seen: None,
            };
            (
                0,
                Arc::new(TtlItem {
                    fetch: tokio::sync::Mutex::new(()),
                    entry: Mutex::new(entry),
                }),
            )
        });
        *count += 1;
        item.entry.lock().invalidate();
    }

    /// OM-10: the last reference forgets the item; an unknown key is a no-op.
    pub(crate) fn delete_reference(&self, key: &ObjectRef) {
        let mut items = self.items.lock();
        if let Some((count, _)) = items.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                items.remove(key);
            }
        }
    }

    pub(crate) fn referenced(&self) -> usize {
        self.items.lock().len()
    }

    /// The TTL in force now (OM-12): the node annotation if present and valid, else the default.
    fn ttl(&self) -> Duration {
        self.ttl
            .as_ref()
            .and_then(NodeTtl::current)
            .unwrap_or(self.default_ttl)
    }

    /// OM-11 (steps in the module docs).
    pub(crate) async fn get(&self, key: &ObjectRef) -> Result<Arc<K>, Error> {
        // (1)
        let Some(item) = self.items.lock().get(key).map(|(_, item)| item.clone()) else {
            return Err(Error::NotRegistered {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            });
        };
        let _fetching = item.fetch.lock().await; // (2)
        if let Some(ttl) = &self.ttl {
            ttl.first_sync().await;
        }
        // (3)
        let has_object = {
            let entry = item.entry.lock();
            let fresh = entry.error.is_none()
                && entry
                    .last_update
                    .is_some_and(|t| Instant::now() < t + self.ttl());
            if fresh {
                return result(&entry, key); // (6), read under the same lock as the check
            }
            entry.object.is_some() && entry.error.is_none()
        };
        // (4)
        let read = if has_object {
            ReadFrom::WatchCache
        } else {
            ReadFrom::Quorum
        };
        let fetched = self.source.get(&key.namespace, &key.name, read).await;
        // (5)
        let mut entry = item.entry.lock();
        match fetched {
            Ok(object) => {
                if !is_older(&object, entry.object.as_deref()) {
                    let rv = object.meta().resource_version.clone();
                    entry.object = Some(Arc::new(object));
                    entry.error = None;
                    entry.last_update = Some(Instant::now());
                    self.saw(key, &mut entry, rv);
                }
            }
            Err(err) => {
                let err = Error::from_source(err, K::PLURAL, &key.namespace, &key.name);
                if err.is_not_found() {
                    entry.object = None;
                    entry.error = Some(err);
                    entry.last_update = Some(Instant::now());
                    self.saw(key, &mut entry, None);
                } else if entry.object.is_none() && entry.error.is_none() {
                    return Err(err);
                }
                // else: serve the stale entry.
            }
        }
        // (6), under the lock that wrote the entry: a concurrent invalidation cannot empty it.
        result(&entry, key)
    }

    /// Record the content version just cached; announce it if it differs from the last one.
    fn saw(&self, key: &ObjectRef, entry: &mut Entry<K>, rv: Option<String>) {
        let now = Some(rv);
        let changed = entry.seen.is_some() && entry.seen != now;
        entry.seen = now;
        if changed {
            tracing::debug!(object.ref = %key, "object changed");
            let _ = self.notify.send(key.clone());
        }
    }
}

/// What `get` returns for a cached entry (OM-11 step 6).
fn result<K: ManagedObject>(entry: &Entry<K>, key: &ObjectRef) -> Result<Arc<K>, Error> {
    match (&entry.error, &entry.object) {
        (Some(err), _) => Err(err.clone()),
        (None, Some(object)) => Ok(object.clone()),
        // Only reachable for an entry invalidated and never refilled; not produced by `get`.
        (None, None) => Err(Error::NotFound {
            resource: K::PLURAL,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        }),
    }
}

/// OM-11 step 5: numeric resourceVersion compare; unparsable counts as 0, nothing cached
/// counts as "not older".
fn is_older<K: Resource>(new: &K, cached: Option<&K>) -> bool {
    let version = |o: &K| {
        o.meta()
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    cached.is_some_and(|old| version(new) < version(old))
}

/// Parse the TTL annotation: a base-10 integer number of seconds; negative means 0.
pub(crate) fn parse_ttl(value: &str) -> Option<Duration> {
    let secs: i64 = value.parse().ok()?;
    Some(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

/// The TTL announced by the agent's own Node, kept current by a reflector on that one Node.
pub(crate) struct NodeTtl {
    cell: Arc<Cell<Node>>,
    /// How long the first `get` waits for the node's first list.
    first_wait: Duration,
    /// The first wait is over (synced or timed out): never wait again.
    waited: AtomicBool,
}

impl NodeTtl {
    /// Start watching `node_name` (`fieldSelector=metadata.name=<node>`).
    pub(crate) fn start(
        source: Arc<dyn ObjectSource<Node>>,
        node_name: &str,
        backoff: BackoffConfig,
        first_wait: Duration,
        tasks: &Tasks,
    ) -> Self {
        let cell = Cell::new();
        let reflector = Reflector {
            source,
            namespace: String::new(),
            name: node_name.to_owned(),
            cell: Arc::downgrade(&cell),
            epoch: 0,
            settings: Arc::new(Settings {
                kind: "node",
                backoff,
                notify: None,
                recovery: None,
                driver: None,
                first_reads: crate::limiter::ReadLimiter::unlimited(),
            }),
        };
        tasks.spawn(reflector.run(tasks.root.child_token(), None));
        NodeTtl {
            cell,
            first_wait,
            waited: AtomicBool::new(false),
        }
    }

    /// Before the first TTL is read, wait (at most `first_wait`, once per manager) for the
    /// node's first list, so the annotation governs from the first `get` on — as the kubelet's
    /// node lister is synced before pods start. Never fails: no node means the default TTL.
    async fn first_sync(&self) {
        if self.waited.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.cell.state.subscribe();
        let _ = tokio::time::timeout(self.first_wait, state.wait_for(|s| s.listed_once)).await;
        self.waited.store(true, Ordering::Release);
    }

    /// The annotation's TTL, or `None` (node unknown yet, no annotation, unparsable value).
    fn current(&self) -> Option<Duration> {
        let state = self.cell.state.borrow();
        let node = state.object.as_ref()?;
        parse_ttl(node.metadata.annotations.as_ref()?.get(TTL_ANNOTATION)?)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::future::join_all;
    use k8s_openapi::api::core::v1::{Node, Secret};

    use super::*;
    use crate::Strategy;
    use crate::source::{FakeSource, SourceError, Verb};
    use crate::testutil::{manager, node, pod, secret, settle, value};

    #[test]
    fn ttl_annotation_is_a_strict_base_10_integer_of_seconds() {
        assert_eq!(parse_ttl("60"), Some(Duration::from_secs(60)));
        assert_eq!(parse_ttl("0"), Some(Duration::ZERO));
        assert_eq!(parse_ttl("-5"), Some(Duration::ZERO));
        assert_eq!(parse_ttl("bad"), None);
        assert_eq!(parse_ttl("60s"), None);
        assert_eq!(parse_ttl(""), None);
    }

    #[test]
    fn an_older_resource_version_never_replaces_a_newer_one() {
        let mut old = secret("s", "a", false);
        old.metadata.resource_version = Some("10".into());
        let mut new = secret("s", "b", false);
        new.metadata.resource_version = Some("9".into());
        assert!(is_older(&new, Some(&old)));
        assert!(!is_older(&old, Some(&new)));
        assert!(!is_older(&new, None));
    }

    /// 10 secrets referenced by one pod each.
    fn ten_secrets(fake: &FakeSource<Secret>, m: &crate::SecretManager) {
        for i in 0..10 {
            let name = format!("s{i}");
            fake.apply("ns", secret(&name, "v", false));
            m.register_pod(
                &nodelet_core::AdmittedPod::new(pod(
                    "ns",
                    &format!("p{i}"),
                    &format!("u{i}"),
                    &[&name],
                ))
                .unwrap(),
            );
        }
    }

    async fn hundred_concurrent_gets(m: &crate::SecretManager) {
        let gets = (0..100).map(|i| {
            let m = m.clone();
            async move { m.get("ns", &format!("s{}", i % 10)).await }
        });
        for r in join_all(gets).await {
            assert!(r.is_ok());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn om13_ttl_zero_refetches_on_every_get() {
        let (fake, nodes) = (FakeSource::new(), FakeSource::<Node>::new());
        nodes.apply("", node("n1", Some("0")));
        let m = manager(Strategy::Cache, &fake, Some(&nodes));
        settle().await;
        ten_secrets(&fake, &m);
        hundred_concurrent_gets(&m).await;
        assert_eq!(fake.total(Verb::Get), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn om13_a_one_minute_ttl_fetches_each_key_once() {
        let (fake, nodes) = (FakeSource::new(), FakeSource::<Node>::new());
        nodes.apply("", node("n1", Some("60")));
        let m = manager(Strategy::Cache, &fake, Some(&nodes));
        settle().await;
        ten_secrets(&fake, &m);
        hundred_concurrent_gets(&m).await;
        assert_eq!(fake.total(Verb::Get), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn om13_custom_ttl_then_default_after_the_annotation_disappears() {
        let (fake, nodes) = (FakeSource::new(), FakeSource::<Node>::new());
        nodes.apply("", node("n1", Some("300")));
        fake.apply("ns", secret("s1", "v", false));
        let m = manager(Strategy::Cache, &fake, Some(&nodes));
        settle().await;
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        let gets = || fake.count(Verb::Get, "ns", "s1");

        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(gets(), 1);
        tokio::time::advance(Duration::from_secs(240)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(gets(), 1, "fresh at +4m");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(gets(), 2, "stale at +5m");

        nodes.apply("", node("n1", None));
        settle().await;
        tokio::time::advance(Duration::from_secs(55)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(gets(), 2, "fresh at +55s under the 1m default");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(gets(), 3, "stale at +60s");
    }

    #[tokio::test(start_paused = true)]
    async fn om12_the_first_get_waits_once_for_the_node_and_a_missing_node_means_the_default() {
        let (fake, nodes) = (FakeSource::new(), FakeSource::<Node>::new());
        fake.apply("ns", secret("s1", "v", false));
        nodes.hold_lists(true);
        let m = manager(Strategy::Cache, &fake, Some(&nodes));
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        let start = Instant::now();
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(1),
            "bounded by sync_timeout"
        );
        let start = Instant::now();
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(start.elapsed(), Duration::ZERO, "never waits again");
        assert_eq!(
            fake.count(Verb::Get, "ns", "s1"),
            1,
            "the default 1 minute TTL"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn om12_without_a_node_name_the_default_ttl_applies() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = manager(Strategy::Cache, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(fake.count(Verb::Get, "ns", "s1"), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(fake.count(Verb::Get, "ns", "s1"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn om8_re_registering_a_pod_keeps_the_cache_of_unchanged_names() {
        let fake = FakeSource::new();
        for s in ["s1", "s2", "s3"] {
            fake.apply("ns", secret(s, "v", false));
        }
        let m = manager(Strategy::Cache, &fake, None);
        m.register_pod(
            &nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1", "s2"])).unwrap(),
        );
        assert!(m.get("ns", "s1").await.is_ok() && m.get("ns", "s2").await.is_ok());
        m.register_pod(
            &nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1", "s2"])).unwrap(),
        );
        assert!(m.get("ns", "s1").await.is_ok() && m.get("ns", "s2").await.is_ok());
        assert_eq!(fake.total(Verb::Get), 2, "a resync re-fetches nothing");

        m.register_pod(
            &nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1", "s3"])).unwrap(),
        );
        assert!(m.get("ns", "s1").await.is_ok() && m.get("ns", "s3").await.is_ok());
        assert_eq!(fake.total(Verb::Get), 3, "only the new name is fetched");
        let err = m.get("ns", "s2").await.err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some(r#"object "ns"/"s2" not registered"#));
    }

    #[tokio::test(start_paused = true)]
    async fn om10_a_new_reference_from_another_pod_invalidates_the_entry() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = manager(Strategy::Cache, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p1", "u1", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p2", "u2", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(fake.count(Verb::Get, "ns", "s1"), 2);
        m.unregister_pod(
            nodelet_core::AdmittedPod::new(pod("ns", "p1", "u1", &[]))
                .unwrap()
                .uid(),
        );
        assert!(m.get("ns", "s1").await.is_ok(), "still referenced by p2");
        m.unregister_pod(
            nodelet_core::AdmittedPod::new(pod("ns", "p2", "u2", &[]))
                .unwrap()
                .uid(),
        );
        assert!(matches!(
            m.get("ns", "s1").await,
            Err(Error::NotRegistered { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_get_in_flight_while_another_pod_registers_still_returns_the_object() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = manager(Strategy::Cache, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p1", "u1", &["s1"])).unwrap());
        fake.hold_gets(true);
        let reader = tokio::spawn({
            let m = m.clone();
            async move { m.get("ns", "s1").await.map(|s| value(&s)) }
        });
        settle().await;
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p2", "u2", &["s1"])).unwrap()); // invalidates the entry (OM-10)
        fake.hold_gets(false);
        let got = reader.await.unwrap_or_else(|e| panic!("reader: {e}"));
        assert_eq!(got.ok().as_deref(), Some("v"));
    }

    #[tokio::test(start_paused = true)]
    async fn om11_not_found_is_cached_with_the_api_text_and_refetched_on_every_get() {
        let fake = FakeSource::<Secret>::new();
        let m = manager(Strategy::Cache, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["missing"])).unwrap());
        for _ in 0..3 {
            let err = m.get("ns", "missing").await.err();
            assert!(err.as_ref().is_some_and(Error::is_not_found));
            assert_eq!(
                err.map(|e| e.to_string()).as_deref(),
                Some(r#"secrets "missing" not found"#)
            );
        }
        assert_eq!(fake.count(Verb::Get, "ns", "missing"), 3);
        assert_eq!(
            fake.watch_cache_gets(),
            0,
            "after an error the GET is quorum-consistent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn om11_a_refresh_of_a_good_entry_reads_from_the_watch_cache() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = manager(Strategy::Cache, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(fake.watch_cache_gets(), 0, "first fetch is quorum");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(fake.watch_cache_gets(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn om11_errors_serve_the_stale_entry_or_pass_through_when_nothing_is_cached() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "old", false));
        let m = manager(Strategy::Cache, &fake, None);
        m.register_pod(
            &nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1", "s2"])).unwrap(),
        );

        fake.fail_next(1, SourceError::status(500, "InternalError", "etcd is sad"));
        let err = m.get("ns", "s2").await.err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("etcd is sad"),
            "nothing cached: the error passes through"
        );

        assert!(m.get("ns", "s1").await.is_ok());
        fake.apply("ns", secret("s1", "new", false));
        tokio::time::advance(Duration::from_secs(61)).await;
        fake.fail_next(1, SourceError::status(500, "InternalError", "etcd is sad"));
        let stale = m.get("ns", "s1").await.map(|s| value(&s));
        assert_eq!(
            stale.ok().as_deref(),
            Some("old"),
            "stale entry served on error"
        );
        let fresh = m.get("ns", "s1").await.map(|s| value(&s));
        assert_eq!(
            fresh.ok().as_deref(),
            Some("new"),
            "the failed refresh left it stale"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_ttl_refresh_that_sees_new_content_notifies_subscribers() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "old", false));
        let m = manager(Strategy::Cache, &fake, None);
        let mut changes = m.subscribe();
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert!(
            changes.try_recv().is_err(),
            "same resourceVersion: no notification"
        );

        fake.apply("ns", secret("s1", "new", false));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(m.get("ns", "s1").await.is_ok());
        assert_eq!(changes.try_recv().ok(), Some(ObjectRef::secret("ns", "s1")));

        fake.delete("ns", "s1");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(m.get("ns", "s1").await.is_err());
        assert_eq!(
            changes.try_recv().ok(),
            Some(ObjectRef::secret("ns", "s1")),
            "deletion"
        );
    }
}
