//! [`Recovery`]: one "the API server answers again" signal shared by every reflector of a
//! manager, so that after an outage all watches resume within about a second instead of each on
//! its own back-off schedule (up to 30 s), and without a stampede.
//!
//! 1. A request that fails because the server is unreachable (a transport error, 503) marks an
//!    outage.
//! 2. During an outage one reflector at a time is the *prober*: it retries every
//!    [`RecoveryConfig::probe_interval`] (jittered) instead of backing off; the others wait for
//!    their back-off or for the signal, whichever comes first. A prober that goes away is
//!    replaced after two probe intervals.
//! 3. The first request that succeeds while an outage is marked ends it and wakes every waiting
//!    reflector.
//! 4. A woken reflector resets its back-off, waits a random delay below
//!    [`RecoveryConfig::spread`], and then retries holding one of
//!    [`RecoveryConfig::concurrency`] permits (released when the server answered), so relists and
//!    re-watches reach the server spread out and bounded.
//! 5. When a watch resumed after the outage is answered `410 Expired`, the server has forgotten
//!    its watch history (a restarted kube-apiserver starts its watch cache afresh): every
//!    reflector woken by the same recovery then lists again at once instead of first resuming
//!    into the same 410 — one request per object after a restart instead of two.
//!
//! The same shared state bounds every reflector request, outage or not: at most
//! `requests_in_flight` await their answer at once ([`Recovery::in_flight`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nodelet_core::backoff::Jitter;
use parking_lot::Mutex;
use tokio::sync::{Semaphore, SemaphorePermit, watch};
use tokio::time::Instant;

use crate::source::SourceError;

/// Options of the shared recovery signal (see [`ManagerConfig`](crate::ManagerConfig)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecoveryConfig {
    pub(crate) probe_interval: Duration,
    pub(crate) spread: Duration,
    pub(crate) concurrency: usize,
    /// Requests of reflectors awaiting their answer at once, at any time ([`Recovery::in_flight`]).
    pub(crate) requests_in_flight: usize,
}

/// The signal and its prober lease; one per manager.
pub(crate) struct Recovery {
    config: RecoveryConfig,
    /// An outage is marked (1).
    outage: AtomicBool,
    /// Bumped at the end of each outage (3).
    recovered: watch::Sender<u64>,
    /// Until when the current prober's lease runs (2).
    prober_until: Mutex<Option<Instant>>,
    /// Retries of woken reflectors (4).
    permits: Semaphore,
    /// Every reflector request awaiting its answer ([`Recovery::in_flight`]).
    in_flight: Semaphore,
    /// 1 + the recovery generation in which a resumed watch was answered `410 Expired` (5);
    /// 0: never.
    expired_in: AtomicU64,
    /// Bumped whenever a pod is registered: reflectors refused for want of a relationship
    /// retry at once (`refusal.rs`, (1)).
    pods_confirmed: watch::Sender<u64>,
}

/// What a reflector does after a failed request.
pub(crate) enum Pause {
    /// Slept its back-off (or was not in an outage).
    BackedOff,
    /// Woken by the end of an outage: retry holding a permit.
    Recovered,
}

impl Recovery {
    pub(crate) fn new(config: RecoveryConfig) -> Self {
        Recovery {
            config,
            outage: AtomicBool::new(false),
            recovered: watch::channel(0).0,
            prober_until: Mutex::new(None),
            permits: Semaphore::new(config.concurrency.max(1)),
            in_flight: Semaphore::new(config.requests_in_flight.max(1)),
            expired_in: AtomicU64::new(0),
            pods_confirmed: watch::channel(0).0,
        }
    }

