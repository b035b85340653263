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
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::kind::ManagedObject;
use crate::manager::Tasks;
use crate::reflector::{BackoffConfig, Cell, Reflector};
use crate::source::{ObjectSource, ReadFrom};
use crate::{Error, ObjectKey};

/// The node annotation holding the TTL in seconds (OM-12).
pub const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// Key → (reference count, item).
type Items<K> = HashMap<ObjectKey, (usize, Arc<TtlItem<K>>)>;

pub(crate) struct TtlStore<K> {
    source: Arc<dyn ObjectSource<K>>,
    items: Mutex<Items<K>>,
    ttl: Option<NodeTtl>,
    default_ttl: Duration,
    notify: broadcast::Sender<ObjectKey>,
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
        notify: broadcast::Sender<ObjectKey>,
    ) -> Self {
        TtlStore {
            source,
            items: Mutex::default(),
            ttl,
            default_ttl,
            notify,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Items<K>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// OM-10: count the reference and drop cached data so the next `get` fetches.
    pub(crate) fn add_reference(&self, key: &ObjectKey) {
        let mut items = self.lock();
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
        lock_entry(item).invalidate();
    }

    /// OM-10: the last reference forgets the item; an unknown key is a no-op.
    pub(crate) fn delete_reference(&self, key: &ObjectKey) {
        let mut items = self.lock();
        if let Some((count, _)) = items.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                items.remove(key);
            }
        }
    }

    pub(crate) fn referenced(&self) -> usize {
        self.lock().len()
    }

    /// The TTL in force now (OM-12): the node annotation if present and valid, else the default.
    fn ttl(&self) -> Duration {
        self.ttl
            .as_ref()
            .and_then(NodeTtl::current)
            .unwrap_or(self.default_ttl)
    }

    /// OM-11 (steps in the module docs).
    pub(crate) async fn get(&self, key: &ObjectKey) -> Result<Arc<K>, Error> {
        // (1)
        let Some(item) = self.lock().get(key).map(|(_, item)| item.clone()) else {
            return Err(Error::NotRegistered {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            });
        };
        let _fetching = item.fetch.lock().await; // (2)
        // (3)
        let (has_object, fresh) = {
            let entry = lock_entry(&item);
            let fresh = entry.error.is_none()
                && entry
                    .last_update
                    .is_some_and(|t| Instant::now() < t + self.ttl());
            (entry.object.is_some() && entry.error.is_none(), fresh)
        };
        if !fresh {
            // (4)
            let read = if has_object {
                ReadFrom::WatchCache
            } else {
                ReadFrom::Quorum
            };
            let fetched = self.source.get(&key.namespace, &key.name, read).await;
            // (5)
            let mut entry = lock_entry(&item);
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
        }
        // (6)
        let entry = lock_entry(&item);
        match (&entry.error, &entry.object) {
            (Some(err), _) => Err(err.clone()),
            (None, Some(object)) => Ok(object.clone()),
            (None, None) => Err(Error::NotFound {
                resource: K::PLURAL,
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            }),
        }
    }

    /// Record the content version just cached; announce it if it differs from the last one.
    fn saw(&self, key: &ObjectKey, entry: &mut Entry<K>, rv: Option<String>) {
        let now = Some(rv);
        let changed = entry.seen.is_some() && entry.seen != now;
        entry.seen = now;
        if changed {
            tracing::debug!(object.ref = %key, "object changed");
            let _ = self.notify.send(key.clone());
        }
    }
}

fn lock_entry<K>(item: &TtlItem<K>) -> MutexGuard<'_, Entry<K>> {
    item.entry.lock().unwrap_or_else(|p| p.into_inner())
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
}

impl NodeTtl {
    /// Start watching `node_name` (`fieldSelector=metadata.name=<node>`).
    pub(crate) fn start(
        source: Arc<dyn ObjectSource<Node>>,
        node_name: &str,
        backoff: BackoffConfig,
        tasks: &Tasks,
    ) -> Self {
        let cell = Cell::new();
        let reflector = Reflector {
            source,
            key: ObjectKey::new("", node_name),
            kind: "node",
            cell: Arc::downgrade(&cell),
            epoch: 0,
            backoff,
            notify: None,
        };
        tasks.spawn(reflector.run(tasks.root.child_token()));
        NodeTtl { cell }
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
    use super::*;

    #[test]
    fn ttl_annotation_is_a_strict_base_10_integer_of_seconds() {
        assert_eq!(parse_ttl("60"), Some(Duration::from_secs(60)));
        assert_eq!(parse_ttl("0"), Some(Duration::ZERO));
        assert_eq!(parse_ttl("-5"), Some(Duration::ZERO));
        assert_eq!(parse_ttl("bad"), None);
        assert_eq!(parse_ttl("60s"), None);
        assert_eq!(parse_ttl(""), None);
    }
}
