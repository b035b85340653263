//! Service account tokens for projected volumes (PL-10): the [`TokenSource`] seam, its
//! TokenRequest implementation [`KubeTokenSource`], a fake, and [`TokenManager`], the per-pod
//! token cache that decides when a token must be refreshed (at 80 % of its lifetime).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use nodelet_core::backoff::Schedule;
use nodelet_core::{AdmittedPod, PodUid};
use parking_lot::Mutex;
use tokio::time::Instant;

/// A service account token. `Debug` redacts the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The bearer token (a JWT from a real API server).
    pub token: String,
    /// When the API server says the token expires.
    pub expiration: SystemTime,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("token", &format_args!("<{} bytes>", self.token.len()))
            .field("expiration", &self.expiration)
            .finish()
    }
}

/// Why a token could not be obtained. `Display` is the API server's message or the transport
/// failure, never the token.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The API server refused the TokenRequest.
    #[error("{message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// The TokenRequest got no usable answer.
    #[error("token request for service account {namespace}/{service_account}: {message}")]
    Request {
        /// The pod's namespace.
        namespace: String,
        /// The service account.
        service_account: String,
        /// What went wrong.
        message: String,
    },
}

/// Where tokens come from: the TokenRequest API ([`KubeTokenSource`]) or a fake in tests.
#[async_trait]
pub trait TokenSource: Send + Sync + 'static {
    /// Sends `request` (built by the token cache: audiences, expiration, the pod as bound
    /// object) for `service_account` in `namespace`.
    ///
    /// # Errors
    /// [`TokenError`] when the API refuses or cannot be reached.
    async fn token(
        &self,
        namespace: &str,
        service_account: &str,
        request: &TokenRequest,
    ) -> Result<Token, TokenError>;
}

/// How often a token request the Node authorizer refuses with `no relationship found` (its
/// graph lags the API) is retried, on [`Schedule::AUTHORIZER_LAG`]: 1.3–2.6 s in all.
const LAG_RETRIES: u32 = 6;

/// [`TokenSource`] over the `serviceaccounts/<sa>/token` subresource.
#[derive(Clone)]
pub struct KubeTokenSource {
    client: kube::Client,
}

impl fmt::Debug for KubeTokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KubeTokenSource")
    }
}

impl KubeTokenSource {
    /// Requests tokens through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl TokenSource for KubeTokenSource {
    async fn token(
        &self,
        namespace: &str,
        service_account: &str,
        request: &TokenRequest,
    ) -> Result<Token, TokenError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let expiration_seconds = request
            .spec
            .as_ref()
            .and_then(|s| s.expiration_seconds)
            .unwrap_or_default();
        // The Node authorizer links a pod's service account a moment after the pod is bound
        // (and after a server restart, once its graph is rebuilt): a refusal for want of that
        // link is retried six times, over 1.3-2.6 s in all, before it is reported. So is a
        // 404: NodeRestriction looks the bound pod up in its informer's cache, which trails
        // the pod's creation as the graph does (OM-32).
        let mut lag = (0..LAG_RETRIES).map(|attempt| Schedule::AUTHORIZER_LAG.delay(attempt));
        let answer = loop {
            let sent = api
                .create_token_request(service_account, &PostParams::default(), request)
                .await;
            match (sent, lag.next()) {
                (Err(kube::Error::Api(status)), Some(delay))
                    if status.code == 404
                        || nodelet_object_manager::source::is_no_relationship(
                            status.code,
                            &status.message,
                        ) =>
                {
                    tokio::time::sleep(delay).await;
                }
                (sent, _) => break sent,
            }
        };
        let answer = answer.map_err(|e| match e {
            kube::Error::Api(status) => TokenError::Api {
                code: status.code,
                message: status.message,
            },
            other => TokenError::Request {
                namespace: namespace.to_owned(),
                service_account: service_account.to_owned(),
                message: other.to_string(),
            },
        })?;
        let status = answer.status.ok_or_else(|| TokenError::Request {
            namespace: namespace.to_owned(),
            service_account: service_account.to_owned(),
            message: "the answer has no status".into(),
        })?;
        let expiration = status
            .expiration_timestamp
            .map(|t| SystemTime::from(t.0))
            .unwrap_or_else(|| {
                SystemTime::now() + Duration::from_secs(expiration_seconds.max(0).unsigned_abs())
            });
        Ok(Token {
            token: status.token.unwrap_or_default(),
            expiration,
        })
    }
}

/// What identifies a cached token: the whole TokenRequest, as the kubelet's token manager
/// keys its cache (service account, namespace, audiences, expiration, the bound object and
/// the request's own UID when one is set), plus the pod whose teardown forgets it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TokenKey {
    pod_uid: PodUid,
    namespace: String,
    service_account: String,
    audiences: Vec<String>,
    expiration_seconds: Option<i64>,
    bound_object: Option<[Option<String>; 4]>,
    request_uid: Option<String>,
}

