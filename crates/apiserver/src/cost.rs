//! [`CostModel`]: an opt-in imitation of what answers cost a real kube-apiserver + etcd, for
//! benchmarks whose figures should match a real server's. Off by default.
//!
//! What it imitates, request by request:
//! 1. Every read (a GET, a LIST, the initial events of a watch-list) holds one of the server's
//!    places ([`CostModel::concurrency`]: the seats of API Priority and Fairness' priority
//!    level; arrivals beyond them wait their turn, nothing is refused) for
//!    [`CostModel::read_latency`], the answer's own time.
//! 2. A *consistent read from the watch cache* — a LIST or a watch-list without a
//!    resourceVersion — also waits, on its place, until the resource's watch cache has caught
//!    up with the store: the server asks the store for its current revision and blocks until
//!    the cache has seen it. A cache sees a revision through an event of its own resource, or
//!    through a progress notification, which the server requests at once when the first
//!    request starts waiting and then every [`CostModel::progress_period`] while requests
//!    wait. So after any write to another resource a consistent read waits for the next
//!    notification; a read from the cache as it is (`resourceVersion=0`, or any given
//!    resourceVersion the cache has passed) and a GET (answered by the store) never wait.
//! 3. A write (create, update, patch, delete, deletecollection; `status` and `binding`
//!    subresources) waits [`CostModel::write_latency`] (the commit) and takes no place: on a
//!    real server a node's reads and an admin's writes are in different priority levels.
//!
//! The server's CPU is not imitated: it is this process's own, on the same machine as the
//! client's. A watch without initial events costs nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// What an answer costs (see the module docs). `CostModel::default()` is off: every field 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CostModel {
    /// Spent on a place before a GET, a LIST or the initial events of a watch-list answer.
    /// 0: none.
    pub read_latency: Duration,
    /// Added before the answer of a create, update, patch, delete or deletecollection (the etcd
    /// commit). 0: none.
    pub write_latency: Duration,
    /// Reads that may hold a place at once, server-wide; others wait for a place (in arrival
    /// order). Writes take none. 0: unlimited.
    pub concurrency: usize,
    /// How often the server requests a progress notification for a watch cache while
    /// consistent reads wait for it (module docs, 2). 0: consistent reads never wait.
    pub progress_period: Duration,
}

impl CostModel {
    /// A v1.36.2 kube-apiserver with etcd and a controller manager on a 2-core machine:
    /// - 16 ms per read: about 60 watch-lists/s from one HTTP/1.1 client sending them one
    ///   after the other, on an otherwise idle server (22 ms each as that client saw them);
    /// - 74 places: the nominal seats of the `system` priority level, which serves requests of
    ///   the `system:nodes` group (600 seats by default, the level's 30 of 245 shares);
    /// - progress notifications every 100 ms (the watch cache's `progressRequestPeriod`): with
    ///   the places full of waiting watch-lists, 74 / (0.1 + 0.016) s ≈ 640 initial answers/s,
    ///   against the 660/s measured to an agent over HTTP/2 while pods were being created;
    /// - 2 ms per write: of the 6.6 ms per pod create measured from one client, the rest is
    ///   the client's and the server's own work, which this server does too.
    pub fn like_kube_apiserver() -> Self {
        CostModel {
            read_latency: Duration::from_millis(16),
            write_latency: Duration::from_millis(2),
            concurrency: 74,
            progress_period: Duration::from_millis(100),
        }
    }

    /// Sets [`CostModel::read_latency`].
    #[must_use]
    pub fn read_latency(mut self, d: Duration) -> Self {
        self.read_latency = d;
        self
    }

    /// Sets [`CostModel::write_latency`].
    #[must_use]
    pub fn write_latency(mut self, d: Duration) -> Self {
        self.write_latency = d;
        self
    }

    /// Sets [`CostModel::concurrency`] (0: unlimited).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets [`CostModel::progress_period`] (0: consistent reads never wait for the cache).
    #[must_use]
    pub fn progress_period(mut self, d: Duration) -> Self {
        self.progress_period = d;
        self
    }

    /// Whether any cost is added.
    pub fn is_off(&self) -> bool {
        self.read_latency.is_zero()
            && self.write_latency.is_zero()
            && self.progress_period.is_zero()
    }
}

/// What one request costs under the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cost {
    Free,
    /// A read answered from the store, or from the watch cache as it is.
    Read,
    /// A read from the watch cache that first waits for the cache to catch up (module docs, 2).
    ConsistentRead,
    Write,
}

