//! [`Shared`]: what the prober's manager and its workers share — the results of every probe
//! (the kubelet's three results managers in one map), the running workers, the runtime and
//! the event sink.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nodelet_core::PodUid;
use nodelet_core::events::EventSink;
use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::types::{Clock, ProbeKind, ProbeResult, ProbeTarget, ProbeUpdate};

/// One probe of one container of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) pod_uid: PodUid,
    pub(crate) container: String,
    pub(crate) kind: ProbeKind,
}

/// A running worker, as the manager sees it.
pub(crate) struct WorkerHandle {
    /// Stops the worker (and a probe it is running).
    pub(crate) stop: CancellationToken,
    /// Runs the worker's next probe now (holds one wake-up, as the kubelet's channel of one).
    pub(crate) trigger: Arc<Notify>,
    /// Tells this worker from a later one of the same key.
    pub(crate) serial: u64,
}

/// A probe's standing result for one container instance.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    container_id: String,
    result: ProbeResult,
}

pub(crate) struct Shared {
    /// Where a probe without a host goes: the pod's IP, which on the host network is the
    /// node's.
    pub(crate) pod_ip: String,
    pub(crate) target: Arc<dyn ProbeTarget>,
    pub(crate) events: Arc<dyn EventSink>,
    pub(crate) clock: Clock,
    /// Stops every worker (the agent is stopping).
    pub(crate) shutdown: CancellationToken,
    results: Mutex<HashMap<Key, Entry>>,
    workers: Mutex<HashMap<Key, WorkerHandle>>,
    updates: broadcast::Sender<ProbeUpdate>,
    serials: AtomicU64,
}

impl Shared {
    pub(crate) fn new(
        pod_ip: String,
        target: Arc<dyn ProbeTarget>,
        events: Arc<dyn EventSink>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            pod_ip,
            target,
            events,
            clock: Clock::new(),
            shutdown,
            results: Mutex::default(),
            workers: Mutex::default(),
            updates: broadcast::channel(1024).0,
            serials: AtomicU64::new(0),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<ProbeUpdate> {
        self.updates.subscribe()
    }

    /// The result of `key` for instance `container_id`, if one was set for that instance.
    pub(crate) fn result(&self, key: &Key, container_id: &str) -> Option<ProbeResult> {
        self.results
            .lock()
            .get(key)
            .filter(|e| e.container_id == container_id)
            .map(|e| e.result)
    }

    /// Sets the result of `key` for instance `container_id`; announces it when it changed
    /// (or the instance is new).
    pub(crate) fn set_result(&self, key: &Key, container_id: &str, result: ProbeResult) {
        let entry = Entry {
            container_id: container_id.to_owned(),
            result,
        };
        let changed = self.results.lock().insert(key.clone(), entry.clone()) != Some(entry);
        if changed {
            let _ = self.updates.send(ProbeUpdate {
                pod_uid: key.pod_uid.clone(),
                container: key.container.clone(),
                kind: key.kind,
                result,
            });
        }
    }

    /// Forgets the result of `key` if it is instance `container_id`'s.
    pub(crate) fn remove_result(&self, key: &Key, container_id: &str) {
        let mut results = self.results.lock();
        if results
            .get(key)
            .is_some_and(|e| e.container_id == container_id)
        {
            results.remove(key);
        }
    }

    /// Registers a worker for `key` unless one runs; the new worker's stop token, wake-up and
    /// serial.
    pub(crate) fn add_worker(&self, key: &Key) -> Option<(CancellationToken, Arc<Notify>, u64)> {
        let mut workers = self.workers.lock();
        if workers.contains_key(key) {
            return None;
        }
        let handle = WorkerHandle {
            stop: self.shutdown.child_token(),
            trigger: Arc::new(Notify::new()),
            serial: self.serials.fetch_add(1, Ordering::Relaxed),
        };
        let out = (handle.stop.clone(), handle.trigger.clone(), handle.serial);
        workers.insert(key.clone(), handle);
        Some(out)
    }

    /// A worker ended: forgets it, unless a newer one took its key.
    pub(crate) fn remove_worker(&self, key: &Key, serial: u64) {
        let mut workers = self.workers.lock();
        if workers.get(key).is_some_and(|w| w.serial == serial) {
            workers.remove(key);
        }
    }

    pub(crate) fn has_worker(&self, key: &Key) -> bool {
        self.workers.lock().contains_key(key)
    }

    /// Runs `key`'s next probe now, if it has a worker (a wake-up already pending is kept).
    pub(crate) fn trigger(&self, key: &Key) {
        if let Some(w) = self.workers.lock().get(key) {
            w.trigger.notify_one();
        }
    }

    /// Stops the workers of pod `uid` whose kind `stop` selects.
    pub(crate) fn stop_workers(&self, uid: &PodUid, stop: impl Fn(ProbeKind) -> bool) {
        for (key, w) in self.workers.lock().iter() {
            if key.pod_uid == *uid && stop(key.kind) {
                w.stop.cancel();
            }
        }
    }

    /// Whether the running instance `container_id` of `container` has started (PW-33): its
    /// startup probe succeeded; without a result, it has started unless a startup worker
    /// still waits to probe it.
    pub(crate) fn is_started(&self, uid: &PodUid, container: &str, container_id: &str) -> bool {
        let key = Key {
            pod_uid: uid.clone(),
            container: container.to_owned(),
            kind: ProbeKind::Startup,
        };
        match self.result(&key, container_id) {
            Some(result) => result == ProbeResult::Success,
            None => !self.has_worker(&key),
        }
    }
}
