//! [`TerminationOrder`]: the order in which a pod with sidecars stops (PW-62; the kubelet's
//! `terminationOrdering`). Every running container is killed at once, side by side, but a
//! sidecar, after its `Killing` event and its `preStop` hook, waits for its turn before it
//! gets SIGTERM: until every app container and every sidecar declared after it have stopped,
//! or its grace period ran out. So the app containers stop first, then the sidecars in
//! reverse order of declaration.
//!
//! ```text
//! app a, app b ─────────────────────────► stopped ─┐
//! sidecar s2 (declared last): preStop ─► wait a, b ─► SIGTERM ─► stopped ─┐
//! sidecar s1:                 preStop ─► wait a, b, s2 ──────────────────► SIGTERM ─► stopped
//! ```

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::runtime::is_sidecar;
use tokio_util::sync::CancellationToken;

/// Who waits for whom while a pod's containers stop. A container that is not running counts
/// as stopped from the start.
#[derive(Debug, Default)]
pub(crate) struct TerminationOrder {
    /// Per container, cancelled once it stopped.
    stopped: HashMap<String, CancellationToken>,
    /// Per sidecar, the containers it waits for.
    waits_for: HashMap<String, Vec<CancellationToken>>,
}

impl TerminationOrder {
    /// The order of `pod`'s containers, of which those named in `running` run.
    pub(crate) fn new(pod: &Pod, running: &[String]) -> Self {
        let mut order = Self::default();
        let Some(spec) = pod.spec.as_ref() else {
            return order;
        };
        let mut token = |name: &str| {
            let token = CancellationToken::new();
            if !running.iter().any(|r| r == name) {
                token.cancel();
            }
            order.stopped.insert(name.to_owned(), token.clone());
            token
        };
        let apps: Vec<CancellationToken> = spec.containers.iter().map(|c| token(&c.name)).collect();
        let mut later: Option<CancellationToken> = None;
        let mut waits_for = HashMap::new();
        for c in spec.init_containers.iter().flatten().rev() {
            let own = token(&c.name);
            if is_sidecar(c) {
                let mut waits = apps.clone();
                waits.extend(later.replace(own));
                waits_for.insert(c.name.clone(), waits);
            }
        }
        order.waits_for = waits_for;
        order
    }

    /// Waits until `name` may be stopped, at most `grace`. Returns the whole seconds it
    /// waited (to come off the container's grace period). No wait when `grace` is zero.
    pub(crate) async fn wait_for_turn(&self, name: &str, grace: Duration) -> u64 {
        let Some(waits) = self.waits_for.get(name).filter(|_| !grace.is_zero()) else {
            return 0;
        };
        let started = tokio::time::Instant::now();
        let all = async {
            for token in waits {
                token.cancelled().await;
            }
        };
        let _ = tokio::time::timeout(grace, all).await;
        started.elapsed().as_secs()
    }

    /// `name` has stopped: those waiting for it may go on.
    pub(crate) fn stopped(&self, name: &str) {
        if let Some(token) = self.stopped.get(name) {
            token.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use nodelet_testutil::PodBuilder;
    use serde_json::json;

    use super::*;

    fn pod() -> Pod {
        PodBuilder::new("ns", "p")
            .init_container(json!({"name": "s1", "image": "x", "restartPolicy": "Always"}))
            .init_container(json!({"name": "setup", "image": "x"}))
            .init_container(json!({"name": "s2", "image": "x", "restartPolicy": "Always"}))
            .container(json!({"name": "a", "image": "x"}))
            .container(json!({"name": "b", "image": "x"}))
            .build()
    }

    fn running() -> Vec<String> {
        ["s1", "s2", "a", "b"].map(str::to_owned).to_vec()
    }

    /// Whether `name`'s turn came within `within`, with time paused.
    async fn turn_within(order: &TerminationOrder, name: &str, within: Duration) -> bool {
        tokio::time::timeout(within, order.wait_for_turn(name, Duration::from_secs(30)))
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_wait_for_the_app_containers_then_for_the_sidecars_declared_after_them() {
        let order = TerminationOrder::new(&pod(), &running());
        let soon = Duration::from_millis(10);
        assert_eq!(order.wait_for_turn("a", Duration::from_secs(30)).await, 0);
        assert!(!turn_within(&order, "s2", soon).await, "a and b run");
        order.stopped("a");
        assert!(!turn_within(&order, "s2", soon).await, "b runs");
        order.stopped("b");
        assert!(turn_within(&order, "s2", soon).await);
        assert!(!turn_within(&order, "s1", soon).await, "s2 runs");
        order.stopped("s2");
        assert!(turn_within(&order, "s1", soon).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sidecar_waits_no_longer_than_its_grace_period_and_counts_the_whole_seconds() {
        let order = TerminationOrder::new(&pod(), &running());
        let waited = order.wait_for_turn("s1", Duration::from_secs(7)).await;
        assert_eq!(waited, 7);
        assert_eq!(order.wait_for_turn("s1", Duration::ZERO).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn containers_that_do_not_run_are_not_waited_for() {
        let order = TerminationOrder::new(&pod(), &["s1".to_owned(), "a".to_owned()]);
        order.stopped("a");
        let waited = order.wait_for_turn("s1", Duration::from_secs(30)).await;
        assert_eq!(waited, 0, "b and s2 were not running");
    }
}
