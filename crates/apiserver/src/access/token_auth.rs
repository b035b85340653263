//! Bearer-token authentication: static tokens, tokens minted with [`ApiServer::token_for`](crate::ApiServer::token_for),
//! and service-account JWTs issued by this server's TokenRequest endpoint.
//!
//! A request without a token, or with one that matches nothing, is answered 401 (the server
//! runs with anonymous authentication disabled).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::access::auth::{Authenticator, Headers, Unauthenticated, User};
use crate::extras::Extras;
use crate::registry::Registry;
use crate::resources::{PODS, SERVICEACCOUNTS};

/// Maps `Authorization: Bearer <token>` to a [`User`].
///
/// Installed by [`Config::with_auth`](crate::Config::with_auth), it also accepts tokens minted with
/// [`ApiServer::token_for`](crate::ApiServer::token_for) and service-account tokens from `serviceaccounts/{sa}/token`
/// (while the service account, and the pod the token is bound to, still exist). Built with
/// [`TokenAuthenticator::new`] and set through [`Config::authenticator`](crate::Config::authenticator) it knows only its table.
#[derive(Clone, Default)]
pub struct TokenAuthenticator {
    table: HashMap<String, User>,
    /// With [`Config::with_auth`](crate::Config::with_auth): the server whose minted and
    /// service-account tokens are accepted.
    server: Option<ServerTokens>,
}

/// What the authenticator of one server reads: its registry (service accounts and pods a
/// token names), its minted tokens and signer, and the issuer its tokens carry.
#[derive(Clone)]
struct ServerTokens {
    registry: Arc<Registry>,
    extras: Arc<Extras>,
    issuer: String,
}

impl TokenAuthenticator {
    /// An authenticator for a fixed token → user table.
    pub fn new(table: HashMap<String, User>) -> Self {
        TokenAuthenticator {
            table,
            server: None,
        }
    }

    /// The authenticator of the server with this registry, token state and issuer.
    pub(crate) fn for_server(registry: Arc<Registry>, extras: Arc<Extras>, issuer: String) -> Self {
        TokenAuthenticator {
            table: HashMap::new(),
            server: Some(ServerTokens {
                registry,
                extras,
                issuer,
            }),
        }
    }
}

impl std::fmt::Debug for TokenAuthenticator {
    /// Tokens are credentials: only their number is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuthenticator")
            .field("tokens", &self.table.len())
            .finish_non_exhaustive()
    }
}

/// What a TokenReview reports about an authenticated token (`status.user`,
/// `status.audiences`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenInfo {
    /// The user name and groups.
    pub(crate) user: User,
    /// `status.user.uid`: a service account's uid.
    pub(crate) uid: Option<String>,
    /// `status.user.extra`: a service-account token's credential id and the pod and node it
    /// is bound to.
    pub(crate) extra: BTreeMap<String, Vec<String>>,
    /// The audiences the token is good for among those asked for.
    pub(crate) audiences: Vec<String>,
}

impl TokenInfo {
    fn plain(user: User, audiences: Vec<String>) -> Self {
        TokenInfo {
            user,
            uid: None,
            extra: BTreeMap::new(),
            audiences,
        }
    }
}

