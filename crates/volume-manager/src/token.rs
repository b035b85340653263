//! Service account tokens for projected volumes (PL-10): the [`TokenSource`] seam, its
//! TokenRequest implementation [`KubeTokenSource`], a fake, and the per-pod token cache that
//! decides when a token must be refreshed (at 80 % of its lifetime).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use nodelet_core::PodUid;
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
    /// A token for `service_account` in the pod's namespace, bound to the pod (name and UID),
    /// for `audience` (the API server's default audiences when `None`), valid for about
    /// `expiration_seconds`.
    ///
    /// # Errors
    /// [`TokenError`] when the API refuses or cannot be reached.
    async fn token(
        &self,
        pod: &Pod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<Token, TokenError>;
}

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
        pod: &Pod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<Token, TokenError> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &namespace);
        let request = TokenRequest {
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
        };
        let answer = api
            .create_token_request(service_account, &PostParams::default(), &request)
            .await
            .map_err(|e| match e {
                kube::Error::Api(status) => TokenError::Api {
                    code: status.code,
                    message: status.message,
                },
                other => TokenError::Request {
                    namespace: namespace.clone(),
                    service_account: service_account.to_owned(),
                    message: other.to_string(),
                },
            })?;
        let status = answer.status.ok_or_else(|| TokenError::Request {
            namespace: namespace.clone(),
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

/// What identifies a cached token (the kubelet's token manager key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TokenKey {
    pod_uid: PodUid,
    namespace: String,
    service_account: String,
    audience: Option<String>,
    expiration_seconds: i64,
}

#[derive(Debug, Clone)]
struct Cached {
    token: Token,
    refresh_at: Instant,
}

/// Tokens per pod, refreshed at `refresh_fraction` of their lifetime. Deadlines are in tokio
/// time (lifetime measured when the token arrives), so tests can run on paused time.
pub(crate) struct TokenCache {
    source: Arc<dyn TokenSource>,
    refresh_fraction: f64,
    tokens: Mutex<HashMap<TokenKey, Cached>>,
}

impl TokenCache {
    pub(crate) fn new(source: Arc<dyn TokenSource>, refresh_fraction: f64) -> Self {
        Self {
            source,
            refresh_fraction: refresh_fraction.clamp(0.0, 1.0),
            tokens: Mutex::default(),
        }
    }

    /// A token for the pod and the instant it should be refreshed. A token is reused until its
    /// refresh time.
    pub(crate) async fn get(
        &self,
        pod_uid: &PodUid,
        pod: &Pod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<(Token, Instant), TokenError> {
        let key = TokenKey {
            pod_uid: pod_uid.clone(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            service_account: service_account.to_owned(),
            audience: audience.map(str::to_owned),
            expiration_seconds,
        };
        let cached = self.tokens.lock().get(&key).cloned();
        if let Some(c) = &cached
            && Instant::now() < c.refresh_at
        {
            return Ok((c.token.clone(), c.refresh_at));
        }
        match self
            .source
            .token(pod, service_account, audience, expiration_seconds)
            .await
        {
            Ok(token) => {
                let now = Instant::now();
                let lifetime = token
                    .expiration
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                let refresh_at = now + lifetime.mul_f64(self.refresh_fraction);
                let entry = Cached {
                    token: token.clone(),
                    refresh_at,
                };
                self.tokens.lock().insert(key, entry);
                Ok((token, refresh_at))
            }
            // Unlike the kubelet (which hands out the old token and retries on the next sync),
            // the error is returned: the remount fails, the old token stays on disk, and the
            // reconciler retries with backoff and reports a FailedMount event.
            Err(e) => Err(e),
        }
    }

    /// Forget every token of the pod (PL-10: teardown tells the token manager).
    pub(crate) fn forget_pod(&self, pod_uid: &PodUid) {
        self.tokens.lock().retain(|k, _| &k.pod_uid != pod_uid);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tokens.lock().len()
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
    use k8s_openapi::api::core::v1::Pod;

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
            pod: &Pod,
            service_account: &str,
            audience: Option<&str>,
            expiration_seconds: i64,
        ) -> Result<Token, TokenError> {
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
            let mut token = format!(
                "token-{n}-{service_account}-{}",
                pod.metadata.name.as_deref().unwrap_or_default()
            );
            if let Some(a) = audience {
                token.push('-');
                token.push_str(a);
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
    fn pod(uid: &str) -> Pod {
        nodelet_testutil::PodBuilder::new("ns", "p")
            .uid(uid)
            .build()
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
        let cache = TokenCache::new(Arc::new(fake.clone()), 0.8);
        let (first, refresh_at) = cache
            .get(&uid("u1"), &pod("u1"), "default", None, 1000)
            .await
            .unwrap();
        let expected = Instant::now() + Duration::from_secs(800);
        assert!(refresh_at <= expected && refresh_at + Duration::from_secs(2) >= expected);
        tokio::time::advance(Duration::from_secs(700)).await;
        let (again, _) = cache
            .get(&uid("u1"), &pod("u1"), "default", None, 1000)
            .await
            .unwrap();
        assert_eq!(first, again);
        tokio::time::advance(Duration::from_secs(101)).await;
        let (fresh, _) = cache
            .get(&uid("u1"), &pod("u1"), "default", None, 1000)
            .await
            .unwrap();
        assert_ne!(first.token, fresh.token);
        assert_eq!(fake.issued(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_per_pod_and_audience_and_forgotten_with_the_pod() {
        let fake = FakeTokenSource::new();
        let cache = TokenCache::new(Arc::new(fake.clone()), 0.8);
        cache
            .get(&uid("u1"), &pod("u1"), "sa", None, 3600)
            .await
            .unwrap();
        cache
            .get(&uid("u1"), &pod("u1"), "sa", Some("vault"), 3600)
            .await
            .unwrap();
        cache
            .get(&uid("u2"), &pod("u2"), "sa", None, 3600)
            .await
            .unwrap();
        assert_eq!((fake.issued(), cache.len()), (3, 3));
        cache.forget_pod(&uid("u1"));
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_reports_the_error() {
        let fake = FakeTokenSource::new();
        let cache = TokenCache::new(Arc::new(fake.clone()), 0.8);
        cache
            .get(&uid("u1"), &pod("u1"), "sa", None, 100)
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(90)).await;
        fake.fail_next(1);
        let err = cache
            .get(&uid("u1"), &pod("u1"), "sa", None, 100)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "injected failure");
    }
}
