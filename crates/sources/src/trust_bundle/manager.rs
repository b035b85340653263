//! [`TrustBundleManager`]: the trust anchors of `clusterTrustBundle` projections (PL-19),
//! from a lazily started cluster-wide watch, normalized and cached.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ClusterTrustBundleProjection;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use lru::LruCache;
use nodelet_core::SourceChange;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::TrustBundleError;
use super::pem::normalize;
use super::refs::TrustBundleChange;
use super::selector::Selector;
use super::source::{BundleEvent, BundleStream, TrustBundle, TrustBundleApi, TrustBundleSource};

/// Changes kept for a slow subscriber before it lags (and misses some).
const CHANGES_CAPACITY: usize = 1024;

/// Options of a [`TrustBundleManager`] (the agent builds one when the `ClusterTrustBundle` and
/// `ClusterTrustBundleProjection` gates are on).
#[derive(Clone)]
#[non_exhaustive]
pub struct TrustBundleConfig {
    /// Where bundles come from (in the agent: [`KubeTrustBundleSource`](super::KubeTrustBundleSource)
    /// over the node's client). Default `None`: every `clusterTrustBundle` source fails as in a
    /// kubelet without an API client (static mode).
    pub source: Option<Arc<dyn TrustBundleSource>>,
    /// Normalized results kept, least recently used dropped first (default 220: twice the
    /// kubelet's default `maxPods`, as the kubelet sizes it).
    pub cache_size: NonZeroUsize,
    /// How long a normalized result is kept at most (default 5 min, the kubelet's).
    pub cache_ttl: Duration,
    /// How long a read waits for the watch's first list (default 10 s, the kubelet's).
    pub sync_timeout: Duration,
}

impl Default for TrustBundleConfig {
    fn default() -> Self {
        Self {
            source: None,
            cache_size: NonZeroUsize::new(220).unwrap_or(NonZeroUsize::MIN),
            cache_ttl: Duration::from_secs(300),
            sync_timeout: Duration::from_secs(10),
        }
    }
}

impl fmt::Debug for TrustBundleConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustBundleConfig")
            .field("source", &self.source.as_ref().map(|_| "..."))
            .field("cache_size", &self.cache_size)
            .field("cache_ttl", &self.cache_ttl)
            .field("sync_timeout", &self.sync_timeout)
            .finish()
    }
}

/// The kubelet's ClusterTrustBundle manager, event-driven: reads bundles from one cluster-wide
/// watch, started on the first read; answers with normalized PEM (blocks decoded, one per
/// distinct DER, in an order random per process, written as `CERTIFICATE` blocks); caches each
/// answer (LRU, TTL) until a bundle of that name or signer changes, and tells subscribers of
/// every change so the volumes reading it are set up again (PL-20).
///
/// Cheap to clone (a handle). The watch task holds a weak reference: it ends when the last
/// handle is dropped or [`shutdown`](Self::shutdown) is called.
#[derive(Clone)]
pub struct TrustBundleManager {
    shared: Arc<Shared>,
}

struct Shared {
    source: Option<Arc<dyn TrustBundleSource>>,
    cache_ttl: Duration,
    sync_timeout: Duration,
    /// The API version the watch runs on, once started.
    started: tokio::sync::Mutex<Option<TrustBundleApi>>,
    store: RwLock<Store>,
    synced: watch::Sender<bool>,
    cache: Mutex<LruCache<CacheKey, Cached>>,
    changes: broadcast::Sender<SourceChange>,
    /// The per-process order of anchors (the kubelet shuffles).
    order: RandomState,
    shutdown: CancellationToken,
    /// Normalizations so far (cache misses), for tests.
    normalizations: AtomicU64,
}

