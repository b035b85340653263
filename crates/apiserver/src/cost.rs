//! [`CostModel`]: an opt-in imitation of what answers cost a real kube-apiserver + etcd, for
//! benchmarks whose figures should match a real server's: a consistent read before the initial
//! answer of a GET, LIST or watch-list, a commit before a write's answer, and a server-wide
//! number of reads waiting at once (the rest wait their turn; nothing is refused). Writes take
//! no place: etcd pipelines commits, and on a real server a node's reads and an admin's writes
//! are in different priority levels (`system:masters` is exempt), so neither queues behind the
//! other.
//!
//! Throughput of initial answers is `concurrency / read_latency`; a client that sends one
//! request at a time (one HTTP/1.1 connection) gets `1 / read_latency`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

/// What an answer costs (see the module docs). `CostModel::default()` is off: every field 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CostModel {
    /// Added before the answer of a GET, a LIST and the initial events of a watch-list
    /// (`sendInitialEvents=true`): the consistent read's wait. Plain watches, from a
    /// resourceVersion or `0`, are served from the watch cache and cost nothing. 0: none.
    pub read_latency: Duration,
    /// Added before the answer of a create, update, patch, delete or deletecollection (the etcd
    /// commit). 0: none.
    pub write_latency: Duration,
    /// Reads that may be spending their latency at once, server-wide; others wait for a place
    /// (in arrival order). Writes take none. 0: unlimited.
    pub concurrency: usize,
}

impl CostModel {
    /// A v1.36.2 kube-apiserver with etcd and a controller manager on a 2-core machine, as
    /// measured: one watch-list of one ConfigMap answered in 22 ms alone; about
    /// 60 watch-lists/s from one HTTP/1.1 client sending them one after the other; about 660
    /// watch-list initial answers/s to an agent over HTTP/2; 110 pod creates one after the
    /// other in 0.73 s. Hence 16 ms per read (1 / 60 s, less the client's own time), 12 at
    /// once (660 × 16 ms ≈ 11), 2 ms per write (of the 6.6 ms per pod create, the rest is the
    /// client's and the server's own work, which this server does too).
    pub fn like_kube_apiserver() -> Self {
        CostModel {
            read_latency: Duration::from_millis(16),
            write_latency: Duration::from_millis(2),
            concurrency: 12,
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

    /// Whether any cost is added.
    pub fn is_off(&self) -> bool {
        self.read_latency.is_zero() && self.write_latency.is_zero()
    }
}

/// What one request costs under the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cost {
    Free,
    Read,
    Write,
}

impl Cost {
    /// The cost of a resource request with this verb; `watch_list`: `sendInitialEvents=true`;
    /// `subresource`: only `status` and `binding` are stored writes (logs, exec and tokens
    /// are not), and a GET of a subresource is not a read of its own.
    pub(crate) fn of(verb: &str, subresource: Option<&str>, watch_list: bool) -> Cost {
        let stored = subresource.is_none_or(|s| matches!(s, "status" | "binding"));
        match verb {
            "get" | "list" if subresource.is_none() => Cost::Read,
            "watch" if watch_list => Cost::Read,
            "create" | "update" | "patch" | "delete" | "deletecollection" if stored => Cost::Write,
            _ => Cost::Free,
        }
    }
}

/// The model in force on one server: its latencies and the places.
pub(crate) struct Costs {
    model: CostModel,
    places: Option<Arc<Semaphore>>,
}

impl Costs {
    pub(crate) fn new(model: CostModel) -> Self {
        let places = (model.concurrency > 0 && !model.is_off())
            .then(|| Arc::new(Semaphore::new(model.concurrency)));
        Costs { model, places }
    }

    /// Waits out `cost`: a place (reads, if limited), then the latency. Cancel-safe (a
    /// dropped wait gives its place back).
    pub(crate) async fn pay(&self, cost: Cost) {
        let (latency, places) = match cost {
            Cost::Free => return,
            Cost::Read => (self.model.read_latency, self.places.as_ref()),
            Cost::Write => (self.model.write_latency, None),
        };
        if latency.is_zero() {
            return;
        }
        let _place = match places {
            Some(p) => p.clone().acquire_owned().await.ok(),
            None => None,
        };
        tokio::time::sleep(latency).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_free_requests_are_told_apart() {
        assert_eq!(Cost::of("watch", None, true), Cost::Read);
        assert_eq!(Cost::of("watch", None, false), Cost::Free);
        assert_eq!(Cost::of("list", None, false), Cost::Read);
        assert_eq!(Cost::of("get", Some("log"), false), Cost::Free);
        assert_eq!(Cost::of("create", Some("token"), false), Cost::Free);
        assert_eq!(Cost::of("update", Some("status"), false), Cost::Write);
        assert_eq!(Cost::of("delete", None, false), Cost::Write);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_bounds_the_throughput_of_reads() {
        let costs = Arc::new(Costs::new(
            CostModel::default()
                .read_latency(Duration::from_millis(20))
                .concurrency(4),
        ));
        let start = tokio::time::Instant::now();
        let all: Vec<_> = (0..40)
            .map(|_| {
                let c = costs.clone();
                tokio::spawn(async move { c.pay(Cost::Read).await })
            })
            .collect();
        for t in all {
            let _ = t.await;
        }
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
        let start = tokio::time::Instant::now();
        let all: Vec<_> = (0..10)
            .map(|_| {
                let c = costs.clone();
                tokio::spawn(async move { c.pay(Cost::Write).await })
            })
            .collect();
        for t in all {
            let _ = t.await;
        }
        assert_eq!(start.elapsed(), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_model_costs_nothing() {
        let costs = Costs::new(CostModel::default());
        let start = tokio::time::Instant::now();
        costs.pay(Cost::Read).await;
        costs.pay(Cost::Write).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
