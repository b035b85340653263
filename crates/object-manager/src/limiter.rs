//! [`ReadLimiter`]: a token bucket for the reads that load the API server at a node's start
//! (OM-30): each reflector's first watch-list or LIST, and every GET of the Get and Cache
//! strategies. A node starting with a thousand referenced objects then asks at most `burst`
//! at once and `qps` per second after that, in the order the reads were asked for (pod by pod,
//! as the pods are registered), instead of all of them within the first pod POSTs.
//!
//! 1. A read takes a token; the bucket holds at most `burst` and gains `qps` per second.
//! 2. A read that finds none *reserves* the next one: the bucket goes below zero and the read
//!    waits until its own token has accrued. Reservations are made in call order, so reads
//!    are answered first come, first served, each waking exactly once at its time (no polling,
//!    no herd of retries).
//! 3. An established watch and its resumes never take a token: propagation of a change does
//!    not wait for the bucket.
//!
//! 4. With a [`Window`] ([`ReadLimiter::with_window`], OM-34, OM-35), a read also holds a
//!    place in the node's window of outstanding requests from the moment it is sent until the
//!    server answered it in full (a watch-list: until its initial events ended), and a read
//!    that finds the window full waits for a place, in call order. The bucket bounds how many
//!    reads a second; the window how many the server works on for this node at any moment,
//!    and it narrows while the server's answers slow down (see [`Window`]).
//!
//! The bucket is shared: the agent hands one to its ConfigMap and Secret managers, so the
//! node's first reads together keep to `kubeAPIQPS` / `kubeAPIBurst`, and draws the node's
//! other non-watch requests from the same bucket and window through [`ReadLimiter::sharing`]
//! (OM-33), each user counted on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::source::{Listed, ObjectSource, ReadFrom, SourceError, WatchStream};
use crate::window::{Place, Window};

/// A shared token bucket for first reads (see the module docs). Cloning shares the bucket;
/// [`ReadLimiter::unlimited`] (the default) never waits.
#[derive(Debug, Clone, Default)]
pub struct ReadLimiter {
    bucket: Option<Arc<Bucket>>,
    /// The node's window of outstanding requests (4); `None`: no bound.
    window: Option<Window>,
    /// What this user of the bucket took ([`ReadLimiter::sharing`] starts a count of its own).
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    reads: AtomicU64,
    delayed: AtomicU64,
    waited_micros: AtomicU64,
}

/// The settings of a [`ReadLimiter`], as the kubelet's `kubeAPIQPS` and `kubeAPIBurst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadLimits {
    /// Tokens gained per second (> 0).
    pub qps: f64,
    /// Tokens the bucket holds at most, and holds at the start (≥ 1).
    pub burst: u32,
}

/// What a [`ReadLimiter`] did so far (for `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimiterStats {
    /// Reads that took a token.
    pub reads: u64,
    /// Of those, reads that had to wait for theirs.
    pub delayed: u64,
    /// Their waits, summed.
    pub waited: Duration,
}

#[derive(Debug)]
struct Bucket {
    limits: ReadLimits,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Tokens at `at`; below zero while reads wait for reserved tokens (2).
    tokens: f64,
    at: Instant,
}

impl ReadLimiter {
    /// A bucket of `limits`, full.
    pub fn new(limits: ReadLimits) -> Self {
        let limits = ReadLimits {
            qps: if limits.qps > 0.0 { limits.qps } else { 1.0 },
            burst: limits.burst.max(1),
        };
        ReadLimiter {
            bucket: Some(Arc::new(Bucket {
                limits,
                state: Mutex::new(State {
                    tokens: f64::from(limits.burst),
                    at: Instant::now(),
                }),
            })),
            window: None,
            counts: Arc::default(),
        }
    }

    /// This bucket with `window` (4), OM-34, OM-35: its reads, and those of every
    /// [`ReadLimiter::sharing`] it, take places there.
    #[must_use]
    pub fn with_window(mut self, window: Window) -> Self {
        self.window = Some(window);
        self
    }

    /// Its window; `None` without one.
    pub fn window(&self) -> Option<&Window> {
        self.window.as_ref()
    }