#[derive(Default)]
struct Store {
    bundles: HashMap<String, TrustBundle>,
    /// Bumped on every change: a result computed from an older store is not cached.
    generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum CacheKey {
    Name(String),
    Signer { signer: String, selector: String },
}

struct Cached {
    anchors: Arc<[u8]>,
    expires: Instant,
}

impl fmt::Debug for TrustBundleManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustBundleManager")
            .field("bundles", &self.shared.store.read().bundles.len())
            .field("synced", &*self.shared.synced.borrow())
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TrustBundleManager {
    /// A manager reading from `config.source`. Sends nothing until the first read.
    pub fn new(config: TrustBundleConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                source: config.source,
                cache_ttl: config.cache_ttl,
                sync_timeout: config.sync_timeout,
                started: tokio::sync::Mutex::new(None),
                store: RwLock::new(Store::default()),
                synced: watch::channel(false).0,
                cache: Mutex::new(LruCache::new(config.cache_size)),
                changes: broadcast::channel(CHANGES_CAPACITY).0,
                order: RandomState::new(),
                shutdown: CancellationToken::new(),
                normalizations: AtomicU64::new(0),
            }),
        }
    }

    /// The trust anchors a projection asks for: by `name`, else by `signerName` +
    /// `labelSelector`; `optional` turns a missing bundle (or zero matches) into empty
    /// content.
    ///
    /// # Errors
    /// See [`by_name`](Self::by_name) and [`by_signer`](Self::by_signer);
    /// [`TrustBundleError::NoNameOrSigner`] when the projection has neither.
    pub async fn trust_anchors(
        &self,
        projection: &ClusterTrustBundleProjection,
    ) -> Result<Arc<[u8]>, TrustBundleError> {
        let optional = projection.optional.unwrap_or(false);
        if let Some(name) = &projection.name {
            self.by_name(name, optional).await
        } else if let Some(signer) = &projection.signer_name {
            self.by_signer(signer, projection.label_selector.as_ref(), optional)
                .await
        } else {
            Err(TrustBundleError::NoNameOrSigner)
        }
    }

    /// The normalized anchors of the bundle `name`; empty when it is missing and
    /// `allow_missing`.
    ///
    /// # Errors
    /// [`TrustBundleError::NotFound`]; the start-up errors (`StaticMode`, `ApiNotServed`,
    /// `Discovery`, `NotSynced`, `ShutDown`).
    pub async fn by_name(
        &self,
        name: &str,
        allow_missing: bool,
    ) -> Result<Arc<[u8]>, TrustBundleError> {
        self.ready().await?;
        let key = CacheKey::Name(name.to_owned());
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        let (generation, bundle) = {
            let store = self.shared.store.read();
            (store.generation, store.bundles.get(name).cloned())
        };
        let Some(bundle) = bundle else {
            if allow_missing {
                return Ok(Arc::from(Vec::new()));
            }
            return Err(TrustBundleError::NotFound {
                name: name.to_owned(),
            });
        };
        Ok(self.normalize_and_cache(key, generation, [bundle.trust_bundle.as_str()]))
    }

    /// The normalized anchors of every bundle of `signer_name` that `label_selector` selects
    /// (`None` selects nothing, an empty selector everything); empty when none matches and
    /// `allow_missing`.
    ///
    /// # Errors
    /// [`TrustBundleError::InvalidSelector`], [`TrustBundleError::SelectorTooLong`],
    /// [`TrustBundleError::NoMatch`]; the start-up errors as for [`by_name`](Self::by_name).
    pub async fn by_signer(
        &self,
        signer_name: &str,
        label_selector: Option<&LabelSelector>,
        allow_missing: bool,
    ) -> Result<Arc<[u8]>, TrustBundleError> {
        self.ready().await?;
        let selector = Selector::parse(label_selector)?;
        let key = CacheKey::Signer {
            signer: signer_name.to_owned(),
            selector: selector.to_string(),
        };
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        let (generation, selected) = {
            let store = self.shared.store.read();
            let selected: Vec<String> = store
                .bundles
                .values()
                .filter(|b| b.signer_name.as_deref() == Some(signer_name))
                .filter(|b| selector.matches(&b.labels))
                .map(|b| b.trust_bundle.clone())
                .collect();
            (store.generation, selected)
        };
        if selected.is_empty() {
            if allow_missing {
                return Ok(Arc::from(Vec::new()));
            }
            return Err(TrustBundleError::NoMatch {
                signer_name: signer_name.to_owned(),
            });
        }
        Ok(self.normalize_and_cache(key, generation, selected.iter().map(String::as_str)))
    }

    /// A [`SourceChange::TrustBundle`] for every bundle created, modified or deleted (after
    /// the cached results it affects are dropped). Only changes after this call arrive; a
    /// subscriber more than 1,024 behind lags.
    pub fn subscribe(&self) -> broadcast::Receiver<SourceChange> {
        self.shared.changes.subscribe()
    }

    /// Whether the watch was started (by a first read).
    pub fn is_started(&self) -> bool {
        self.shared
            .started
            .try_lock()
            .map(|s| s.is_some())
            .unwrap_or(false)
    }

    /// Stops the watch; later reads fail with [`TrustBundleError::ShutDown`].
    pub fn shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    /// Lazily start the watch (discovery first), then wait for its first list.
    async fn ready(&self) -> Result<(), TrustBundleError> {
        let shared = &self.shared;
        let Some(source) = shared.source.as_ref() else {
            return Err(TrustBundleError::StaticMode);
        };
        if shared.shutdown.is_cancelled() {
            return Err(TrustBundleError::ShutDown);
        }
        {
            // (1) One discovery at a time; a failed or empty one is asked again next read.
            let mut started = shared.started.lock().await;
            if started.is_none() {
                let api = match source.discover().await {
                    Ok(Some(api)) => api,
                    Ok(None) => return Err(TrustBundleError::ApiNotServed),
                    Err(e) => return Err(TrustBundleError::Discovery(Arc::new(e))),
                };
                // (2) One cluster-wide watch for the manager's life.
                let stream = source.watch(api);
                tokio::spawn(run_watch(
                    Arc::downgrade(shared),
                    stream,
                    shared.shutdown.clone(),
                ));
                tracing::info!(
                    api = api.group_version(),
                    "ClusterTrustBundle watch started"
                );
                *started = Some(api);
            }
        }
        // (3) Wait for the first list, at most `sync_timeout`.
        let mut synced = shared.synced.subscribe();
        match tokio::time::timeout(shared.sync_timeout, synced.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(TrustBundleError::NotSynced),
        }
    }

    fn cached(&self, key: &CacheKey) -> Option<Arc<[u8]>> {
        let mut cache = self.shared.cache.lock();
        match cache.get(key) {
            Some(c) if Instant::now() < c.expires => Some(c.anchors.clone()),
            Some(_) => {
                cache.pop(key);
                None
            }
            None => None,
        }
    }

    fn normalize_and_cache<'a>(
        &self,
        key: CacheKey,
        generation: u64,
        bundles: impl IntoIterator<Item = &'a str>,
    ) -> Arc<[u8]> {
        self.shared.normalizations.fetch_add(1, Ordering::Relaxed);
        let anchors: Arc<[u8]> = Arc::from(normalize(bundles, &self.shared.order));
        // Store before cache, as `apply` takes them: a result of an older store is not kept.
        let store = self.shared.store.read();
        if store.generation == generation {
            self.shared.cache.lock().put(
                key,
                Cached {
                    anchors: anchors.clone(),
                    expires: Instant::now() + self.shared.cache_ttl,
                },
            );
        }
        anchors
    }

    #[cfg(test)]
    fn normalizations(&self) -> u64 {
        self.shared.normalizations.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// The one writer: applies a watch event, drops the cached results it affects, then
    /// tells subscribers.
    fn apply(&self, event: BundleEvent) {
        let mut changes: Vec<TrustBundleChange> = Vec::new();
        let mut note = |b: &TrustBundle| {
            let change = TrustBundleChange {
                name: b.name.clone(),
                signer_name: b.signer_name.clone(),
            };
            if !changes.contains(&change) {
                changes.push(change);
            }
        };
        let first_list = {
            let mut store = self.store.write();
            match event {
                BundleEvent::Listed(list) => {
                    let new: HashMap<String, TrustBundle> =
                        list.into_iter().map(|b| (b.name.clone(), b)).collect();
                    for (name, old) in &store.bundles {
                        match new.get(name) {
                            Some(b) if b == old => {}
                            Some(b) => {
                                note(old);
                                note(b);
                            }
                            None => note(old),
                        }
                    }
                    for (name, b) in &new {
                        if !store.bundles.contains_key(name) {
                            note(b);
                        }
                    }
                    store.bundles = new;
                }
                BundleEvent::Applied(b) => {
                    let old = store.bundles.insert(b.name.clone(), b.clone());
                    if old.as_ref() != Some(&b) {
                        if let Some(old) = &old {
                            note(old);
                        }
                        note(&b);
                    }
                }
                BundleEvent::Deleted(b) => {
                    if let Some(old) = store.bundles.remove(&b.name) {
                        note(&old);
                    }
                }
            }
            if !changes.is_empty() {
                store.generation += 1;
                let mut cache = self.cache.lock();
                let stale: Vec<CacheKey> = cache
                    .iter()
                    .map(|(k, _)| k)
                    .filter(|k| changes.iter().any(|c| c.drops(k)))
                    .cloned()
                    .collect();
                for k in &stale {
                    cache.pop(k);
                }
            }
            !*self.synced.borrow()
        };
        if first_list {
            self.synced.send_replace(true);
        }
        for change in changes {
            // Nobody listening is fine.
            let _ = self.changes.send(change.into());
        }
    }
}

