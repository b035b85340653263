//! [`EventPublisher`]: pod events from the pod workers and the volume manager, queued and
//! published as core/v1 Events the way a kubelet's event correlator does (PL-9, VM-10, PW-4,
//! PW-7, PW-12).
//!
//! # Aggregation
//!
//! An event's identity is (involved object UID, type, reason, message): the message is part of
//! it, so a `FailedMount` whose error text changes is a *new* Event and users see the current
//! error. (kube-rs's `Recorder` keys its cache without the note, so a changed message only bumped
//! the count of the first Event and never reached the API.)
//!
//! For each queued event the background task:
//!
//! 1. looks the identity up in the [`Correlator`]; an entry whose last occurrence is within
//!    [`AGGREGATION_WINDOW`] (10 min) is a repeat;
//! 2. a repeat PATCHes (`application/merge-patch+json`) `count` and `lastTimestamp` of the existing
//!    Event; if that Event is gone (404, e.g. expired by the API server's event TTL) it is created
//!    again under the same name with the running count;
//! 3. anything else is created: `metadata.name` = `<pod name>.<16 hex digits>` (nanoseconds since
//!    the epoch, strictly increasing, like client-go), `count` 1, `firstTimestamp` =
//!    `lastTimestamp` = now;
//! 4. on success the identity is recorded; the cache holds at most [`CACHE_CAPACITY`] identities,
//!    dropping those older than the window first, then the least recently seen.
//!
//! `source.component` and `reportingComponent` are `nodelet`, not `kubelet`: reasons and messages
//! are the kubelet's, but the writer is named truthfully (`kubectl describe` shows "From
//! nodelet"); `source.host` and `reportingInstance` are the node name. Publishing never blocks
//! the caller, failures are logged at debug level with the reason and pod only (messages are
//! never logged), and the task stops on shutdown (pending events are dropped).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::metrics::Metrics;

/// A repeat of an identical event within this time of its last occurrence updates the existing
/// Event (count, lastTimestamp) instead of creating a new one.
pub(crate) const AGGREGATION_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The most event identities remembered for aggregation.
pub(crate) const CACHE_CAPACITY: usize = 4096;

/// The component name written to `source.component` and `reportingComponent`.
pub(crate) const COMPONENT: &str = "nodelet";

/// A non-blocking event sink: `event` queues, a background task publishes. Implements the
/// event seams of both `nodelet-podworker` and `nodelet-volume-manager`.
#[derive(Debug, Clone)]
pub(crate) struct EventPublisher {
    tx: mpsc::UnboundedSender<PodEvent>,
}

/// `Normal` or `Warning`, as in `Event.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EventKind {
    Normal,
    Warning,
}

/// One event about a pod, as queued.
#[derive(Debug, Clone)]
struct PodEvent {
    pod: ObjectReference,
    kind: EventKind,
    reason: String,
    message: String,
}

/// What makes two events the same: the kubelet's correlator aggregates on the message too.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EventKey {
    pub(crate) uid: String,
    pub(crate) kind: EventKind,
    pub(crate) reason: String,
    pub(crate) message: String,
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
    entries: HashMap<EventKey, Published>,
    window: Duration,
    capacity: usize,
}

impl EventPublisher {
    /// A publisher for `node` through `client`; the task ends on `shutdown` (pending events are
    /// dropped).
    pub(crate) fn start(
        client: kube::Client,
        node: &str,
        metrics: Metrics,
        shutdown: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<PodEvent>();
        let mut writer = Writer {
            client,
            node: node.to_owned(),
            metrics,
            correlator: Correlator::new(AGGREGATION_WINDOW, CACHE_CAPACITY),
            names: EventNames::default(),
        };
        tracker.spawn(async move {
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = rx.recv() => next,
                };
                let Some(event) = next else {
                    return;
                };
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = writer.publish(event) => {}
                }
            }
        });
        Self { tx }
    }

    fn push(&self, pod: &Pod, kind: EventKind, reason: &str, message: String) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let _ = self.tx.send(PodEvent {
            pod: reference,
            kind,
            reason: reason.to_owned(),
            message,
        });
    }
}

