//! The pod watch's health ([`PodWatchHealth`]): recorded by the pod source, shown by
//! `api_health.rs` in `/metrics` and `/pods`. Its own module so that the shared agent state holds
//! it without depending on the views.

use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// How often the pod source probes the API server while the pod watch is failing.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The pod watch's health: the last answer and the current run of failures.
#[derive(Debug, Default)]
pub(crate) struct PodWatchHealth {
    state: Mutex<State>,
}

/// A copy of the pod watch's health at one moment.
#[derive(Debug, Default, Clone)]
pub(crate) struct State {
    pub(crate) last_success: Option<SystemTime>,
    pub(crate) failing_since: Option<SystemTime>,
    pub(crate) failures: u32,
    pub(crate) last_error: Option<String>,
}

impl PodWatchHealth {
    /// The API server answered the pod watch (an event) or the probe.
    pub(crate) fn success(&self) {
        *self.state.lock() = State {
            last_success: Some(SystemTime::now()),
            ..State::default()
        };
    }

    /// A pod watch request failed; `error` is the client's text (no payloads).
    pub(crate) fn failure(&self, error: &str) {
        let mut s = self.state.lock();
        s.failing_since.get_or_insert_with(SystemTime::now);
        s.failures = s.failures.saturating_add(1);
        s.last_error = Some(error.to_owned());
    }

    /// The current health.
    pub(crate) fn snapshot(&self) -> State {
        self.state.lock().clone()
    }

    /// Whether the latest pod watch request failed.
    pub(crate) fn is_failing(&self) -> bool {
        self.state.lock().failing_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_lasts_until_the_next_answer() {
        let h = PodWatchHealth::default();
        assert!(!h.is_failing());
        h.failure("connection refused");
        h.failure("connection refused");
        let s = h.state.lock().clone();
        assert!(h.is_failing());
        assert_eq!(s.failures, 2);
        h.success();
        assert!(!h.is_failing());
        let s = h.state.lock().clone();
        assert_eq!((s.failures, s.last_error), (0, None));
        assert!(s.last_success.is_some());
    }
}