impl TokenKey {
    fn new(pod_uid: &PodUid, namespace: &str, service_account: &str, r: &TokenRequest) -> Self {
        let spec = r.spec.as_ref();
        Self {
            pod_uid: pod_uid.clone(),
            namespace: namespace.to_owned(),
            service_account: service_account.to_owned(),
            audiences: spec.and_then(|s| s.audiences.clone()).unwrap_or_default(),
            expiration_seconds: spec.and_then(|s| s.expiration_seconds),
            bound_object: spec.and_then(|s| s.bound_object_ref.as_ref()).map(|b| {
                [
                    b.api_version.clone(),
                    b.kind.clone(),
                    b.name.clone(),
                    b.uid.clone(),
                ]
            }),
            request_uid: r.metadata.uid.clone(),
        }
    }
}

/// The TokenRequest the kubelet sends for a projected token: `audience` (the API server's
/// default audiences when `None`), `expiration_seconds`, bound to the pod (name and UID).
fn token_request(pod: &Pod, audience: Option<&str>, expiration_seconds: i64) -> TokenRequest {
    TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_owned()]),
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        }),
        ..TokenRequest::default()
    }
}

#[derive(Debug, Clone)]
struct Cached {
    token: Token,
    refresh_at: Instant,
}

/// The kubelet's token manager: service account tokens for the pods' projected volumes,
/// requested through a [`TokenSource`], cached per pod and request, and reused until a
/// fraction of their lifetime (default 0.8, PL-10) has passed. Deadlines are in tokio time
/// (lifetime measured when the token arrives), so tests can run on paused time. Tokens never
/// change on their own: a volume is set up again at the refresh instant [`get`](Self::get)
/// returns, so the manager announces no changes.
///
/// Cheap to clone (a handle).
#[derive(Clone)]
pub struct TokenManager {
    inner: Arc<TokenInner>,
}

struct TokenInner {
    source: Arc<dyn TokenSource>,
    refresh_fraction: f64,
    tokens: Mutex<HashMap<TokenKey, Cached>>,
}

impl fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenManager")
            .field("refresh_fraction", &self.inner.refresh_fraction)
            .field("tokens", &self.inner.tokens.lock().len())
            .finish_non_exhaustive()
    }
}

impl TokenManager {
    /// A manager requesting tokens through `source`, refreshing them at 80 % of their lifetime.
    pub fn new(source: Arc<dyn TokenSource>) -> Self {
        Self::with_refresh_fraction(source, 0.8)
    }

    /// A manager refreshing tokens once `refresh_fraction` (clamped to `0.0..=1.0`) of their
    /// lifetime has passed.
    pub fn with_refresh_fraction(source: Arc<dyn TokenSource>, refresh_fraction: f64) -> Self {
        Self {
            inner: Arc::new(TokenInner {
                source,
                refresh_fraction: refresh_fraction.clamp(0.0, 1.0),
                tokens: Mutex::default(),
            }),
        }
    }

    /// A token of `service_account` for `pod` (bound to the pod, for `audience`, valid
    /// `expiration_seconds`) and the instant it should be refreshed: the cached one until
    /// then, else a new one.
    ///
    /// # Errors
    /// [`TokenError`] when the source fails; the cached token is not handed out then (the
    /// volume keeps its old file and retries).
    pub async fn get(
        &self,
        pod: &AdmittedPod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<(Token, Instant), TokenError> {
        let inner = &self.inner;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let request = token_request(pod, audience, expiration_seconds);
        let key = TokenKey::new(pod.uid(), namespace, service_account, &request);
        let cached = inner.tokens.lock().get(&key).cloned();
        if let Some(c) = &cached
            && Instant::now() < c.refresh_at
        {
            return Ok((c.token.clone(), c.refresh_at));
        }
        match inner
            .source
            .token(namespace, service_account, &request)
            .await
        {
            Ok(token) => {
                let now = Instant::now();
                let lifetime = token
                    .expiration
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                let refresh_at = now + lifetime.mul_f64(inner.refresh_fraction);
                let entry = Cached {
                    token: token.clone(),
                    refresh_at,
                };
                inner.tokens.lock().insert(key, entry);
                Ok((token, refresh_at))
            }
            // Unlike the kubelet (which hands out the old token and retries on the next sync),
            // the error is returned: the remount fails, the old token stays on disk, and the
            // reconciler retries with backoff and reports a FailedMount event.
            Err(e) => Err(e),
        }
    }

    /// Forget every token of the pod (PL-10: teardown tells the token manager).
    /// Forgets the pod's tokens (its volumes are gone). Never blocks.
    pub fn unregister_pod(&self, pod_uid: &PodUid) {
        self.inner
            .tokens
            .lock()
            .retain(|k, _| &k.pod_uid != pod_uid);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.tokens.lock().len()
    }
}

#[cfg(any(test, feature = "test-util"))]
pub use fake::FakeTokenSource;

#[cfg(any(test, feature = "test-util"))]
mod fake {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, SystemTime};

    use async_trait::async_trait;
    use k8s_openapi::api::authentication::v1::TokenRequest;

    use super::{Token, TokenError, TokenSource};

