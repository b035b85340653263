//! The operation executor's bookkeeping (VM-8, VM-9): at most one operation per volume, and
//! the kubelet's exponential backoff after a failure.
//!
//! Beyond the kubelet: the backoff holds retries that have no new information. A change of an
//! object the volume reads is new information: it ends the wait at once (or, while an operation
//! runs, makes its failure retry at once), so a volume waiting for a late object is mounted
//! right after the object appears instead of at the backoff deadline (up to 2 min 2 s later).
//! The delay itself still doubles with each failure.
//!
//! Both tables hand their room back once mostly empty (`shrink_when_sparse`): a node's first
//! thousand volumes are all in flight at once, and most of them back off once while their
//! objects are still on the way; 0.2 MB of empty tables stayed after the start otherwise.

use std::collections::HashMap;
use std::time::Duration;

use nodelet_core::backoff::Backoff;
use nodelet_core::capacity::shrink_when_sparse;
use tokio::time::Instant;

/// Why an operation may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// One is already running for this volume.
    Pending,
    /// A recent failure: not before this instant.
    BackingOff(Instant),
}

/// A volume whose last operation failed: when it may retry, and its back-off.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    retry_at: Instant,
    backoff: Backoff,
}

#[derive(Debug, Clone, Copy, Default)]
struct InFlight {
    /// A remount was requested while the operation ran: its result may be stale.
    dirty: bool,
    /// An object the volume reads changed while the operation ran: a failure is retried at
    /// once.
    object_changed: bool,
}

/// In-flight operations and backoff per volume (unique volume name).
#[derive(Debug)]
pub(crate) struct Operations {
    initial: Duration,
    max: Duration,
    in_flight: HashMap<String, InFlight>,
    backoff: HashMap<String, Waiting>,
}

