//! [`Window`]: how many of the node's requests the API server works on at once, a number that
//! follows the server's answer times (OM-35), so that a starting node takes the server's
//! spare capacity and yields when others need it.
//!
//! 1. A request takes a *place* before it is sent ([`Window::place`]) and holds it until it
//!    was answered in full (a watch-list: until its initial events ended). At most
//!    `floor(limit)` places are held at once; a request that finds none free waits, first come,
//!    first served.
//! 2. A place given back with [`Place::answered`] is a sample of its *class* (a kind of request:
//!    a ConfigMap's watch-list, a Service list, …): its time from sent to answered. The caller
//!    chooses which requests are samples: the agent's are its reads (a write's answer time
//!    varies with the server's own work on it, see [`paced`](crate::paced)). Each class keeps
//!    its *base*, the shortest time seen over the last minute (the server's answer time when
//!    nothing waits ahead of the request); the sample's *queueing delay* is its time minus that
//!    base.
//! 3. The limit follows the queueing delay, as LEDBAT's congestion window does (RFC 6817): each
//!    sample moves it by `(target − delay) / target / limit`, so a delay under the target
//!    grows it by about one place per round of answers, and one over the target shrinks it in
//!    proportion to how far over it is; always within `min ..= max`. A server whose answers
//!    slow down because other clients keep it busy (a burst of pod creations, other nodes
//!    starting) gets fewer of this node's requests until they speed up again.
//!    Below one place (a `min` under 1) one request is outstanding at a time, and the next is
//!    sent only after a pause of `took × (1/limit − 1)` after the last answer: a window of
//!    ½ sends one request every two answer times.
//! 4. A place dropped without [`Place::answered`] (a failed or refused request, a cancelled
//!    one) is given back and says nothing about the server.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// How a [`Window`] moves (3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowConfig {
    /// Places at least (> 0; under 1: a pause between requests, see (3)).
    pub min: f64,
    /// Places at most, and at the start (≥ 1, ≥ `min`).
    pub max: usize,
    /// The queueing delay the window aims at: under it the window grows, over it it shrinks.
    pub target: Duration,
}

/// The base history of a class (2): the shortest time of each [`BASE_SPAN`] that had samples,
/// over the last [`BASE_HISTORY`].
const BASE_SPAN: Duration = Duration::from_secs(10);
const BASE_HISTORY: Duration = Duration::from_secs(60);

/// What a [`Window`] did so far (for `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowStats {
    /// Places now (`floor(limit)`).
    pub limit: usize,
    /// The fewest places it had.
    pub lowest: usize,
    /// Samples taken (2).
    pub samples: u64,
    /// Of those, samples whose queueing delay was over the target.
    pub over_target: u64,
    /// Places that waited a pause below one place (3) before their request was sent.
    pub pauses: u64,
    /// The time those pauses took together.
    pub paused: Duration,
}

/// The window of the node's outstanding requests (see the module docs). Cloning shares it.
#[derive(Debug, Clone)]
pub struct Window {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: WindowConfig,
    places: Arc<Semaphore>,
    control: Mutex<Control>,
}

#[derive(Debug)]
struct Control {
    /// The window's size, fractional (3).
    limit: f64,
    /// Permits in existence, held or free: `floor(limit)` once those held over it came back.
    permits: usize,
    /// Below one place: when the next place may be used (3).
    resume_at: Option<Instant>,
    bases: HashMap<String, Base>,
    stats: WindowStats,
}

/// A class's shortest times (2), oldest span first.
#[derive(Debug, Default)]
struct Base {
    spans: VecDeque<(Instant, Duration)>,
}

/// A held place (1); give it back with [`Place::answered`] or by dropping it (4).
#[derive(Debug)]
pub struct Place {
    permit: Option<OwnedSemaphorePermit>,
    shared: Arc<Shared>,
    class: String,
    sent: Instant,
}