impl EventKind {
    fn as_str(self) -> &'static str {
        match self {
            EventKind::Normal => "Normal",
            EventKind::Warning => "Warning",
        }
    }
}

impl Correlator {
    pub(crate) fn new(window: Duration, capacity: usize) -> Self {
        Correlator {
            entries: HashMap::new(),
            window,
            capacity: capacity.max(1),
        }
    }

    /// (1) Whether `key` occurring at `now` repeats a published Event.
    pub(crate) fn step(&self, key: &EventKey, now: Instant) -> Step {
        match self.entries.get(key) {
            Some(p) if now.saturating_duration_since(p.seen) <= self.window => Step::Repeat {
                name: p.name.clone(),
                count: p.count.saturating_add(1),
                first: p.first,
            },
            _ => Step::Create,
        }
    }

    /// (4) Remembers a published Event, evicting expired then least recently seen entries.
    pub(crate) fn record(&mut self, key: EventKey, published: Published) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let now = published.seen;
            let window = self.window;
            self.entries
                .retain(|_, p| now.saturating_duration_since(p.seen) <= window);
            while self.entries.len() >= self.capacity {
                let oldest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, p)| p.seen)
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => {
                        self.entries.remove(&k);
                    }
                    None => break,
                }
            }
        }
        self.entries.insert(key, published);
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
    metrics: Metrics,
    correlator: Correlator,
    names: EventNames,
}

impl Writer {
    async fn publish(&mut self, event: PodEvent) {
        let (Some(namespace), Some(pod_name)) =
            (event.pod.namespace.clone(), event.pod.name.clone())
        else {
            return;
        };
        let key = EventKey {
            uid: event.pod.uid.clone().unwrap_or_default(),
            kind: event.kind,
            reason: event.reason.clone(),
            message: event.message.clone(),
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Timestamp::now();
        let result = match self.correlator.step(&key, Instant::now()) {
            // (2)
            Step::Repeat { name, count, first } => {
                self.metrics.api_request("patch");
                let patch = serde_json::json!({"count": count, "lastTimestamp": Time(now)});
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Ok((name, count, first)),
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        self.metrics.api_request("create");
                        let body = self.body(&event, &namespace, &name, count, first, now);
                        api.create(&PostParams::default(), &body)
                            .await
                            .map(|_| (name, count, first))
                    }
                    Err(error) => Err(error),
                }
            }
            // (3)
            Step::Create => {
                let name = self.names.next(&pod_name, now);
                self.metrics.api_request("create");
                let body = self.body(&event, &namespace, &name, 1, now, now);
                api.create(&PostParams::default(), &body)
                    .await
                    .map(|_| (name, 1, now))
            }
        };
        match result {
            // (4)
            Ok((name, count, first)) => self.correlator.record(
                key,
                Published {
                    name,
                    count,
                    first,
                    seen: Instant::now(),
                },
            ),
            Err(error) => debug!(
                %error,
                reason = %event.reason,
                pod.namespace = %namespace,
                pod.name = %pod_name,
                "event not published"
            ),
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
impl nodelet_volume_manager::EventSink for EventPublisher {
    fn event(
        &self,
        pod: &Pod,
        type_: nodelet_volume_manager::EventType,
        reason: &str,
        message: String,
    ) {
        let kind = match type_ {
            nodelet_volume_manager::EventType::Normal => EventKind::Normal,
            nodelet_volume_manager::EventType::Warning => EventKind::Warning,
        };
        self.push(pod, kind, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(message: &str) -> EventKey {
        EventKey {
            uid: "u1".into(),
            kind: EventKind::Warning,
            reason: "FailedMount".into(),
            message: message.into(),
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
}