impl Operations {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            in_flight: HashMap::new(),
            backoff: HashMap::new(),
        }
    }

    /// Starts an operation for `key` unless one runs or the key is backing off (VM-8: such
    /// refusals are expected and silently ignored by the reconciler).
    pub(crate) fn try_start(&mut self, key: &str, now: Instant) -> Result<(), Refusal> {
        if self.in_flight.contains_key(key) {
            return Err(Refusal::Pending);
        }
        if let Some(b) = self.backoff.get(key)
            && now < b.retry_at
        {
            return Err(Refusal::BackingOff(b.retry_at));
        }
        self.in_flight.insert(key.to_owned(), InFlight::default());
        Ok(())
    }

    pub(crate) fn is_pending(&self, key: &str) -> bool {
        self.in_flight.contains_key(key)
    }

    /// Records that the volume's content may have changed while its operation runs.
    pub(crate) fn mark_dirty(&mut self, key: &str) {
        if let Some(op) = self.in_flight.get_mut(key) {
            op.dirty = true;
        }
    }

    /// An object the volume reads changed: a volume backing off may retry now; a running
    /// operation's failure will be retried at once (see the module docs). Returns whether a
    /// retry became due now (a running operation reports its own end).
    pub(crate) fn object_changed(&mut self, key: &str, now: Instant) -> bool {
        if let Some(op) = self.in_flight.get_mut(key) {
            op.dirty = true;
            op.object_changed = true;
            false
        } else if let Some(b) = self.backoff.get_mut(key) {
            b.retry_at = b.retry_at.min(now);
            true
        } else {
            false
        }
    }

    /// Ends the operation. Success resets the backoff; failure waits 500 ms, then 1 s, 2 s …
    /// up to the cap (VM-9), or not at all when an object the volume reads changed meanwhile.
    /// Returns whether a remount was requested meanwhile.
    pub(crate) fn finish(&mut self, key: &str, ok: bool, now: Instant) -> bool {
        let op = self.in_flight.remove(key).unwrap_or_default();
        shrink_when_sparse(&mut self.in_flight);
        let dirty = op.dirty;
        if ok {
            self.backoff.remove(key);
            shrink_when_sparse(&mut self.backoff);
        } else {
            let (initial, max) = (self.initial, self.max);
            let waiting = self
                .backoff
                .entry(key.to_owned())
                .or_insert_with(|| Waiting {
                    retry_at: now,
                    backoff: Backoff::new(initial, max),
                });
            let delay = waiting.backoff.next_delay();
            waiting.retry_at = if op.object_changed { now } else { now + delay };
        }
        dirty
    }

    /// Drops the backoff of a volume that is gone.
    pub(crate) fn forget(&mut self, key: &str) {
        self.backoff.remove(key);
        shrink_when_sparse(&mut self.backoff);
    }

    /// The current retry delay of `key`, if it is backing off.
    #[cfg(test)]
    pub(crate) fn delay(&self, key: &str) -> Option<Duration> {
        self.backoff.get(key).and_then(|w| w.backoff.last_delay())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops() -> Operations {
        Operations::new(Duration::from_millis(500), Duration::from_secs(122))
    }

    // A node's first thousand volumes run at once and back off once: the tables hand their
    // room back when those end.
    #[test]
    fn the_tables_give_their_room_back_once_a_burst_of_operations_has_ended() {
        let mut ops = ops();
        let now = Instant::now();
        let keys: Vec<String> = (0..1000).map(|i| format!("volume-{i}")).collect();
        for k in &keys {
            ops.try_start(k, now).unwrap();
        }
        assert!(ops.in_flight.capacity() >= 1000);
        for k in &keys {
            ops.finish(k, false, now);
        }
        assert!(ops.backoff.capacity() >= 1000);
        for k in &keys {
            assert!(ops.object_changed(k, now));
            ops.try_start(k, now).unwrap();
        }
        for k in &keys {
            ops.finish(k, true, now);
        }
        assert!(ops.in_flight.is_empty() && ops.backoff.is_empty());
        assert!(
            ops.in_flight.capacity() <= 128,
            "{}",
            ops.in_flight.capacity()
        );
        assert!(ops.backoff.capacity() <= 128, "{}", ops.backoff.capacity());
    }

    #[test]
    fn only_one_operation_runs_per_volume() {
        let mut ops = ops();
        let now = Instant::now();
        assert_eq!(ops.try_start("v", now), Ok(()));
        assert_eq!(ops.try_start("v", now), Err(Refusal::Pending));
        assert_eq!(ops.try_start("w", now), Ok(()));
        assert!(!ops.finish("v", true, now));
        assert_eq!(ops.try_start("v", now), Ok(()));
    }

    // VM-9: 500 ms, 1 s, 2 s, … doubling up to 2 min 2 s; success resets.
    #[test]
    fn failures_back_off_exponentially_up_to_the_cap_and_success_resets() {
        let mut ops = ops();
        let mut now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..10 {
            ops.try_start("v", now).unwrap();
            ops.finish("v", false, now);
            let d = ops.delay("v").unwrap();
            delays.push(d.as_millis());
            assert_eq!(ops.try_start("v", now), Err(Refusal::BackingOff(now + d)));
            now += d;
        }
        assert_eq!(
            delays,
            [
                500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 122_000, 122_000
            ]
        );
        ops.try_start("v", now).unwrap();
        ops.finish("v", true, now);
        assert_eq!(ops.delay("v"), None);
        assert_eq!(ops.try_start("v", now), Ok(()));
    }

    // A late object mounts at once: an object change ends the wait, the delay keeps doubling.
    #[test]
    fn an_object_change_ends_the_backoff_but_not_its_growth() {
        let mut ops = ops();
        let now = Instant::now();
        ops.try_start("v", now).unwrap();
        ops.finish("v", false, now);
        assert!(ops.try_start("v", now).is_err());
        assert!(ops.object_changed("v", now), "a retry is due now");
        assert_eq!(ops.try_start("v", now), Ok(()));
        ops.finish("v", false, now);
        assert_eq!(ops.delay("v"), Some(Duration::from_secs(1)));
        assert!(ops.try_start("v", now).is_err());
    }

    #[test]
    fn an_object_change_during_a_failing_operation_retries_at_once() {
        let mut ops = ops();
        let now = Instant::now();
        ops.try_start("v", now).unwrap();
        assert!(
            !ops.object_changed("v", now),
            "the running operation reports its end"
        );
        assert!(ops.finish("v", false, now));
        assert_eq!(ops.try_start("v", now), Ok(()));
        // Without new information the next failure backs off again.
        ops.finish("v", false, now);
        assert_eq!(
            ops.try_start("v", now),
            Err(Refusal::BackingOff(now + Duration::from_secs(1)))
        );
    }

    #[test]
    fn a_remount_requested_during_an_operation_is_reported_when_it_ends() {
        let mut ops = ops();
        let now = Instant::now();
        ops.try_start("v", now).unwrap();
        ops.mark_dirty("v");
        assert!(ops.finish("v", true, now));
        ops.mark_dirty("v");
        ops.try_start("v", now).unwrap();
        assert!(!ops.finish("v", true, now));
    }
}