    /// A pod was registered (the agent's pod watch confirmed it): wakes the reflectors waiting
    /// out a no-relationship refusal (`refusal.rs`, (1)).
    pub(crate) fn pod_confirmed(&self) {
        self.pods_confirmed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits `delay`, or less when a pod is registered meanwhile (then a random delay below
    /// 25 ms, so the woken reflectors do not all ask at once).
    pub(crate) async fn wait_for_relationship(&self, delay: Duration) {
        let mut confirmed = self.pods_confirmed.subscribe();
        confirmed.borrow_and_update();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            changed = confirmed.changed() => {
                if changed.is_ok() {
                    let spread = Jitter::between(0.0, 1.0).apply(Duration::from_millis(25));
                    tokio::time::sleep(spread.min(delay)).await;
                }
            }
        }
    }

    /// Whether `error` says the server is unreachable (1).
    pub(crate) fn is_outage(error: &SourceError) -> bool {
        matches!(
            error,
            SourceError::Transport { .. } | SourceError::Status { code: 503, .. }
        )
    }

    /// A request answered: ends a marked outage and wakes the waiting reflectors (3).
    pub(crate) fn succeeded(&self) {
        if self.outage.swap(false, Ordering::AcqRel) {
            tracing::debug!("API server answers again; resuming every watch");
            self.recovered.send_modify(|n| *n += 1);
            *self.prober_until.lock() = None;
        }
    }

    /// Takes (or renews) the prober lease if nobody holds it.
    fn try_probe(&self, renew: bool) -> bool {
        let now = Instant::now();
        let mut until = self.prober_until.lock();
        if renew || until.is_none_or(|u| u <= now) {
            *until = Some(now + self.config.probe_interval * 2);
            true
        } else {
            false
        }
    }

    /// How many outages ended so far: read before a request, handed to [`Recovery::pause`].
    pub(crate) fn generation(&self) -> u64 {
        *self.recovered.borrow()
    }

    /// After a failed request (sent at [`Recovery::generation`] `seen`): sleep `backoff` unless
    /// this is an outage, where the prober retries soon and the others wake at the end of the
    /// outage — at once if it ended since the request was sent (2), (4).
    pub(crate) async fn pause(
        &self,
        error: &SourceError,
        backoff: Duration,
        probing: &mut bool,
        seen: u64,
    ) -> Pause {
        if !Self::is_outage(error) {
            *probing = false;
            tokio::time::sleep(backoff).await;
            return Pause::BackedOff;
        }
        let mut rx = self.recovered.subscribe();
        if *rx.borrow_and_update() != seen {
            *probing = false;
            self.spread().await;
            return Pause::Recovered;
        }
        self.outage.store(true, Ordering::Release);
        *probing = self.try_probe(*probing);
        if *probing {
            let interval = self.config.probe_interval;
            let jittered = Jitter::between(0.5, 1.0).apply(interval);
            tokio::time::sleep(jittered.min(backoff)).await;
            return Pause::BackedOff;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => Pause::BackedOff,
            changed = rx.changed() => {
                if changed.is_err() {
                    return Pause::BackedOff;
                }
                self.spread().await;
                Pause::Recovered
            }
        }
    }

    /// A random delay below the spread (4).
    async fn spread(&self) {
        let spread = self.config.spread;
        if !spread.is_zero() {
            let delay = Jitter::between(0.0, 1.0).apply(spread);
            tokio::time::sleep(delay).await;
        }
    }

    /// A watch resumed from a resourceVersion sent at generation `seen` was answered
    /// `410 Expired` (5).
    pub(crate) fn saw_expired(&self, seen: u64) {
        if seen > 0 && seen == self.generation() {
            self.expired_in.store(seen + 1, Ordering::Release);
        }
    }

    /// Whether a resumed watch was answered `410 Expired` since the last outage ended: the
    /// server forgot its watch history (a restarted kube-apiserver does), so the woken
    /// reflectors list again at once instead of resuming first (5).
    pub(crate) fn history_forgotten(&self) -> bool {
        let generation = self.generation();
        generation > 0 && self.expired_in.load(Ordering::Acquire) == generation + 1
    }

    /// A permit for the retry of a woken reflector (4).
    pub(crate) async fn permit(&self) -> Option<SemaphorePermit<'_>> {
        self.permits.acquire().await.ok()
    }

    /// A permit for any reflector request (a watch-list, a list, a watch), held until the
    /// server answered (for a watch: its response headers). A thousand objects registered at
    /// once then hold a bounded number of requests — each a few KiB of client futures and
    /// headers — instead of a thousand, which would leave the allocator's heap at that peak
    /// for good.
    pub(crate) async fn in_flight(&self) -> Option<SemaphorePermit<'_>> {
        self.in_flight.acquire().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recovery() -> Recovery {
        Recovery::new(RecoveryConfig {
            probe_interval: Duration::from_millis(200),
            spread: Duration::from_millis(100),
            concurrency: 2,
            requests_in_flight: 64,
        })
    }

