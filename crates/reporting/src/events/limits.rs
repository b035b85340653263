//! The bounds of the kubelet's event correlator (client-go `tools/record/events_cache.go`) that
//! sit in front of the de-duplicating [`Correlator`](super::Correlator): the aggregation of
//! similar events, the per-object spam filter, and the message length cap.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use tokio::time::Instant;

use nodelet_core::EventType;

/// Similar events (same object, type and reason, different messages) within this time of the
/// previous one count towards [`AGGREGATE_MAX_EVENTS`] (upstream
/// `defaultAggregateIntervalInSeconds` = 600).
pub(crate) const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);

/// The distinct messages after which similar events are combined into one (upstream
/// `defaultAggregateMaxEvents` = 10).
pub(crate) const AGGREGATE_MAX_EVENTS: usize = 10;

/// The prefix of a combined event's message (upstream `EventAggregatorByReasonMessageFunc`).
pub(crate) const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// Events (creations and count updates) one object may burst (upstream `defaultSpamBurst`).
pub(crate) const SPAM_BURST: f64 = 25.0;

/// The spam filter's refill: one event per 5 minutes and object (upstream `defaultSpamQPS` =
/// 1/300).
pub(crate) const SPAM_REFILL: Duration = Duration::from_secs(300);

/// The longest message published, in bytes: the API server's limit on an event note
/// (`NoteLengthLimit`, 1024 in `pkg/apis/core/validation`); longer messages are cut at a
/// character boundary and end in `" ..."`, as the scheduler truncates its event messages.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// The most event identities, objects or aggregate groups remembered, each cache evicting the
/// least recently seen (upstream `maxLruCacheEntries`).
pub const CACHE_CAPACITY: usize = 4096;

/// [`CACHE_CAPACITY`] as the LRU caches take it.
const CAPACITY: NonZeroUsize = match NonZeroUsize::new(CACHE_CAPACITY) {
    Some(c) => c,
    None => NonZeroUsize::MIN,
};

/// What makes events similar: same involved object, type and reason (the source is always this
/// agent on this node).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SimilarKey {
    pub(crate) uid: String,
    pub(crate) kind: EventType,
    pub(crate) reason: String,
}

/// The result of [`Aggregator::aggregate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Aggregated {
    /// Publish the event as it is.
    Single,
    /// Publish it as the group's combined event, with this message.
    Combined(String),
}

/// Combines similar events with changing messages (upstream `EventAggregator`): from the
/// [`AGGREGATE_MAX_EVENTS`]th distinct message of a group within [`AGGREGATE_INTERVAL`] of each
/// other, events are published as one combined event per group whose count grows.
#[derive(Debug)]
pub(crate) struct Aggregator {
    groups: LruCache<SimilarKey, Group>,
}

#[derive(Debug)]
struct Group {
    messages: HashSet<String>,
    last: Instant,
}

/// Token buckets per involved object (upstream `EventSourceObjectSpamFilter`).
#[derive(Debug)]
pub(crate) struct SpamFilter {
    buckets: LruCache<String, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator {
            groups: lru_cache(CAPACITY),
        }
    }
}

impl Default for SpamFilter {
    fn default() -> Self {
        SpamFilter {
            buckets: lru_cache(CAPACITY),
        }
    }
}

impl Aggregator {
    /// Records `message` in its group at `now` and says how to publish it.
    pub(crate) fn aggregate(
        &mut self,
        key: &SimilarKey,
        message: &str,
        now: Instant,
    ) -> Aggregated {
        let group = self.groups.get_or_insert_mut_ref(key, || Group {
            messages: HashSet::new(),
            last: now,
        });
        if now.saturating_duration_since(group.last) > AGGREGATE_INTERVAL {
            group.messages.clear();
        }
        group.messages.insert(message.to_owned());
        group.last = now;
        if group.messages.len() < AGGREGATE_MAX_EVENTS {
            return Aggregated::Single;
        }
        // Keep the set below the threshold (upstream pops one at random): every further
        // distinct message is combined too.
        if let Some(any) = group.messages.iter().find(|m| *m != message).cloned() {
            group.messages.remove(&any);
        }
        Aggregated::Combined(format!("{COMBINED_PREFIX}{message}"))
    }

    /// Drops every group of the involved object `uid` (walks the groups: once per pod removed).
    pub(crate) fn forget(&mut self, uid: &str) {
        let keys: Vec<SimilarKey> = self
            .groups
            .iter()
            .filter(|(k, _)| k.uid == uid)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            self.groups.pop(key);
        }
    }

    /// Number of groups remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }
}

