//! [`FakeSource`]: an in-memory [`ObjectSource`] with request counters and fault injection.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio_stream_shim::UnboundedReceiverStream;

use super::api::{Listed, ObjectSource, ReadFrom, SourceError, WatchEvent, WatchStream};

/// A request kind, for [`FakeSource::count`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// [`ObjectSource::get`].
    Get,
    /// [`ObjectSource::list`].
    List,
    /// [`ObjectSource::watch`].
    Watch,
    /// [`ObjectSource::watch_list`] (only counted while watch-lists are on).
    WatchList,
}

/// An in-memory object source for tests: objects keyed by (namespace, name), a global numeric
/// resourceVersion, watch streams that replay history after the requested resourceVersion,
/// and knobs for faults (`fail_next`, `close_watches`, `compact`, `hold_lists`).
///
/// Clones share state.
pub struct FakeSource<K> {
    state: Arc<Mutex<State<K>>>,
    lists_held: Arc<watch::Sender<bool>>,
    gets_held: Arc<watch::Sender<bool>>,
}

type Key = (String, String);
type EventSender<K> = mpsc::UnboundedSender<Result<WatchEvent<K>, SourceError>>;

struct State<K> {
    objects: HashMap<Key, K>,
    resource_version: u64,
    /// Every change, for watches that start at an older resourceVersion.
    history: Vec<(u64, Key, WatchEvent<K>)>,
    /// Watches from below this resourceVersion answer 410 Gone.
    compacted: u64,
    counts: HashMap<(Verb, String, String), usize>,
    watch_cache_gets: usize,
    /// How each LIST and watch-list asked to be served, in order.
    list_reads: Vec<ReadFrom>,
    /// Queued failures; `None` matches any verb.
    failures: VecDeque<(Option<Verb>, SourceError)>,
    /// While set, every request fails with it (an outage), before queued failures.
    outage: Option<SourceError>,
    watchers: Vec<(Key, EventSender<K>)>,
    /// Watch-lists are served (else `watch_list` answers `Ok(None)`).
    watch_list: bool,
}

impl<K> Clone for FakeSource<K> {
    fn clone(&self) -> Self {
        FakeSource {
            state: self.state.clone(),
            lists_held: self.lists_held.clone(),
            gets_held: self.gets_held.clone(),
        }
    }
}

impl<K> fmt::Debug for FakeSource<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeSource").finish_non_exhaustive()
    }
}

impl<K> Default for FakeSource<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> FakeSource<K> {
    /// An empty source.
    pub fn new() -> Self {
        let (lists_held, _) = watch::channel(false);
        let (gets_held, _) = watch::channel(false);
        FakeSource {
            state: Arc::new(Mutex::new(State {
                objects: HashMap::new(),
                resource_version: 1,
                history: Vec::new(),
                compacted: 0,
                counts: HashMap::new(),
                watch_cache_gets: 0,
                list_reads: Vec::new(),
                failures: VecDeque::new(),
                outage: None,
                watchers: Vec::new(),
                watch_list: false,
            })),
            lists_held: Arc::new(lists_held),
            gets_held: Arc::new(gets_held),
        }
    }

    /// Requests of `verb` for `namespace/name` so far (failed ones included).
    pub fn count(&self, verb: Verb, namespace: &str, name: &str) -> usize {
        let key = (verb, namespace.to_owned(), name.to_owned());
        self.state.lock().counts.get(&key).copied().unwrap_or(0)
    }

    /// How each LIST and watch-list so far asked to be served (failed ones included), in
    /// order.
    pub fn list_reads(&self) -> Vec<ReadFrom> {
        self.state.lock().list_reads.clone()
    }

    /// Requests of `verb` for any object so far.
    pub fn total(&self, verb: Verb) -> usize {
        self.state
            .lock()
            .counts
            .iter()
            .filter(|((v, _, _), _)| *v == verb)
            .map(|(_, n)| n)
            .sum()
    }

