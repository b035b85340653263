//! The seam between the [`TrustBundleManager`](super::TrustBundleManager) and the API server
//! (PL-19): [`TrustBundleSource`], the version-neutral [`TrustBundle`] and [`BundleEvent`],
//! and [`KubeTrustBundleSource`], the real one (discovery, then a cluster-wide list and watch
//! of `certificates.k8s.io/v1beta1`, else `v1alpha1`, ClusterTrustBundles).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt as _, future};
use k8s_openapi::api::certificates::{v1alpha1, v1beta1};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use nodelet_object_manager::source::SourceError;

/// A ClusterTrustBundle, whatever API version served it.
#[derive(Clone, PartialEq, Eq)]
pub struct TrustBundle {
    /// `metadata.name`.
    pub name: String,
    /// `spec.signerName`; `None` when empty or unset.
    pub signer_name: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.trustBundle`: PEM text.
    pub trust_bundle: String,
}

impl fmt::Debug for TrustBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustBundle")
            .field("name", &self.name)
            .field("signer_name", &self.signer_name)
            .field("labels", &self.labels)
            .field(
                "trust_bundle",
                &format_args!("<{} bytes>", self.trust_bundle.len()),
            )
            .finish()
    }
}

/// Which API version serves ClusterTrustBundles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrustBundleApi {
    /// `certificates.k8s.io/v1beta1` (preferred).
    V1beta1,
    /// `certificates.k8s.io/v1alpha1`.
    V1alpha1,
}

impl TrustBundleApi {
    /// The versions in the order discovery tries them.
    pub const PREFERENCE: [TrustBundleApi; 2] = [TrustBundleApi::V1beta1, TrustBundleApi::V1alpha1];

    /// `certificates.k8s.io/<version>`.
    pub fn group_version(self) -> &'static str {
        match self {
            TrustBundleApi::V1beta1 => "certificates.k8s.io/v1beta1",
            TrustBundleApi::V1alpha1 => "certificates.k8s.io/v1alpha1",
        }
    }
}

/// What the cluster-wide watch reports.
#[derive(Debug, Clone)]
pub enum BundleEvent {
    /// A complete list (the first one, and after every relist): the store is replaced.
    Listed(Vec<TrustBundle>),
    /// A bundle was created or modified.
    Applied(TrustBundle),
    /// A bundle was deleted (its last state).
    Deleted(TrustBundle),
}

/// A cluster-wide watch of ClusterTrustBundles. Errors are items; the stream retries on its
/// own (with backoff) and ends only when dropped.
pub type BundleStream = BoxStream<'static, Result<BundleEvent, SourceError>>;

/// Where ClusterTrustBundles come from: [`KubeTrustBundleSource`], or an in-memory fake
/// (`FakeTrustBundleSource`, feature `test-util`).
#[async_trait]
pub trait TrustBundleSource: Send + Sync + 'static {
    /// Which version of the API serves `clustertrustbundles` (v1beta1 preferred), `None` when
    /// none does.
    ///
    /// # Errors
    /// A [`SourceError`] when discovery itself fails (not a 404).
    async fn discover(&self) -> Result<Option<TrustBundleApi>, SourceError>;

    /// Lists and watches every ClusterTrustBundle of `api`: a [`BundleEvent::Listed`] first
    /// and after every relist, then changes.
    fn watch(&self, api: TrustBundleApi) -> BundleStream;
}

/// [`TrustBundleSource`] over a `kube::Client` (the node's identity: the Node authorizer lets a
/// node get, list and watch ClusterTrustBundles).
#[derive(Clone)]
pub struct KubeTrustBundleSource {
    client: Client,
}

impl fmt::Debug for KubeTrustBundleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeTrustBundleSource")
            .finish_non_exhaustive()
    }
}

impl KubeTrustBundleSource {
    /// A source reading through `client`. Sends nothing until the manager first needs a
    /// bundle.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl TrustBundleSource for KubeTrustBundleSource {
    async fn discover(&self) -> Result<Option<TrustBundleApi>, SourceError> {
        for api in TrustBundleApi::PREFERENCE {
            match self
                .client
                .list_api_group_resources(api.group_version())
                .await
            {
                Ok(list) => {
                    if list
                        .resources
                        .iter()
                        .any(|r| r.name == "clustertrustbundles")
                    {
                        return Ok(Some(api));
                    }
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(convert(e)),
            }
        }
        Ok(None)
    }

    fn watch(&self, api: TrustBundleApi) -> BundleStream {
        match api {
            TrustBundleApi::V1beta1 => watch_all(
                Api::<v1beta1::ClusterTrustBundle>::all(self.client.clone()),
                |b| TrustBundle {
                    name: b.metadata.name.unwrap_or_default(),
                    signer_name: b.spec.signer_name.filter(|s| !s.is_empty()),
                    labels: b.metadata.labels.unwrap_or_default(),
                    trust_bundle: b.spec.trust_bundle,
                },
            ),
            TrustBundleApi::V1alpha1 => watch_all(
                Api::<v1alpha1::ClusterTrustBundle>::all(self.client.clone()),
                |b| TrustBundle {
                    name: b.metadata.name.unwrap_or_default(),
                    signer_name: b.spec.signer_name.filter(|s| !s.is_empty()),
                    labels: b.metadata.labels.unwrap_or_default(),
                    trust_bundle: b.spec.trust_bundle,
                },
            ),
        }
    }
}

/// kube's watcher (list, then watch; relist on 410; backoff on errors) with its initial
/// events gathered into one [`BundleEvent::Listed`].
fn watch_all<K>(api: Api<K>, into: fn(K) -> TrustBundle) -> BundleStream
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let mut listing: Option<Vec<TrustBundle>> = None;
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |item| {
            let out = match item {
                Err(e) => Some(Err(convert_watcher(e))),
                Ok(Event::Init) => {
                    listing = Some(Vec::new());
                    None
                }
                Ok(Event::InitApply(k)) => {
                    listing.get_or_insert_with(Vec::new).push(into(k));
                    None
                }
                Ok(Event::InitDone) => {
                    Some(Ok(BundleEvent::Listed(listing.take().unwrap_or_default())))
                }
                Ok(Event::Apply(k)) => Some(Ok(BundleEvent::Applied(into(k)))),
                Ok(Event::Delete(k)) => Some(Ok(BundleEvent::Deleted(into(k)))),
            };
            future::ready(out)
        })
        .boxed()
}

fn convert(err: kube::Error) -> SourceError {
    match err {
        kube::Error::Api(status) => {
            SourceError::status(status.code, &status.reason, &status.message)
        }
        other => SourceError::Transport {
            source: Arc::new(other),
        },
    }
}

fn convert_watcher(err: watcher::Error) -> SourceError {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => convert(e),
        watcher::Error::WatchError(status) => {
            SourceError::status(status.code, &status.reason, &status.message)
        }
        other => SourceError::Transport {
            source: Arc::new(other),
        },
    }
}
