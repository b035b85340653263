//! The KubeletConfiguration file: the subset nodelet reads (unknown fields are errors), read
//! with errors that name the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{ConfigError, invalid};

/// The KubeletConfiguration subset nodelet reads. Unknown fields are errors.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FileConfig {
    #[serde(rename = "apiVersion")]
    pub(crate) api_version: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) config_map_and_secret_change_detection_strategy: Option<String>,
    pub(crate) sync_frequency: Option<String>,
    pub(crate) register_node: Option<bool>,
    pub(crate) node_labels: Option<BTreeMap<String, String>>,
    pub(crate) healthz_bind_address: Option<String>,
    pub(crate) healthz_port: Option<u16>,
    pub(crate) node_lease_duration_seconds: Option<i32>,
    pub(crate) feature_gates: Option<BTreeMap<String, bool>>,
    /// The kubelet API's port.
    pub(crate) port: Option<u16>,
    /// The kubelet API's address.
    pub(crate) address: Option<String>,
    pub(crate) tls_cert_file: Option<PathBuf>,
    pub(crate) tls_private_key_file: Option<PathBuf>,
    pub(crate) authentication: Option<FileAuthentication>,
    /// nodelet's own: `config` or `process`.
    pub(crate) runtime: Option<String>,
    /// nodelet's own: the process runtime's image table.
    pub(crate) images: Option<Vec<nodelet_runtime::ImageEntry>>,
    /// nodelet's own: let containers run as root.
    pub(crate) allow_root_containers: Option<bool>,
    /// Unsafe sysctls pods may set (PW-56).
    pub(crate) allowed_unsafe_sysctls: Option<Vec<String>>,
    /// nodelet's own: `cluster` or `api-server`.
    pub(crate) kubernetes_service: Option<String>,
    /// nodelet's own: the node-wide defaults of configuration that follows a change (FC-2).
    pub(crate) follow_change: Option<FileFollowChange>,
    /// The first reads' rate (OM-30).
    #[serde(rename = "kubeAPIQPS")]
    pub(crate) kube_api_qps: Option<i32>,
    /// The first reads' burst (OM-30).
    #[serde(rename = "kubeAPIBurst")]
    pub(crate) kube_api_burst: Option<i32>,
}

/// `followChange` (nodelet's own, FC-2): what a pod without `nodelet.io/` annotations gets.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FileFollowChange {
    /// subPath mounts follow updates (`nodelet.io/follow-subpath`).
    pub(crate) sub_path: Option<bool>,
    /// A reload signal (`nodelet.io/reload-signal`).
    pub(crate) reload_signal: Option<String>,
    /// The quiet time that ends a burst (`nodelet.io/reload-debounce`).
    pub(crate) reload_debounce: Option<String>,
    /// Environments follow changes (`nodelet.io/follow-env`).
    pub(crate) env: Option<bool>,
    /// The quiet time that ends a burst of environment changes (`nodelet.io/env-debounce`).
    pub(crate) env_debounce: Option<String>,
}

/// KubeletConfiguration `authentication` (the part nodelet reads).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileAuthentication {
    pub(crate) x509: Option<FileX509>,
}

/// KubeletConfiguration `authentication.x509`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileX509 {
    #[serde(rename = "clientCAFile")]
    pub(crate) client_ca_file: Option<PathBuf>,
}

/// The config file must be a KubeletConfiguration (when it names its kind and version).
pub(crate) fn check_kind(file: &FileConfig) -> Result<(), ConfigError> {
    if let Some(kind) = file
        .kind
        .as_deref()
        .filter(|k| *k != "KubeletConfiguration")
    {
        return Err(invalid(
            "kind",
            format!("must be KubeletConfiguration, not {kind:?}"),
        ));
    }
    if let Some(v) = file
        .api_version
        .as_deref()
        .filter(|v| !v.starts_with("kubelet.config.k8s.io/"))
    {
        return Err(invalid(
            "apiVersion",
            format!("must be kubelet.config.k8s.io/v1beta1, not {v:?}"),
        ));
    }
    Ok(())
}

pub(crate) fn read_file_config(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if text.trim().is_empty() {
        return Ok(FileConfig::default());
    }
    // serde_path_to_error names the field of a type error ("syncFrequency: ..."); saphyr's first
    // line gives the place and the reason (the rest of its message is a source excerpt).
    let mut field = String::new();
    serde_saphyr::with_deserializer_from_str(&text, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            field = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let message = e.to_string();
        let reason = message
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ");
        let text = if field.is_empty() || field == "." {
            reason.to_string()
        } else {
            format!("{field}: {reason}")
        };
        invalid(&path.display().to_string(), text)
    })
}
