//! [`Backoff`] and [`Jitter`]: the one exponential back-off and the one jitter of the node
//! crates (reflector reconnects, volume operation retries, pod worker resyncs, outage probes),
//! and [`Schedule`]: a back-off's values, with the kubelet's schedules as constants (crash
//! loop, the object watches, the Service watch, the Node authorizer's lag).

use std::time::Duration;

use rand::Rng as _;

/// Random spread applied to a delay, so that many waiters started together do not wake
/// together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// The delay as it is.
    None,
    /// The delay scaled by a factor drawn uniformly from `[low, high)`.
    Scale {
        /// Smallest factor.
        low: f64,
        /// Largest factor (excluded).
        high: f64,
    },
}

impl Jitter {
    /// Adds up to `fraction` of the delay: `d × [1, 1 + fraction)`.
    pub fn up_to(fraction: f64) -> Self {
        Self::between(1.0, 1.0 + fraction)
    }

    /// Scales the delay by a factor in `[low, high)`.
    pub fn between(low: f64, high: f64) -> Self {
        Jitter::Scale { low, high }
    }

    /// `delay` with this jitter applied. A range that is empty or not finite scales by `low`
    /// (and a negative factor by 0).
    pub fn apply(self, delay: Duration) -> Duration {
        match self {
            Jitter::None => delay,
            Jitter::Scale { low, high } => {
                let factor = if low < high && low.is_finite() && high.is_finite() {
                    rand::rng().random_range(low..high)
                } else {
                    low
                };
                if factor.is_finite() && factor > 0.0 {
                    delay.mul_f64(factor)
                } else {
                    Duration::ZERO
                }
            }
        }
    }
}

/// Exponential back-off: `initial`, then doubled after each delay up to `max`; each delay
/// jittered by [`Jitter`] and never above `max`. [`Backoff::reset`] starts over.
///
/// ```
/// use std::time::Duration;
/// use nodelet_core::backoff::Backoff;
///
/// let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(2));
/// let delays: Vec<u64> = (0..4).map(|_| b.next_delay().as_millis() as u64).collect();
/// assert_eq!(delays, [500, 1000, 2000, 2000]);
/// b.reset();
/// assert_eq!(b.next_delay(), Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: Jitter,
    step: Duration,
    last: Option<Duration>,
}

impl Backoff {
    /// A back-off from `initial` to `max`, without jitter.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            jitter: Jitter::None,
            step: initial,
            last: None,
        }
    }

    /// The same back-off with `jitter` applied to each delay.
    #[must_use]
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The next delay (the current step, jittered, at most `max`); the step doubles.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = step.saturating_mul(2).min(self.max);
        let delay = self.jitter.apply(step).min(self.max);
        self.last = Some(delay);
        delay
    }

    /// The delay [`Backoff::next_delay`] returned last, if any since the last reset.
    pub fn last_delay(&self) -> Option<Duration> {
        self.last
    }

    /// Starts over from `initial`.
    pub fn reset(&mut self) {
        self.step = self.initial;
        self.last = None;
    }
}

/// The values of a back-off: its first and largest delay, its jitter, and how long a run
/// lasts before it starts over (for a back-off that counts failures of something that runs).
/// [`Schedule::backoff`] makes a [`Backoff`] of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay.
    pub max: Duration,
    /// The spread of each delay.
    pub jitter: Jitter,
    /// A run this long resets the back-off (`None`: only success does).
    pub reset_after: Option<Duration>,
}

impl Schedule {
    /// The kubelet's crash-loop back-off of a container that ended: 10 s doubling to 5 min
    /// (`MaxContainerBackOff`), reset after an instance ran 10 min.
    pub const CRASH_LOOP: Self = Self {
        initial: Duration::from_secs(10),
        max: Duration::from_secs(300),
        jitter: Jitter::None,
        reset_after: Some(Duration::from_secs(600)),
    };

    /// An object watch's reconnect (client-go's reflector): 800 ms doubling to 30 s, each
    /// delay plus up to 100 %.
    pub const WATCH: Self = Self {
        initial: Duration::from_millis(800),
        max: Duration::from_secs(30),
        jitter: Jitter::Scale {
            low: 1.0,
            high: 2.0,
        },
        reset_after: None,
    };

    /// The node's Service watch after a failed request: 1 s doubling to 30 s (client-go's
    /// informer's cap), each delay plus up to a half.
    pub const SERVICE_WATCH: Self = Self {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(30),
        jitter: Jitter::Scale {
            low: 1.0,
            high: 1.5,
        },
        reset_after: None,
    };

    /// A request the Node authorizer refused for want of a link its graph does not have yet
    /// (`no relationship found`: the graph trails the API): 50 ms doubling to 1 s, each delay
    /// scaled by a factor in [0.5, 1), so that the many requests refused together spread.
    pub const AUTHORIZER_LAG: Self = Self {
        initial: Duration::from_millis(50),
        max: Duration::from_secs(1),
        jitter: Jitter::Scale {
            low: 0.5,
            high: 1.0,
        },
        reset_after: None,
    };

