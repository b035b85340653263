//! The Watch strategy's store: one per-object reflector while the object is referenced
//! (spec OM-15 … OM-21).
//!
//! `get` (OM-18), numbered as the spec:
//! 1. unknown key → `object "ns"/"name" not registered`;
//! 2. record the access time (even if the call later fails);
//! 3. a stopped, mutable item restarts its reflector (not after shutdown);
//! 4. await the first list for up to `sync_timeout` from when it was sent (OM-36: not while
//!    it waits in the node's own queue; readiness is awaited on a `watch`
//!    channel, not polled) → `failed to sync <kind> cache: timed out waiting for the condition`;
//!    the list that completes later is then announced to subscribers like a change, so the
//!    caller that failed (a volume, a pod's env) retries as soon as the object is there;
//! 5. absent → `<kind> "name" not found` (singular);
//! 6. present and immutable → stop the reflector for good and serve the object from memory.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::gate::PodGate;
use crate::health::{HealthCell, Recording, WatchHealth};
use crate::kept::Keep;
use crate::kind::ManagedObject;
use crate::limiter::ReadLimiter;
use crate::recovery::{Recovery, RecoveryConfig};
use crate::reflector::{BackoffConfig, Cell, CellState, Reflector, Settings, Start, WatchDriver};
use crate::source::ObjectSource;
use crate::tasks::Tasks;
use crate::{Error, ObjectRef, PodUid};

/// Options of the watch store, from `ManagerConfig`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WatchOptions {
    pub(crate) sync_timeout: Duration,
    pub(crate) max_idle: Duration,
    pub(crate) idle_check_interval: Duration,
    pub(crate) backoff: BackoffConfig,
    pub(crate) recovery: RecoveryConfig,
}

pub(crate) struct WatchStore<K: Keep> {
    inner: Arc<Inner<K>>,
}

struct Inner<K: Keep> {
    source: Arc<dyn ObjectSource<K>>,
    /// Boxed: a table keeps room for up to twice its entries, and an item is twice the size of
    /// its key (at 495 objects of a kind, 1,024 slots of 169 bytes inline, 64 boxed).
    items: Mutex<HashMap<ObjectRef, Box<Item<K>>>>,
    options: WatchOptions,
    tasks: Tasks,
    /// Shared by every reflector: resumes them all when the API server answers again.
    recovery: Arc<Recovery>,
    /// Follows every open watch (`driver.rs`).
    driver: WatchDriver<K>,
    /// Each new pod's gate (OM-31), while a reflector holds it.
    gates: Mutex<HashMap<PodUid, std::sync::Weak<PodGate>>>,
    /// What every reflector run shares: the kind, the back-off, where changes are announced,
    /// the recovery signal, the driver and the first-read bucket (OM-30).
    settings: Arc<Settings<K>>,
}

/// One referenced object (OM-15).
struct Item<K: Keep> {
    /// Referencing pod UID → count; entries are removed at 0, never negative.
    refs: Refs,
    cell: Arc<Cell<K>>,
    /// The running reflector's token; `None` while stopped.
    reflector: Option<CancellationToken>,
    last_access: Instant,
    immutable: bool,
    epoch: u64,
    /// What the reflector runs last heard from the API server (`health.rs`).
    health: Arc<HealthCell>,
}

/// The pods that reference one object, each with its count of references (OM-15). Nearly every
/// object on a node is referenced by one pod: that one is kept inline, and a map is made only
/// when a second pod comes (a map of one entry was a 119-byte allocation per watched object).
enum Refs {
    None,
    One(PodUid, usize),
    Many(HashMap<PodUid, usize>),
}

impl Refs {
    fn is_empty(&self) -> bool {
        match self {
            Refs::None => true,
            Refs::One(..) => false,
            Refs::Many(many) => many.is_empty(),
        }
    }

    /// One more reference of `uid`.
    fn add(&mut self, uid: &PodUid) {
        match self {
            Refs::None => *self = Refs::One(uid.clone(), 1),
            Refs::One(one, count) if one == uid => *count += 1,
            Refs::One(..) => {
                if let Refs::One(one, count) = std::mem::replace(self, Refs::None) {
                    *self = Refs::Many(HashMap::from([(one, count), (uid.clone(), 1)]));
                }
            }
            Refs::Many(many) => *many.entry(uid.clone()).or_insert(0) += 1,
        }
    }

    /// One reference of `uid` less, its entry gone at 0; `false` (and nothing changes) when
    /// `uid` holds none.
    fn remove(&mut self, uid: &PodUid) -> bool {
        match self {
            Refs::One(one, count) if one == uid => {
                *count -= 1;
                if *count == 0 {
                    *self = Refs::None;
                }
                true
            }
            Refs::None | Refs::One(..) => false,
            Refs::Many(many) => {
                let Some(count) = many.get_mut(uid) else {
                    return false;
                };
                *count -= 1;
                if *count == 0 {
                    many.remove(uid);
                }
                true
            }
        }
    }
}

