//! The crate's errors: [`Error`] for the manager's API and [`SetUpError`] for plugin SetUp and
//! TearDown, with the kubelet's texts in `Display`.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// What the [`VolumeManager`](crate::VolumeManager) API fails with.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// VM-11: `wait_for_attach_and_mount` ended (time-out or pod errors) with volumes still not
    /// mounted. Lists are sorted outer volume names, printed the way the kubelet prints them.
    #[error(
        "unmounted volumes={}, unattached volumes={}, failed to process volumes={}: {cause}",
        GoList(unmounted),
        GoList(unattached),
        GoList(failed_to_process)
    )]
    VolumesNotMounted {
        /// Expected volumes not (yet) mounted.
        unmounted: Vec<String>,
        /// Always empty: none of the supported plugins is attachable.
        unattached: Vec<String>,
        /// Expected volumes absent from the desired state.
        failed_to_process: Vec<String>,
        /// Why the wait ended.
        cause: WaitCause,
    },
    /// VM-12: `wait_for_unmount` ended with volumes still mounted.
    #[error("mounted volumes={}: {cause}", GoList(mounted))]
    VolumesStillMounted {
        /// Outer names of the volumes still mounted (sorted).
        mounted: Vec<String>,
        /// Why the wait ended.
        cause: WaitCause,
    },
    /// `wait_for_attach_and_mount` was asked to wait for a pod that is not in the desired
    /// state (never added, or removed): nothing would ever mount its volumes, so the wait ends
    /// at once instead of after the time-out as the kubelet's would.
    #[error(
        "pod {pod} (UID {uid}) is not desired: it must be added before waiting for its volumes"
    )]
    PodNotDesired {
        /// `namespace/name` of the pod.
        pod: String,
        /// The pod's UID.
        uid: nodelet_core::PodUid,
    },
    /// The root directory could not be created or probed.
    #[error("prepare root directory {}: {cause}", path.display())]
    RootDir {
        /// The configured root directory.
        path: PathBuf,
        /// Underlying error.
        cause: Arc<io::Error>,
    },
}

/// Why a wait of the manager ended without success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WaitCause {
    /// The time-out (2 min 3 s by default, VM-1) elapsed.
    #[error("timed out waiting for the condition")]
    Timeout,
    /// The desired-state populator recorded errors for the pod (joined by `"; "`, VM-11).
    #[error("{}", .0.join("; "))]
    PodErrors(Vec<String>),
    /// The manager was shut down while waiting.
    #[error("the volume manager is shut down")]
    ShutDown,
}

