//! Configuration: [`Strategy`] and [`ManagerConfig`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use nodelet_core::backoff::Schedule;

use crate::{Error, ReadLimiter};

/// How a manager keeps objects fresh: the kubelet's `configMapAndSecretChangeDetectionStrategy`
/// (spec OM-5). See the crate docs for freshness and API cost of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// One per-object list/watch while the object is referenced (the default).
    #[default]
    Watch,
    /// A TTL cache in front of GETs; TTL from the node's `node.alpha.kubernetes.io/ttl`.
    Cache,
    /// A live GET on every `get`.
    Get,
}

impl FromStr for Strategy {
    type Err = Error;

    /// Parses the kubelet's strings `Watch`, `Cache`, `Get` (case-sensitive, as the kubelet).
    ///
    /// # Errors
    /// [`Error::UnknownStrategy`]: `unknown configmap and secret manager mode: <s>`.
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "Watch" => Ok(Strategy::Watch),
            "Cache" => Ok(Strategy::Cache),
            "Get" => Ok(Strategy::Get),
            other => Err(Error::UnknownStrategy {
                mode: other.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Watch => "Watch",
            Strategy::Cache => "Cache",
            Strategy::Get => "Get",
        })
    }
}

/// Options of a [`Manager`](crate::Manager). Start from `ManagerConfig::default()` and set
/// fields; every default is the kubelet's.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ManagerConfig {
    /// Which strategy serves `get` (default [`Strategy::Watch`]).
    pub strategy: Strategy,
    /// The kubelet's `syncFrequency` (default 60 s). Watch: an unread watch stops after
    /// `max(5 × resync_interval, 1 min)` (OM-19).
    pub resync_interval: Duration,
    /// The agent's Node. Cache: its `node.alpha.kubernetes.io/ttl` annotation sets the TTL
    /// (OM-12). `None`: always [`default_ttl`](Self::default_ttl).
    pub node_name: Option<String>,
    /// Cache: TTL when the node has no (valid) annotation (default 60 s, OM-12).
    pub default_ttl: Duration,
    /// Watch: how long `get` waits for a reflector's first list (default 1 s, OM-18), counted
    /// from when that list was sent, not while it waited in the node's own queue (OM-36). Cache:
    /// how long the first `get` waits for the node's first list (its TTL annotation).
    pub sync_timeout: Duration,
    /// Watch: how often idle reflectors are looked for (default 60 s, OM-19).
    pub idle_check_interval: Duration,
    /// Reflector reconnect back-off: first delay (default 800 ms, doubled per failure, with
    /// up to 100 % jitter).
    pub initial_backoff: Duration,
    /// Reflector reconnect back-off: largest delay (default 30 s).
    pub max_backoff: Duration,
    /// Watch: how long a reflector retries the Node authorizer's `no relationship found`
    /// refusal soon and often (50 ms doubling to 1 s), as the lag of the authorizer's graph
    /// behind the API it usually is, before it reports it at WARN as a denial and backs off
    /// (default 30 s; not a kubelet setting).
    pub relationship_grace: Duration,
    /// Watch: after an API server outage, how often one reflector probes whether the server
    /// answers again (default 250 ms, jittered); the others wait for that signal instead of
    /// their back-off.
    pub recovery_probe_interval: Duration,
    /// Watch: once the server answers again, waiting reflectors retry within a random delay
    /// below this (default 250 ms), so they do not all arrive at once.
    pub recovery_spread: Duration,
    /// Watch: at most this many of those retries (relists, re-watches) in flight at once
    /// (default 64).
    pub recovery_concurrency: usize,
    /// Watch: at most this many reflector requests (watch-lists, lists, watches) awaiting
    /// their answer at once, and at most this many new reflectors between their start and
    /// their open watch, the others queued in order (default 64; not a kubelet setting). Bounds
    /// the memory a burst of registrations (a node's first thousand objects) holds at once; an
    /// open watch does not count.
    pub requests_in_flight: usize,
    /// Capacity of the change-notification channel (default 1024); a subscriber that falls
    /// further behind gets `RecvError::Lagged` and should resync everything.
    pub notify_capacity: usize,
    /// The token bucket every first read takes a token from (OM-30): Watch, a reflector's
    /// watch-lists and LISTs until its object was listed once; Get and Cache, every GET.
    /// Default unlimited; share one (a clone) between managers to bound them together, as the
    /// agent does from `kubeAPIQPS` / `kubeAPIBurst`.
    pub first_reads: ReadLimiter,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            strategy: Strategy::Watch,
            resync_interval: Duration::from_secs(60),
            node_name: None,
            default_ttl: Duration::from_secs(60),
            sync_timeout: Duration::from_secs(1),
            idle_check_interval: Duration::from_secs(60),
            initial_backoff: Schedule::WATCH.initial,
            max_backoff: Schedule::WATCH.max,
            relationship_grace: Duration::from_secs(30),
            notify_capacity: 1024,
            recovery_probe_interval: Duration::from_millis(250),
            recovery_spread: Duration::from_millis(250),
            recovery_concurrency: 64,
            requests_in_flight: 64,
            first_reads: ReadLimiter::unlimited(),
        }
    }
}

impl ManagerConfig {
    /// The kubelet's defaults with `strategy`.
    pub fn new(strategy: Strategy) -> Self {
        ManagerConfig {
            strategy,
            ..ManagerConfig::default()
        }
    }

    /// Sets [`node_name`](Self::node_name).
    #[must_use]
    pub fn with_node_name(mut self, node_name: impl Into<String>) -> Self {
        self.node_name = Some(node_name.into());
        self
    }

    /// Sets [`first_reads`](Self::first_reads).
    #[must_use]
    pub fn with_first_reads(mut self, first_reads: ReadLimiter) -> Self {
        self.first_reads = first_reads;
        self
    }

    /// Sets [`resync_interval`](Self::resync_interval).
    #[must_use]
    pub fn with_resync_interval(mut self, resync_interval: Duration) -> Self {
        self.resync_interval = resync_interval;
        self
    }

    /// Watch: how long a reflector may go unread before it stops: `max(5 × resync, 1 min)`.
    pub fn max_idle_time(&self) -> Duration {
        (self.resync_interval * 5).max(Duration::from_secs(60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_parses_the_kubelet_strings_and_rejects_others_with_its_text() {
        assert_eq!("Watch".parse::<Strategy>().ok(), Some(Strategy::Watch));
        assert_eq!("Cache".parse::<Strategy>().ok(), Some(Strategy::Cache));
        assert_eq!("Get".parse::<Strategy>().ok(), Some(Strategy::Get));
        let err = "watch".parse::<Strategy>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unknown configmap and secret manager mode: watch")
        );
        assert_eq!(Strategy::default(), Strategy::Watch);
    }

    #[test]
    fn max_idle_time_is_five_resyncs_but_at_least_a_minute() {
        let mut c = ManagerConfig::default();
        assert_eq!(c.max_idle_time(), Duration::from_secs(300));
        c.resync_interval = Duration::from_secs(1);
        assert_eq!(c.max_idle_time(), Duration::from_secs(60));
    }
}
