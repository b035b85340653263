//! [`EventPublisher`]: pod events from the pod workers and the volume manager, queued and
//! published as core/v1 Events the way a kubelet's event correlator does (PL-9, VM-10, PW-4,
//! PW-7, PW-12).
//!
//! # The queue
//!
//! Events wait for the background task in a bounded queue of [`QUEUE_CAPACITY`] (1000, the
//! queue length of client-go's event broadcaster). While it is full, a new event is dropped
//! (as client-go's `DropIfChannelFull`), never the caller blocked nor memory grown: an API
//! server that answers slowly or not at all costs at most that many queued events. Drops are
//! counted in `nodelet_events_dropped_total{reason="queue_full"}`; those of the spam filter
//! (step 3 below) in `{reason="spam_filter"}`.
//!
//! # Aggregation
//!
//! An event's identity is (involved object UID, type, reason, message): the message is part of
//! it, so a `FailedMount` whose error text changes is a *new* Event and users see the current
//! error. (kube-rs's `Recorder` keys its cache without the note, so a changed message only bumped
//! the count of the first Event and never reached the API.)
//!
//! Like the kubelet's `EventCorrelator` (client-go `tools/record/events_cache.go`, defaults in
//! `limits`), events are bounded even when the message changes on every occurrence. Messages
//! are cut to 1024 bytes (the API server's note limit) when queued. For each queued event the
//! background task:
//!
//! 1. **aggregates** similar events: same pod, type and reason with a different message. From
//!    the 10th distinct message of such a group (each within 10 minutes of the previous event
//!    of the group), the event is published as the group's one combined event, message
//!    `(combined from similar events): <message>`, whose count grows from then on;
//! 2. looks the identity up in the [`Correlator`]; an entry whose last occurrence is within
//!    [`AGGREGATION_WINDOW`] (10 min) is a repeat;
//! 3. the **spam filter** takes a token from the pod's bucket (burst 25, refilled at one per
//!    5 minutes), for a creation or a repeat alike; without a token the event is dropped
//!    (debug log), as upstream does;
//! 4. a repeat PATCHes (`application/merge-patch+json`) `count`, `lastTimestamp` and `message`
//!    of the existing Event; if that Event is gone (404, e.g. expired by the API server's event
//!    TTL) it is created again under the same name with the running count;
//! 5. anything else is created: `metadata.name` = `<pod name>.<16 hex digits>` (nanoseconds since
//!    the epoch, strictly increasing, like client-go), `count` 1, `firstTimestamp` =
//!    `lastTimestamp` = now;
//! 6. on success the identity is recorded; the cache holds at most [`CACHE_CAPACITY`] identities,
//!    dropping those older than the window first, then the least recently seen.
//!
//! # Forgetting a pod
//!
//! The three caches (identities, similar-event groups, spam buckets) are keyed by the pod's UID,
//! and a UID never comes back: what they hold about a pod is dead weight once the pod is gone.
//! [`EventPublisher::forget`] drops it all. The pod source calls it when the pod's worker is
//! forgotten (the pod was removed from the API and its termination finished, so nothing will
//! report on it again). The forget travels in the event queue: the events queued before it are
//! published (and recorded) first. While the queue is full it is refused ([`QueueFull`]) and
//! the pod source asks again later. [`CACHE_CAPACITY`] per cache stays as the bound for pods
//! that live long and report much (the kubelet's own correlator is an LRU of that size and
//! forgets nothing); under pod churn the caches hold the entries of live pods only.
//!
//! `source.component` and `reportingComponent` are `kubelet`, and `source.host` and
//! `reportingInstance` the node name, exactly as the kubelet's recorder writes them: tools and
//! tests select a node agent's events with `source=kubelet` (`kubectl get events
//! --field-selector source=kubelet`, upstream e2e's event waits), and those must find ours.
//! What tells a nodelet node apart is the Node itself (`nodeInfo.osImage` is `nodelet`, and
//! `nodeInfo.containerRuntimeVersion` names a `nodelet-…` runtime), not its events. Publishing never blocks
//! the caller, failures are logged at debug level with the reason and pod only (messages are
//! never logged), and the task stops on shutdown (pending events are dropped).

