//! [`Backoff`] and [`Jitter`]: the one exponential back-off and the one jitter of the node
//! crates (reflector reconnects, volume operation retries, pod worker resyncs, outage probes).

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