    /// Waits for a place in the window (4) for a request of `class`, in call order; the place
    /// is held until it is answered ([`Place::answered`]) or dropped. `None` at once without a
    /// window.
    ///
    /// # Cancel safety
    /// Cancel-safe: a waiter dropped holds no place.
    pub async fn place(&self, class: &str) -> Option<Place> {
        Some(self.window.as_ref()?.place(class).await)
    }

    /// A limiter that never waits.
    pub fn unlimited() -> Self {
        ReadLimiter::default()
    }

    /// Another user of the same bucket and window: its requests take the same tokens and
    /// places, in the same first come, first served order, and are counted in its own
    /// [`ReadLimiter::stats`] (OM-33).
    pub fn sharing(&self) -> Self {
        ReadLimiter {
            bucket: self.bucket.clone(),
            window: self.window.clone(),
            counts: Arc::default(),
        }
    }

    /// Its limits; `None` when unlimited.
    pub fn limits(&self) -> Option<ReadLimits> {
        self.bucket.as_ref().map(|b| b.limits)
    }

    /// Waits for this read's token (1), (2).
    ///
    /// # Cancel safety
    /// A read dropped while it waits keeps its reservation: the token is spent, as the
    /// request it stood for might have been.
    pub async fn acquire(&self) {
        let Some(bucket) = &self.bucket else {
            return;
        };
        let wait = bucket.reserve(Instant::now());
        let counts = &self.counts;
        counts.reads.fetch_add(1, Ordering::Relaxed);
        if !wait.is_zero() {
            counts.delayed.fetch_add(1, Ordering::Relaxed);
            let micros = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
            counts.waited_micros.fetch_add(micros, Ordering::Relaxed);
            tokio::time::sleep(wait).await;
        }
    }

    /// What this user of the bucket did so far (zero when unlimited): its clones' requests
    /// included, those of a [`ReadLimiter::sharing`] not.
    pub fn stats(&self) -> LimiterStats {
        let c = &self.counts;
        LimiterStats {
            reads: c.reads.load(Ordering::Relaxed),
            delayed: c.delayed.load(Ordering::Relaxed),
            waited: Duration::from_micros(c.waited_micros.load(Ordering::Relaxed)),
        }
    }
}

/// An [`ObjectSource`] whose GETs and LISTs take a token first (the Get and Cache strategies,
/// OM-30); watches pass straight through.
pub(crate) struct Limited<K> {
    pub(crate) inner: Arc<dyn ObjectSource<K>>,
    pub(crate) limiter: ReadLimiter,
    /// The window's classes of its GETs and LISTs (OM-35), e.g. `GET configmaps`.
    pub(crate) classes: [&'static str; 2],
}

#[async_trait::async_trait]
impl<K: Send + Sync + 'static> ObjectSource<K> for Limited<K> {
    async fn get(&self, namespace: &str, name: &str, read: ReadFrom) -> Result<K, SourceError> {
        self.limiter.acquire().await;
        let place = self.limiter.place(self.classes[0]).await;
        answered(place, self.inner.get(namespace, name, read).await)
    }

    async fn list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Listed<K>, SourceError> {
        self.limiter.acquire().await;
        let place = self.limiter.place(self.classes[1]).await;
        answered(place, self.inner.list(namespace, name, read).await)
    }