/// Why a plugin's SetUp or TearDown failed. `Display` is the text that follows
/// `MountVolume.SetUp failed for volume "<vol>" : ` in the `FailedMount` event (PL-9).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SetUpError {
    /// PL-7 / PL-10 / PL-13: the volume has no `defaultMode` (API defaulting always sets one).
    #[error("no defaultMode used, not even the default value for it")]
    NoDefaultMode,
    /// PL-7: an item names a key the ConfigMap lacks (and the volume is not optional).
    #[error("configmap references non-existent config key: {key}")]
    MissingConfigMapKey {
        /// The missing key.
        key: String,
    },
    /// PL-8: an item names a key the Secret lacks (and the volume is not optional).
    #[error("references non-existent secret key: {key}")]
    MissingSecretKey {
        /// The missing key.
        key: String,
    },
    /// PL-6 step 3: the object manager could not provide the object; its text unchanged.
    #[error(transparent)]
    Fetch(#[from] nodelet_object_manager::Error),
    /// PL-10: a service account token could not be obtained.
    #[error("failed to fetch token: {0}")]
    Token(#[from] crate::token::TokenError),
    /// PL-21 / PL-22: a `podCertificate` source has no credential (yet, or for good).
    #[error(transparent)]
    PodCertificate(#[from] crate::pod_certificate::PodCertificateError),
    /// PL-13: a downward API item could not be rendered; `Display` is the kubelet's text.
    #[error(transparent)]
    DownwardApi(#[from] crate::downward::DownwardError),
    /// PL-10 / PL-13: several sources or items failed; `[err1, err2]` like the kubelet's
    /// aggregate (a single error is never wrapped).
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Aggregate(Vec<SetUpError>),
    /// PL-17: a `clusterTrustBundle` source could not be read; `Display` is the kubelet's
    /// text where it has one.
    #[error(transparent)]
    TrustBundle(#[from] crate::trust_bundle::TrustBundleError),
    /// A projection this crate does not implement, or one whose feature gates are off
    /// (`clusterTrustBundle` without `ClusterTrustBundle` + `ClusterTrustBundleProjection`).
    #[error("{what} is not supported by nodelet")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// PL-5 step 5: the wrapper directory (or its tmpfs) could not be set up.
    #[error("set up volume directory {}: {cause}", path.display())]
    Wrapper {
        /// The volume directory.
        path: PathBuf,
        /// Underlying error.
        cause: Arc<io::Error>,
    },
    /// PL-12: a nested mountpoint directory could not be created.
    #[error("unable to create nested volume mountpoints: {cause}")]
    NestedMountpoints {
        /// Underlying error.
        cause: Arc<io::Error>,
    },
    /// PL-6 step 9: the atomic writer failed (the previous content is still visible).
    #[error(transparent)]
    Write(Arc<nodelet_atomic_writer::Error>),
    /// PL-14: tearing the volume directory down failed.
    #[error("tear down volume directory {}: {cause}", path.display())]
    TearDown {
        /// The volume directory.
        path: PathBuf,
        /// Underlying error.
        cause: Arc<io::Error>,
    },
    /// The blocking task running the write panicked or was cancelled.
    #[error("volume write task for {} did not complete", path.display())]
    TaskFailed {
        /// The volume directory.
        path: PathBuf,
    },
    /// An error of a plugin from another crate.
    #[error(transparent)]
    Other(Arc<dyn std::error::Error + Send + Sync>),
}

impl SetUpError {
    /// One error from several: none → `None`, one → itself, more → [`SetUpError::Aggregate`].
    pub fn aggregate(mut errors: Vec<SetUpError>) -> Option<SetUpError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(SetUpError::Aggregate(errors)),
        }
    }

    pub(crate) fn wrapper(path: &std::path::Path, cause: io::Error) -> Self {
        SetUpError::Wrapper {
            path: path.to_path_buf(),
            cause: Arc::new(cause),
        }
    }

    pub(crate) fn tear_down(path: &std::path::Path, cause: io::Error) -> Self {
        SetUpError::TearDown {
            path: path.to_path_buf(),
            cause: Arc::new(cause),
        }
    }
}

/// Formats a list like Go's `%v` of a `[]string`: `[a b c]`.
pub(crate) struct GoList<'a>(pub(crate) &'a [String]);

impl fmt::Display for GoList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.0.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_for_attach_and_mount_error_reads_like_the_kubelet() {
        let e = Error::VolumesNotMounted {
            unmounted: vec!["cfg".into(), "secret".into()],
            unattached: vec![],
            failed_to_process: vec![],
            cause: WaitCause::Timeout,
        };
        assert_eq!(
            e.to_string(),
            "unmounted volumes=[cfg secret], unattached volumes=[], failed to process volumes=[]: \
             timed out waiting for the condition"
        );
    }

    #[test]
    fn pod_errors_are_joined_with_semicolons() {
        let e = Error::VolumesStillMounted {
            mounted: vec!["a".into()],
            cause: WaitCause::PodErrors(vec!["x".into(), "y".into()]),
        };
        assert_eq!(e.to_string(), "mounted volumes=[a]: x; y");
    }

    #[test]
    fn a_single_error_is_not_wrapped_and_several_are_bracketed() {
        let one = SetUpError::aggregate(vec![SetUpError::NoDefaultMode]);
        assert_eq!(
            one.map(|e| e.to_string()).as_deref(),
            Some("no defaultMode used, not even the default value for it")
        );
        let two = SetUpError::aggregate(vec![
            SetUpError::MissingConfigMapKey { key: "a".into() },
            SetUpError::MissingSecretKey { key: "b".into() },
        ]);
        assert_eq!(
            two.map(|e| e.to_string()).as_deref(),
            Some(
                "[configmap references non-existent config key: a, \
                 references non-existent secret key: b]"
            )
        );
        assert!(SetUpError::aggregate(vec![]).is_none());
    }
}