impl TrustBundleChange {
    /// A change of this bundle drops the results of its name and of its signer (the kubelet
    /// drops only the signer's when the bundle has one).
    fn drops(&self, key: &CacheKey) -> bool {
        match key {
            CacheKey::Name(name) => *name == self.name,
            CacheKey::Signer { signer, .. } => self.signer_name.as_ref() == Some(signer),
        }
    }
}

/// The watch task: applies events until shut down, the stream ends or the manager is gone.
async fn run_watch(shared: Weak<Shared>, mut stream: BundleStream, shutdown: CancellationToken) {
    loop {
        let item = tokio::select! {
            () = shutdown.cancelled() => return,
            item = stream.next() => item,
        };
        let (Some(item), Some(shared)) = (item, shared.upgrade()) else {
            return;
        };
        match item {
            Ok(event) => shared.apply(event),
            // The stream backs off and retries on its own.
            Err(e) => tracing::warn!(error = %e, "ClusterTrustBundle watch failed, retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use serde_json::json;

    use super::*;
    use crate::trust_bundle::fake::FakeTrustBundleSource;

    /// A PEM `CERTIFICATE` block around `der`.
    fn pem(der: &[u8]) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
    }

    fn manager(source: &FakeTrustBundleSource, cache_size: usize) -> TrustBundleManager {
        TrustBundleManager::new(TrustBundleConfig {
            source: Some(Arc::new(source.clone())),
            cache_size: NonZeroUsize::new(cache_size).unwrap(),
            ..TrustBundleConfig::default()
        })
    }

    fn ders(anchors: &[u8]) -> Vec<Vec<u8>> {
        let mut d = super::super::pem::decode_blocks(std::str::from_utf8(anchors).unwrap());
        d.sort();
        d
    }

    fn bundle(
        name: &str,
        signer: Option<&str>,
        labels: &[(&str, &str)],
        der: &[u8],
    ) -> TrustBundle {
        FakeTrustBundleSource::bundle(name, signer, labels, &pem(der))
    }

    fn selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_asked_before_the_first_read_and_one_watch_serves_every_read() {
        let source = FakeTrustBundleSource::new();
        source.apply(bundle("a", None, &[], b"a"));
        let m = manager(&source, 10);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!((source.discoveries(), source.watches()), (0, 0));
        assert!(!m.is_started());
        assert_eq!(ders(&m.by_name("a", false).await.unwrap()), [b"a".to_vec()]);
        assert_eq!(ders(&m.by_name("a", false).await.unwrap()), [b"a".to_vec()]);
        assert!(m.by_name("b", true).await.unwrap().is_empty());
        assert_eq!((source.discoveries(), source.watches()), (1, 1));
        assert!(m.is_started());
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_bundle_is_an_error_unless_optional() {
        let source = FakeTrustBundleSource::new();
        let m = manager(&source, 10);
        let err = m.by_name("nope", false).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "while getting ClusterTrustBundle: clustertrustbundle.certificates.k8s.io \"nope\" not found"
        );
        assert!(err.is_missing());
        assert!(m.by_name("nope", true).await.unwrap().is_empty());
        let projection: ClusterTrustBundleProjection =
            serde_json::from_value(json!({"path": "ca.pem"})).unwrap();
        assert_eq!(
            m.trust_anchors(&projection).await.unwrap_err().to_string(),
            "ClusterTrustBundle projection requires either name or signerName to be set"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn by_signer_no_selector_matches_nothing_and_an_empty_one_everything_of_the_signer() {
        let source = FakeTrustBundleSource::new();
        source.apply(bundle("s:1", Some("example.com/s"), &[("team", "a")], b"1"));
        source.apply(bundle("s:2", Some("example.com/s"), &[("team", "b")], b"2"));
        source.apply(bundle("o:3", Some("example.com/o"), &[("team", "a")], b"3"));
        source.apply(bundle("plain", None, &[("team", "a")], b"4"));
        let m = manager(&source, 10);
        let err = m.by_signer("example.com/s", None, false).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "combination of signerName and labelSelector matched zero ClusterTrustBundles"
        );
        assert!(
            m.by_signer("example.com/s", None, true)
                .await
                .unwrap()
                .is_empty()
        );
        let all = m
            .by_signer("example.com/s", Some(&selector(json!({}))), false)
            .await
            .unwrap();
        assert_eq!(ders(&all), [b"1".to_vec(), b"2".to_vec()]);
        let team_a = m
            .by_signer(
                "example.com/s",
                Some(&selector(json!({"matchLabels": {"team": "a"}}))),
                false,
            )
            .await
            .unwrap();
        assert_eq!(ders(&team_a), [b"1".to_vec()]);
        // The nil selector is not the empty one, even with the empty one cached.
        assert!(m.by_signer("example.com/s", None, false).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_result_is_cached_until_a_bundle_of_its_name_or_signer_changes() {
        let source = FakeTrustBundleSource::new();
        source.apply(bundle("named", Some("example.com/s"), &[], b"n1"));
        source.apply(bundle("other", None, &[], b"o"));
        let m = manager(&source, 10);
        let everything = selector(json!({}));
        m.by_name("named", false).await.unwrap();
        m.by_signer("example.com/s", Some(&everything), false)
            .await
            .unwrap();
        m.by_name("named", false).await.unwrap();
        m.by_signer("example.com/s", Some(&everything), false)
            .await
            .unwrap();
        assert_eq!(m.normalizations(), 2);
        let mut changes = m.subscribe();

        // An unrelated bundle changes: both stay cached.
        source.apply(bundle("other", None, &[], b"o2"));
        let change = changes.recv().await.unwrap();
        assert_eq!(
            change,
            SourceChange::TrustBundle {
                name: "other".into(),
                signer_name: None
            }
        );
        m.by_name("named", false).await.unwrap();
        m.by_signer("example.com/s", Some(&everything), false)
            .await
            .unwrap();
        assert_eq!(m.normalizations(), 2);

        // The bundle changes: its name's and its signer's results are dropped.
        source.apply(bundle("named", Some("example.com/s"), &[], b"n2"));
        let change = changes.recv().await.unwrap();
        assert_eq!(
            change,
            SourceChange::TrustBundle {
                name: "named".into(),
                signer_name: Some("example.com/s".into())
            }
        );
        assert_eq!(
            ders(&m.by_name("named", false).await.unwrap()),
            [b"n2".to_vec()]
        );
        let by_signer = m
            .by_signer("example.com/s", Some(&everything), false)
            .await
            .unwrap();
        assert_eq!(ders(&by_signer), [b"n2".to_vec()]);
        assert_eq!(m.normalizations(), 4);

        // A new bundle of the signer: the signer's result is dropped.
        source.apply(bundle("s:new", Some("example.com/s"), &[], b"x"));
        changes.recv().await.unwrap();
        let by_signer = m
            .by_signer("example.com/s", Some(&everything), false)
            .await
            .unwrap();
        assert_eq!(ders(&by_signer), [b"n2".to_vec(), b"x".to_vec()]);
        // Deleted: the next read fails.
        source.delete("named");
        changes.recv().await.unwrap();
        assert!(m.by_name("named", false).await.unwrap_err().is_missing());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cached_result_expires_after_five_minutes() {
        let source = FakeTrustBundleSource::new();
        source.apply(bundle("a", None, &[], b"a"));
        let m = manager(&source, 10);
        m.by_name("a", false).await.unwrap();
        tokio::time::sleep(Duration::from_secs(299)).await;
        m.by_name("a", false).await.unwrap();
        assert_eq!(m.normalizations(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        m.by_name("a", false).await.unwrap();
        assert_eq!(m.normalizations(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_used_result_goes_first_when_the_cache_is_full() {
        let source = FakeTrustBundleSource::new();
        for name in ["a", "b", "c"] {
            source.apply(bundle(name, None, &[], name.as_bytes()));
        }
        let m = manager(&source, 2);
        for name in ["a", "b", "a", "c"] {
            m.by_name(name, false).await.unwrap();
        }
        assert_eq!(m.normalizations(), 3);
        m.by_name("a", false).await.unwrap();
        assert_eq!(m.normalizations(), 3, "a was used recently");
        m.by_name("b", false).await.unwrap();
        assert_eq!(m.normalizations(), 4, "b was evicted");
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_without_the_api_is_a_clear_error_and_discovery_is_asked_again() {
        let source = FakeTrustBundleSource::new();
        source.set_api(None);
        source.apply(bundle("a", None, &[], b"a"));
        let m = manager(&source, 10);
        let err = m.by_name("a", false).await.unwrap_err();
        assert!(matches!(err, TrustBundleError::ApiNotServed));
        assert!(
            err.to_string().contains("certificates.k8s.io/v1beta1"),
            "{err}"
        );
        source.fail_discovery(Some(SourceErrorForTests::status(503)));
        assert!(matches!(
            m.by_name("a", false).await,
            Err(TrustBundleError::Discovery(_))
        ));
        source.fail_discovery(None);
        source.set_api(Some(TrustBundleApi::V1alpha1));
        assert_eq!(ders(&m.by_name("a", false).await.unwrap()), [b"a".to_vec()]);
        assert_eq!((source.discoveries(), source.watches()), (3, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_waits_ten_seconds_for_the_first_list() {
        let source = FakeTrustBundleSource::new();
        source.apply(bundle("a", None, &[], b"a"));
        source.hold_lists(true);
        let m = manager(&source, 10);
        let start = Instant::now();
        let err = m.by_name("a", false).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "ClusterTrustBundle informer has not yet synced"
        );
        assert_eq!(Instant::now() - start, Duration::from_secs(10));
        source.hold_lists(false);
        assert!(m.by_name("a", false).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_source_or_after_shutdown_reads_fail() {
        let m = TrustBundleManager::new(TrustBundleConfig::default());
        assert_eq!(
            m.by_name("a", true).await.unwrap_err().to_string(),
            "ClusterTrustBundle projection is not supported in static kubelet mode"
        );
        let source = FakeTrustBundleSource::new();
        let m = manager(&source, 10);
        m.shutdown();
        assert!(matches!(
            m.by_name("a", true).await,
            Err(TrustBundleError::ShutDown)
        ));
    }

    /// Source errors for the fake.
    struct SourceErrorForTests;

    impl SourceErrorForTests {
        fn status(code: u16) -> nodelet_object_manager::source::SourceError {
            nodelet_object_manager::source::SourceError::status(code, "ServiceUnavailable", "down")
        }
    }
}
