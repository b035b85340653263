//! The errors of the process runtime: [`StartError`] (a container could not start, with the
//! waiting reason the kubelet would show) and [`Error`] (everything else).

use std::path::PathBuf;

use nodelet_core::PodUid;

/// Why a container did not start. [`reason`](Self::reason) is the container's waiting or
/// terminated reason, `Display` its message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The container's configuration cannot be made (`runAsNonRoot`, root not allowed, a bad
    /// user ID): the container waits with `CreateContainerConfigError`.
    #[error("{message}")]
    Config {
        /// The kubelet's (or nodelet's) text.
        message: String,
    },
    /// No entry of the image table matches the container's image: it waits with
    /// `ErrImageNeverPull`, as a kubelet's container whose image is absent under pull policy
    /// `Never`.
    #[error(
        "Container image {image:?} is not present: no entry of the agent's image table \
         (config file key \"images\") matches it"
    )]
    ImageNotMapped {
        /// The image reference.
        image: String,
    },
    /// The runtime tried and failed (the program is missing, a mount failed): the container
    /// is terminated with reason `StartError` and exit code 128.
    #[error("{message}")]
    Start {
        /// What failed, as the container's init process reported it.
        message: String,
    },
    /// A runtime file could not be prepared.
    #[error("{step} {path}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The path.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },
}

impl StartError {
    /// The waiting (or terminated) reason the kubelet shows for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Config { .. } => "CreateContainerConfigError",
            Self::ImageNotMapped { .. } => "ErrImageNeverPull",
            Self::Start { .. } | Self::Io { .. } => "StartError",
        }
    }
}

/// A runtime operation other than a start failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filesystem step failed.
    #[error("{step} {path}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The path.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },
    /// Containers of the pod did not stop.
    #[error("containers {containers:?} of pod {pod_uid} did not stop after SIGKILL")]
    NotStopped {
        /// The pod's UID.
        pod_uid: PodUid,
        /// The containers still running.
        containers: Vec<String>,
    },
}
