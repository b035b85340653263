//! The Node authorizer's view of the pod graph: it trails the store by
//! [`Config::node_authorizer_lag`](crate::Config::node_authorizer_lag), and a simulated
//! restart leaves it empty until it is rebuilt.
//!
//! A real kube-apiserver's Node authorizer fills its graph from its own informers, so a pod
//! written a moment ago is not in it yet (a node is refused the pod's Secrets for a while),
//! a deleted pod is still in it for a while, and a freshly started process answers from an
//! empty graph until its informers have listed everything. This view imitates that.
//!
//! # How it works
//! 1. The store hands every pod write (create, update, delete) to
//!    [`LaggedPodGraph::pod_written`] under its lock: the previous and the new version (`None`
//!    when absent), queued to become visible at `ready = max(written + lag, ready of the entry
//!    before)`. Ready times never decrease, so changes become visible in write order.
//! 2. Before every check and every write, the queued entries whose `ready` has come are
//!    applied to the view, oldest first. There is no background task: an entry holds its two
//!    pod versions (`Arc`s shared with the store and its history) until the next write or
//!    check after it is ready. With a lag of 0 and an empty queue a write is applied at once.
//! 3. A restart ([`LaggedPodGraph::restarted`]) empties the view, drops the queue and queues one
//!    rebuild entry holding the store's pods of that moment, ready `graph_rebuild` later; writes
//!    after it queue behind it. Applying it makes the view the graph of those pods.
//!
//! ```text
//! write p1 ──▶ queue [p1 @t+lag] ──(check at ≥ t+lag)──▶ view: p1's edges
//! restart  ──▶ view {} , queue [rebuild(all pods) @r+graph_rebuild, later writes …]
//! ```
//!
//! Times are `tokio::time::Instant`s, so tests with a paused clock step through the lag.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::access::pod_refs::{PodGraph, RefKind};

/// The pod graph as the Node authorizer sees it (see the module docs). Starts empty, with a
/// lag of 0 (immediately consistent).
#[derive(Debug, Default)]
pub(crate) struct LaggedPodGraph {
    /// What the authorizer answers from.
    view: PodGraph,
    /// Changes not yet visible, ready times non-decreasing.
    queue: VecDeque<Pending>,
    lag: Duration,
}

/// One queued change and when it becomes visible.
#[derive(Debug)]
struct Pending {
    ready: Instant,
    change: Change,
}

#[derive(Debug)]
enum Change {
    /// A pod write at `written`: its previous and new version.
    Pod {
        written: Instant,
        prev: Option<Arc<Value>>,
        now: Option<Arc<Value>>,
    },
    /// A restart's rebuild: the view becomes the graph of these pods.
    Rebuild(Vec<Arc<Value>>),
}

impl LaggedPodGraph {
    /// Sets the lag of every pod change not yet visible and of later ones (a change queued at
    /// `t` becomes visible at `t + lag`, never before a change queued earlier). A queued
    /// rebuild keeps its time.
    pub(crate) fn set_lag(&mut self, lag: Duration) {
        self.lag = lag;
        let mut floor: Option<Instant> = None;
        for p in &mut self.queue {
            if let Change::Pod { written, .. } = &p.change {
                p.ready = *written + lag;
            }
            if let Some(f) = floor {
                p.ready = p.ready.max(f);
            }
            floor = Some(p.ready);
        }
    }

    /// (1) Queues a pod write: `prev` became `now` (`None`: absent).
    pub(crate) fn pod_written(&mut self, prev: Option<Arc<Value>>, now: Option<Arc<Value>>) {
        let t = Instant::now();
        self.catch_up(t);
        if self.queue.is_empty() && self.lag.is_zero() {
            self.view.pod_changed(prev.as_deref(), now.as_deref());
            return;
        }
        let ready = self
            .queue
            .back()
            .map_or(t + self.lag, |last| last.ready.max(t + self.lag));
        self.queue.push_back(Pending {
            ready,
            change: Change::Pod {
                written: t,
                prev,
                now,
            },
        });
    }

    /// (3) A restart: the view is empty from now until `rebuild` has passed, then it is the
    /// graph of `pods` (the store's pods now) with the writes made since.
    pub(crate) fn restarted(&mut self, pods: Vec<Arc<Value>>, rebuild: Duration) {
        self.view = PodGraph::default();
        self.queue.clear();
        self.queue.push_back(Pending {
            ready: Instant::now() + rebuild,
            change: Change::Rebuild(pods),
        });
    }