impl<K: ManagedObject> WatchStore<K> {
    pub(crate) fn new(
        source: Arc<dyn ObjectSource<K>>,
        options: WatchOptions,
        tasks: Tasks,
        notify: broadcast::Sender<ObjectRef>,
        first_reads: ReadLimiter,
    ) -> Self {
        let recovery = Arc::new(Recovery::new(options.recovery));
        let driver = WatchDriver::spawn(&tasks, options.recovery.requests_in_flight);
        let settings = Arc::new(Settings {
            kind: K::SINGULAR,
            backoff: options.backoff,
            notify: Some((notify, K::KIND)),
            recovery: Some(recovery.clone()),
            driver: Some(driver.clone()),
            first_reads,
        });
        let inner = Arc::new(Inner {
            gates: Mutex::default(),
            source,
            items: Mutex::default(),
            options,
            tasks: tasks.clone(),
            recovery,
            driver,
            settings,
        });
        let weak = Arc::downgrade(&inner);
        let cancel = inner.tasks.root.clone();
        inner
            .tasks
            .spawn(idle_loop(weak, options.idle_check_interval, cancel));
        WatchStore { inner }
    }

    /// OM-16: the first reference creates the item and starts its reflector.
    pub(crate) fn add_reference(&self, key: &ObjectRef, uid: &PodUid) {
        let inner = &self.inner;
        let mut items = inner.items.lock();
        let item = items.entry(key.clone()).or_insert_with(|| {
            Box::new(Item {
                refs: Refs::None,
                cell: Cell::new(),
                reflector: None,
                last_access: Instant::now(),
                immutable: false,
                epoch: 0,
                health: Arc::default(),
            })
        });
        if item.refs.is_empty() && item.reflector.is_none() && !inner.tasks.root.is_cancelled() {
            let gate = inner.gate(uid);
            inner.start(key, item, Some(gate));
        }
        item.refs.add(uid);
    }

    /// A pod was registered: reflectors refused for want of a relationship retry at once
    /// (`refusal.rs`).
    pub(crate) fn pod_confirmed(&self) {
        self.inner.recovery.pod_confirmed();
    }

    /// OM-17: the last reference stops the reflector and forgets the item. A UID that holds no
    /// reference is ignored (upstream records a negative count and keeps the item alive).
    pub(crate) fn delete_reference(&self, key: &ObjectRef, uid: &PodUid) {
        let mut items = self.inner.items.lock();
        let Some(item) = items.get_mut(key) else {
            return;
        };
        if !item.refs.remove(uid) {
            return;
        }
        if item.refs.is_empty()
            && let Some(mut item) = items.remove(key)
        {
            stop(&mut item, true);
            nodelet_core::capacity::shrink_when_sparse(&mut items);
        }
    }

    /// OM-18 (steps in the module docs).
    pub(crate) async fn get(&self, key: &ObjectRef) -> Result<Arc<K>, Error> {
        let inner = &self.inner;
        let (mut state, cell) = {
            let mut items = inner.items.lock();
            // (1)
            let Some(item) = items.get_mut(key) else {
                return Err(Error::NotRegistered {
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                });
            };
            item.last_access = Instant::now(); // (2)
            if item.reflector.is_none() && !item.immutable {
                // (3)
                if inner.tasks.root.is_cancelled() {
                    return Err(Error::ShutDown {
                        namespace: key.namespace.clone(),
                        name: key.name.clone(),
                    });
                }
                inner.start(key, item, None);
            }
            (item.cell.state.subscribe(), Arc::downgrade(&item.cell))
        };
        // (4)
        let object = match wait_synced(&mut state, inner.options.sync_timeout).await {
            Err(_elapsed) => {
                if let Some(cell) = cell.upgrade() {
                    cell.state.send_if_modified(|s| {
                        s.waited_out = !s.synced;
                        false
                    });
                }
                return Err(Error::SyncTimeout {
                    resource: K::SINGULAR,
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                });
            }
            // The item was dropped while we waited: its last reference went away.
            Ok(Err(_closed)) => {
                return Err(Error::NotRegistered {
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                });
            }
            Ok(Ok(object)) => object,
        };
        let object = object.transpose().map_err(|_undecodable| Error::Kept {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        })?;
        // (5)
        let Some(object) = object else {
            return Err(Error::NotFound {
                resource: K::SINGULAR,
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            });
        };
        // (6)
        if object.is_immutable() {
            let mut items = inner.items.lock();
            if let Some(item) = items.get_mut(key)
                && !item.immutable
                && Weak::ptr_eq(&Arc::downgrade(&item.cell), &cell)
            {
                item.immutable = true;
                stop(item, false);
            }
        }
        Ok(object)
    }