impl TokenAuthenticator {
    /// Authenticates `token` for `audiences` (a TokenReview's; empty means this server's API
    /// audience, its issuer), as upstream's token authenticators do:
    /// 1. table and minted tokens know no audience (upstream's audience-agnostic wrapper):
    ///    they are good for the API audiences among those asked for, and for none other;
    /// 2. a service-account token must be signed by this server for `iss` = the issuer, be
    ///    within its lifetime, name one of the audiences, and the service account (and the
    ///    pod it is bound to) must still exist with the uids it was issued for.
    ///
    /// # Errors
    /// [`Unauthenticated`] when the token is none of these.
    pub(crate) fn review(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<TokenInfo, Unauthenticated> {
        let wanted = self.audiences(audiences);
        if let Some(user) = self.table.get(token) {
            return self.audience_agnostic(user.clone(), audiences);
        }
        let shared = self.server.as_ref().ok_or(Unauthenticated)?;
        if let Some(user) = shared.extras.user_for_token(token) {
            return self.audience_agnostic(user, audiences);
        }
        // (2)
        let (claims, audiences) = shared
            .extras
            .signer
            .verify_for(token, &shared.issuer, &wanted)
            .ok_or(Unauthenticated)?;
        let k = claims.get("kubernetes.io").ok_or(Unauthenticated)?;
        let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        let ns = s(k, "/namespace").ok_or(Unauthenticated)?;
        let sa = s(k, "/serviceaccount/name").ok_or(Unauthenticated)?;
        let sa_uid = s(k, "/serviceaccount/uid");
        let reg = &shared.registry;
        let stored = reg
            .get(SERVICEACCOUNTS, &ns, &sa)
            .map_err(|_| Unauthenticated)?;
        if s(&stored, "/metadata/uid") != sa_uid {
            return Err(Unauthenticated);
        }
        let mut extra = BTreeMap::new();
        if let Some(pod) = k.get("pod") {
            let name = s(pod, "/name").ok_or(Unauthenticated)?;
            let stored = reg.get(PODS, &ns, &name).map_err(|_| Unauthenticated)?;
            if s(&stored, "/metadata/uid") != s(pod, "/uid")
                || stored.pointer("/metadata/deletionTimestamp").is_some()
            {
                return Err(Unauthenticated);
            }
            if let Some(uid) = s(pod, "/uid") {
                extra.insert(format!("{EXTRA}pod-name"), vec![name]);
                extra.insert(format!("{EXTRA}pod-uid"), vec![uid]);
            }
        }
        if let Some(jti) = s(&claims, "/jti") {
            extra.insert(format!("{EXTRA}credential-id"), vec![format!("JTI={jti}")]);
        }
        if let Some(node) = s(k, "/node/name") {
            extra.insert(format!("{EXTRA}node-name"), vec![node]);
            if let Some(uid) = s(k, "/node/uid") {
                extra.insert(format!("{EXTRA}node-uid"), vec![uid]);
            }
        }
        Ok(TokenInfo {
            user: User::service_account(&ns, &sa),
            uid: sa_uid,
            extra,
            audiences,
        })
    }
}

impl TokenAuthenticator {
    /// This server's API audiences: its issuer (kube-apiserver's `--api-audiences` default).
    fn api_audiences(&self) -> Vec<String> {
        self.server.iter().map(|s| s.issuer.clone()).collect()
    }

    /// The audiences a review checks: those asked for, else the API audiences.
    fn audiences(&self, asked: &[String]) -> Vec<String> {
        if asked.is_empty() {
            self.api_audiences()
        } else {
            asked.to_vec()
        }
    }

    /// What a token of an authenticator that knows no audiences is good for (upstream's
    /// audience-agnostic wrapper): the API audiences among those asked for; none shared is
    /// unauthenticated.
    ///
    /// # Errors
    /// [`Unauthenticated`] when the audiences asked for do not include an API audience.
    pub(crate) fn audience_agnostic(
        &self,
        user: User,
        asked: &[String],
    ) -> Result<TokenInfo, Unauthenticated> {
        let wanted = self.audiences(asked);
        if wanted.is_empty() {
            return Ok(TokenInfo::plain(user, Vec::new()));
        }
        let shared: Vec<String> = self
            .api_audiences()
            .into_iter()
            .filter(|a| wanted.contains(a))
            .collect();
        if shared.is_empty() {
            return Err(Unauthenticated);
        }
        Ok(TokenInfo::plain(user, shared))
    }
}

/// The prefix of the `extra` keys a service-account token carries.
const EXTRA: &str = "authentication.kubernetes.io/";

impl Authenticator for TokenAuthenticator {
    fn authenticate(&self, headers: &Headers) -> Result<User, Unauthenticated> {
        let token = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(Unauthenticated)?;
        self.review(token, &[]).map(|info| info.user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(t: &str) -> Headers {
        let mut h = Headers::new();
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
        h
    }

    #[test]
    fn a_table_token_authenticates_as_its_user_and_anything_else_is_rejected() {
        let auth =
            TokenAuthenticator::new([("t1".to_string(), User::node("n1"))].into_iter().collect());
        assert_eq!(auth.authenticate(&bearer("t1")), Ok(User::node("n1")));
        assert_eq!(auth.authenticate(&bearer("nope")), Err(Unauthenticated));
        assert_eq!(auth.authenticate(&Headers::new()), Err(Unauthenticated));
    }

    #[test]
    fn debug_output_never_shows_a_token() {
        let auth = TokenAuthenticator::new(
            [("s3cr3t-token".to_string(), User::admin())]
                .into_iter()
                .collect(),
        );
        let shown = format!("{auth:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("tokens: 1"), "{shown}");
    }

    #[test]
    fn only_members_of_system_nodes_have_a_node_name() {
        assert_eq!(User::node("n1").node_name(), Some("n1"));
        let mut impostor = User::node("n1");
        impostor.groups.clear();
        assert_eq!(impostor.node_name(), None);
    }
}
