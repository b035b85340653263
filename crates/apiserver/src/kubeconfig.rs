//! Kubeconfig files for a running server: its URL, the CA with TLS, and a bearer token minted
//! for the user, so `kubectl` and `kube::Config::from_custom_kubeconfig` can talk to it.

use std::path::Path;

use base64::Engine as _;
use serde_json::json;

use crate::auth::User;
use crate::error::Error;
use crate::server::ApiServer;

/// The cluster, context and user name in written kubeconfigs.
const NAME: &str = "nodelet";

impl ApiServer {
    /// A kubeconfig (YAML) for `user`: cluster `nodelet` at [`ApiServer::url`] (with the CA's
    /// `certificate-authority-data` under TLS), a fresh bearer token for `user`, and context
    /// `nodelet` (namespace `default`) selected.
    pub fn kubeconfig_yaml(&self, user: &User) -> String {
        let mut cluster = json!({ "server": self.url() });
        if let Some(ca) = self.ca_pem() {
            cluster["certificate-authority-data"] =
                json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        let doc = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": NAME, "cluster": cluster}],
            "users": [{"name": user.name, "user": {"token": self.token_for(user)}}],
            "contexts": [{"name": NAME, "context": {"cluster": NAME, "user": user.name, "namespace": "default"}}],
            "current-context": NAME,
            "preferences": {},
        });
        serde_saphyr::to_string(&doc).unwrap_or_default()
    }

    /// Writes [`ApiServer::kubeconfig_yaml`] to `path` atomically: a temporary file beside it
    /// (mode 0600 on Unix from its creation: it holds a token) renamed over `path`, so a reader
    /// sees the old file or the new one, never a partial one.
    ///
    /// # Errors
    /// [`Error::WriteKubeconfig`] when the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path, user: &User) -> Result<(), Error> {
        let err = |source| Error::WriteKubeconfig {
            path: path.to_path_buf(),
            source,
        };
        let name = path.file_name().map_or_else(
            || std::ffi::OsString::from("kubeconfig"),
            std::ffi::OsStr::to_os_string,
        );
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(&name);
        tmp_name.push(format!(".tmp{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let written = (|| {
            let mut f = opts.open(&tmp)?;
            // A stale temporary file keeps its mode: set it before the token is written.
            #[cfg(unix)]
            f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            std::io::Write::write_all(&mut f, self.kubeconfig_yaml(user).as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(err)
    }
}