impl Cost {
    /// The cost of a resource request with this verb; `watch_list`: `sendInitialEvents=true`;
    /// `resource_version`: the request's, if given and not empty; `subresource`: only
    /// `status` and `binding` are stored writes (logs, exec and tokens are not), and a GET of
    /// a subresource is not a read of its own.
    pub(crate) fn of(
        verb: &str,
        subresource: Option<&str>,
        watch_list: bool,
        resource_version: Option<&str>,
    ) -> Cost {
        let stored = subresource.is_none_or(|s| matches!(s, "status" | "binding"));
        let consistent = resource_version.is_none_or(str::is_empty);
        match verb {
            "get" if subresource.is_none() => Cost::Read,
            "list" if subresource.is_none() && consistent => Cost::ConsistentRead,
            "list" if subresource.is_none() => Cost::Read,
            "watch" if watch_list && consistent => Cost::ConsistentRead,
            "watch" if watch_list => Cost::Read,
            "create" | "update" | "patch" | "delete" | "deletecollection" if stored => Cost::Write,
            _ => Cost::Free,
        }
    }
}

/// The model in force on one server: its latencies, the places and the watch caches' clocks.
pub(crate) struct Costs {
    model: CostModel,
    places: Option<Arc<Semaphore>>,
    caches: Mutex<Caches>,
}

/// Revisions as the model counts them: one per write, and per resource what its watch cache
/// has seen and when it last requested a progress notification.
#[derive(Default)]
struct Caches {
    revision: u64,
    by_resource: HashMap<String, Cache>,
}

#[derive(Default)]
struct Cache {
    seen: u64,
    last_request: Option<Instant>,
}

impl Costs {
    pub(crate) fn new(model: CostModel) -> Self {
        let places = (model.concurrency > 0 && !model.is_off())
            .then(|| Arc::new(Semaphore::new(model.concurrency)));
        Costs {
            model,
            places,
            caches: Mutex::new(Caches::default()),
        }
    }

    /// Waits out `cost` of a request for `resource` (module docs): a place (reads, if
    /// limited), the cache's catching up (consistent reads), then the latency. Cancel-safe (a
    /// dropped wait gives its place back).
    pub(crate) async fn pay(&self, cost: Cost, resource: &str) {
        if self.model.is_off() {
            return;
        }
        match cost {
            Cost::Free => {}
            Cost::Write => {
                tokio::time::sleep(self.model.write_latency).await;
                let mut caches = self.caches.lock();
                caches.revision += 1;
                let revision = caches.revision;
                caches
                    .by_resource
                    .entry(resource.to_owned())
                    .or_default()
                    .seen = revision;
            }
            Cost::Read | Cost::ConsistentRead => {
                let _place = match &self.places {
                    Some(p) => p.clone().acquire_owned().await.ok(),
                    None => None,
                };
                if cost == Cost::ConsistentRead {
                    self.catch_up(resource).await;
                }
                tokio::time::sleep(self.model.read_latency).await;
            }
        }
    }

