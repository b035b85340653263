//! The kubelet's volume manager and its configMap, secret, projected, downwardAPI (and
//! emptyDir) volume plugins, with event-driven updates (spec rules PL-1 … PL-16, VM-1 … VM-13,
//! UP-1 … UP-4).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod asw;
mod config;
mod dsw;
mod error;
pub mod events;
mod executor;
mod manager;
pub mod plugins;
mod populator;
mod reconciler;
mod reconstruct;
mod snapshot;
pub mod token;

pub use config::{Config, MemoryMedium};
pub use error::{Error, SetUpError, WaitCause};
pub use events::{EventSink, EventType};
pub use manager::VolumeManager;
pub use plugins::{PluginRegistry, VolumePlugin};
pub use snapshot::{PodVolumes, VolumeSnapshot, VolumeState};
pub use token::{KubeTokenSource, Token, TokenError, TokenSource};
