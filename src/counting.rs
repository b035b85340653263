//! [`Counting`]: an object source that counts the object managers' API requests by verb for
//! `nodelet_api_requests_total`.

use std::sync::Arc;

use nodelet_object_manager::source::{Listed, ObjectSource, ReadFrom, SourceError, WatchStream};

use crate::metrics::Metrics;

/// Wraps the managers' [`ObjectSource`] (a `KubeSource`) and counts each request.
pub(crate) struct Counting<K> {
    pub(crate) inner: Arc<dyn ObjectSource<K>>,
    pub(crate) metrics: Metrics,
}

#[async_trait::async_trait]
impl<K: Send + Sync + 'static> ObjectSource<K> for Counting<K> {
    async fn get(&self, namespace: &str, name: &str, read: ReadFrom) -> Result<K, SourceError> {
        self.metrics.api_request("get");
        self.inner.get(namespace, name, read).await
    }

    async fn list(&self, namespace: &str, name: &str) -> Result<Listed<K>, SourceError> {
        self.metrics.api_request("list");
        self.inner.list(namespace, name).await
    }

    async fn watch(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<WatchStream<K>, SourceError> {
        self.metrics.api_request("watch");
        self.inner.watch(namespace, name, resource_version).await
    }

    async fn watch_list(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<WatchStream<K>>, SourceError> {
        // One request either way: a watch-list, or none (a refused one was counted by the
        // server's answer only; the LIST that follows is counted as such).
        let result = self.inner.watch_list(namespace, name).await;
        if !matches!(result, Ok(None)) {
            self.metrics.api_request("watch");
        }
        result
    }
}
