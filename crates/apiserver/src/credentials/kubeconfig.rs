//! Kubeconfig files for a running server: its URL, the CA with TLS, and a bearer token minted
//! for the user, so `kubectl` and `kube::Config::from_custom_kubeconfig` can talk to it.

use std::path::Path;

use nodelet_core::kubeconfig::{Credentials, Kubeconfig, KubeconfigSpec};

use crate::access::auth::User;
use crate::error::Error;
use crate::server::ApiServer;

/// The cluster, context and user name in written kubeconfigs.
const NAME: &str = "nodelet";

impl ApiServer {
    /// A kubeconfig for `user`: cluster `nodelet` at [`ApiServer::url`] (with the CA's
    /// `certificate-authority-data` under TLS), a fresh bearer token for `user`, and context
    /// `nodelet` (namespace `default`) selected.
    pub fn kubeconfig(&self, user: &User) -> Kubeconfig {
        let url = self.url();
        let ca = self.ca_pem();
        let token = self.token_for(user);
        KubeconfigSpec {
            name: NAME,
            server: &url,
            ca_pem: ca.as_deref().map(str::as_bytes),
            user: &user.name,
            credentials: Credentials::Token(&token),
            namespace: Some("default"),
        }
        .build()
    }

    /// [`ApiServer::kubeconfig`] as YAML.
    pub fn kubeconfig_yaml(&self, user: &User) -> String {
        nodelet_core::kubeconfig::to_yaml(&self.kubeconfig(user)).unwrap_or_default()
    }

    /// Writes [`ApiServer::kubeconfig`] to `path` atomically, mode 0600 (it holds a token):
    /// a reader sees the old file or the new one, never a partial one.
    ///
    /// # Errors
    /// [`Error::WriteKubeconfig`] when the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path, user: &User) -> Result<(), Error> {
        nodelet_core::kubeconfig::write(path, &self.kubeconfig(user))
            .map_err(Error::WriteKubeconfig)
    }
}
