//! The object store: current objects, the global resourceVersion counter, a bounded event history
//! and the broadcast that feeds watches.
//!
//! # Invariants
//! 1. `rv` only grows; every write gets `rv + 1`, stamped into `metadata.resourceVersion`.
//! 2. `history` holds every event with `rv > history_start`, oldest first; a watch or an exact
//!    read from `X < history_start` is answered `410 Expired`.
//! 3. Writes and broadcasts happen under one lock, so a watch that subscribes under the lock and
//!    replays history sees every event exactly once.
//! 4. `node_graph` is handed every pod write, in write order, under the lock: the Node
//!    authorizer's view of the stored pods, which trails them by the configured lag
//!    (`lagged_graph.rs`); [`Inner::restart_node_graph`] empties it until it is rebuilt.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::access::lagged_graph::LaggedPodGraph;
use crate::resources::{PODS, ResourceId};

/// Identifies one stored object: resource, namespace (`""` for cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Key {
    pub(crate) resource: ResourceId,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl Key {
    pub(crate) fn new(resource: ResourceId, namespace: &str, name: &str) -> Self {
        Key {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// Watch event types (`ADDED`, `MODIFIED`, `DELETED`): what happened to a stored object, as a
/// watch stream names it. Not a core/v1 `Event.type` (`Normal` / `Warning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchEventType {
    Added,
    Modified,
    Deleted,
}

impl WatchEventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WatchEventType::Added => "ADDED",
            WatchEventType::Modified => "MODIFIED",
            WatchEventType::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) rv: u64,
    pub(crate) kind: WatchEventType,
    pub(crate) key: Key,
    /// The object after the change (for `Deleted`: its last state, stamped with the delete's rv).
    pub(crate) object: Arc<Value>,
    /// The object before the change (`None` for `Added`); lets a list rebuild an older snapshot.
    pub(crate) prev: Option<Arc<Value>>,
    /// `object` as JSON, encoded once and shared by every watch that forwards this event.
    encoded: OnceLock<Vec<u8>>,
}

impl Event {
    /// `object` serialized as JSON (computed on first use).
    pub(crate) fn object_json(&self) -> &[u8] {
        self.encoded
            .get_or_init(|| serde_json::to_vec(&*self.object).unwrap_or_default())
    }
}

/// What watches receive.
#[derive(Debug, Clone)]
pub(crate) enum Notice {
    Event(Arc<Event>),
    /// Send a bookmark at this resourceVersion to watches that allow bookmarks.
    Bookmark(u64),
    /// End every open watch (cleanly, as when a real server closes the stream).
    CloseWatches,
}

pub(crate) struct Inner {
    pub(crate) rv: u64,
    pub(crate) objects: BTreeMap<Key, Arc<Value>>,
    pub(crate) history: VecDeque<Arc<Event>>,
    pub(crate) history_start: u64,
    /// What the stored pods reference, as the Node authorizer sees it: fed every pod write,
    /// visible after the lag (`lagged_graph.rs`).
    pub(crate) node_graph: LaggedPodGraph,
    history_limit: usize,
    tx: broadcast::Sender<Notice>,
}

/// The shared store. Cheap to lock; never held across `.await`.
pub(crate) struct Store {
    pub(crate) inner: Mutex<Inner>,
}

impl Store {
    pub(crate) fn new(history_limit: usize, broadcast_capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(broadcast_capacity.max(16));
        Store {
            inner: Mutex::new(Inner {
                rv: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_start: 0,
                node_graph: LaggedPodGraph::default(),
                history_limit: history_limit.max(1),
                tx,
            }),
        }
    }
}

pub(crate) fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