    /// The delay before retry number `attempt` (from 0): `initial` doubled `attempt` times,
    /// at most `max`, jittered, never above `max`. For a caller that counts its retries
    /// itself instead of keeping a [`Backoff`].
    pub fn delay(self, attempt: u32) -> Duration {
        let step = self
            .initial
            .saturating_mul(1u32 << attempt.min(31))
            .min(self.max);
        self.jitter.apply(step).min(self.max)
    }

    /// A fresh [`Backoff`] on this schedule.
    pub fn backoff(self) -> Backoff {
        Backoff::new(self.initial, self.max).with_jitter(self.jitter)
    }

    /// The delay after a run that lasted `ran`, when the previous delay was `previous`
    /// (zero: none yet) and `first` says whether this was the first run: none after the
    /// first run or a run of at least [`reset_after`](Self::reset_after), then `initial`,
    /// then doubled up to `max` (the kubelet's crash loop: the first restart is at once).
    pub fn after_run(self, ran: Duration, previous: Duration, first: bool) -> Duration {
        let reset = self.reset_after.is_some_and(|after| ran >= after);
        if reset || previous.is_zero() && first {
            Duration::ZERO
        } else if previous.is_zero() {
            self.initial
        } else {
            previous.saturating_mul(2).min(self.max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(122));
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(b.next_delay());
        }
        assert_eq!(seen[0], Duration::from_millis(500));
        assert_eq!(seen[1], Duration::from_secs(1));
        assert_eq!(seen[8], Duration::from_secs(122));
        assert_eq!(seen[9], Duration::from_secs(122));
        assert_eq!(b.last_delay(), Some(Duration::from_secs(122)));
        b.reset();
        assert_eq!(b.last_delay(), None);
        assert_eq!(b.next_delay(), Duration::from_millis(500));
    }

    #[test]
    fn the_crash_loop_restarts_at_once_then_waits_10s_doubling_to_5min_and_a_long_run_resets() {
        let s = Schedule::CRASH_LOOP;
        let secs = Duration::from_secs;
        assert_eq!(s.after_run(secs(1), Duration::ZERO, true), Duration::ZERO);
        assert_eq!(s.after_run(secs(1), Duration::ZERO, false), secs(10));
        assert_eq!(s.after_run(secs(1), secs(10), false), secs(20));
        assert_eq!(s.after_run(secs(1), secs(160), false), secs(300));
        assert_eq!(s.after_run(secs(1), secs(300), false), secs(300));
        assert_eq!(s.after_run(secs(600), secs(300), false), Duration::ZERO);
        let never_resets = Schedule {
            reset_after: None,
            ..s
        };
        assert_eq!(never_resets.after_run(secs(600), secs(10), false), secs(20));
        let mut watch = Schedule::SERVICE_WATCH.backoff();
        let first = watch.next_delay();
        assert!(
            first >= secs(1) && first < Duration::from_millis(1500),
            "{first:?}"
        );
    }

    #[test]
    fn a_retry_counted_by_its_caller_gets_the_doubled_jittered_step_never_above_the_cap() {
        let lag = Schedule::AUTHORIZER_LAG;
        for attempt in 0..40 {
            let step = Duration::from_millis(50u64 << attempt.min(5)).min(lag.max);
            let d = lag.delay(attempt);
            assert!(d >= step / 2 && d < step, "{attempt}: {d:?}");
        }
        assert_eq!(Schedule::CRASH_LOOP.delay(1), Duration::from_secs(20));
        assert_eq!(Schedule::CRASH_LOOP.delay(9), Duration::from_secs(300));
    }

    #[test]
    fn jitter_stays_within_its_range_and_the_cap() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30))
            .with_jitter(Jitter::up_to(1.0));
        for step in [1, 2, 4, 8, 16] {
            let d = b.next_delay();
            let base = Duration::from_secs(step);
            assert!(
                d >= base && d < (base * 2).min(Duration::from_secs(31)),
                "{d:?}"
            );
            assert!(d <= Duration::from_secs(30));
        }
        for _ in 0..100 {
            let d = Jitter::between(0.5, 1.0).apply(Duration::from_secs(10));
            assert!(
                d >= Duration::from_secs(5) && d < Duration::from_secs(10),
                "{d:?}"
            );
        }
        assert_eq!(
            Jitter::between(2.0, 2.0).apply(Duration::from_secs(1)),
            Duration::from_secs(2)
        );
        assert_eq!(
            Jitter::between(-1.0, f64::NAN).apply(Duration::from_secs(1)),
            Duration::ZERO
        );
    }
}
