//! [`Counters`]: what the reporting parts count — API writes that failed and events that were
//! not published — for the agent's metrics to read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The API write that failed (and was logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WriteTarget {
    /// A pod status patch or a finished pod's deletion.
    PodStatus,
    /// An Event's creation or update.
    Event,
    /// The Node's creation or reconciliation.
    NodeRegistration,
    /// The Lease's renewal.
    Lease,
    /// The Node status heartbeat.
    NodeStatus,
}

impl WriteTarget {
    /// Every target, in a fixed order.
    pub const ALL: [WriteTarget; 5] = [
        WriteTarget::PodStatus,
        WriteTarget::Event,
        WriteTarget::NodeRegistration,
        WriteTarget::Lease,
        WriteTarget::NodeStatus,
    ];

    /// Its name as a metric label: `pod_status`, `event`, `node_registration`, `lease`,
    /// `node_status`.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteTarget::PodStatus => "pod_status",
            WriteTarget::Event => "event",
            WriteTarget::NodeRegistration => "node_registration",
            WriteTarget::Lease => "lease",
            WriteTarget::NodeStatus => "node_status",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a pod event was not published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventDrop {
    /// The publisher's queue was full.
    QueueFull,
    /// The spam filter had no token for the pod.
    SpamFilter,
}

impl EventDrop {
    /// Every reason, in a fixed order.
    pub const ALL: [EventDrop; 2] = [EventDrop::QueueFull, EventDrop::SpamFilter];

    /// Its name as a metric label: `queue_full`, `spam_filter`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventDrop::QueueFull => "queue_full",
            EventDrop::SpamFilter => "spam_filter",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Counts that only grow, shared by the parts that write and whoever exports them. Cheap to
/// clone; nothing process-global (each agent has its own).
#[derive(Debug, Clone, Default)]
pub struct Counters {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    write_failures: [AtomicU64; 5],
    events_dropped: [AtomicU64; 2],
}

impl Counters {
    /// Counts one failed write to `target`.
    pub fn write_failed(&self, target: WriteTarget) {
        self.inner.write_failures[target.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// How many writes to `target` failed so far.
    pub fn write_failures(&self, target: WriteTarget) -> u64 {
        self.inner.write_failures[target.index()].load(Ordering::Relaxed)
    }

    /// Counts one event not published for `reason`.
    pub fn event_dropped(&self, reason: EventDrop) {
        self.inner.events_dropped[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// How many events were not published for `reason` so far.
    pub fn events_dropped(&self, reason: EventDrop) -> u64 {
        self.inner.events_dropped[reason.index()].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_count_into_the_same_counters_each_by_its_target_or_reason() {
        let counters = Counters::default();
        let writer = counters.clone();
        writer.write_failed(WriteTarget::Lease);
        writer.write_failed(WriteTarget::Lease);
        writer.event_dropped(EventDrop::SpamFilter);
        assert_eq!(counters.write_failures(WriteTarget::Lease), 2);
        assert_eq!(counters.write_failures(WriteTarget::NodeStatus), 0);
        assert_eq!(counters.events_dropped(EventDrop::SpamFilter), 1);
        assert_eq!(counters.events_dropped(EventDrop::QueueFull), 0);
        let labels: Vec<_> = WriteTarget::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            labels,
            [
                "pod_status",
                "event",
                "node_registration",
                "lease",
                "node_status"
            ]
        );
    }
}