impl Inner {
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.tx.subscribe()
    }

    pub(crate) fn get(&self, key: &Key) -> Option<&Arc<Value>> {
        self.objects.get(key)
    }

    /// Stores `obj` under `key` with a new resourceVersion and records the event.
    pub(crate) fn put(&mut self, key: Key, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        set_rv(&mut obj, self.rv);
        let obj = Arc::new(obj);
        let prev = self.objects.insert(key.clone(), obj.clone());
        if key.resource == PODS {
            self.node_graph.pod_written(prev.clone(), Some(obj.clone()));
        }
        let kind = if prev.is_some() {
            WatchEventType::Modified
        } else {
            WatchEventType::Added
        };
        self.record(Event {
            rv: self.rv,
            kind,
            key,
            object: obj.clone(),
            prev,
            encoded: OnceLock::new(),
        });
        obj
    }

    /// Removes `key`; the DELETED event carries the last state stamped with a new rv.
    pub(crate) fn remove(&mut self, key: &Key) -> Option<Arc<Value>> {
        let prev = self.objects.remove(key)?;
        if key.resource == PODS {
            self.node_graph.pod_written(Some(prev.clone()), None);
        }
        self.rv += 1;
        let mut last = (*prev).clone();
        set_rv(&mut last, self.rv);
        let last = Arc::new(last);
        self.record(Event {
            rv: self.rv,
            kind: WatchEventType::Deleted,
            key: key.clone(),
            object: last.clone(),
            prev: Some(prev),
            encoded: OnceLock::new(),
        });
        Some(last)
    }

    fn record(&mut self, event: Event) {
        let event = Arc::new(event);
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.history_start = old.rv;
            }
        }
        // No receivers is fine.
        let _ = self.tx.send(Notice::Event(event));
    }

    /// Drops all history: the next watch or exact read from an older rv gets 410. Advances the
    /// rv by one so that every rv handed out so far is compacted.
    pub(crate) fn compact(&mut self) {
        self.rv += 1;
        self.history.clear();
        self.history_start = self.rv;
    }

    /// A simulated restart of the Node authorizer: its graph is empty from now until
    /// `rebuild` has passed, then rebuilt from the pods stored now (and the writes since).
    pub(crate) fn restart_node_graph(&mut self, rebuild: Duration) {
        let start = Key::new(PODS, "", "");
        let pods = self
            .objects
            .range(start..)
            .take_while(|(k, _)| k.resource == PODS)
            .map(|(_, v)| v.clone())
            .collect();
        self.node_graph.restarted(pods, rebuild);
    }

    pub(crate) fn notify(&self, notice: Notice) {
        let _ = self.tx.send(notice);
    }

    /// Objects of `resource` (optionally in one namespace) as they were at `rv`, sorted by
    /// namespace and name. `rv` must be `>= history_start` and `<= self.rv`.
    pub(crate) fn snapshot(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        rv: u64,
    ) -> Vec<(Key, Arc<Value>)> {
        self.snapshot_of(resource, namespace, None, rv)
    }

    /// As [`snapshot`](Self::snapshot), narrowed to the object called `name` when given (a
    /// watch or list by `metadata.name`): only that object's key range is read, not every
    /// object of the resource.
    pub(crate) fn snapshot_of(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        name: Option<&str>,
        rv: u64,
    ) -> Vec<(Key, Arc<Value>)> {
        let in_scope = |k: &Key| {
            k.resource == resource
                && namespace.is_none_or(|ns| k.namespace == ns)
                && name.is_none_or(|n| k.name == n)
        };
        // Keys sort by resource, then namespace, then name: the objects in scope are one range.
        let start = Key::new(resource, namespace.unwrap_or(""), "");
        let mut map: BTreeMap<Key, Arc<Value>> = match (namespace, name) {
            (Some(ns), Some(n)) => {
                let key = Key::new(resource, ns, n);
                self.objects
                    .get(&key)
                    .map(|v| (key, v.clone()))
                    .into_iter()
                    .collect()
            }
            _ => self
                .objects
                .range(start..)
                .take_while(|(k, _)| {
                    k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns)
                })
                .filter(|(k, _)| in_scope(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        if rv < self.rv {
            for ev in self.history.iter().rev() {
                if ev.rv <= rv {
                    break;
                }
                if !in_scope(&ev.key) {
                    continue;
                }
                match &ev.prev {
                    Some(p) => {
                        map.insert(ev.key.clone(), p.clone());
                    }
                    None => {
                        map.remove(&ev.key);
                    }
                }
            }
        }
        map.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CONFIGMAPS, PODS};
    use serde_json::json;

    fn cm(name: &str, v: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "d"}, "data": {"k": v}})
    }

    #[test]
    fn snapshot_at_an_older_rv_undoes_later_changes() {
        let store = Store::new(100, 16);
        let mut s = store.inner.lock();
        let a = Key::new(CONFIGMAPS, "d", "a");
        let b = Key::new(CONFIGMAPS, "d", "b");
        s.put(a.clone(), cm("a", "1"));
        s.put(b.clone(), cm("b", "1"));
        let at2 = s.rv;
        s.put(a.clone(), cm("a", "2"));
        s.remove(&b);
        s.put(Key::new(CONFIGMAPS, "d", "c"), cm("c", "1"));
        let old = s.snapshot(CONFIGMAPS, Some("d"), at2);
        let names: Vec<_> = old
            .iter()
            .map(|(k, v)| (k.name.clone(), v["data"]["k"].clone()))
            .collect();
        assert_eq!(
            names,
            vec![("a".into(), json!("1")), ("b".into(), json!("1"))]
        );
        assert_eq!(s.snapshot(CONFIGMAPS, None, s.rv).len(), 2);
    }

    #[test]
    fn a_snapshot_by_name_reads_only_that_object_at_any_rv() {
        let store = Store::new(100, 16);
        let mut s = store.inner.lock();
        let a = Key::new(CONFIGMAPS, "d", "a");
        s.put(a.clone(), cm("a", "1"));
        s.put(Key::new(CONFIGMAPS, "d", "ab"), cm("ab", "1"));
        s.put(Key::new(CONFIGMAPS, "e", "a"), cm("a", "1"));
        s.put(Key::new(PODS, "d", "a"), cm("a", "1"));
        let at4 = s.rv;
        s.put(a.clone(), cm("a", "2"));
        let value = |v: &[(Key, Arc<Value>)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, o)| {
                    (
                        k.namespace.clone(),
                        o["data"]["k"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        };
        let now = s.snapshot_of(CONFIGMAPS, Some("d"), Some("a"), s.rv);
        assert_eq!(value(&now), [("d".to_owned(), "2".to_owned())]);
        let then = s.snapshot_of(CONFIGMAPS, Some("d"), Some("a"), at4);
        assert_eq!(value(&then), [("d".to_owned(), "1".to_owned())]);
        // Across namespaces: both `a`s, not `ab`, not the pod.
        let all = s.snapshot_of(CONFIGMAPS, None, Some("a"), s.rv);
        assert_eq!(value(&all).len(), 2);
        s.remove(&a);
        assert!(
            s.snapshot_of(CONFIGMAPS, Some("d"), Some("a"), s.rv)
                .is_empty()
        );
        assert_eq!(
            value(&s.snapshot_of(CONFIGMAPS, Some("d"), Some("a"), at4)).len(),
            1
        );
    }

    #[test]
    fn history_beyond_the_limit_moves_the_compaction_point() {
        let store = Store::new(2, 16);
        let mut s = store.inner.lock();
        for i in 0..5 {
            s.put(Key::new(CONFIGMAPS, "d", &format!("n{i}")), cm("x", "1"));
        }
        assert_eq!(s.history.len(), 2);
        assert_eq!(s.history_start, 3);
        s.compact();
        assert_eq!(s.history_start, 6);
        assert!(s.history.is_empty());
    }
}