impl Window {
    /// A window of `config`, starting at `config.max` places.
    pub fn new(config: WindowConfig) -> Self {
        let max = config.max.max(1);
        let min = if config.min > 0.0 { config.min } else { 1.0 };
        let config = WindowConfig {
            min: min.min(count_f64(max)),
            max,
            target: config.target.max(Duration::from_micros(100)),
        };
        Window {
            shared: Arc::new(Shared {
                config,
                places: Arc::new(Semaphore::new(config.max)),
                control: Mutex::new(Control {
                    limit: count_f64(config.max),
                    permits: config.max,
                    resume_at: None,
                    bases: HashMap::new(),
                    stats: WindowStats {
                        limit: config.max,
                        lowest: config.max,
                        ..WindowStats::default()
                    },
                }),
            }),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> WindowConfig {
        self.shared.config
    }

    /// Waits for a place for a request of `class` (1), in call order; its time counts from
    /// now.
    ///
    /// # Cancel safety
    /// Cancel-safe: a waiter dropped holds no place.
    pub async fn place(&self, class: &str) -> Place {
        let permit = self.shared.places.clone().acquire_owned().await.ok();
        let mut place = Place {
            permit,
            shared: self.shared.clone(),
            class: class.to_owned(),
            sent: Instant::now(),
        };
        // Below one place: the pause after the last answer (3). Dropped meanwhile, the place
        // is given back.
        let resume_at = self.shared.control.lock().resume_at;
        if let Some(at) = resume_at
            && at > place.sent
        {
            tokio::time::sleep_until(at).await;
            let now = Instant::now();
            let mut control = self.shared.control.lock();
            control.stats.pauses += 1;
            control.stats.paused += now.saturating_duration_since(place.sent);
            drop(control);
            place.sent = now;
        }
        place
    }

    /// What it did so far.
    pub fn stats(&self) -> WindowStats {
        self.shared.control.lock().stats
    }
}

impl Place {
    /// The request was answered in full: its time is a sample of its class (2), (3).
    pub fn answered(self) {
        let took = self.sent.elapsed();
        self.shared.sample(&self.class, took, Instant::now());
        // Dropped here: the place is given back.
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let mut control = self.shared.control.lock();
        if control.permits > floor(control.limit) {
            // The window shrank while this place was held: the place goes with it.
            permit.forget();
            control.permits -= 1;
        }
    }
}

impl Shared {
    /// (2), (3): a sample of `class` that took `took`, answered at `now`.
    fn sample(&self, class: &str, took: Duration, now: Instant) {
        let config = self.config;
        let mut control = self.control.lock();
        let base = match control.bases.get_mut(class) {
            Some(base) => base.record(now, took),
            None => {
                let mut base = Base::default();
                let shortest = base.record(now, took);
                control.bases.insert(class.to_owned(), base);
                shortest
            }
        };
        let delay = took.saturating_sub(base);
        let target = config.target.as_secs_f64();
        let off_target = (target - delay.as_secs_f64()) / target;
        let limit = control.limit;
        control.limit = (limit + off_target / limit).clamp(config.min, count_f64(config.max));
        control.resume_at =
            (control.limit < 1.0).then(|| now + took.mul_f64(1.0 / control.limit - 1.0));
        control.stats.samples += 1;
        if delay > config.target {
            control.stats.over_target += 1;
        }
        let places = floor(control.limit);
        if places > control.permits {
            self.places.add_permits(places - control.permits);
            control.permits = places;
        }
        control.stats.limit = places;
        control.stats.lowest = control.stats.lowest.min(places);
        tracing::trace!(
            class,
            took_us = took.as_micros(),
            base_us = base.as_micros(),
            limit = control.limit,
            "window sample"
        );
    }
}

impl Base {
    /// Records `took` at `now`; the shortest time of the spans kept.
    fn record(&mut self, now: Instant, took: Duration) -> Duration {
        match self.spans.back_mut() {
            Some((start, shortest)) if now.saturating_duration_since(*start) < BASE_SPAN => {
                *shortest = (*shortest).min(took);
            }
            _ => self.spans.push_back((now, took)),
        }
        while self
            .spans
            .front()
            .is_some_and(|(start, _)| now.saturating_duration_since(*start) >= BASE_HISTORY)
        {
            self.spans.pop_front();
        }
        self.spans
            .iter()
            .map(|(_, shortest)| *shortest)
            .min()
            .unwrap_or(took)
    }
}

/// `limit`'s whole places (at least one).
fn floor(limit: f64) -> usize {
    // The limit stays within `min ..= max`, small positive numbers.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let places = limit.floor() as usize;
    places.max(1)
}

fn count_f64(n: usize) -> f64 {
    u32::try_from(n).map_or(f64::from(u32::MAX), f64::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(min: f64, max: usize, target_ms: u64) -> Window {
        Window::new(WindowConfig {
            min,
            max,
            target: Duration::from_millis(target_ms),
        })
    }

    /// A request of `class` that takes `took` from its place to its answer.
    async fn request(w: &Window, class: &str, took: Duration) {
        let place = w.place(class).await;
        tokio::time::sleep(took).await;
        place.answered();
    }

    #[tokio::test(start_paused = true)]
    async fn answers_slower_than_the_base_by_more_than_the_target_shrink_the_window_to_its_minimum()
    {
        let w = window(1.0, 8, 2);
        request(&w, "watch-list", Duration::from_millis(1)).await;
        assert_eq!(w.stats().limit, 8, "at the base: the window stays full");
        for _ in 0..20 {
            request(&w, "watch-list", Duration::from_millis(11)).await;
        }
        let stats = w.stats();
        assert_eq!((stats.limit, stats.lowest), (1, 1), "{stats:?}");
        assert_eq!(stats.over_target, 20);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_back_at_the_base_grow_the_window_again_by_about_one_place_a_round() {
        let w = window(1.0, 8, 2);
        request(&w, "token", Duration::from_millis(1)).await;
        for _ in 0..10 {
            request(&w, "token", Duration::from_millis(20)).await;
        }
        assert_eq!(w.stats().limit, 1);
        // One place: each answer at the base adds a whole place.
        request(&w, "token", Duration::from_millis(1)).await;
        assert_eq!(w.stats().limit, 2);
        // Two places: each answer adds 1/limit (2 → 2.5 → 2.9 → 3.24), a place in about a
        // round of answers.
        request(&w, "token", Duration::from_millis(1)).await;
        request(&w, "token", Duration::from_millis(1)).await;
        assert_eq!(w.stats().limit, 2);
        request(&w, "token", Duration::from_millis(1)).await;
        assert_eq!(w.stats().limit, 3);
        for _ in 0..40 {
            request(&w, "token", Duration::from_millis(1)).await;
        }
        assert_eq!(w.stats().limit, 8, "never past the maximum");
    }

    #[tokio::test(start_paused = true)]
    async fn each_class_is_measured_against_its_own_base() {
        let w = window(1.0, 8, 2);
        // A patch takes 10 ms at its best, a watch-list 1 ms: neither is slowed.
        for _ in 0..5 {
            request(&w, "patch", Duration::from_millis(10)).await;
            request(&w, "watch-list", Duration::from_millis(1)).await;
        }
        let stats = w.stats();
        assert_eq!((stats.limit, stats.over_target), (8, 0), "{stats:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shrunk_window_holds_no_more_places_than_its_limit() {
        let w = window(1.0, 4, 2);
        request(&w, "a", Duration::from_millis(1)).await;
        let held: Vec<Place> = futures::future::join_all((0..4).map(|_| w.place("a"))).await;
        // The four come back slow: the window shrinks to one place while they are held.
        for place in held {
            tokio::time::sleep(Duration::from_millis(30)).await;
            place.answered();
        }
        assert_eq!(w.stats().limit, 1);
        let first = w.place("a").await;
        let second = {
            let w = w.clone();
            tokio::spawn(async move { w.place("a").await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!second.is_finished(), "one place only");
        drop(first);
        let second = tokio::time::timeout(Duration::from_millis(5), second).await;
        assert!(second.is_ok(), "the place given back lets the waiter in");
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_dropped_unanswered_is_given_back_and_measures_nothing() {
        let w = window(1.0, 1, 2);
        let place = w.place("a").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(place);
        let again = tokio::time::timeout(Duration::from_millis(1), w.place("a")).await;
        assert!(again.is_ok(), "given back");
        assert_eq!(w.stats().samples, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_get_their_places_in_call_order_and_a_cancelled_one_holds_none() {
        let w = window(1.0, 1, 2);
        let held = w.place("a").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in 0..3 {
            let (w, order) = (w.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let place = w.place("a").await;
                order.lock().push(n);
                drop(place);
            }));
            tokio::task::yield_now().await;
        }
        // The second waiter gives up.
        tasks[1].abort();
        tokio::task::yield_now().await;
        drop(held);
        for t in tasks {
            let _ = t.await;
        }
        assert_eq!(*order.lock(), vec![0, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn below_one_place_the_next_request_waits_a_pause_after_the_last_answer() {
        let w = window(0.25, 4, 2);
        request(&w, "a", Duration::from_millis(1)).await;
        for _ in 0..20 {
            request(&w, "a", Duration::from_millis(40)).await;
        }
        // The limit is at its minimum, ¼: the last answer (40 ms) is followed by a pause of
        // 40 × (4 − 1) = 120 ms.
        let asked = Instant::now();
        let place = w.place("a").await;
        assert_eq!(asked.elapsed(), Duration::from_millis(120));
        drop(place);
        let stats = w.stats();
        assert!(stats.pauses >= 1, "{stats:?}");
        assert!(stats.paused >= Duration::from_millis(120), "{stats:?}");
        // Answers at the base grow it back over one place: no pause.
        for _ in 0..8 {
            request(&w, "a", Duration::from_millis(1)).await;
        }
        let asked = Instant::now();
        let _place = w.place("a").await;
        assert_eq!(asked.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_base_forgets_a_minute_old_best() {
        let w = window(1.0, 8, 2);
        // A quick answer, then the server is slower for good (larger objects, say).
        request(&w, "a", Duration::from_millis(1)).await;
        tokio::time::sleep(Duration::from_secs(61)).await;
        for _ in 0..3 {
            request(&w, "a", Duration::from_millis(9)).await;
        }
        let before = w.stats().over_target;
        for _ in 0..3 {
            request(&w, "a", Duration::from_millis(9)).await;
        }
        assert_eq!(
            w.stats().over_target,
            before,
            "measured against the newer base"
        );
    }
}