    async fn watch(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<WatchStream<K>, SourceError> {
        self.inner.watch(namespace, name, resource_version).await
    }

    async fn watch_list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Option<WatchStream<K>>, SourceError> {
        self.inner.watch_list(namespace, name, read).await
    }
}

/// Gives `place` back, as a sample when `result` is an answer of the server's (an object or
/// an API error) and not a failure to reach it.
fn answered<T>(place: Option<Place>, result: Result<T, SourceError>) -> Result<T, SourceError> {
    if let Some(place) = place
        && result.as_ref().err().is_none_or(SourceError::is_answer)
    {
        place.answered();
    }
    result
}

impl Bucket {
    /// Takes a token at `now`: how long until it has accrued (zero: at once).
    fn reserve(&self, now: Instant) -> Duration {
        let mut state = self.state.lock();
        let elapsed = now.saturating_duration_since(state.at).as_secs_f64();
        let burst = f64::from(self.limits.burst);
        state.tokens = (state.tokens + elapsed * self.limits.qps).min(burst);
        state.at = now.max(state.at);
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-state.tokens / self.limits.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(qps: f64, burst: u32) -> ReadLimiter {
        ReadLimiter::new(ReadLimits { qps, burst })
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_lets_the_burst_through_at_once_then_qps_per_second() {
        let l = limiter(50.0, 100);
        let started = Instant::now();
        for _ in 0..100 {
            l.acquire().await;
        }
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the burst waits for nothing"
        );
        for _ in 0..50 {
            l.acquire().await;
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(999) && elapsed <= Duration::from_millis(1001),
            "50 more at 50/s: {elapsed:?}"
        );
        let stats = l.stats();
        assert_eq!((stats.reads, stats.delayed), (150, 50));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_reads_are_served_in_the_order_they_asked() {
        let l = limiter(10.0, 1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in 0..5 {
            let (l, order) = (l.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                l.acquire().await;
                order.lock().push((n, Instant::now()));
            }));
            // Asked in this order.
            tokio::task::yield_now().await;
        }
        for t in tasks {
            let _ = t.await;
        }
        let order = order.lock().clone();
        let names: Vec<i32> = order.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, vec![0, 1, 2, 3, 4]);
        // One every 100 ms after the first.
        let first = order[0].1;
        for (k, (_, at)) in order.iter().enumerate() {
            let expected = Duration::from_millis(100) * u32::try_from(k).unwrap_or(0);
            let got = at.duration_since(first);
            assert!(
                got.abs_diff(expected) <= Duration::from_millis(1),
                "{k}: {got:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_bucket_refills_up_to_its_burst_and_no_further() {
        let l = limiter(100.0, 10);
        for _ in 0..10 {
            l.acquire().await;
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        let started = Instant::now();
        for _ in 0..10 {
            l.acquire().await;
        }
        assert_eq!(started.elapsed(), Duration::ZERO, "refilled to the burst");
        l.acquire().await;
        assert!(
            started.elapsed() >= Duration::from_millis(9),
            "not beyond it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_holds_its_places_for_every_user_of_the_bucket_in_call_order() {
        let window = Window::new(crate::window::WindowConfig {
            min: 1.0,
            max: 2,
            target: Duration::from_millis(5),
        });
        let l = limiter(1000.0, 100).with_window(window);
        let first = l.place("a").await;
        let second = l.sharing().place("b").await;
        assert!(first.is_some() && second.is_some());
        let waiter = {
            let l = l.clone();
            tokio::spawn(async move { l.place("a").await.is_some() })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished(), "the window is full");
        drop(second);
        assert!(
            waiter.await.unwrap_or(false),
            "a place given back lets the waiter in"
        );
        assert!(
            limiter(1.0, 1).place("a").await.is_none(),
            "no window: no place"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits_nor_counts() {
        let l = ReadLimiter::unlimited();
        let started = Instant::now();
        for _ in 0..10_000 {
            l.acquire().await;
        }
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(l.stats(), LimiterStats::default());
        assert_eq!(l.limits(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn clones_share_one_bucket() {
        let a = limiter(1.0, 2);
        let b = a.clone();
        a.acquire().await;
        b.acquire().await;
        let started = Instant::now();
        a.acquire().await;
        assert!(started.elapsed() >= Duration::from_millis(999));
        assert_eq!(b.stats().reads, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sharing_limiter_takes_from_the_same_bucket_and_counts_on_its_own() {
        let reads = limiter(10.0, 2);
        let others = reads.sharing();
        reads.acquire().await;
        others.acquire().await;
        let started = Instant::now();
        others.acquire().await;
        assert!(
            started.elapsed() >= Duration::from_millis(99),
            "the burst of 2 was spent by both users together"
        );
        // Reserved in call order across users: the read asked after waits behind it.
        reads.acquire().await;
        assert!(started.elapsed() >= Duration::from_millis(199));
        assert_eq!((reads.stats().reads, reads.stats().delayed), (2, 1));
        assert_eq!((others.stats().reads, others.stats().delayed), (2, 1));
        assert_eq!(ReadLimiter::unlimited().sharing().limits(), None);
    }
}