    /// (2) Until `resource`'s cache has seen the current revision: the next progress
    /// notification, at once when none was requested within the period, else at the period's
    /// end.
    async fn catch_up(&self, resource: &str) {
        let period = self.model.progress_period;
        if period.is_zero() {
            return;
        }
        let notified_at = {
            let mut caches = self.caches.lock();
            let revision = caches.revision;
            let cache = caches.by_resource.entry(resource.to_owned()).or_default();
            if cache.seen >= revision {
                return;
            }
            let now = Instant::now();
            let at = match cache.last_request {
                // A notification already requested for now or later: it serves this read too.
                Some(last) if last >= now => last,
                Some(last) if now < last + period => last + period,
                _ => now,
            };
            cache.last_request = Some(at);
            at
        };
        tokio::time::sleep_until(notified_at).await;
        let mut caches = self.caches.lock();
        let revision = caches.revision;
        let cache = caches.by_resource.entry(resource.to_owned()).or_default();
        cache.seen = cache.seen.max(revision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_millis(100);

    #[test]
    fn reads_consistent_reads_writes_and_free_requests_are_told_apart() {
        assert_eq!(Cost::of("watch", None, true, None), Cost::ConsistentRead);
        assert_eq!(
            Cost::of("watch", None, true, Some("")),
            Cost::ConsistentRead
        );
        assert_eq!(Cost::of("watch", None, true, Some("0")), Cost::Read);
        assert_eq!(Cost::of("watch", None, true, Some("42")), Cost::Read);
        assert_eq!(Cost::of("watch", None, false, None), Cost::Free);
        assert_eq!(Cost::of("list", None, false, None), Cost::ConsistentRead);
        assert_eq!(Cost::of("list", None, false, Some("0")), Cost::Read);
        assert_eq!(Cost::of("get", None, false, None), Cost::Read);
        assert_eq!(Cost::of("get", Some("log"), false, None), Cost::Free);
        assert_eq!(Cost::of("create", Some("token"), false, None), Cost::Free);
        assert_eq!(Cost::of("update", Some("status"), false, None), Cost::Write);
        assert_eq!(Cost::of("delete", None, false, None), Cost::Write);
    }

    async fn all_at_once(costs: &Arc<Costs>, n: usize, cost: Cost, resource: &'static str) {
        let all: Vec<_> = (0..n)
            .map(|_| {
                let c = costs.clone();
                tokio::spawn(async move { c.pay(cost, resource).await })
            })
            .collect();
        for t in all {
            let _ = t.await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_bounds_the_throughput_of_reads() {
        let costs = Arc::new(Costs::new(
            CostModel::default()
                .read_latency(Duration::from_millis(20))
                .concurrency(4),
        ));
        let start = Instant::now();
        all_at_once(&costs, 40, Cost::Read, "configmaps").await;
        // 40 reads, 4 at a time, 20 ms each: 10 rounds.
        assert_eq!(start.elapsed(), Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn writes_take_no_place() {
        let costs = Arc::new(Costs::new(
            CostModel::default()
                .write_latency(Duration::from_millis(5))
                .concurrency(1),
        ));
        let start = Instant::now();
        all_at_once(&costs, 10, Cost::Write, "pods").await;
        assert_eq!(start.elapsed(), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_model_costs_nothing() {
        let costs = Costs::new(CostModel::default());
        let start = Instant::now();
        costs.pay(Cost::Read, "configmaps").await;
        costs.pay(Cost::ConsistentRead, "configmaps").await;
        costs.pay(Cost::Write, "pods").await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_consistent_read_waits_for_a_progress_notification_only_after_another_resource_was_written()
     {
        let costs = Costs::new(CostModel::default().progress_period(PERIOD));
        let took = |start: Instant| start.elapsed();

        // Nothing written: the cache is current, no wait.
        let start = Instant::now();
        costs.pay(Cost::ConsistentRead, "configmaps").await;
        assert_eq!(took(start), Duration::ZERO);

        // A pod written: the ConfigMaps' cache is behind. The first waiter's notification is
        // requested at once; after the next write, the following one waits for the period.
        costs.pay(Cost::Write, "pods").await;
        let start = Instant::now();
        costs.pay(Cost::ConsistentRead, "configmaps").await;
        assert_eq!(took(start), Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(30)).await;
        costs.pay(Cost::Write, "pods").await;
        let start = Instant::now();
        costs.pay(Cost::ConsistentRead, "configmaps").await;
        assert_eq!(
            took(start),
            Duration::from_millis(70),
            "until the period ends"
        );

        // Caught up: no wait until the next write; a write of its own resource keeps it current.
        let start = Instant::now();
        costs.pay(Cost::ConsistentRead, "configmaps").await;
        costs.pay(Cost::Write, "configmaps").await;
        costs.pay(Cost::ConsistentRead, "configmaps").await;
        assert_eq!(took(start), Duration::ZERO);

        // A read from the cache as it is never waits.
        costs.pay(Cost::Write, "pods").await;
        let start = Instant::now();
        costs.pay(Cost::Read, "configmaps").await;
        assert_eq!(took(start), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_consistent_reads_hold_their_places_so_notifications_pace_the_throughput() {
        let model = CostModel::default()
            .read_latency(Duration::from_millis(10))
            .concurrency(10)
            .progress_period(PERIOD);
        let costs = Arc::new(Costs::new(model));
        // Writes to another resource all along, as pods are created while the node starts.
        let writer = {
            let c = costs.clone();
            tokio::spawn(async move {
                loop {
                    c.pay(Cost::Write, "pods").await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        let start = Instant::now();
        all_at_once(&costs, 30, Cost::ConsistentRead, "configmaps").await;
        let consistent = start.elapsed();
        let start = Instant::now();
        all_at_once(&costs, 30, Cost::Read, "configmaps").await;
        let cached = start.elapsed();
        writer.abort();
        // 3 rounds of 10: the first notified at once, the next two a period apart.
        assert_eq!(consistent, Duration::from_millis(2 * 100 + 10));
        assert_eq!(cached, Duration::from_millis(3 * 10));
    }
}
