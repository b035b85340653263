//! `FakeTrustBundleSource` (feature `test-util`): ClusterTrustBundles in memory, with the
//! served API version, discovery failures and a held first list under the test's control.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use futures::StreamExt as _;
use nodelet_object_manager::source::SourceError;
use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};

use super::source::{BundleEvent, BundleStream, TrustBundle, TrustBundleApi, TrustBundleSource};

/// An in-memory [`TrustBundleSource`] (feature `test-util`). Serves `v1beta1` until told
/// otherwise; every watch starts with the current bundles, then sees each change.
#[derive(Clone)]
pub struct FakeTrustBundleSource {
    inner: Arc<Inner>,
}

struct Inner {
    bundles: Mutex<BTreeMap<String, TrustBundle>>,
    api: Mutex<Option<TrustBundleApi>>,
    discovery_error: Mutex<Option<SourceError>>,
    changes: broadcast::Sender<BundleEvent>,
    hold: watch::Sender<bool>,
    discoveries: AtomicUsize,
    watches: AtomicUsize,
}

impl std::fmt::Debug for FakeTrustBundleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeTrustBundleSource")
            .field("bundles", &self.inner.bundles.lock().len())
            .finish_non_exhaustive()
    }
}

impl Default for FakeTrustBundleSource {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeTrustBundleSource {
    /// No bundles; serves `certificates.k8s.io/v1beta1`.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                bundles: Mutex::new(BTreeMap::new()),
                api: Mutex::new(Some(TrustBundleApi::V1beta1)),
                discovery_error: Mutex::new(None),
                changes: broadcast::channel(256).0,
                hold: watch::channel(false).0,
                discoveries: AtomicUsize::new(0),
                watches: AtomicUsize::new(0),
            }),
        }
    }

    /// A bundle named `name` of `signer` (if any) with `labels`, holding `pem`.
    pub fn bundle(
        name: &str,
        signer: Option<&str>,
        labels: &[(&str, &str)],
        pem: &str,
    ) -> TrustBundle {
        TrustBundle {
            name: name.to_owned(),
            signer_name: signer.map(str::to_owned),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            trust_bundle: pem.to_owned(),
        }
    }

    /// Creates or replaces a bundle; open watches see it.
    pub fn apply(&self, bundle: TrustBundle) {
        self.inner
            .bundles
            .lock()
            .insert(bundle.name.clone(), bundle.clone());
        let _ = self.inner.changes.send(BundleEvent::Applied(bundle));
    }

    /// Deletes a bundle; open watches see it. Returns whether it existed.
    pub fn delete(&self, name: &str) -> bool {
        let removed = self.inner.bundles.lock().remove(name);
        match removed {
            Some(b) => {
                let _ = self.inner.changes.send(BundleEvent::Deleted(b));
                true
            }
            None => false,
        }
    }

    /// Which version discovery reports (`None`: the API is not served).
    pub fn set_api(&self, api: Option<TrustBundleApi>) {
        *self.inner.api.lock() = api;
    }

    /// Makes discovery fail with `err` until set back to `None`.
    pub fn fail_discovery(&self, err: Option<SourceError>) {
        *self.inner.discovery_error.lock() = err;
    }

    /// While held, new watches do not deliver their first list.
    pub fn hold_lists(&self, held: bool) {
        self.inner.hold.send_replace(held);
    }

    /// Discovery calls so far.
    pub fn discoveries(&self) -> usize {
        self.inner.discoveries.load(Ordering::SeqCst)
    }

    /// Watches started so far.
    pub fn watches(&self) -> usize {
        self.inner.watches.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl TrustBundleSource for FakeTrustBundleSource {
    async fn discover(&self) -> Result<Option<TrustBundleApi>, SourceError> {
        self.inner.discoveries.fetch_add(1, Ordering::SeqCst);
        if let Some(e) = self.inner.discovery_error.lock().clone() {
            return Err(e);
        }
        Ok(*self.inner.api.lock())
    }

    fn watch(&self, _api: TrustBundleApi) -> BundleStream {
        self.inner.watches.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.clone();
        let mut hold = inner.hold.subscribe();
        let first = async move {
            // A dropped sender cannot happen while `inner` lives; either way, go on.
            let _ = hold.wait_for(|held| !held).await;
            let changes = inner.changes.subscribe();
            let listed: Vec<TrustBundle> = inner.bundles.lock().values().cloned().collect();
            (BundleEvent::Listed(listed), changes)
        };
        futures::stream::once(first)
            .flat_map(|(listed, changes)| {
                let rest = futures::stream::unfold(changes, |mut rx| async move {
                    loop {
                        match rx.recv().await {
                            Ok(event) => return Some((Ok(event), rx)),
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return None,
                        }
                    }
                });
                futures::stream::once(async move { Ok(listed) }).chain(rest)
            })
            .boxed()
    }
}