    /// Whether a reflector is running for `key`.
    pub(crate) fn is_watching(&self, key: &ObjectRef) -> bool {
        self.inner
            .items
            .lock()
            .get(key)
            .is_some_and(|i| i.reflector.is_some())
    }

    /// (referenced objects, running reflectors, watches the driver follows).
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let items = self.inner.items.lock();
        (
            items.len(),
            items.values().filter(|i| i.reflector.is_some()).count(),
            self.inner.driver.len(),
        )
    }

    /// The health of every referenced object's watch, sorted by object.
    pub(crate) fn health(&self) -> Vec<WatchHealth> {
        let mut out: Vec<WatchHealth> = self
            .inner
            .items
            .lock()
            .iter()
            .map(|(key, item)| item.health.snapshot(key.clone(), item.reflector.is_some()))
            .collect();
        out.sort_by(|a, b| a.object.cmp(&b.object));
        out
    }

    /// OM-21: stop every item; nothing is (re)started afterwards (the root token is cancelled
    /// by the caller first).
    pub(crate) fn stop_all(&self) {
        for item in self.inner.items.lock().values_mut() {
            let immutable = item.immutable;
            stop(item, !immutable);
        }
    }
}

impl<K: ManagedObject> Inner<K> {
    /// Start a reflector run for `item` (never two at once: the item holds at most one token
    /// and every start bumps the epoch).
    /// The gate of pod `uid` (OM-31): made by its first reflector, shared by the others its
    /// registration starts; forgotten once no reflector holds it.
    fn gate(&self, uid: &PodUid) -> Arc<PodGate> {
        let mut gates = self.gates.lock();
        if let Some(gate) = gates.get(uid).and_then(std::sync::Weak::upgrade) {
            return gate;
        }
        if gates.len() >= 64 && gates.len().is_power_of_two() {
            gates.retain(|_, g| g.strong_count() > 0);
        }
        let gate = Arc::new(PodGate::new());
        gates.insert(uid.clone(), Arc::downgrade(&gate));
        gate
    }

    fn start(&self, key: &ObjectRef, item: &mut Item<K>, gate: Option<Arc<PodGate>>) {
        item.epoch += 1;
        let epoch = item.epoch;
        item.cell.state.send_modify(|s| {
            s.epoch = epoch;
            s.synced = false;
            // The run waits for the driver's start slot, then in `first_read`: the node's own
            // queue until its first request is sent (OM-36).
            s.queued = true;
            s.sent = None;
        });
        let cancel = self.tasks.root.child_token();
        let reflector = Reflector {
            source: Arc::new(Recording {
                inner: self.source.clone(),
                health: item.health.clone(),
            }),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            cell: Arc::downgrade(&item.cell),
            epoch,
            settings: self.settings.clone(),
        };
        self.driver.start(Start {
            reflector,
            cancel: cancel.clone(),
            gate,
        });
        item.reflector = Some(cancel);
    }

    /// OM-19: stop reflectors that are synced and unread for longer than `max_idle`.
    fn stop_idle(&self) {
        let now = Instant::now();
        for (key, item) in self.items.lock().iter_mut() {
            let synced = item.cell.state.borrow().synced;
            if item.reflector.is_some() && synced && item.last_access + self.options.max_idle < now
            {
                tracing::debug!(object.ref = %key, "stopping idle reflector");
                stop(item, true);
            }
        }
    }
}

/// Stop `item`'s reflector, if running; `unsync` makes the next `get` wait for a fresh list.
fn stop<K: Keep>(item: &mut Item<K>, unsync: bool) {
    if let Some(cancel) = item.reflector.take() {
        cancel.cancel();
        item.epoch += 1;
        let epoch = item.epoch;
        item.cell.state.send_modify(|s| {
            s.epoch = epoch;
            if unsync {
                s.synced = false;
            }
        });
    }
}

async fn idle_loop<K: ManagedObject>(
    inner: Weak<Inner<K>>,
    every: Duration,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        inner.stop_idle();
    }
}

/// How long a first read may wait in the node's own queue before a `get` waiting for it gives
/// up anyway (OM-36): far more than a start's queue takes (990 objects: under 2 s).
const QUEUED_AT_MOST: Duration = Duration::from_secs(30);

/// Step (4): waits until the cell is synced, at most `timeout` counted from when the first read
/// was sent: time it spends in the node's own queue does not count (OM-36), up to
/// [`QUEUED_AT_MOST`].
/// The object is read from how the cell keeps it (`kept.rs`).
#[allow(clippy::type_complexity)]
async fn wait_synced<K: Keep>(
    state: &mut tokio::sync::watch::Receiver<CellState<K>>,
    timeout: Duration,
) -> Result<
    Result<Option<Result<Arc<K>, serde_json::Error>>, tokio::sync::watch::error::RecvError>,
    tokio::time::error::Elapsed,