    /// A [`TokenSource`] issuing `token-<n>-<sa>-<pod name>[-<audience>]` tokens that expire
    /// `expiration_seconds` from now; can be told to fail (feature `test-util`).
    #[derive(Debug, Clone, Default)]
    pub struct FakeTokenSource {
        issued: Arc<AtomicUsize>,
        fail: Arc<AtomicUsize>,
    }

    impl FakeTokenSource {
        /// A working fake.
        pub fn new() -> Self {
            Self::default()
        }

        /// How many tokens were issued so far.
        pub fn issued(&self) -> usize {
            self.issued.load(Ordering::SeqCst)
        }

        /// The next `n` requests fail with a 500 error.
        pub fn fail_next(&self, n: usize) {
            self.fail.store(n, Ordering::SeqCst);
        }
    }

    #[async_trait]
    impl TokenSource for FakeTokenSource {
        async fn token(
            &self,
            _namespace: &str,
            service_account: &str,
            request: &TokenRequest,
        ) -> Result<Token, TokenError> {
            let spec = request.spec.clone().unwrap_or_default();
            let pod_name = spec
                .bound_object_ref
                .and_then(|b| b.name)
                .unwrap_or_default();
            let audience = spec.audiences.and_then(|a| a.into_iter().next());
            let expiration_seconds = spec.expiration_seconds.unwrap_or_default();
            if self
                .fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(TokenError::Api {
                    code: 500,
                    message: "injected failure".into(),
                });
            }
            let n = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
            let mut token = format!("token-{n}-{service_account}-{pod_name}");
            if let Some(a) = audience {
                token.push('-');
                token.push_str(&a);
            }
            let secs = expiration_seconds.max(0).unsigned_abs();
            Ok(Token {
                token,
                expiration: SystemTime::now() + Duration::from_secs(secs),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(uid: &str) -> PodUid {
        PodUid::new(uid).unwrap()
    }

    /// Pod `ns/p` with UID `uid`.
    fn pod(uid: &str) -> AdmittedPod {
        AdmittedPod::new(
            nodelet_testutil::PodBuilder::new("ns", "p")
                .uid(uid)
                .build(),
        )
        .unwrap()
    }

    #[test]
    fn token_debug_never_prints_the_token() {
        let t = Token {
            token: "very-secret".into(),
            expiration: SystemTime::UNIX_EPOCH,
        };
        assert!(!format!("{t:?}").contains("very-secret"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_is_reused_until_eighty_percent_of_its_lifetime_then_refreshed() {
        let fake = FakeTokenSource::new();
        let cache = TokenManager::new(Arc::new(fake.clone()));
        let (first, refresh_at) = cache.get(&pod("u1"), "default", None, 1000).await.unwrap();
        let expected = Instant::now() + Duration::from_secs(800);
        assert!(refresh_at <= expected && refresh_at + Duration::from_secs(2) >= expected);
        tokio::time::advance(Duration::from_secs(700)).await;
        let (again, _) = cache.get(&pod("u1"), "default", None, 1000).await.unwrap();
        assert_eq!(first, again);
        tokio::time::advance(Duration::from_secs(101)).await;
        let (fresh, _) = cache.get(&pod("u1"), "default", None, 1000).await.unwrap();
        assert_ne!(first.token, fresh.token);
        assert_eq!(fake.issued(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_per_pod_and_audience_and_forgotten_with_the_pod() {
        let fake = FakeTokenSource::new();
        let cache = TokenManager::new(Arc::new(fake.clone()));
        cache.get(&pod("u1"), "sa", None, 3600).await.unwrap();
        cache
            .get(&pod("u1"), "sa", Some("vault"), 3600)
            .await
            .unwrap();
        cache.get(&pod("u2"), "sa", None, 3600).await.unwrap();
        assert_eq!((fake.issued(), cache.len()), (3, 3));
        cache.unregister_pod(&uid("u1"));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_key_is_the_whole_token_request_including_its_uid_when_set() {
        let p: Pod = (*pod("u1")).clone();
        let request = token_request(&p, Some("vault"), 600);
        let key = |r: &TokenRequest| TokenKey::new(&uid("u1"), "ns", "sa", r);
        assert_eq!(key(&request), key(&request.clone()));
        let mut with_uid = request.clone();
        with_uid.metadata.uid = Some("request-1".into());
        assert_ne!(key(&request), key(&with_uid));
        let mut other_uid = with_uid.clone();
        other_uid.metadata.uid = Some("request-2".into());
        assert_ne!(key(&with_uid), key(&other_uid));
        assert_ne!(key(&request), key(&token_request(&p, Some("vault"), 601)));
        let mut renamed = p.clone();
        renamed.metadata.name = Some("q".into());
        assert_ne!(
            key(&request),
            key(&token_request(&renamed, Some("vault"), 600))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_reports_the_error() {
        let fake = FakeTokenSource::new();
        let cache = TokenManager::new(Arc::new(fake.clone()));
        cache.get(&pod("u1"), "sa", None, 100).await.unwrap();
        tokio::time::advance(Duration::from_secs(90)).await;
        fake.fail_next(1);
        let err = cache.get(&pod("u1"), "sa", None, 100).await.unwrap_err();
        assert_eq!(err.to_string(), "injected failure");
    }
}