use std::num::NonZeroUsize;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use lru::LruCache;
use nodelet_core::{AdmittedPod, EventType, PodUid};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::counters::{Counters, EventDrop, WriteTarget};

mod limits;

pub use limits::CACHE_CAPACITY;
use limits::{Aggregated, Aggregator, SimilarKey, SpamFilter, lru_cache, truncate_message};

/// A repeat of an identical event within this time of its last occurrence updates the existing
/// Event (count, lastTimestamp) instead of creating a new one.
pub const AGGREGATION_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The component name written to `source.component` and `reportingComponent`: the kubelet's
/// own (its recorder's `EventSource{Component: "kubelet"}`), which event selectors look for.
pub const COMPONENT: &str = "kubelet";

/// How many events may wait for the publishing task (client-go's `maxQueuedEvents`); beyond it
/// new events are dropped and counted (module docs, "The queue").
pub const QUEUE_CAPACITY: usize = 1000;

/// A non-blocking event sink: `event` queues, a background task publishes. Implements the
/// event seams of both `nodelet-podworker` and `nodelet-volume-manager`.
#[derive(Debug, Clone)]
pub struct EventPublisher {
    tx: mpsc::Sender<Message>,
    counters: Counters,
}

/// How an [`EventPublisher`] publishes. [`EventConfig::new`] gives client-go's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventConfig {
    /// The node's name: `source.host` and `reportingInstance` of every Event.
    pub node_name: String,
    /// How many events may wait for the publishing task ([`QUEUE_CAPACITY`]; at least one).
    pub queue_capacity: usize,
}

impl EventConfig {
    /// Events of node `node_name` with a queue of [`QUEUE_CAPACITY`].
    pub fn new(node_name: impl Into<String>) -> Self {
        Self {
            node_name: node_name.into(),
            queue_capacity: QUEUE_CAPACITY,
        }
    }
}

/// [`EventPublisher::forget`] found the queue full: nothing was forgotten; ask again later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event queue is full: pod {0} not forgotten yet")]
pub struct QueueFull(pub PodUid);

/// What the queue carries, in order.
///
/// An event is boxed: the queue keeps the blocks of slots it grew into for its life (tokio's
/// `mpsc` reuses them), and a slot of an event by value is about 220 bytes. A node's start
/// queues hundreds (its pods' container events, mount failures of volumes whose objects are
/// still on the way): 22 blocks, 155 KB kept after the queue drained; boxed, 11 KB, and each
/// event freed once published.
#[derive(Debug)]
enum Message {
    Event(Box<PodEvent>),
    /// Drop the caches' entries of this pod (module docs, "Forgetting a pod").
    Forget(PodUid),
}

/// One event about a pod, as queued.
#[derive(Debug, Clone)]
struct PodEvent {
    pod: ObjectReference,
    kind: EventType,
    reason: String,
    message: String,
}

/// What makes two events the same: the kubelet's correlator aggregates on the message too.
/// A group's combined event has `combined` set and the group's first combined message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EventKey {
    pub(crate) uid: String,
    pub(crate) kind: EventType,
    pub(crate) reason: String,
    pub(crate) message: String,
    pub(crate) combined: bool,
}

/// A published Event, as remembered for aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// `metadata.name` of the Event.
    pub(crate) name: String,
    /// Its `count`.
    pub(crate) count: i32,
    /// Its `firstTimestamp`.
    pub(crate) first: Timestamp,
    /// When it last occurred (monotonic; for the window and eviction).
    pub(crate) seen: Instant,
}

/// The next step for an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Create a new Event.
    Create,
    /// Patch the existing Event `name` to `count`.
    Repeat {
        name: String,
        count: i32,
        first: Timestamp,
    },
}