    /// Whether, as the authorizer sees it now, a pod bound to `node` is (for
    /// [`RefKind::Pod`]) or references the object.
    pub(crate) fn related(
        &mut self,
        kind: RefKind,
        namespace: &str,
        name: &str,
        node: &str,
    ) -> bool {
        self.catch_up(Instant::now());
        self.view.related(kind, namespace, name, node)
    }

    /// (2) Applies, oldest first, the queued changes ready at `t`.
    fn catch_up(&mut self, t: Instant) {
        while self.queue.front().is_some_and(|p| p.ready <= t) {
            let Some(p) = self.queue.pop_front() else {
                break;
            };
            match p.change {
                Change::Pod { prev, now, .. } => {
                    self.view.pod_changed(prev.as_deref(), now.as_deref());
                }
                Change::Rebuild(pods) => {
                    let mut g = PodGraph::default();
                    for pod in &pods {
                        g.pod_changed(None, Some(pod));
                    }
                    self.view = g;
                }
            }
        }
    }

    /// Changes queued and not yet visible.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const LAG: Duration = Duration::from_millis(50);

    fn pod(name: &str, cm: &str) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"nodeName": "n1", "volumes": [{"name": "v", "configMap": {"name": cm}}]},
        }))
    }

    fn sees(g: &mut LaggedPodGraph, cm: &str) -> bool {
        g.related(RefKind::ConfigMap, "ns", cm, "n1")
    }

    fn lagged(lag: Duration) -> LaggedPodGraph {
        let mut g = LaggedPodGraph::default();
        g.set_lag(lag);
        g
    }

    #[tokio::test(start_paused = true)]
    async fn a_created_pod_becomes_visible_only_after_the_lag() {
        let mut g = lagged(LAG);
        g.pod_written(None, Some(pod("p", "a")));
        assert!(!sees(&mut g, "a"));
        assert!(!g.related(RefKind::Pod, "ns", "p", "n1"));
        tokio::time::advance(LAG - Duration::from_millis(1)).await;
        assert!(!sees(&mut g, "a"));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(sees(&mut g, "a"));
        assert!(g.related(RefKind::Pod, "ns", "p", "n1"));
        assert_eq!(g.queued(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_pod_stays_visible_for_the_lag() {
        let mut g = lagged(Duration::ZERO);
        let p = pod("p", "a");
        g.pod_written(None, Some(p.clone()));
        assert!(sees(&mut g, "a"));
        g.set_lag(LAG);
        g.pod_written(Some(p), None);
        assert!(sees(&mut g, "a"));
        tokio::time::advance(LAG).await;
        assert!(!sees(&mut g, "a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_lag_retimes_queued_changes_and_keeps_their_order() {
        let mut g = lagged(Duration::from_secs(10));
        let v1 = pod("p", "a");
        let v2 = pod("p", "b");
        g.pod_written(None, Some(v1.clone()));
        tokio::time::advance(Duration::from_secs(1)).await;
        g.pod_written(Some(v1), Some(v2));
        assert!(!sees(&mut g, "a") && !sees(&mut g, "b"));
        g.set_lag(Duration::from_millis(10));
        // The first write is 1 s old: visible; the second only 10 ms after it was made.
        assert!(sees(&mut g, "a") && !sees(&mut g, "b"));
        tokio::time::advance(Duration::from_millis(10)).await;
        assert!(!sees(&mut g, "a") && sees(&mut g, "b"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_empties_the_view_until_it_is_rebuilt_from_the_pods_given() {
        let mut g = lagged(Duration::ZERO);
        let p = pod("p", "a");
        g.pod_written(None, Some(p.clone()));
        assert!(sees(&mut g, "a"));
        g.restarted(vec![p.clone()], Duration::from_secs(1));
        assert!(!sees(&mut g, "a"));
        // A write during the rebuild waits behind it.
        let q = pod("q", "b");
        g.pod_written(None, Some(q));
        assert!(!sees(&mut g, "b"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(sees(&mut g, "a"));
        assert!(sees(&mut g, "b"));
        assert_eq!(g.queued(), 0);
        // A zero rebuild is at once.
        g.restarted(vec![p], Duration::ZERO);
        assert!(sees(&mut g, "a"));
        assert!(!sees(&mut g, "b"));
    }

    #[tokio::test(start_paused = true)]
    async fn writes_alone_drain_what_is_ready_so_the_queue_stays_bounded() {
        let mut g = lagged(LAG);
        for i in 0..100 {
            g.pod_written(None, Some(pod(&format!("p{i}"), "a")));
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        // Only the writes of the last `LAG` are still held.
        assert!(g.queued() <= 6, "{}", g.queued());
    }
}
