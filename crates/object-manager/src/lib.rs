//! The kubelet's ConfigMap/Secret managers: `get(namespace, name)` for every consumer on the
//! node, with bounded API load (spec rules OM-1 … OM-21).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod config;
mod error;
mod kind;
mod manager;
mod reflector;
mod refs;
pub mod source;
mod ttl;
mod watch;

#[cfg(test)]
mod testutil;

pub use config::{ManagerConfig, ObjectKey, Strategy};
pub use error::Error;
pub use kind::ManagedObject;
pub use manager::{ConfigMapManager, Manager, ManagerStats, SecretManager};
pub use refs::{referenced_config_map_names, referenced_secret_names};
pub use ttl::TTL_ANNOTATION;
