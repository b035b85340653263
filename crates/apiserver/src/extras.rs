//! Server-wide state of the optional capabilities (bearer tokens, the service-account token
//! signer, TLS material) and the hooks the core calls: `prepare` before the shared state exists,
//! `started` right after, `non_resource` for the extra endpoints.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock, Weak};

use serde_json::Value;

use crate::auth::User;
use crate::error::Error;
use crate::node_authorizer::NodeAuthorizer;
use crate::server::{Config, Shared};
use crate::status::ApiError;
use crate::tls::TlsMaterial;
use crate::token_auth::TokenAuthenticator;
use crate::token_request::Signer;

/// Lets the token authenticator and the Node authorizer (built before the server) read the
/// store of the server they were installed in. Set once, at start.
pub(crate) type ServerLink = Arc<OnceLock<Weak<Shared>>>;

/// The state behind the optional capabilities, one per server.
pub(crate) struct Extras {
    /// Minted bearer tokens (`ApiServer::token_for`), token → user.
    tokens: RwLock<HashMap<String, User>>,
    /// Signs and verifies service-account tokens (TokenRequest).
    pub(crate) signer: Signer,
    /// The generated CA and server certificate, with [`Config::tls`].
    pub(crate) tls: Option<TlsMaterial>,
    link: ServerLink,
}

impl Extras {
    /// Generates keys (and certificates with TLS) and, with [`Config::auth`], installs the token
    /// authenticator and the Node authorizer in `config`.
    pub(crate) fn prepare(config: &mut Config) -> Result<Extras, Error> {
        let link = ServerLink::default();
        if config.auth {
            config.authenticator = Arc::new(TokenAuthenticator::linked(link.clone()));
            config.authorizer = Arc::new(NodeAuthorizer::linked(link.clone()));
        }
        let tls = if config.tls {
            Some(TlsMaterial::generate()?)
        } else {
            None
        };
        Ok(Extras {
            tokens: RwLock::new(HashMap::new()),
            signer: Signer::generate(&config.service_account_issuer)?,
            tls,
            link,
        })
    }

    /// The user a minted token stands for.
    pub(crate) fn user_for_token(&self, token: &str) -> Option<User> {
        self.tokens
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
    }
}

/// Links the installed authenticator/authorizer to the running server.
pub(crate) fn started(shared: &Arc<Shared>) {
    let _ = shared.extras.link.set(Arc::downgrade(shared));
}

impl Shared {
    /// `http://ADDR` or, with TLS, `https://ADDR`.
    pub(crate) fn url(&self) -> String {
        let scheme = if self.extras.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// A new random bearer token for `user` (valid for the server's life).
    pub(crate) fn mint_token(&self, user: &User) -> String {
        let token = random_token();
        self.extras
            .tokens
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.clone(), user.clone());
        token
    }
}

/// 32 random bytes, base64url: as opaque as a real bootstrap or static token.
fn random_token() -> String {
    use base64::Engine as _;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Non-resource endpoints served beyond the core set: OIDC discovery for service-account
/// tokens and the OpenAPI v3 stubs kubectl needs. `None`: not one of ours.
pub(crate) fn non_resource(shared: &Arc<Shared>, path: &str) -> Option<Result<Value, ApiError>> {
    match path.trim_end_matches('/') {
        "/.well-known/openid-configuration" => {
            Some(Ok(shared.extras.signer.openid_configuration()))
        }
        "/openid/v1/jwks" => Some(Ok(shared.extras.signer.jwks())),
        p if p.starts_with("/openapi/v3") => Some(crate::openapi::v3(p)),
        _ => None,
    }
}

/// Adds the CA (TLS) and an admin bearer token (auth) to a kube config for this server.
#[cfg(feature = "client")]
pub(crate) fn admin_kube_config(shared: &Arc<Shared>, mut config: kube::Config) -> kube::Config {
    if let Some(tls) = &shared.extras.tls {
        config.root_cert = Some(vec![tls.ca_der()]);
    }
    if shared.config.auth {
        let token = shared.mint_token(&User::admin());
        if let Ok(info) = serde_json::from_value(serde_json::json!({ "token": token })) {
            config.auth_info = info;
        }
    }
    config
}
