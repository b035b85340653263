//! [`Refusals`]: what a reflector does when the API server refuses it (401, 403), and in
//! particular with the Node authorizer's `no relationship found between node '<node>' and this
//! object`.
//!
//! The Node authorizer lets a node read a Secret or ConfigMap only when a pod bound to the node
//! references it, and it answers from a graph it fills from its own informers. That graph
//! trails the API: a pod's objects are refused for a moment after the pod is bound, and every
//! object is refused after a server restart until the graph is rebuilt. A reflector only runs
//! for an object a registered pod references, so such a refusal is, at first, the graph
//! lagging — and the ordinary back-off (doubling to 30 s) would turn a window of tens of
//! milliseconds into seconds (measured on a v1.36 server: 10–27 s after a restart, p99 1.5 s
//! from pod to volume under churn).
//!
//! Rules (markers `// (n)` below):
//! 1. A no-relationship refusal ([`SourceError::is_no_relationship`]) is retried on a schedule
//!    of its own: after 25–50 ms, then doubling up to 0.5–1 s
//!    ([`Schedule::AUTHORIZER_LAG`]), and at once
//!    when a pod is registered with the manager again (the agent's pod watch confirmed a pod, a
//!    sign the server's informers have caught up). The reflector's back-off does not grow.
//! 2. Such refusals for longer than the grace period in a row (`ManagerConfig::
//!    relationship_grace`, 30 s by default: a restarted server rebuilds its graph from a full
//!    list of the cluster's pods, seconds on a large cluster) are a real denial: reported once
//!    at WARN with the server's text, then retried on the ordinary back-off.
//! 3. Any other 401 or 403 is a real denial at once: reported once at WARN, ordinary back-off.
//! 4. An answered request (a list, a watch, a watch-list) ends the run of refusals: the next
//!    refusal starts at (1) and is reported again.

use std::time::Duration;

use nodelet_core::backoff::Schedule;
use tokio::time::Instant;

use crate::source::SourceError;

/// What to do after a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The authorizer's graph lags: retry after this delay (or when a pod is registered), with
    /// the back-off untouched (1).
    Lagging(Duration),
    /// Refused for good: back off; `report` for the first refusal of a run (2), (3).
    Denied {
        /// Log it at WARN.
        report: bool,
    },
    /// Not a refusal: the caller's usual handling.
    Other,
}

/// One reflector run's record of refusals in a row (16 bytes: kept in every run).
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// When the current run of no-relationship refusals began (1).
    lagging_since: Option<Instant>,
    /// No-relationship refusals retried in the current run (1).
    attempts: u8,
    /// This run of refusals was reported (2), (3).
    reported: bool,
}

impl Refusals {
    /// Classifies a failed request made at `now`; no-relationship refusals are lag for `grace`.
    pub(crate) fn failed(&mut self, error: &SourceError, now: Instant, grace: Duration) -> Verdict {
        if error.is_no_relationship() {
            let since = *self.lagging_since.get_or_insert(now);
            if now.saturating_duration_since(since) < grace {
                let delay = Schedule::AUTHORIZER_LAG.delay(self.attempts.into());
                self.attempts = self.attempts.saturating_add(1);
                return Verdict::Lagging(delay); // (1)
            }
        } else if !matches!(
            error,
            SourceError::Status {
                code: 401 | 403,
                ..
            }
        ) {
            return Verdict::Other;
        }
        // (2), (3)
        let report = !std::mem::replace(&mut self.reported, true);
        Verdict::Denied { report }
    }

    /// The server answered a request: the run of refusals is over (4).
    pub(crate) fn answered(&mut self) {
        *self = Refusals::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(30);
    const LAG_FIRST: Duration = Schedule::AUTHORIZER_LAG.initial;
    const LAG_MAX: Duration = Schedule::AUTHORIZER_LAG.max;

    fn no_relationship() -> SourceError {
        SourceError::status(
            403,
            "Forbidden",
            "secrets \"s\" is forbidden: User \"system:node:n1\" cannot watch resource \"secrets\" \
             in API group \"\" in the namespace \"ns\": no relationship found between node 'n1' \
             and this object",
        )
    }

    #[test]
    fn lag_retries_start_below_50_ms_and_double_to_at_most_a_second() {
        let bounds: Vec<(u128, u128)> = (0..8)
            .map(|a| {
                let d: Vec<Duration> = (0..200)
                    .map(|_| Schedule::AUTHORIZER_LAG.delay(a))
                    .collect();
                let lo = d.iter().min().copied().unwrap_or_default();
                let hi = d.iter().max().copied().unwrap_or_default();
                (lo.as_millis(), hi.as_millis())
            })
            .collect();
        for (attempt, (lo, hi)) in bounds.iter().enumerate() {
            let step = (50u128 << attempt.min(5)).min(1000);
            assert!(
                *lo >= step / 2 && *hi < step,
                "attempt {attempt}: {lo}..{hi}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn no_relationship_is_lag_for_the_grace_period_then_a_denial_reported_once() {
        let mut r = Refusals::default();
        let start = Instant::now();
        let mut waited = Duration::ZERO;
        let mut retries = 0;
        loop {
            match r.failed(&no_relationship(), Instant::now(), GRACE) {
                Verdict::Lagging(d) => {
                    assert!(d < LAG_MAX, "{d:?}");
                    retries += 1;
                    waited += d;
                    tokio::time::advance(d).await;
                }
                Verdict::Denied { report } => {
                    assert!(report, "the first denial is reported");
                    break;
                }
                Verdict::Other => panic!("a 403 is a refusal"),
            }
        }
        assert!(start.elapsed() >= GRACE);
        // Capped at 1 s: about one retry a second after the first few.
        assert!(retries >= 30, "{retries} retries in {waited:?}");
        assert_eq!(
            r.failed(&no_relationship(), Instant::now(), GRACE),
            Verdict::Denied { report: false },
            "reported once per run of refusals"
        );
        r.answered();
        assert!(matches!(
            r.failed(&no_relationship(), Instant::now(), GRACE),
            Verdict::Lagging(d) if d < LAG_FIRST
        ));
    }

    #[test]
    fn other_refusals_are_denials_at_once_and_other_errors_are_not_refusals() {
        let mut r = Refusals::default();
        let now = Instant::now();
        let denied = SourceError::status(403, "Forbidden", "secrets \"s\" is forbidden: nope");
        assert_eq!(
            r.failed(&denied, now, GRACE),
            Verdict::Denied { report: true }
        );
        assert_eq!(
            r.failed(&denied, now, GRACE),
            Verdict::Denied { report: false }
        );
        let unauthorized = SourceError::status(401, "Unauthorized", "Unauthorized");
        assert_eq!(
            r.failed(&unauthorized, now, GRACE),
            Verdict::Denied { report: false }
        );
        let mut fresh = Refusals::default();
        let internal = SourceError::status(500, "InternalError", "boom");
        assert_eq!(fresh.failed(&internal, now, GRACE), Verdict::Other);
        assert_eq!(
            fresh.failed(&SourceError::status(410, "Expired", "too old"), now, GRACE),
            Verdict::Other
        );
    }
}
