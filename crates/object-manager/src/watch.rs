//! The Watch strategy's store: one per-object reflector while the object is referenced
//! (spec OM-15 … OM-21).
//!
//! `get` (OM-18), numbered as the spec:
//! 1. unknown key → `object "ns"/"name" not registered`;
//! 2. record the access time (even if the call later fails);
//! 3. a stopped, mutable item restarts its reflector (not after shutdown);
//! 4. await the first list for up to `sync_timeout` (readiness is awaited on a `watch`
//!    channel, not polled) → `failed to sync <kind> cache: timed out waiting for the condition`;
//! 5. absent → `<kind> "name" not found` (singular);
//! 6. present and immutable → stop the reflector for good and serve the object from memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::kind::ManagedObject;
use crate::manager::Tasks;
use crate::reflector::{BackoffConfig, Cell, Reflector};
use crate::source::ObjectSource;
use crate::{Error, ObjectKey};

/// Options of the watch store, from `ManagerConfig`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WatchOptions {
    pub(crate) sync_timeout: Duration,
    pub(crate) max_idle: Duration,
    pub(crate) idle_check_interval: Duration,
    pub(crate) backoff: BackoffConfig,
}

pub(crate) struct WatchStore<K> {
    inner: Arc<Inner<K>>,
}

struct Inner<K> {
    source: Arc<dyn ObjectSource<K>>,
    items: Mutex<HashMap<ObjectKey, Item<K>>>,
    options: WatchOptions,
    tasks: Tasks,
    notify: broadcast::Sender<ObjectKey>,
}

/// One referenced object (OM-15).
struct Item<K> {
    /// Referencing pod UID → count; entries are removed at 0, never negative.
    refs: HashMap<String, usize>,
    cell: Arc<Cell<K>>,
    /// The running reflector's token; `None` while stopped.
    reflector: Option<CancellationToken>,
    last_access: Instant,
    immutable: bool,
    epoch: u64,
}

impl<K: ManagedObject> WatchStore<K> {
    pub(crate) fn new(
        source: Arc<dyn ObjectSource<K>>,
        options: WatchOptions,
        tasks: Tasks,
        notify: broadcast::Sender<ObjectKey>,
    ) -> Self {
        let inner = Arc::new(Inner {
            source,
            items: Mutex::default(),
            options,
            tasks,
            notify,
        });
        let weak = Arc::downgrade(&inner);
        let cancel = inner.tasks.root.clone();
        inner
            .tasks
            .spawn(idle_loop(weak, options.idle_check_interval, cancel));
        WatchStore { inner }
    }

    /// OM-16: the first reference creates the item and starts its reflector.
    pub(crate) fn add_reference(&self, key: &ObjectKey, uid: &str) {
        let inner = &self.inner;
        let mut items = inner.lock();
        let item = items.entry(key.clone()).or_insert_with(|| Item {
            refs: HashMap::new(),
            cell: Cell::new(),
            reflector: None,
            last_access: Instant::now(),
            immutable: false,
            epoch: 0,
        });
        if item.refs.is_empty() && item.reflector.is_none() && !inner.tasks.root.is_cancelled() {
            inner.start(key, item);
        }
        *item.refs.entry(uid.to_owned()).or_insert(0) += 1;
    }

    /// OM-17: the last reference stops the reflector and forgets the item. A UID that holds no
    /// reference is ignored (upstream records a negative count and keeps the item alive).
    pub(crate) fn delete_reference(&self, key: &ObjectKey, uid: &str) {
        let mut items = self.inner.lock();
        let Some(item) = items.get_mut(key) else {
            return;
        };
        let Some(count) = item.refs.get_mut(uid) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            item.refs.remove(uid);
        }
        if item.refs.is_empty()
            && let Some(mut item) = items.remove(key)
        {
            stop(&mut item, true);
        }
    }

    /// OM-18 (steps in the module docs).
    pub(crate) async fn get(&self, key: &ObjectKey) -> Result<Arc<K>, Error> {
        let inner = &self.inner;
        let (mut state, cell) = {
            let mut items = inner.lock();
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
                inner.start(key, item);
            }
            (item.cell.state.subscribe(), Arc::downgrade(&item.cell))
        };
        // (4)
        let object =
            match tokio::time::timeout(inner.options.sync_timeout, state.wait_for(|s| s.synced))
                .await
            {
                Err(_elapsed) => {
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
                Ok(Ok(s)) => s.object.clone(),
            };
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
            let mut items = inner.lock();
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
    pub(crate) fn is_watching(&self, key: &ObjectKey) -> bool {
        self.inner
            .lock()
            .get(key)
            .is_some_and(|i| i.reflector.is_some())
    }

    /// (referenced objects, running reflectors).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let items = self.inner.lock();
        (
            items.len(),
            items.values().filter(|i| i.reflector.is_some()).count(),
        )
    }

    /// OM-21: stop every item; nothing is (re)started afterwards (the root token is cancelled
    /// by the caller first).
    pub(crate) fn stop_all(&self) {
        for item in self.inner.lock().values_mut() {
            let immutable = item.immutable;
            stop(item, !immutable);
        }
    }
}

impl<K: ManagedObject> Inner<K> {
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, Item<K>>> {
        // Nothing panics while holding this lock; recover anyway rather than poison readers.
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start a reflector run for `item` (never two at once: the item holds at most one token
    /// and every start bumps the epoch).
    fn start(&self, key: &ObjectKey, item: &mut Item<K>) {
        item.epoch += 1;
        let epoch = item.epoch;
        item.cell.state.send_modify(|s| {
            s.epoch = epoch;
            s.synced = false;
        });
        let cancel = self.tasks.root.child_token();
        let reflector = Reflector {
            source: self.source.clone(),
            key: key.clone(),
            kind: K::SINGULAR,
            cell: Arc::downgrade(&item.cell),
            epoch,
            backoff: self.options.backoff,
            notify: Some(self.notify.clone()),
        };
        self.tasks.spawn(reflector.run(cancel.clone()));
        item.reflector = Some(cancel);
    }

    /// OM-19: stop reflectors that are synced and unread for longer than `max_idle`.
    fn stop_idle(&self) {
        let now = Instant::now();
        for (key, item) in self.lock().iter_mut() {
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
fn stop<K>(item: &mut Item<K>, unsync: bool) {
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
