//! Per-watch health for operators ([`WatchHealth`], from [`Manager::watch_health`]): when each
//! object's reflector last heard from the API server, and whether its latest request failed.
//!
//! Recorded by [`Recording`], a source wrapper each reflector run reads through, so the
//! reflector's algorithm does not change. What counts:
//! - success: a list answered, a watch opened, a watch event (including a bookmark);
//! - failure: a list or watch refused or unanswered (connection refused or reset, time-out,
//!   any error status), an error item in a watch stream;
//! - neither: `410 Gone` (the server answered; the reflector relists) and a watch the server
//!   ends normally.
//!
//! [`Manager::watch_health`]: crate::Manager::watch_health

use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt as _;
use parking_lot::Mutex;

use crate::ObjectRef;
use crate::source::{Listed, ObjectSource, ReadFrom, SourceError, WatchStream};

/// One watched object's health (a snapshot; see the module docs for what counts).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchHealth {
    /// The object.
    pub object: ObjectRef,
    /// Whether its reflector runs now (an idle-stopped or immutable object's does not).
    pub running: bool,
    /// The last time the API server answered this watch: a list, an opened watch, an event.
    pub last_success: Option<SystemTime>,
    /// Set while the latest request failed: when the current run of failures began.
    pub failing_since: Option<SystemTime>,
    /// Failed requests since the last success.
    pub consecutive_failures: u32,
    /// The latest failure's text (the server's status message or "could not be reached";
    /// never a payload), kept until the next success.
    pub last_error: Option<String>,
}

/// The mutable record behind one object's [`WatchHealth`].
#[derive(Debug, Default)]
pub(crate) struct HealthCell {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last_success: Option<SystemTime>,
    failing_since: Option<SystemTime>,
    consecutive_failures: u32,
    last_error: Option<String>,
}

impl HealthCell {
    fn success(&self) {
        let mut s = self.state.lock();
        s.last_success = Some(SystemTime::now());
        s.failing_since = None;
        s.consecutive_failures = 0;
        s.last_error = None;
    }

    fn outcome(&self, error: &SourceError) {
        if error.is_gone() {
            return;
        }
        let mut s = self.state.lock();
        s.failing_since.get_or_insert_with(SystemTime::now);
        s.consecutive_failures = s.consecutive_failures.saturating_add(1);
        s.last_error = Some(error.to_string());
    }

    pub(crate) fn snapshot(&self, object: ObjectRef, running: bool) -> WatchHealth {
        let s = self.state.lock();
        WatchHealth {
            object,
            running,
            last_success: s.last_success,
            failing_since: s.failing_since,
            consecutive_failures: s.consecutive_failures,
            last_error: s.last_error.clone(),
        }
    }
}

/// A source that records each answer in a [`HealthCell`] and passes everything through.
pub(crate) struct Recording<K> {
    pub(crate) inner: Arc<dyn ObjectSource<K>>,
    pub(crate) health: Arc<HealthCell>,
}

impl<K> Recording<K> {
    fn record<T>(&self, result: &Result<T, SourceError>) {
        match result {
            Ok(_) => self.health.success(),
            Err(error) => self.health.outcome(error),
        }
    }
}

#[async_trait::async_trait]
impl<K: Send + Sync + 'static> ObjectSource<K> for Recording<K> {
    async fn get(&self, namespace: &str, name: &str, read: ReadFrom) -> Result<K, SourceError> {
        let result = self.inner.get(namespace, name, read).await;
        self.record(&result);
        result
    }

    async fn list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Listed<K>, SourceError> {
        let result = self.inner.list(namespace, name, read).await;
        self.record(&result);
        result
    }

    async fn watch(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<WatchStream<K>, SourceError> {
        let result = self.inner.watch(namespace, name, resource_version).await;
        self.record(&result);
        result.map(|stream| self.follow(stream))
    }

    async fn watch_list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Option<WatchStream<K>>, SourceError> {
        let result = self.inner.watch_list(namespace, name, read).await;
        self.record(&result);
        result.map(|stream| stream.map(|stream| self.follow(stream)))
    }
}

impl<K: Send + Sync + 'static> Recording<K> {
    /// Records the outcome of each item of a watch stream.
    fn follow(&self, stream: WatchStream<K>) -> WatchStream<K> {
        let health = self.health.clone();
        stream
            .inspect(move |item| match item {
                Ok(_) => health.success(),
                Err(error) => health.outcome(error),
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::source::{FakeSource, SourceError};
    use crate::testutil::{manager, pod, secret, settle};
    use crate::{ObjectRef, Strategy};

    #[tokio::test(start_paused = true)]
    async fn a_watch_reports_failing_during_an_outage_and_healthy_after_it() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = manager(Strategy::Watch, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        settle().await;
        let healthy = m.watch_health();
        assert_eq!(healthy.len(), 1);
        assert_eq!(healthy[0].object, ObjectRef::secret("ns", "s1"));
        assert!(healthy[0].running);
        assert!(healthy[0].last_success.is_some());
        assert_eq!(healthy[0].failing_since, None);

        // An outage: the open watch ends with the error and every request fails until it ends
        // (the recovery prober retries every 250 ms, so a fixed number of failures would be
        // used up within the first second).
        fake.set_outage(Some(SourceError::status(503, "ServiceUnavailable", "down")));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let failing = &m.watch_health()[0];
        assert!(failing.failing_since.is_some(), "{failing:?}");
        assert!(failing.consecutive_failures >= 1);
        assert_eq!(
            failing.last_error.as_deref(),
            Some("the API server answered 503 ServiceUnavailable: down")
        );
        assert_eq!(failing.last_success, healthy[0].last_success);

        fake.set_outage(None);
        tokio::time::sleep(Duration::from_secs(120)).await;
        let recovered = &m.watch_health()[0];
        assert_eq!(recovered.failing_since, None, "{recovered:?}");
        assert_eq!(recovered.consecutive_failures, 0);
        assert_eq!(recovered.last_error, None);
        m.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_410_is_neither_a_success_nor_a_failure() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = manager(Strategy::Watch, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        settle().await;
        fake.compact();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let h = &m.watch_health()[0];
        assert_eq!((h.failing_since, h.consecutive_failures), (None, 0));
        m.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn other_strategies_report_no_watches() {
        let fake = FakeSource::new();
        fake.apply("ns", secret("s1", "v1", false));
        let m = manager(Strategy::Get, &fake, None);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod("ns", "p", "u", &["s1"])).unwrap());
        assert!(m.get("ns", "s1").await.is_ok());
        assert!(m.watch_health().is_empty());
    }
}
