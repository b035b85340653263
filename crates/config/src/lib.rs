//! The node agent's configuration, as a program that embeds the agent or writes its config
//! file takes it: [`AgentConfig`] (everything the agent runs with besides its client), the
//! agent's flags ([`RunArgs`], clap) and the KubeletConfiguration subset read from
//! `--config`, resolved into [`Settings`] with a [`ConfigError`] that names the field or flag.
//!
//! # Principal types
//!
//! * [`AgentConfig`]: node name, root directory, change-detection strategy, sync frequency,
//!   node registration, listen addresses, runtime and its images, the kubelet API's
//!   certificates, the first-read bucket; [`AgentConfig::new`] gives the kubelet's defaults.
//! * [`RunArgs`]: the flags of `nodelet` without a subcommand; [`RunArgs::settings`] reads the
//!   config file (`file.rs`: unknown fields are errors, a type error names its field), lets
//!   the flags override it, applies the mode's defaults (`--manifests` or a cluster) and checks
//!   every value as the kubelet checks it.
//! * [`Settings`]: the [`AgentConfig`] and what only starting the agent needs: where the API
//!   server is ([`ApiSource`]), the log format, the transport's protocol, `--cleanup-on-exit`.
//!
//! # Features
//!
//! * `embedded`: `--manifests` is accepted (the agent built with its offline mode); without
//!   it [`RunArgs::settings`] refuses it with [`NO_EMBEDDED`].
//!
//! # Example
//!
//! ```
//! use clap::Parser as _;
//!
//! let args = nodelet_config::RunArgs::parse_from(["nodelet", "--node-name", "dev-1"]);
//! let settings = args.settings_in(std::path::Path::new("/"))?;
//! assert_eq!(settings.agent.node_name, "dev-1");
//! assert_eq!(settings.agent.root_dir, std::path::Path::new(nodelet_config::DEFAULT_ROOT_DIR));
//! assert!(nodelet_config::RunArgs::try_parse_from(["nodelet", "--bogus"]).is_err());
//! # Ok::<(), nodelet_config::ConfigError>(())
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod agent;
mod args;
mod file;

use std::path::PathBuf;

pub use agent::{
    AgentConfig, DEFAULT_EMBEDDED_NODE_NAME, DEFAULT_EMBEDDED_ROOT_DIR, DEFAULT_LISTEN,
    DEFAULT_ROOT_DIR, KubernetesServiceEnv, LOCK_FILE_NAME, NodeTaint, RuntimeKind, default_images,
    parse_taints, service_endpoint_of,
};
pub use args::{ApiSource, LogFormat, NO_EMBEDDED, RunArgs, Settings};

/// A configuration error: the process exits with code 64 (`EX_USAGE`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field has an invalid value.
    #[error("invalid configuration: {field}: {message}")]
    Invalid {
        /// The field or flag, e.g. `syncFrequency` or `--node-name`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The config file could not be read.
    #[error("reading config file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A [`ConfigError::Invalid`] of `field`.
pub(crate) fn invalid(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}
/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
