//! The crate's error type.

use std::net::SocketAddr;

use crate::status::ApiError;

/// Errors from starting, controlling or driving the server directly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Binding the listening socket failed.
    #[error("binding the API server listener on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The server has been shut down; the listener cannot be restarted.
    #[error("the API server has been shut down")]
    ShutDown,
    /// An object's `apiVersion`/`kind` names no served resource.
    #[error("no served resource for apiVersion {api_version:?} kind {kind:?}")]
    UnknownKind {
        /// The `apiVersion` given.
        api_version: String,
        /// The `kind` given.
        kind: String,
    },
    /// The store refused the operation, exactly as the HTTP API would (`NotFound`, `Invalid`, ...).
    #[error("request rejected: {0}")]
    Rejected(ApiError),
    /// Generating a key or certificate at start failed (token signer, TLS).
    #[error("generating the {what}")]
    Keygen {
        /// What was being generated.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// [`Config::feature_gates`](crate::Config::feature_gates) names a gate this server does
    /// not know.
    #[error("unrecognized feature gate: {name}")]
    UnknownFeatureGate {
        /// The name given.
        name: String,
    },
    /// [`Config::runtime_config`](crate::Config::runtime_config) names a group/version this
    /// server does not have.
    #[error("unknown api group version: {group_version}")]
    UnknownGroupVersion {
        /// The key given.
        group_version: String,
    },
    /// Writing a kubeconfig file failed (the error names the file).
    #[error(transparent)]
    WriteKubeconfig(nodelet_core::kubeconfig::KubeconfigWriteError),
    /// Building a kube client for the server failed (`client` feature).
    #[cfg(feature = "client")]
    #[error("building a kube client for the API server")]
    Client(#[source] Box<kube::Error>),
}

impl Error {
    /// The API status behind a [`Error::Rejected`], to check codes and reasons in tests.
    pub fn api_error(&self) -> Option<&ApiError> {
        match self {
            Error::Rejected(e) => Some(e),
            _ => None,
        }
    }
}
