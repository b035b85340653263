//! [`KubeSource`]: the production [`ObjectSource`], one `kube::Api` request per call.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::NamespaceResourceScope;
use kube::api::{GetParams, ListParams, WatchParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::api::{Listed, ObjectSource, ReadFrom, SourceError, WatchStream};

/// Server-side watch time-out in seconds. The kubelet asks for ≥ 30 minutes (OM-15), but
/// kube's client gives up reading a response after 295 s, so we stay under that and re-watch
/// from the last resourceVersion when the server ends the watch (no relist, no extra cost).
const WATCH_TIMEOUT_SECS: u32 = 290;

/// An [`ObjectSource`] backed by a `kube::Client`.
///
/// Requests: `GET /…/<name>` (optionally `?resourceVersion=0`), `LIST ?fieldSelector=
/// metadata.name=<name>`, `WATCH ?fieldSelector=metadata.name=<name>&allowWatchBookmarks=
/// true` and the watch-list `WATCH ?fieldSelector=…&sendInitialEvents=true&
/// resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=` — all allowed
/// for `system:node:<node>` by the Node authorizer when a pod bound to the node references the
/// object. Watch-lists are used until the server refuses one (400/422); from then on every
/// clone of the source lists and watches.
pub struct KubeSource<K> {
    client: Client,
    api: fn(Client, &str) -> Api<K>,
    /// Watch-lists are used until the server refuses one; shared by clones.
    watch_list: Arc<AtomicBool>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for KubeSource<K> {
    fn clone(&self) -> Self {
        KubeSource {
            client: self.client.clone(),
            api: self.api,
            watch_list: self.watch_list.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for KubeSource<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeSource").finish_non_exhaustive()
    }
}

impl<K> KubeSource<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    /// A source for a namespaced kind (ConfigMap, Secret).
    pub fn namespaced(client: Client) -> Self {
        KubeSource {
            client,
            api: |c, ns| Api::namespaced(c, ns),
            watch_list: Arc::new(AtomicBool::new(true)),
            _kind: PhantomData,
        }
    }
}

impl<K> KubeSource<K>
where
    K: Resource<DynamicType = ()>,
{
    /// A source for a cluster-scoped kind (Node); the `namespace` argument is ignored.
    pub fn cluster(client: Client) -> Self {
        KubeSource {
            client,
            api: |c, _| Api::all(c),
            watch_list: Arc::new(AtomicBool::new(true)),
            _kind: PhantomData,
        }
    }
}

impl<K> KubeSource<K> {
    /// Lists and watches (two requests per object and relist) instead of watch-lists, as
    /// before Kubernetes 1.35 made them the kubelet's default.
    #[must_use]
    pub fn without_watch_list(self) -> Self {
        self.watch_list.store(false, Ordering::Release);
        self
    }
}

fn convert(err: kube::Error) -> SourceError {
    match err {
        kube::Error::Api(status) => SourceError::Status {
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
        other => SourceError::Transport {
            source: Arc::new(other),
        },
    }
}

fn name_selector(name: &str) -> String {
    format!("metadata.name={name}")
}

#[async_trait::async_trait]
impl<K> ObjectSource<K> for KubeSource<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    async fn get(&self, namespace: &str, name: &str, read: ReadFrom) -> Result<K, SourceError> {
        let api = (self.api)(self.client.clone(), namespace);
        let params = match read {
            ReadFrom::Quorum => GetParams::default(),
            ReadFrom::WatchCache => GetParams::any(),
        };
        let mut obj = api.get_with(name, &params).await.map_err(convert)?;
        super::slim::for_node(&mut obj);
        Ok(obj)
    }

    async fn list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Listed<K>, SourceError> {
        let api = (self.api)(self.client.clone(), namespace);
        let params = ListParams::default().fields(&name_selector(name));
        let params = match read {
            ReadFrom::Quorum => params,
            ReadFrom::WatchCache => params.match_any(),
        };
        let list = api.list(&params).await.map_err(convert)?;
        let resource_version = list.metadata.resource_version.clone().unwrap_or_default();
        let object = list
            .items
            .into_iter()
            .find(|o| o.meta().name.as_deref() == Some(name))
            .map(|mut o| {
                super::slim::for_node(&mut o);
                o
            });
        Ok(Listed {
            object,
            resource_version,
        })
    }

    async fn watch(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<WatchStream<K>, SourceError> {
        let api = (self.api)(self.client.clone(), namespace);
        let params = WatchParams::default()
            .fields(&name_selector(name))
            .timeout(WATCH_TIMEOUT_SECS);
        let request = watch_request(&api, &params, resource_version)?;
        super::lines::watch(&self.client, request).await
    }

    async fn watch_list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Option<WatchStream<K>>, SourceError> {
        if !self.watch_list.load(Ordering::Acquire) {
            return Ok(None);
        }
        let api = (self.api)(self.client.clone(), namespace);
        let params = WatchParams::streaming_lists()
            .fields(&name_selector(name))
            .timeout(WATCH_TIMEOUT_SECS);
        // Unset: a consistent read, which waits for the server's watch cache to catch up;
        // "0": the cache as it is (the reflector's choice, `reflector.rs`).
        let resource_version = match read {
            ReadFrom::Quorum => "",
            ReadFrom::WatchCache => "0",
        };
        let request = watch_request(&api, &params, resource_version)?;
        match super::lines::watch(&self.client, request).await {
            Ok(stream) => Ok(Some(stream)),
            Err(SourceError::Status {
                code: code @ (400 | 422),
                reason,
                message,
            }) => {
                if self.watch_list.swap(false, Ordering::AcqRel) {
                    tracing::info!(
                        code,
                        reason = %reason,
                        message = %message,
                        "the API server refused a watch-list; listing and watching instead"
                    );
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// The WATCH request `api` would send, sent by [`super::lines::watch`] instead of kube's
/// line codec (see that module).
fn watch_request<K: Resource>(
    api: &Api<K>,
    params: &WatchParams,
    resource_version: &str,
) -> Result<http::Request<Vec<u8>>, SourceError> {
    kube::core::Request::new(api.resource_url())
        .watch(params, resource_version)
        .map_err(|e| SourceError::Transport {
            source: Arc::new(kube::Error::BuildRequest(e)),
        })
}