    /// GETs that allowed an answer from the watch cache (`resourceVersion=0`, OM-11 step 4).
    pub fn watch_cache_gets(&self) -> usize {
        self.state.lock().watch_cache_gets
    }

    /// Forget the request counts.
    pub fn reset_counts(&self) {
        let mut s = self.state.lock();
        s.counts.clear();
        s.watch_cache_gets = 0;
    }

    /// The next `n` requests (any verb) fail with `err`.
    pub fn fail_next(&self, n: usize, err: SourceError) {
        let mut s = self.state.lock();
        for _ in 0..n {
            s.failures.push_back((None, err.clone()));
        }
    }

    /// The next `n` requests of `verb` fail with `err` (queued behind earlier failures).
    pub fn fail_next_of(&self, verb: Verb, n: usize, err: SourceError) {
        let mut s = self.state.lock();
        for _ in 0..n {
            s.failures.push_back((Some(verb), err.clone()));
        }
    }

    /// An outage: until called with `None`, every request fails with `err`, and open watch
    /// streams end with it.
    pub fn set_outage(&self, err: Option<SourceError>) {
        let mut s = self.state.lock();
        if let Some(err) = &err {
            for (_, tx) in s.watchers.drain(..) {
                let _ = tx.send(Err(err.clone()));
            }
        }
        s.outage = err;
    }

    /// End every open watch stream (as a server restart or time-out would).
    pub fn close_watches(&self) {
        self.state.lock().watchers.clear();
    }

    /// Forget history: open watches receive a `410 Gone` error item and end, and watches from
    /// an older resourceVersion are refused with 410.
    pub fn compact(&self) {
        let mut s = self.state.lock();
        s.compacted = s.resource_version;
        s.history.clear();
        for (_, tx) in s.watchers.drain(..) {
            let _ = tx.send(Err(gone()));
        }
    }

    /// While held, LIST requests wait (a slow initial list).
    pub fn hold_lists(&self, held: bool) {
        self.lists_held.send_replace(held);
    }

    /// While held, GET requests wait (a slow GET).
    pub fn hold_gets(&self, held: bool) {
        self.gets_held.send_replace(held);
    }

    /// Serve watch-lists (default off: callers list and watch, as against a server before
    /// Kubernetes 1.27).
    pub fn set_watch_list(&self, on: bool) {
        self.state.lock().watch_list = on;
    }

    /// Watch streams whose consumer is still alive.
    pub fn open_watches(&self) -> usize {
        let mut s = self.state.lock();
        s.watchers.retain(|(_, tx)| !tx.is_closed());
        s.watchers.len()
    }