    fn unreachable() -> SourceError {
        SourceError::Transport {
            source: std::sync::Arc::new(std::io::Error::other("refused")),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_reflectors_wake_when_a_request_succeeds_not_after_their_back_off() {
        let r = std::sync::Arc::new(recovery());
        // The first becomes the prober and returns after at most one probe interval.
        let mut probing = false;
        let started = Instant::now();
        assert!(matches!(
            r.pause(&unreachable(), Duration::from_secs(30), &mut probing, 0)
                .await,
            Pause::BackedOff
        ));
        assert!(probing);
        assert!(started.elapsed() <= Duration::from_millis(200));
        // The second waits: for 30 s, or until the signal.
        let waiter = {
            let r = r.clone();
            tokio::spawn(async move {
                let mut probing = false;
                let p = r
                    .pause(&unreachable(), Duration::from_secs(30), &mut probing, 0)
                    .await;
                (matches!(p, Pause::Recovered), probing, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let signalled = Instant::now();
        r.succeeded();
        let (recovered, probing, woke) = waiter.await.unwrap_or((false, true, signalled));
        assert!(recovered);
        assert!(!probing);
        // Below the 100 ms spread, plus the timer wheel's 1 ms rounding (a delay of 99.6 ms
        // fires at 100 ms: seen once in a full run).
        assert!(
            woke - signalled <= Duration::from_millis(101),
            "within the spread: {:?}",
            woke - signalled
        );
    }

    #[tokio::test(start_paused = true)]
    async fn errors_other_than_an_outage_sleep_the_whole_back_off() {
        let r = recovery();
        let mut probing = false;
        let started = Instant::now();
        let forbidden = SourceError::status(403, "Forbidden", "no");
        r.pause(&forbidden, Duration::from_secs(3), &mut probing, 0)
            .await;
        assert!(started.elapsed() >= Duration::from_secs(3));
        assert!(!probing);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_failed_before_the_outage_ended_retries_at_once() {
        let r = recovery();
        let seen = r.generation();
        r.outage.store(true, Ordering::Release);
        r.succeeded();
        let started = Instant::now();
        let mut probing = false;
        let p = r
            .pause(&unreachable(), Duration::from_secs(30), &mut probing, seen)
            .await;
        assert!(matches!(p, Pause::Recovered));
        assert!(started.elapsed() < Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_vanished_prober_is_replaced_after_two_probe_intervals() {
        let r = recovery();
        assert!(r.try_probe(false));
        assert!(!r.try_probe(false));
        tokio::time::sleep(Duration::from_millis(401)).await;
        assert!(r.try_probe(false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_410_after_an_outage_marks_the_history_forgotten_until_the_next_outage() {
        let r = recovery();
        // Before any outage ended a 410 says nothing about a restart.
        r.saw_expired(r.generation());
        assert!(!r.history_forgotten());
        r.outage.store(true, Ordering::Release);
        r.succeeded();
        assert!(!r.history_forgotten());
        // A 410 on a request sent before this recovery is stale news.
        r.saw_expired(0);
        assert!(!r.history_forgotten());
        r.saw_expired(r.generation());
        assert!(r.history_forgotten());
        // The next outage's recovery starts unknowing.
        r.outage.store(true, Ordering::Release);
        r.succeeded();
        assert!(!r.history_forgotten());
    }

    #[tokio::test(start_paused = true)]
    async fn a_registered_pod_cuts_short_the_wait_for_a_relationship() {
        let r = std::sync::Arc::new(recovery());
        let waiter = {
            let r = r.clone();
            tokio::spawn(async move {
                r.wait_for_relationship(Duration::from_secs(1)).await;
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let confirmed = Instant::now();
        r.pod_confirmed();
        let woke = waiter.await.unwrap_or(confirmed + Duration::from_secs(1));
        assert!(
            woke - confirmed <= Duration::from_millis(26),
            "{:?}",
            woke - confirmed
        );
        // Without a registration the whole delay.
        let started = Instant::now();
        r.wait_for_relationship(Duration::from_millis(300)).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn woken_retries_are_bounded_by_the_permits() {
        let r = recovery();
        let a = r.permit().await;
        let b = r.permit().await;
        assert!(a.is_some() && b.is_some());
        assert!(r.permits.try_acquire().is_err());
        drop(a);
        assert!(r.permits.try_acquire().is_ok());
    }
}
