//! Offline mode: objects from a directory of manifests, and the one-node scheduler.

pub(crate) mod manifests;
pub(crate) mod scheduler;