impl SpamFilter {
    /// Whether an event about object `uid` may be published at `now` (takes a token).
    pub(crate) fn allow(&mut self, uid: &str, now: Instant) -> bool {
        let bucket = self.buckets.get_or_insert_mut_ref(uid, || Bucket {
            tokens: SPAM_BURST,
            at: now,
        });
        let refill =
            now.saturating_duration_since(bucket.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refill).min(SPAM_BURST);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Drops the bucket of the involved object `uid`.
    pub(crate) fn forget(&mut self, uid: &str) {
        self.buckets.pop(uid);
    }

    /// Number of buckets remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }
}

/// An empty LRU cache of `capacity` that allocates as it fills: `LruCache::new` reserves the
/// whole capacity at once (136 KiB for 4,096 entries), while forgotten pods keep these caches
/// at the live pods' entries.
pub(crate) fn lru_cache<K: std::hash::Hash + Eq, V>(capacity: NonZeroUsize) -> LruCache<K, V> {
    let mut cache = LruCache::unbounded();
    cache.resize(capacity);
    cache
}

/// `message`, cut to [`MAX_MESSAGE_BYTES`] at a character boundary with a `" ..."` suffix.
pub(crate) fn truncate_message(mut message: String) -> String {
    const SUFFIX: &str = " ...";
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_MESSAGE_BYTES - SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(SUFFIX);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn similar() -> SimilarKey {
        SimilarKey {
            uid: "u1".into(),
            kind: EventType::Warning,
            reason: "FailedMount".into(),
        }
    }

    #[test]
    fn the_tenth_distinct_message_within_ten_minutes_is_combined_and_so_are_later_ones() {
        let mut a = Aggregator::default();
        let t0 = Instant::now();
        for n in 1..AGGREGATE_MAX_EVENTS {
            let at = t0 + Duration::from_secs(60 * n as u64);
            assert_eq!(
                a.aggregate(&similar(), &format!("m{n}"), at),
                Aggregated::Single
            );
            // A repeat of a known message is not a new distinct one.
            assert_eq!(a.aggregate(&similar(), "m1", at), Aggregated::Single);
        }
        let at = t0 + Duration::from_secs(600);
        assert_eq!(
            a.aggregate(&similar(), "m10", at),
            Aggregated::Combined("(combined from similar events): m10".into())
        );
        assert_eq!(
            a.aggregate(&similar(), "m11", at),
            Aggregated::Combined("(combined from similar events): m11".into())
        );
        // Another reason is another group.
        let other = SimilarKey {
            reason: "Failed".into(),
            ..similar()
        };
        assert_eq!(a.aggregate(&other, "m12", at), Aggregated::Single);
    }

    #[test]
    fn a_gap_longer_than_the_interval_starts_the_group_again() {
        let mut a = Aggregator::default();
        let t0 = Instant::now();
        for n in 1..AGGREGATE_MAX_EVENTS {
            a.aggregate(&similar(), &format!("m{n}"), t0);
        }
        let later = t0 + AGGREGATE_INTERVAL + Duration::from_secs(1);
        assert_eq!(a.aggregate(&similar(), "m10", later), Aggregated::Single);
    }

    #[test]
    fn an_object_may_burst_25_events_then_one_per_five_minutes() {
        let mut f = SpamFilter::default();
        let t0 = Instant::now();
        let allowed = (0..40).filter(|_| f.allow("u1", t0)).count();
        assert_eq!(allowed, 25);
        assert!(f.allow("u2", t0), "buckets are per object");
        assert!(!f.allow("u1", t0 + Duration::from_secs(299)));
        assert!(f.allow("u1", t0 + Duration::from_secs(301)));
        assert!(!f.allow("u1", t0 + Duration::from_secs(302)));
    }

    // A removed pod's groups and bucket go; another pod's stay as they were.
    #[test]
    fn forgetting_a_pod_drops_its_groups_and_its_bucket_only() {
        let mut a = Aggregator::default();
        let mut f = SpamFilter::default();
        let t0 = Instant::now();
        let other = SimilarKey {
            uid: "u2".into(),
            ..similar()
        };
        let failed = SimilarKey {
            reason: "Failed".into(),
            ..similar()
        };
        for n in 1..AGGREGATE_MAX_EVENTS {
            a.aggregate(&similar(), &format!("m{n}"), t0);
            a.aggregate(&other, &format!("m{n}"), t0);
        }
        a.aggregate(&failed, "m", t0);
        let _ = (0..SPAM_BURST as usize)
            .filter(|_| f.allow("u1", t0))
            .count();
        assert!(f.allow("u2", t0));
        a.forget("u1");
        f.forget("u1");
        assert_eq!((a.len(), f.len()), (1, 1), "u2's group and bucket only");
        assert_eq!(
            a.aggregate(&similar(), "m10", t0),
            Aggregated::Single,
            "u1's group starts again"
        );
        assert!(matches!(
            a.aggregate(&other, "m10", t0),
            Aggregated::Combined(_)
        ));
        assert!(f.allow("u1", t0), "a fresh bucket");
    }

    #[test]
    fn long_messages_are_cut_to_1024_bytes_at_a_character_boundary() {
        let short = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(truncate_message(short.clone()), short);
        let long = format!("{}é{}", "x".repeat(1019), "y".repeat(4000));
        let cut = truncate_message(long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES, "{}", cut.len());
        assert!(cut.ends_with("x ..."), "{cut}");
    }
}
