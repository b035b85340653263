//! The `client` feature: an admin `kube::Client` and `kube::Config` for a running server.

use std::sync::Arc;

use crate::access::auth::User;
use crate::config::Authentication;
use crate::error::Error;
use crate::server::ApiServer;
use crate::state::Shared;

impl ApiServer {
    /// A `kube::Config` pointing at this server as `system:admin` (default namespace `default`;
    /// with [`Config::tls`](crate::Config::tls) the generated CA, with
    /// [`Config::with_auth`](crate::Config::with_auth) an admin bearer token).
    pub fn kube_config(&self) -> kube::Config {
        let config =
            kube::Config::new(http::Uri::from_maybe_shared(self.url()).unwrap_or_default());
        admin_kube_config(self.shared(), config)
    }

    /// An admin `kube::Client` for this server, or the error building it.
    ///
    /// # Errors
    /// [`Error::Client`] if kube cannot build its HTTP stack (its TLS setup runs even for
    /// plain HTTP).
    pub fn try_client(&self) -> Result<kube::Client, Error> {
        kube::Client::try_from(self.kube_config()).map_err(|e| Error::Client(Box::new(e)))
    }

    /// An admin `kube::Client` for this server.
    ///
    /// # Panics
    /// If kube cannot build its HTTP stack at all (see [`ApiServer::try_client`]); a test
    /// helper, so failing loudly is the useful behaviour.
    #[allow(clippy::expect_used)] // Documented test-helper contract; `try_client` is the fallible form.
    pub fn client(&self) -> kube::Client {
        self.try_client()
            .expect("building a kube client for nodelet-apiserver")
    }
}

/// Adds the CA (TLS) and an admin bearer token (auth) to a kube config for this server.
pub(crate) fn admin_kube_config(shared: &Arc<Shared>, mut config: kube::Config) -> kube::Config {
    if shared.extras.tls.is_some() {
        config.root_cert = Some(vec![shared.extras.ca.der().to_vec()]);
    }
    if matches!(shared.config.authenticator, Authentication::BearerTokens) {
        let token = shared.extras.mint_token(&User::admin());
        if let Ok(info) = serde_json::from_value(serde_json::json!({ "token": token })) {
            config.auth_info = info;
        }
    }
    config
}
