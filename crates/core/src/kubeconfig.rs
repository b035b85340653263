//! Kubeconfig files for one cluster and one user, built from kube's own
//! [`Kubeconfig`] types and written atomically with mode 0600 (feature `kubeconfig`).
//!
//! The one place the workspace writes kubeconfigs: nodelet-apiserver's admin and node
//! kubeconfigs and xtask's node identity.

use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
pub use kube::config::Kubeconfig;
use kube::config::{AuthInfo, Cluster, Context, NamedAuthInfo, NamedCluster, NamedContext};
use secrecy::SecretString;

/// How the user of a kubeconfig authenticates. `Debug` never prints the secret.
#[derive(Clone, Copy)]
pub enum Credentials<'a> {
    /// A bearer token.
    Token(&'a str),
    /// A client certificate and its private key, PEM.
    ClientCertificate {
        /// The certificate (chain), PEM.
        cert_pem: &'a str,
        /// The private key, PEM.
        key_pem: &'a str,
    },
}

impl fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
            Credentials::ClientCertificate { .. } => f.write_str("ClientCertificate(<redacted>)"),
        }
    }
}

/// One cluster, one user, one context: what a kubeconfig for a node or an admin holds.
#[derive(Debug, Clone, Copy)]
pub struct KubeconfigSpec<'a> {
    /// The name of the cluster and of the context (selected as `current-context`).
    pub name: &'a str,
    /// The API server's URL.
    pub server: &'a str,
    /// The CA bundle (PEM) that signed the server's certificate, as
    /// `certificate-authority-data`; `None` for plain HTTP or the system roots.
    pub ca_pem: Option<&'a [u8]>,
    /// The user's name.
    pub user: &'a str,
    /// How the user authenticates.
    pub credentials: Credentials<'a>,
    /// The context's namespace, if any.
    pub namespace: Option<&'a str>,
}

impl KubeconfigSpec<'_> {
    /// The kubeconfig.
    pub fn build(&self) -> Kubeconfig {
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let mut auth = AuthInfo::default();
        match self.credentials {
            Credentials::Token(token) => auth.token = Some(SecretString::from(token.to_owned())),
            Credentials::ClientCertificate { cert_pem, key_pem } => {
                auth.client_certificate_data = Some(b64(cert_pem.as_bytes()));
                auth.client_key_data = Some(SecretString::from(b64(key_pem.as_bytes())));
            }
        }
        Kubeconfig {
            api_version: Some("v1".into()),
            kind: Some("Config".into()),
            clusters: vec![NamedCluster {
                name: self.name.to_owned(),
                cluster: Some(Cluster {
                    server: Some(self.server.to_owned()),
                    certificate_authority_data: self.ca_pem.map(b64),
                    ..Cluster::default()
                }),
                ..NamedCluster::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: self.user.to_owned(),
                auth_info: Some(auth),
                ..NamedAuthInfo::default()
            }],
            contexts: vec![NamedContext {
                name: self.name.to_owned(),
                context: Some(Context {
                    cluster: self.name.to_owned(),
                    user: Some(self.user.to_owned()),
                    namespace: self.namespace.map(str::to_owned),
                    ..Context::default()
                }),
                ..NamedContext::default()
            }],
            current_context: Some(self.name.to_owned()),
            ..Kubeconfig::default()
        }
    }
}

/// Writing a kubeconfig failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigWriteError {
    /// The kubeconfig could not be encoded as YAML.
    #[error("encoding the kubeconfig as YAML: {0}")]
    Encode(String),
    /// The file could not be written.
    #[error("writing the kubeconfig {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// `config` as YAML, as `kubectl` writes it.
///
/// # Errors
/// [`KubeconfigWriteError::Encode`] when it cannot be encoded.
pub fn to_yaml(config: &Kubeconfig) -> Result<String, KubeconfigWriteError> {
    serde_saphyr::to_string(config).map_err(|e| KubeconfigWriteError::Encode(e.to_string()))
}

/// Writes `config` to `path` atomically: a temporary file beside it, mode 0600 from its
/// creation (it holds a credential), synced, then renamed over `path`, so a reader sees the
/// old file or the new one, never a partial one.
///
/// # Errors
/// [`KubeconfigWriteError`] naming the file.
pub fn write(path: &Path, config: &Kubeconfig) -> Result<(), KubeconfigWriteError> {
    let yaml = to_yaml(config)?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(path.file_name().unwrap_or_else(|| "kubeconfig".as_ref()));
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        // A stale temporary file keeps its mode: set it before the credential is written.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(yaml.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(|source| KubeconfigWriteError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_kubeconfig_round_trips_through_kube_and_is_written_0600() {
        let spec = KubeconfigSpec {
            name: "nodelet",
            server: "https://127.0.0.1:6443",
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----\n"),
            user: "system:node:n1",
            credentials: Credentials::Token("tok-123"),
            namespace: Some("default"),
        };
        assert!(!format!("{spec:?}").contains("tok-123"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.kubeconfig");
        write(&path, &spec.build()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back = Kubeconfig::read_from(&path).unwrap();
        assert_eq!(back.current_context.as_deref(), Some("nodelet"));
        let cluster = back.clusters[0].cluster.clone().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert!(cluster.certificate_authority_data.is_some());
        let auth = back.auth_infos[0].auth_info.clone().unwrap();
        use secrecy::ExposeSecret as _;
        assert_eq!(auth.token.unwrap().expose_secret(), "tok-123");
        let context = back.contexts[0].context.clone().unwrap();
        assert_eq!(context.user.as_deref(), Some("system:node:n1"));
        assert_eq!(context.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn a_client_certificate_kubeconfig_carries_both_pems_base64() {
        let yaml = to_yaml(
            &KubeconfigSpec {
                name: "e2e",
                server: "https://k:6443",
                ca_pem: None,
                user: "u",
                credentials: Credentials::ClientCertificate {
                    cert_pem: "CERT",
                    key_pem: "KEY",
                },
                namespace: None,
            }
            .build(),
        )
        .unwrap();
        assert!(yaml.contains("client-certificate-data: Q0VSVA=="), "{yaml}");
        assert!(yaml.contains("client-key-data: S0VZ"), "{yaml}");
        assert!(!yaml.contains("certificate-authority-data"), "{yaml}");
    }

    #[test]
    fn a_write_into_a_missing_directory_names_the_file() {
        let err = write(
            Path::new("/nonexistent-dir/x.kubeconfig"),
            &Kubeconfig::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "writing the kubeconfig /nonexistent-dir/x.kubeconfig"
        );
    }
}