    fn record(&self, verb: Verb, namespace: &str, name: &str) -> Result<(), SourceError> {
        let mut s = self.state.lock();
        *s.counts
            .entry((verb, namespace.to_owned(), name.to_owned()))
            .or_insert(0) += 1;
        if let Some(err) = &s.outage {
            return Err(err.clone());
        }
        match s.failures.front() {
            Some((v, _)) if v.is_none_or(|v| v == verb) => match s.failures.pop_front() {
                Some((_, err)) => Err(err),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

fn gone() -> SourceError {
    SourceError::status(410, "Expired", "too old resource version")
}

impl<K: Resource + Clone> FakeSource<K> {
    /// Create or replace `obj` (its `metadata.name`) in `namespace`; returns the new
    /// resourceVersion and notifies matching watches.
    pub fn apply(&self, namespace: &str, mut obj: K) -> String {
        let mut s = self.state.lock();
        s.resource_version += 1;
        let rv = s.resource_version;
        obj.meta_mut().resource_version = Some(rv.to_string());
        obj.meta_mut().namespace = (!namespace.is_empty()).then(|| namespace.to_owned());
        let key = (
            namespace.to_owned(),
            obj.meta().name.clone().unwrap_or_default(),
        );
        s.objects.insert(key.clone(), obj.clone());
        s.publish(rv, key, WatchEvent::Applied(obj));
        rv.to_string()
    }

    /// Delete `namespace/name`; `false` if it did not exist.
    pub fn delete(&self, namespace: &str, name: &str) -> bool {
        let mut s = self.state.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let Some(mut obj) = s.objects.remove(&key) else {
            return false;
        };
        s.resource_version += 1;
        let rv = s.resource_version;
        obj.meta_mut().resource_version = Some(rv.to_string());
        s.publish(rv, key, WatchEvent::Deleted(obj));
        true
    }

    /// The stored object, if any.
    pub fn stored(&self, namespace: &str, name: &str) -> Option<K> {
        self.state
            .lock()
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }
}

impl<K: Clone> State<K> {
    fn publish(&mut self, rv: u64, key: Key, event: WatchEvent<K>) {
        self.watchers
            .retain(|(k, tx)| *k != key || tx.send(Ok(event.clone())).is_ok());
        self.history.push((rv, key, event));
    }
}

#[async_trait::async_trait]
impl<K> ObjectSource<K> for FakeSource<K>
where
    K: Resource + Clone + Send + Sync + 'static,
{
    async fn get(&self, namespace: &str, name: &str, read: ReadFrom) -> Result<K, SourceError> {
        if read == ReadFrom::WatchCache {
            self.state.lock().watch_cache_gets += 1;
        }
        self.record(Verb::Get, namespace, name)?;
        let mut held = self.gets_held.subscribe();
        let _ = held.wait_for(|held| !held).await;
        self.stored(namespace, name).ok_or_else(|| {
            SourceError::status(404, "NotFound", &format!("object {name:?} not found"))
        })
    }

    async fn list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Listed<K>, SourceError> {
        self.state.lock().list_reads.push(read);
        self.record(Verb::List, namespace, name)?;
        let mut held = self.lists_held.subscribe();
        // The sender lives as long as `self`, so this only ends when lists are released.
        let _ = held.wait_for(|held| !held).await;
        let s = self.state.lock();
        Ok(Listed {
            object: s
                .objects
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned(),
            resource_version: s.resource_version.to_string(),
        })
    }

    async fn watch(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<WatchStream<K>, SourceError> {
        self.record(Verb::Watch, namespace, name)?;
        let from: u64 = resource_version.parse().unwrap_or(0);
        let mut s = self.state.lock();
        if from < s.compacted {
            return Err(gone());
        }
        let key = (namespace.to_owned(), name.to_owned());
        let (tx, rx) = mpsc::unbounded_channel();
        for (rv, k, event) in &s.history {
            if *rv > from && *k == key {
                let _ = tx.send(Ok(event.clone()));
            }
        }
        s.watchers.push((key, tx));
        Ok(UnboundedReceiverStream(rx).boxed())
    }

    async fn watch_list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Option<WatchStream<K>>, SourceError> {
        {
            let mut s = self.state.lock();
            if !s.watch_list {
                return Ok(None);
            }
            s.list_reads.push(read);
        }
        self.record(Verb::WatchList, namespace, name)?;
        let mut held = self.lists_held.subscribe();
        let _ = held.wait_for(|held| !held).await;
        let mut s = self.state.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(obj) = s.objects.get(&key) {
            let _ = tx.send(Ok(WatchEvent::Applied(obj.clone())));
        }
        let _ = tx.send(Ok(WatchEvent::InitialEventsEnd {
            resource_version: s.resource_version.to_string(),
        }));
        s.watchers.push((key, tx));
        Ok(Some(UnboundedReceiverStream(rx).boxed()))
    }
}

/// A minimal `Stream` over an unbounded receiver (saves a dependency on tokio-stream).
mod tokio_stream_shim {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    pub(super) struct UnboundedReceiverStream<T>(
        pub(super) tokio::sync::mpsc::UnboundedReceiver<T>,
    );

    impl<T> futures::Stream for UnboundedReceiverStream<T> {
        type Item = T;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
            self.0.poll_recv(cx)
        }
    }
}