> {
    let start = Instant::now();
    loop {
        let (deadline, queued) = {
            let s = state.borrow();
            if s.queued {
                (start + QUEUED_AT_MOST, true)
            } else {
                let from = s.sent.map_or(start, |sent| sent.max(start));
                (from + timeout, false)
            }
        };
        let waited =
            tokio::time::timeout_at(deadline, state.wait_for(|s| s.synced || s.queued != queued))
                .await;
        match waited {
            Ok(Ok(s)) if !s.synced => {}
            Ok(Ok(s)) => return Ok(Ok(s.object.as_ref().map(K::load))),
            Ok(Err(closed)) => return Ok(Err(closed)),
            Err(elapsed) => return Err(elapsed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Secret;

    use super::*;
    use crate::source::{FakeSource, SourceError, Verb};
    use crate::testutil::{manager, manager_with, pod, secret, settle, value};
    use crate::{ManagerConfig, Strategy};

    fn watch(fake: &FakeSource<Secret>) -> crate::SecretManager {
        manager(Strategy::Watch, fake, None)
    }

    async fn read(m: &crate::SecretManager, name: &str) -> Result<String, Error> {
        m.get("ns", name).await.map(|s| value(&s))
    }

    #[tokio::test(start_paused = true)]
    async fn om16_one_list_and_one_watch_for_21_adds_and_20_deletes() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = watch(&fake);
        let pods: Vec<_> = (0..21)
            .map(|i| pod("ns", &format!("p{i}"), &format!("u{i}"), &["s1"]))
            .collect();
        for p in &pods {
            m.register_pod(&nodelet_core::AdmittedPod::new(p.clone()).unwrap());
        }
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v"));
        for p in &pods[..20] {
            m.unregister_pod(nodelet_core::AdmittedPod::new(p.clone()).unwrap().uid());
        }
        assert!(read(&m, "s1").await.is_ok());
        settle().await;
        assert_eq!(fake.count(Verb::List, "ns", "s1"), 1);
        assert_eq!(fake.count(Verb::Watch, "ns", "s1"), 1);
        assert!(m.is_watching("ns", "s1"));

        m.unregister_pod(
            nodelet_core::AdmittedPod::new(pods[20].clone())
                .unwrap()
                .uid(),
        );
        assert!(!m.is_watching("ns", "s1"));
        assert!(matches!(
            m.get("ns", "s1").await,
            Err(Error::NotRegistered { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn om17_deleting_a_reference_never_affects_other_objects_or_other_pods() {
        let fake = FakeSource::<Secret>::new();
        let (tasks, notify) = (test_tasks(), broadcast::channel(8).0);
        let store = WatchStore::new(
            Arc::new(fake.clone()),
            options(),
            tasks,
            notify,
            ReadLimiter::unlimited(),
        );
        let (a, b) = (ObjectRef::secret("ns", "a"), ObjectRef::secret("ns", "b"));
        let uid = |u: &str| PodUid::new(u).unwrap();
        store.add_reference(&a, &uid("u1"));
        store.add_reference(&a, &uid("u1"));
        store.add_reference(&a, &uid("u2"));
        store.add_reference(&b, &uid("u1"));

        store.delete_reference(&a, &uid("never-referenced"));
        store.delete_reference(&ObjectRef::secret("ns", "unknown"), &uid("u1"));
        let (objects, running, _) = store.counts();
        assert_eq!((objects, running), (2, 2));

        store.delete_reference(&b, &uid("u1"));
        assert!(store.is_watching(&a) && !store.is_watching(&b));
        store.delete_reference(&a, &uid("u1"));
        store.delete_reference(&a, &uid("u2"));
        assert!(
            store.is_watching(&a),
            "u1 still holds one of its two references"
        );
        store.delete_reference(&a, &uid("u2"));
        assert!(
            store.is_watching(&a),
            "u2 has no reference left to drop: no negative count"
        );
        store.delete_reference(&a, &uid("u1"));
        let (objects, running, _) = store.counts();
        assert_eq!((objects, running), (0, 0));
    }

    #[test]
    fn one_referencing_pod_is_kept_inline_and_counts_like_the_map_of_several() {
        let uid = |u: &str| PodUid::new(u).unwrap();
        let mut refs = Refs::None;
        refs.add(&uid("u1"));
        refs.add(&uid("u1"));
        assert!(matches!(refs, Refs::One(_, 2)), "no map for one pod");
        assert!(!refs.remove(&uid("u2")), "u2 holds no reference");
        assert!(refs.remove(&uid("u1")) && !refs.is_empty());

        refs.add(&uid("u2"));
        assert!(
            matches!(&refs, Refs::Many(m) if m.len() == 2),
            "a second pod makes a map"
        );
        assert!(refs.remove(&uid("u1")) && !refs.remove(&uid("u1")));
        assert!(!refs.is_empty(), "u2 still holds one");
        assert!(refs.remove(&uid("u2")) && refs.is_empty());
        assert!(!refs.remove(&uid("u2")), "never negative");
    }

    fn test_tasks() -> Tasks {
        Tasks::for_tests()
    }

    fn options() -> WatchOptions {
        WatchOptions {
            sync_timeout: Duration::from_secs(1),
            max_idle: Duration::from_secs(60),
            idle_check_interval: Duration::from_secs(60),
            backoff: BackoffConfig {
                initial: Duration::from_millis(800),
                max: Duration::from_secs(30),
                relationship_grace: Duration::from_secs(30),
            },
            recovery: crate::recovery::RecoveryConfig {
                probe_interval: Duration::from_millis(250),
                spread: Duration::from_millis(250),
                concurrency: 64,
                requests_in_flight: 64,
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn om17_a_pod_registered_twice_holds_one_reference() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = watch(&fake);
        let p = pod("ns", "p", "u", &["s1"]);
        m.register_pod(&nodelet_core::AdmittedPod::new(p.clone()).unwrap());
        m.register_pod(&nodelet_core::AdmittedPod::new(p.clone()).unwrap());
        m.unregister_pod(nodelet_core::AdmittedPod::new(p.clone()).unwrap().uid());
        assert!(!m.is_watching("ns", "s1"));
        m.unregister_pod(nodelet_core::AdmittedPod::new(p.clone()).unwrap().uid());
        assert_eq!(m.stats().referenced_objects, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn om17_a_pod_recreated_with_a_new_uid_is_a_separate_registration() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "old", &["s1"])).unwrap());
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "new", &["s1"])).unwrap());
        m.unregister_pod(
            nodelet_core::AdmittedPod::new(pod("ns", "p", "old", &[]))
                .unwrap()
                .uid(),
        );
        assert!(m.is_watching("ns", "s1"));
        m.unregister_pod(
            nodelet_core::AdmittedPod::new(pod("ns", "p", "new", &[]))
                .unwrap()
                .uid(),
        );
        assert!(!m.is_watching("ns", "s1"));
    }

    #[tokio::test(start_paused = true)]
    async fn om18_a_missing_object_reads_as_the_singular_not_found() {
        let fake = FakeSource::<Secret>::new();
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        let err = m.get("ns", "s1").await.err();
        assert!(err.as_ref().is_some_and(Error::is_not_found));
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some(r#"secret "s1" not found"#)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn om18_get_fails_with_the_kubelet_text_when_the_first_list_is_slow() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        fake.hold_lists(true);
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        let err = m.get("ns", "s1").await.err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("failed to sync secret cache: timed out waiting for the condition")
        );
        fake.hold_lists(false);
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v"));
    }

    #[tokio::test(start_paused = true)]
    async fn om34_no_more_first_reads_are_outstanding_than_the_window_holds() {
        let fake = FakeSource::new();
        fake.set_watch_list(true);
        for j in 0..5 {
            fake.apply("ns", secret(&format!("s{j}"), "v", false));
        }
        fake.hold_lists(true);
        let window = crate::ReadLimiter::new(crate::ReadLimits {
            qps: 1000.0,
            burst: 100,
        })
        .with_window(crate::Window::new(crate::WindowConfig {
            min: 2.0,
            max: 2,
            target: Duration::from_millis(5),
        }));
        let m = manager_with(
            ManagerConfig::new(Strategy::Watch).with_first_reads(window),
            &fake,
            None,
        );
        for j in 0..5 {
            let (name, uid) = (format!("p{j}"), format!("u{j}"));
            let secret = format!("s{j}");
            m.register_pod(
                &nodelet_core::AdmittedPod::new(pod("ns", &name, &uid, &[secret.as_str()]))
                    .unwrap(),
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            fake.total(Verb::WatchList),
            2,
            "two watch-lists sent, three wait for a place"
        );
        fake.hold_lists(false);
        for j in 0..5 {
            assert_eq!(read(&m, &format!("s{j}")).await.ok().as_deref(), Some("v"));
        }
        assert_eq!(fake.total(Verb::WatchList), 5, "each sent once");
    }

    #[tokio::test(start_paused = true)]
    async fn om36_time_a_first_read_waits_in_the_node_s_own_queue_does_not_count_against_the_sync_timeout()
     {
        let fake = FakeSource::new();
        fake.set_watch_list(true);
        fake.apply("ns", secret("s0", "v", false));
        fake.apply("ns", secret("s1", "w", false));
        fake.hold_lists(true);
        let window = crate::ReadLimiter::new(crate::ReadLimits {
            qps: 1000.0,
            burst: 100,
        })
        .with_window(crate::Window::new(crate::WindowConfig {
            min: 1.0,
            max: 1,
            target: Duration::from_millis(5),
        }));
        let m = Arc::new(manager_with(
            ManagerConfig::new(Strategy::Watch).with_first_reads(window),
            &fake,
            None,
        ));
        for (name, uid, secret) in [("p0", "u0", "s0"), ("p1", "u1", "s1")] {
            m.register_pod(
                &nodelet_core::AdmittedPod::new(pod("ns", name, uid, &[secret])).unwrap(),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        let getter = {
            let m = m.clone();
            tokio::spawn(async move { read(&m, "s1").await.map_err(|e| e.to_string()) })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !getter.is_finished(),
            "s1's read waits for the one place s0's holds: no time-out yet"
        );
        assert_eq!(fake.total(Verb::WatchList), 1, "s1's read is not sent");
        fake.hold_lists(false);
        let got = getter.await.ok();
        assert_eq!(got, Some(Ok("w".to_owned())));
    }

    #[tokio::test(start_paused = true)]
    async fn om36_time_a_run_waits_for_its_start_slot_does_not_count_against_the_sync_timeout() {
        let fake = FakeSource::new();
        fake.set_watch_list(true);
        fake.apply("ns", secret("s0", "v", false));
        fake.apply("ns", secret("s1", "w", false));
        fake.hold_lists(true);
        // One run at a time between its start and its open watch: s1's run waits for the slot
        // s0's held list keeps.
        let mut config = ManagerConfig::new(Strategy::Watch);
        config.requests_in_flight = 1;
        let m = Arc::new(manager_with(config, &fake, None));
        for (name, uid, secret) in [("p0", "u0", "s0"), ("p1", "u1", "s1")] {
            m.register_pod(
                &nodelet_core::AdmittedPod::new(pod("ns", name, uid, &[secret])).unwrap(),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            fake.total(Verb::WatchList),
            1,
            "s1's run waits for a start slot"
        );
        let getter = {
            let m = m.clone();
            tokio::spawn(async move { read(&m, "s1").await.map_err(|e| e.to_string()) })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !getter.is_finished(),
            "s1's read was never sent: no time-out yet"
        );
        fake.hold_lists(false);
        let got = getter.await.ok();
        assert_eq!(got, Some(Ok("w".to_owned())));
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_list_is_announced_only_after_a_get_gave_up_waiting_for_it() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        fake.apply("ns", secret("s2", "v", false));
        fake.hold_lists(true);
        let m = watch(&fake);
        let mut changes = m.subscribe();
        m.register_pod(
            &nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1", "s2"])).unwrap(),
        );
        assert!(m.get("ns", "s1").await.is_err(), "the first list is held");
        fake.hold_lists(false);
        let announced = tokio::time::timeout(Duration::from_secs(5), changes.recv())
            .await
            .expect("the late first list of s1 is announced")
            .expect("the channel is open");
        assert_eq!(announced.name, "s1");
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v"));
        assert_eq!(read(&m, "s2").await.ok().as_deref(), Some("v"));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            changes.try_recv().is_err(),
            "s2's first list, which nobody waited out, is not announced"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn om19_an_idle_reflector_stops_and_the_next_get_restarts_it() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let config = ManagerConfig {
            resync_interval: Duration::from_secs(1), // max idle clamps to 1 minute
            idle_check_interval: Duration::from_secs(10), // the upstream test checks at +90 s
            ..ManagerConfig::default()
        };
        let m = manager_with(config, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(read(&m, "s1").await.is_ok());

        tokio::time::sleep(Duration::from_secs(90)).await;
        assert!(
            !m.is_watching("ns", "s1"),
            "idle for 90 s with a 1 minute maximum"
        );
        fake.apply("ns", secret("s1", "v2", false));
        assert_eq!(
            read(&m, "s1").await.ok().as_deref(),
            Some("v2"),
            "fresh list after restart"
        );
        assert!(m.is_watching("ns", "s1"));
        assert_eq!(fake.count(Verb::List, "ns", "s1"), 2);

        for _ in 0..9 {
            tokio::time::sleep(Duration::from_secs(20)).await;
            assert!(read(&m, "s1").await.is_ok());
            assert!(
                m.is_watching("ns", "s1"),
                "a get every 20 s keeps it running"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn om19_a_reflector_is_not_stopped_during_a_slow_initial_list() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        fake.hold_lists(true);
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_err());
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(m.is_watching("ns", "s1"));
        fake.hold_lists(false);
        assert!(read(&m, "s1").await.is_ok());
        assert_eq!(fake.count(Verb::List, "ns", "s1"), 1);
    }

    /// OM-20: (name, initial object, update) → reflector running after the last get.
    #[tokio::test(start_paused = true)]
    async fn om20_the_reflector_runs_after_a_get_exactly_when_the_object_is_absent_or_mutable() {
        type Case = (&'static str, Option<bool>, Option<bool>, bool);
        let cases: [Case; 5] = [
            (
                "secret doesn't exist, created as mutable",
                None,
                Some(false),
                true,
            ),
            (
                "secret doesn't exist, created as immutable",
                None,
                Some(true),
                false,
            ),
            (
                "mutable secret modified to mutable",
                Some(false),
                Some(false),
                true,
            ),
            (
                "mutable secret modified to immutable",
                Some(false),
                Some(true),
                false,
            ),
            ("immutable secret", Some(true), None, false),
        ];
        for (case, initial, update, running) in cases {
            let fake = FakeSource::new();
            if let Some(immutable) = initial {
                fake.apply("ns", secret("s", "v1", immutable));
            }
            let m = watch(&fake);
            m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s"])).unwrap());
            let _ = m.get("ns", "s").await;
            if let Some(immutable) = update {
                assert!(
                    m.is_watching("ns", "s"),
                    "{case}: running before the update"
                );
                fake.apply("ns", secret("s", "v2", immutable));
                settle().await;
                assert!(m.get("ns", "s").await.is_ok(), "{case}");
            }
            assert_eq!(m.is_watching("ns", "s"), running, "{case}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn om20_an_immutable_object_is_served_from_memory_forever() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s", "v1", true));
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s"])).unwrap());
        assert!(read(&m, "s").await.is_ok());
        fake.delete("ns", "s");
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(read(&m, "s").await.ok().as_deref(), Some("v1"));
        assert_eq!(fake.total(Verb::List), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn om21_shutdown_stops_every_task_and_starts_none_afterwards() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        fake.apply("ns", secret("imm", "v", true));
        let m = watch(&fake);
        m.register_pod(
            &nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1", "s2", "imm"])).unwrap(),
        );
        assert!(read(&m, "s1").await.is_ok() && read(&m, "imm").await.is_ok());
        assert_eq!(m.stats().running_watches, 2);

        m.shutdown().await;
        let stats = m.stats();
        assert_eq!((stats.running_watches, stats.background_tasks), (0, 0));
        assert_eq!(fake.open_watches(), 0);
        assert!(matches!(
            m.get("ns", "s1").await,
            Err(Error::ShutDown { .. })
        ));
        assert_eq!(
            read(&m, "imm").await.ok().as_deref(),
            Some("v"),
            "immutable: from memory"
        );
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p2", "u2", &["s3"])).unwrap());
        assert!(!m.is_watching("ns", "s3"));
        assert_eq!(m.stats().background_tasks, 0);
        m.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn two_hundred_registrations_start_at_most_requests_in_flight_runs_at_once() {
        let fake = FakeSource::new();
        fake.set_watch_list(true);
        let names: Vec<String> = (0..200).map(|i| format!("s{i}")).collect();
        for name in &names {
            fake.apply("ns", secret(name, "v", false));
        }
        fake.hold_lists(true);
        let config = ManagerConfig {
            requests_in_flight: 16,
            ..ManagerConfig::new(Strategy::Watch)
        };
        let m = manager_with(config, &fake, None);
        // One pod per object: each is its pod's scout (OM-31), so none waits for another's
        // answer and only the cap holds them back.
        for (i, name) in names.iter().enumerate() {
            let p = pod("ns", &format!("p{i}"), &format!("u{i}"), &[name.as_str()]);
            m.register_pod(&nodelet_core::AdmittedPod::new(p).unwrap());
        }
        settle().await;
        // Held watch-lists have been sent but not answered: only as many as the cap, and only
        // their runs have a task (plus the driver and the idle sweeper); the rest wait queued.
        assert_eq!(fake.total(Verb::WatchList), 16);
        assert_eq!(m.stats().background_tasks, 16 + 2);
        assert_eq!(m.stats().running_watches, 200);
        fake.hold_lists(false);
        for name in &names {
            assert_eq!(read(&m, name).await.ok().as_deref(), Some("v"), "{name}");
        }
        assert_eq!(
            fake.total(Verb::WatchList),
            200,
            "one watch-list per object"
        );
        m.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_last_manager_clone_ends_every_reflector() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v", false));
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(read(&m, "s1").await.is_ok());
        assert_eq!(fake.open_watches(), 1);
        drop(m);
        settle().await;
        assert_eq!(fake.open_watches(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn subscribers_hear_of_updates_deletions_and_creations_but_not_first_loads() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = watch(&fake);
        let mut changes = m.subscribe();
        m.register_pod(
            &nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1", "s2"])).unwrap(),
        );
        assert!(read(&m, "s1").await.is_ok() && read(&m, "s2").await.is_err());
        settle().await;
        assert!(changes.try_recv().is_err(), "first load");

        let key = |n: &str| Some(ObjectRef::secret("ns", n));
        fake.apply("ns", secret("s1", "v2", false));
        settle().await;
        assert_eq!(changes.try_recv().ok(), key("s1"));
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v2"));
        fake.apply("ns", secret("s2", "new", false));
        settle().await;
        assert_eq!(
            changes.try_recv().ok(),
            key("s2"),
            "creation of a missing object"
        );
        fake.delete("ns", "s1");
        settle().await;
        assert_eq!(changes.try_recv().ok(), key("s1"), "deletion");
        assert!(
            m.get("ns", "s1")
                .await
                .err()
                .is_some_and(|e| e.is_not_found())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_watch_is_resumed_without_missing_an_update() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = watch(&fake);
        let mut changes = m.subscribe();
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(read(&m, "s1").await.is_ok());
        settle().await;
        fake.close_watches();
        fake.apply("ns", secret("s1", "v2", false));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(changes.try_recv().ok(), Some(ObjectRef::secret("ns", "s1")));
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v2"));
        assert_eq!(
            fake.count(Verb::List, "ns", "s1"),
            1,
            "resumed from the resourceVersion"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_20_s_outage_every_watch_resumes_within_a_second_of_the_server_answering() {
        let fake = FakeSource::new();
        let names: Vec<String> = (0..40).map(|i| format!("s{i}")).collect();
        for n in &names {
            fake.apply("ns", secret(n, "v1", false));
        }
        let m = watch(&fake);
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &refs)).unwrap());
        for n in &names {
            assert!(read(&m, n).await.is_ok());
        }
        settle().await;
        assert_eq!(fake.open_watches(), 40);
        let unreachable = SourceError::Transport {
            source: Arc::new(std::io::Error::other("connection refused")),
        };
        fake.set_outage(Some(unreachable));
        // Long enough for every reflector's own back-off to grow past 10 s.
        tokio::time::sleep(Duration::from_secs(20)).await;
        for n in &names {
            fake.apply("ns", secret(n, "v2", false));
        }
        fake.set_outage(None);
        let back = Instant::now();
        while fake.open_watches() < 40 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let resumed = back.elapsed();
        assert!(resumed <= Duration::from_secs(1), "{resumed:?}");
        settle().await;
        for n in &names {
            assert_eq!(read(&m, n).await.ok().as_deref(), Some("v2"), "{n}");
        }
        assert_eq!(fake.total(Verb::List), 40, "resumed without relisting");
    }

    #[tokio::test(start_paused = true)]
    async fn a_410_gone_relists_and_misses_no_update() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = watch(&fake);
        let mut changes = m.subscribe();
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(read(&m, "s1").await.is_ok());
        settle().await;
        fake.close_watches();
        fake.apply("ns", secret("s1", "v2", false));
        fake.compact();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v2"));
        assert_eq!(changes.try_recv().ok(), Some(ObjectRef::secret("ns", "s1")));
        assert_eq!(fake.count(Verb::List, "ns", "s1"), 2, "relisted after 410");
    }

    #[tokio::test(start_paused = true)]
    async fn cached_objects_are_served_during_an_outage_and_updates_arrive_after_it() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = watch(&fake);
        let mut changes = m.subscribe();
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(read(&m, "s1").await.is_ok());
        settle().await;
        fake.fail_next(5, SourceError::status(500, "InternalError", "down"));
        fake.close_watches();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            read(&m, "s1").await.ok().as_deref(),
            Some("v1"),
            "served during the outage"
        );
        fake.apply("ns", secret("s1", "v2", false));
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v2"));
        assert_eq!(changes.try_recv().ok(), Some(ObjectRef::secret("ns", "s1")));
        assert!(
            fake.count(Verb::Watch, "ns", "s1") > 2,
            "retried with back-off"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_keeps_answering_410_is_relisted_with_back_off_not_in_a_hot_loop() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(read(&m, "s1").await.is_ok());
        // Every watch from now on is refused with 410; lists keep working.
        fake.fail_next_of(
            Verb::Watch,
            1000,
            SourceError::status(410, "Expired", "too old"),
        );
        fake.close_watches();
        tokio::time::sleep(Duration::from_secs(60)).await;
        let requests = fake.total(Verb::List) + fake.total(Verb::Watch);
        assert!(requests < 40, "{requests} requests in a minute");
        assert_eq!(
            read(&m, "s1").await.ok().as_deref(),
            Some("v1"),
            "the cache still serves"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_first_list_is_retried_with_back_off() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        fake.fail_next(3, SourceError::status(500, "InternalError", "down"));
        let m = watch(&fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(read(&m, "s1").await.ok().as_deref(), Some("v1"));
        assert_eq!(fake.count(Verb::List, "ns", "s1"), 4);
    }
}