/// The aggregation cache: identities of recently published Events (one writer: the task).
#[derive(Debug)]
pub(crate) struct Correlator {
    entries: LruCache<EventKey, Published>,
    window: Duration,
}

impl EventPublisher {
    /// A publisher as `config` says through `client`, counting what it drops and fails to
    /// write in `counters`; its task (one of `tracker`'s) ends on `shutdown` (pending events
    /// are dropped).
    pub fn start(
        config: EventConfig,
        client: kube::Client,
        counters: Counters,
        shutdown: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<Message>(config.queue_capacity.max(1));
        let mut writer = Writer {
            client,
            node: config.node_name,
            counters: counters.clone(),
            correlator: Correlator::new(AGGREGATION_WINDOW, CACHE_CAPACITY),
            aggregator: Aggregator::default(),
            spam: SpamFilter::default(),
            names: EventNames::default(),
        };
        tracker.spawn(async move {
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = rx.recv() => next,
                };
                let event = match next {
                    Some(Message::Event(event)) => *event,
                    Some(Message::Forget(uid)) => {
                        writer.forget(uid.as_str());
                        continue;
                    }
                    None => return,
                };
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = writer.publish(event) => {}
                }
            }
        });
        Self { tx, counters }
    }

    /// Forgets what the caches hold about pod `uid` once the events queued before are
    /// published (module docs, "Forgetting a pod"): call it when the pod is gone from the API
    /// and nothing will report on it again. Never blocks.
    ///
    /// # Errors
    /// [`QueueFull`]: the queue has no room; nothing was forgotten, call again later.
    pub fn forget(&self, uid: &PodUid) -> Result<(), QueueFull> {
        match self.tx.try_send(Message::Forget(uid.clone())) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(QueueFull(uid.clone())),
            // The task stopped (shutdown): its caches are gone with it.
            Err(mpsc::error::TrySendError::Closed(_)) => Ok(()),
        }
    }

    fn push(&self, pod: &Pod, kind: EventType, reason: &str, message: String) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let event = PodEvent {
            pod: reference,
            kind,
            reason: reason.to_owned(),
            message: truncate_message(message),
        };
        match self.tx.try_send(Message::Event(Box::new(event))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(Message::Event(event))) => {
                self.counters.event_dropped(EventDrop::QueueFull);
                debug!(
                    reason = %event.reason,
                    pod.namespace = event.pod.namespace.as_deref().unwrap_or_default(),
                    pod.name = event.pod.name.as_deref().unwrap_or_default(),
                    "event dropped: the queue is full"
                );
            }
            // The task stopped (shutdown): pending events are dropped anyway. (A full queue
            // hands back what was sent, the event above.)
            Err(mpsc::error::TrySendError::Full(_) | mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

impl Correlator {
    pub(crate) fn new(window: Duration, capacity: usize) -> Self {
        Correlator {
            entries: lru_cache(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
            window,
        }
    }

    /// (2) Whether `key` occurring at `now` repeats a published Event.
    pub(crate) fn step(&self, key: &EventKey, now: Instant) -> Step {
        match self.entries.peek(key) {
            Some(p) if now.saturating_duration_since(p.seen) <= self.window => Step::Repeat {
                name: p.name.clone(),
                count: p.count.saturating_add(1),
                first: p.first,
            },
            _ => Step::Create,
        }
    }

    /// (6) Remembers a published Event, evicting expired then least recently seen entries.
    pub(crate) fn record(&mut self, key: EventKey, published: Published) {
        // Entries are recorded in the order they are seen, so the least recently used is the
        // one seen longest ago: drop the expired ones, then `put` drops the oldest if still full.
        if !self.entries.contains(&key) && self.entries.len() >= self.entries.cap().get() {
            let now = published.seen;
            while self
                .entries
                .peek_lru()
                .is_some_and(|(_, p)| now.saturating_duration_since(p.seen) > self.window)
            {
                self.entries.pop_lru();
            }
        }
        self.entries.put(key, published);
    }

    /// Drops every identity of the involved object `uid`. Walks the cache (at most
    /// [`CACHE_CAPACITY`] entries): called once per pod removed.
    pub(crate) fn forget(&mut self, uid: &str) {
        let keys: Vec<EventKey> = self
            .entries
            .iter()
            .filter(|(k, _)| k.uid == uid)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            self.entries.pop(key);
        }
    }

    /// Number of remembered identities.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Event names: `<pod name>.<hex nanoseconds>`, strictly increasing per publisher.
#[derive(Debug, Default)]
struct EventNames {
    last: i128,
}

impl EventNames {
    fn next(&mut self, pod: &str, now: Timestamp) -> String {
        let nanos = now.as_nanosecond().max(self.last + 1);
        self.last = nanos;
        format!("{pod}.{nanos:x}")
    }
}

/// The publishing side of the task.
struct Writer {
    client: kube::Client,
    node: String,
    counters: Counters,
    correlator: Correlator,
    aggregator: Aggregator,
    spam: SpamFilter,
    names: EventNames,
}

impl Writer {
    /// Drops what the three caches hold about the involved object `uid`.
    fn forget(&mut self, uid: &str) {
        self.correlator.forget(uid);
        self.aggregator.forget(uid);
        self.spam.forget(uid);
    }

    async fn publish(&mut self, mut event: PodEvent) {
        let (Some(namespace), Some(pod_name)) =
            (event.pod.namespace.clone(), event.pod.name.clone())
        else {
            return;
        };
        // The involved object's UID as the API has it, not a `PodUid`: an event about a pod
        // refused for an unusable UID is published too (client-go keys on it the same way).
        let uid = event.pod.uid.clone().unwrap_or_default();
        let at = Instant::now();
        // (1) Similar events with changing messages end up in one combined event.
        let similar = SimilarKey {
            uid: uid.clone(),
            kind: event.kind,
            reason: event.reason.clone(),
        };
        let combined = match self.aggregator.aggregate(&similar, &event.message, at) {
            Aggregated::Single => false,
            Aggregated::Combined(message) => {
                event.message = message;
                true
            }
        };
        let key = EventKey {
            uid: uid.clone(),
            kind: event.kind,
            reason: event.reason.clone(),
            message: if combined {
                String::new()
            } else {
                event.message.clone()
            },
            combined,
        };
        // (2)
        let step = self.correlator.step(&key, at);
        // (3) The spam filter, for creations and repeats alike.
        if !self.spam.allow(&uid, at) {
            self.counters.event_dropped(EventDrop::SpamFilter);
            debug!(
                reason = %event.reason,
                pod.namespace = %namespace,
                pod.name = %pod_name,
                "event dropped by the spam filter"
            );
            return;
        }
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Timestamp::now();
        let result = match step {
            // (4)
            Step::Repeat { name, count, first } => {
                let patch = serde_json::json!({
                    "count": count,
                    "lastTimestamp": Time(now),
                    "message": event.message,
                });
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Ok((name, count, first)),
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        let body = self.body(&event, &namespace, &name, count, first, now);
                        api.create(&PostParams::default(), &body)
                            .await
                            .map(|_| (name, count, first))
                    }
                    Err(error) => Err(error),
                }
            }
            // (5)
            Step::Create => {
                let name = self.names.next(&pod_name, now);
                let body = self.body(&event, &namespace, &name, 1, now, now);
                api.create(&PostParams::default(), &body)
                    .await
                    .map(|_| (name, 1, now))
            }
        };
        match result {
            // (6)
            Ok((name, count, first)) => self.correlator.record(
                key,
                Published {
                    name,
                    count,
                    first,
                    seen: Instant::now(),
                },
            ),
            Err(error) => {
                self.counters.write_failed(WriteTarget::Event);
                debug!(
                    %error,
                    reason = %event.reason,
                    pod.namespace = %namespace,
                    pod.name = %pod_name,
                    "event not published"
                );
            }
        }
    }

    fn body(
        &self,
        event: &PodEvent,
        namespace: &str,
        name: &str,
        count: i32,
        first: Timestamp,
        last: Timestamp,
    ) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            involved_object: event.pod.clone(),
            reason: Some(event.reason.clone()),
            message: Some(event.message.clone()),
            type_: Some(event.kind.as_str().to_owned()),
            source: Some(EventSource {
                component: Some(COMPONENT.to_owned()),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some(COMPONENT.to_owned()),
            reporting_instance: Some(self.node.clone()),
            first_timestamp: Some(Time(first)),
            last_timestamp: Some(Time(last)),
            count: Some(count),
            ..Event::default()
        }
    }
}

// One trait for both crates: nodelet_podworker::EventSink re-exports this one.
impl nodelet_core::EventSink for EventPublisher {
    fn event(&self, pod: &AdmittedPod, type_: EventType, reason: &str, message: String) {
        self.push(pod, type_, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `nodelet-apiserver` and what publishers on it are started with, for the tests that
    /// publish through the real kube client.
    struct Bed {
        server: nodelet_apiserver::ApiServer,
        shutdown: CancellationToken,
        tracker: tokio_util::task::TaskTracker,
    }

    impl Bed {
        async fn start() -> Self {
            let server = nodelet_apiserver::ApiServer::start(nodelet_apiserver::Config::default())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            Bed {
                server,
                shutdown: CancellationToken::new(),
                tracker: tokio_util::task::TaskTracker::new(),
            }
        }

        /// A publisher for node `n1` with a queue of `capacity`.
        fn publisher(&self, counters: Counters, capacity: usize) -> EventPublisher {
            let mut config = EventConfig::new("n1");
            config.queue_capacity = capacity;
            EventPublisher::start(
                config,
                self.server.client(),
                counters,
                self.shutdown.clone(),
                &self.tracker,
            )
        }

        /// Stops the publishers' tasks, then the server.
        async fn stop(self) {
            self.shutdown.cancel();
            self.tracker.close();
            self.tracker.wait().await;
            self.server.shutdown().await;
        }
    }

    fn key(message: &str) -> EventKey {
        EventKey {
            uid: "u1".into(),
            kind: EventType::Warning,
            reason: "FailedMount".into(),
            message: message.into(),
            combined: false,
        }
    }

    fn published(name: &str, count: i32, seen: Instant) -> Published {
        Published {
            name: name.into(),
            count,
            first: Timestamp::UNIX_EPOCH,
            seen,
        }
    }

    #[test]
    fn a_changed_message_is_a_new_event_not_a_repeat() {
        // PL-9 / VM-10: the message is part of the identity.
        let mut c = Correlator::new(AGGREGATION_WINDOW, 8);
        let now = Instant::now();
        c.record(
            key("object \"ns\"/\"cm\" not registered"),
            published("p.1", 1, now),
        );
        assert_eq!(
            c.step(
                &key("configmap references non-existent config key: data-4"),
                now
            ),
            Step::Create
        );
    }

    #[test]
    fn the_same_message_within_the_window_repeats_with_the_next_count() {
        let mut c = Correlator::new(AGGREGATION_WINDOW, 8);
        let now = Instant::now();
        c.record(key("m"), published("p.1", 3, now));
        assert_eq!(
            c.step(&key("m"), now + AGGREGATION_WINDOW),
            Step::Repeat {
                name: "p.1".into(),
                count: 4,
                first: Timestamp::UNIX_EPOCH
            }
        );
    }

    #[test]
    fn the_same_message_after_the_window_is_a_new_event() {
        let mut c = Correlator::new(AGGREGATION_WINDOW, 8);
        let now = Instant::now();
        c.record(key("m"), published("p.1", 1, now));
        let later = now + AGGREGATION_WINDOW + Duration::from_secs(1);
        assert_eq!(c.step(&key("m"), later), Step::Create);
    }

    #[test]
    fn a_full_cache_drops_expired_entries_first_then_the_least_recently_seen() {
        let mut c = Correlator::new(AGGREGATION_WINDOW, 3);
        let t0 = Instant::now();
        let at = |s: u64| t0 + AGGREGATION_WINDOW + Duration::from_secs(s);
        c.record(key("old"), published("p.1", 1, t0));
        c.record(key("a"), published("p.2", 1, at(1)));
        c.record(key("b"), published("p.3", 1, at(2)));
        // Full: "old" is expired and goes first.
        c.record(key("c"), published("p.4", 1, at(3)));
        assert_eq!(c.len(), 3);
        assert_eq!(c.step(&key("old"), at(3)), Step::Create);
        // Full again, nothing expired: the least recently seen ("a") goes.
        c.record(key("d"), published("p.5", 1, at(4)));
        assert_eq!(c.len(), 3);
        let now = at(4);
        assert_eq!(c.step(&key("a"), now), Step::Create);
        for k in ["b", "c", "d"] {
            assert!(matches!(c.step(&key(k), now), Step::Repeat { .. }), "{k}");
        }
    }

    #[test]
    fn updating_a_known_identity_never_evicts() {
        let mut c = Correlator::new(AGGREGATION_WINDOW, 2);
        let now = Instant::now();
        c.record(key("a"), published("p.1", 1, now));
        c.record(key("b"), published("p.2", 1, now));
        c.record(key("a"), published("p.1", 2, now));
        assert_eq!(c.len(), 2);
        assert!(matches!(c.step(&key("b"), now), Step::Repeat { .. }));
    }

    #[test]
    fn event_names_are_the_pod_name_and_16_hex_digits_strictly_increasing() {
        let mut names = EventNames::default();
        let t = Timestamp::from_second(1_790_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let a = names.next("web", t);
        let b = names.next("web", t);
        let (pod, hex) = a.split_once('.').unwrap_or(("", ""));
        assert_eq!(pod, "web");
        assert_eq!(hex.len(), 16, "{a}");
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(b > a);
    }

    // The pod's identities go, another pod's stay.
    #[test]
    fn forgetting_a_pod_drops_its_identities_and_keeps_the_other_pods() {
        let mut c = Correlator::new(AGGREGATION_WINDOW, 8);
        let now = Instant::now();
        let other = |message: &str| EventKey {
            uid: "u2".into(),
            ..key(message)
        };
        c.record(key("a"), published("p.1", 1, now));
        c.record(other("a"), published("q.1", 1, now));
        c.record(key("b"), published("p.2", 1, now));
        c.forget("u1");
        assert_eq!(c.len(), 1);
        assert_eq!(c.step(&key("a"), now), Step::Create);
        assert_eq!(c.step(&key("b"), now), Step::Create);
        assert!(matches!(c.step(&other("a"), now), Step::Repeat { .. }));
    }

    /// Pod churn grew the three caches until their 4,096-entry cap: a removed pod's entries must
    /// go. Through the queue, in order, and against `nodelet-apiserver`: two events about pod
    /// `p`, its forget, the same event again (a new Event, count 1, where a remembered pod's
    /// would be a repeat with count 3), and one about pod `q`, untouched (its second event is a
    /// repeat). All queued before the task runs: the forget applies after the events before it
    /// and before those after it.
    #[tokio::test(flavor = "current_thread")]
    async fn after_a_pod_is_forgotten_its_next_event_is_new_while_other_pods_still_repeat() {
        use kube::api::ListParams;
        use nodelet_testutil::{PATIENCE, PodBuilder};

        let bed = Bed::start().await;
        let client = bed.server.client();
        let publisher = bed.publisher(Counters::default(), QUEUE_CAPACITY);
        let p = PodBuilder::new("default", "p").uid("u1").build();
        let q = PodBuilder::new("default", "q").uid("u2").build();
        let uid = PodUid::new("u1").unwrap_or_else(|e| panic!("{e}"));
        let failed = || "MountVolume.SetUp failed for volume \"v\"".to_owned();
        // No await until the last one is queued: the task has not run yet.
        publisher.push(&p, EventType::Warning, "FailedMount", failed());
        publisher.push(&q, EventType::Warning, "FailedMount", failed());
        publisher.push(&p, EventType::Warning, "FailedMount", failed());
        assert_eq!(publisher.forget(&uid), Ok(()));
        publisher.push(&p, EventType::Warning, "FailedMount", failed());
        publisher.push(&q, EventType::Warning, "FailedMount", failed());
        let api: Api<Event> = Api::namespaced(client, "default");
        let counts = |events: &[Event], pod: &str| -> Vec<i32> {
            let mut counts: Vec<i32> = events
                .iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(pod))
                .filter_map(|e| e.count)
                .collect();
            counts.sort_unstable();
            counts
        };
        let events = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(list) = api.list(&ListParams::default()).await
                    && counts(&list.items, "q") == [2]
                {
                    return list.items;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("q's repeat was never published"));
        assert_eq!(
            counts(&events, "p"),
            [1, 2],
            "p's Event of two, then a new one after the forget"
        );
        // Queue full: the forget is refused (nothing dropped silently) and can be asked again.
        let full = bed.publisher(Counters::default(), 1);
        full.push(&p, EventType::Warning, "FailedMount", failed());
        assert_eq!(full.forget(&uid), Err(QueueFull(uid.clone())));
        bed.stop().await;
    }

    /// Selected as a kubelet's events are: `source=kubelet` (what `kubectl get events
    /// --field-selector` and upstream e2e's waits use) finds the event, with the kubelet's
    /// component and the node name in both the legacy and the reporting fields.
    #[tokio::test(flavor = "current_thread")]
    async fn an_event_is_found_by_the_kubelet_source_selector_with_the_node_as_host() {
        use kube::api::ListParams;
        use nodelet_testutil::{PATIENCE, PodBuilder};

        let bed = Bed::start().await;
        let publisher = bed.publisher(Counters::default(), QUEUE_CAPACITY);
        let p = PodBuilder::new("default", "p").uid("u1").build();
        publisher.push(&p, EventType::Normal, "Pulled", "image present".to_owned());
        let api: Api<Event> = Api::namespaced(bed.server.client(), "default");
        let selected = ListParams::default().fields("source=kubelet,involvedObject.name=p");
        let events = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(list) = api.list(&selected).await
                    && !list.items.is_empty()
                {
                    return list.items;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no event was selected by source=kubelet"));
        assert_eq!(events.len(), 1);
        let e = &events[0];
        let source = e.source.clone().unwrap_or_default();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some("n1"));
        assert_eq!(e.reporting_component.as_deref(), Some("kubelet"));
        assert_eq!(e.reporting_instance.as_deref(), Some("n1"));
        let other = ListParams::default().fields("source=nodelet");
        let none = api.list(&other).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(none.items.is_empty(), "no event names another component");
        bed.stop().await;
    }

    /// A burst larger than the queue while the publishing task cannot run: the queue keeps
    /// its bound, the rest is dropped and counted, and what was queued is
    /// published once the task runs (each event about its own pod, so neither aggregation nor
    /// the spam filter removes any).
    #[tokio::test(flavor = "current_thread")]
    async fn a_burst_over_the_queue_bound_is_dropped_and_counted_not_queued() {
        use kube::api::ListParams;
        use nodelet_testutil::{PATIENCE, PodBuilder};

        const CAPACITY: usize = 8;
        const BURST: usize = 100;
        let bed = Bed::start().await;
        let client = bed.server.client();
        let counters = Counters::default();
        let dropped = |counters: &Counters| counters.events_dropped(EventDrop::QueueFull);
        assert_eq!(dropped(&counters), 0);
        let publisher = bed.publisher(counters.clone(), CAPACITY);
        // No await in this loop: on a current-thread runtime the task cannot take any.
        for n in 0..BURST {
            let pod = PodBuilder::new("default", &format!("p{n}"))
                .uid(&format!("u{n}"))
                .build();
            publisher.push(&pod, EventType::Warning, "FailedMount", format!("m{n}"));
        }
        assert_eq!(publisher.tx.capacity(), 0, "the queue is full, not larger");
        assert_eq!(dropped(&counters), (BURST - CAPACITY) as u64);

        let api: Api<Event> = Api::namespaced(client, "default");
        let last = format!("p{}", CAPACITY - 1);
        let events = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(list) = api.list(&ListParams::default()).await
                    && list
                        .items
                        .iter()
                        .any(|e| e.involved_object.name.as_deref() == Some(last.as_str()))
                {
                    return list.items;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the queued events were never published"));
        let mut names: Vec<String> = events
            .iter()
            .filter_map(|e| e.involved_object.name.clone())
            .collect();
        names.sort_by_key(|n| {
            n.trim_start_matches('p')
                .parse::<usize>()
                .unwrap_or(usize::MAX)
        });
        let queued: Vec<String> = (0..CAPACITY).map(|n| format!("p{n}")).collect();
        assert_eq!(names, queued, "the first {CAPACITY} events, and only them");
        bed.stop().await;
    }

    /// Events must aggregate as a kubelet's do: a mount failing on every retry with a different
    /// message (40 times,
    /// one pod), then a 4,232-byte message about another pod, published through the real kube
    /// client to `nodelet-apiserver`. Upstream's correlator turns the 40 into 9 single events
    /// and one combined event, and stops at the 25-event burst; the long message is cut.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changing_messages_are_combined_after_ten_and_bounded_by_the_spam_filter() {
        use kube::api::ListParams;
        use nodelet_testutil::{PATIENCE, PodBuilder};

        let bed = Bed::start().await;
        let client = bed.server.client();
        let publisher = bed.publisher(Counters::default(), QUEUE_CAPACITY);
        let pod = |name: &str, uid: &str| PodBuilder::new("default", name).uid(uid).build();
        let failing = pod("p", "u1");
        for n in 1..=40 {
            let message = format!(
                "MountVolume.SetUp failed for volume \"v\" : write file /v/..2026_11_23_01_43_{n:02}.72/k: File name too long"
            );
            publisher.push(&failing, EventType::Warning, "FailedMount", message);
        }
        // Events are published in order: once this one is there, all are.
        let long = "d".repeat(4232);
        publisher.push(&pod("q", "u2"), EventType::Warning, "FailedMount", long);
        let api: Api<Event> = Api::namespaced(client, "default");
        let events = tokio::time::timeout(PATIENCE, async {
            loop {
                let list = api.list(&ListParams::default()).await.map(|l| l.items);
                if let Ok(items) = list
                    && items
                        .iter()
                        .any(|e| e.involved_object.name.as_deref() == Some("q"))
                {
                    return items;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the last event was never published"));
        let about = |name: &str| -> Vec<&Event> {
            events
                .iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(name))
                .collect()
        };
        let failed = about("p");
        let combined: Vec<_> = failed
            .iter()
            .filter(|e| {
                e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("(combined from similar events): "))
            })
            .collect();
        assert_eq!(failed.len(), 10, "Event objects about the failing pod");
        assert_eq!(combined.len(), 1);
        assert_eq!(combined[0].count, Some(16), "the 10th to the 25th event");
        let written: i32 = failed.iter().filter_map(|e| e.count).sum();
        assert_eq!(written, 25, "the spam filter's burst");
        let long = about("q");
        assert_eq!(long.len(), 1);
        let message = long[0].message.as_deref().unwrap_or_default();
        assert!(
            message.len() <= 1024 && message.ends_with(" ..."),
            "{}",
            message.len()
        );
        bed.stop().await;
    }
}
