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
    /// A source a projected volume reads besides objects (a service account token, PL-10; a
    /// ClusterTrustBundle, PL-17; a pod certificate, PL-21) could not answer; `Display` is the
    /// kubelet's text (a source whose gates are off: `<what> is not supported by nodelet`).
    #[error(transparent)]
    Source(#[from] nodelet_sources::Error),
    /// PL-13: a downward API item could not be rendered; `Display` is the kubelet's text.
    #[error(transparent)]
    DownwardApi(#[from] nodelet_core::downward::DownwardError),
    /// PL-10 / PL-13: several sources or items failed; `[err1, err2]` like the kubelet's
    /// aggregate (a single error is never wrapped).
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Aggregate(Vec<SetUpError>),
    /// A volume source this crate does not implement.
    #[error("{what} is not supported by nodelet")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// PL-30: an emptyDir's medium cannot be set up; `Display` is the kubelet's text.
    #[error(transparent)]
    EmptyDir(#[from] crate::plugins::EmptyDirError),
    /// PL-33: a hostPath volume's path fails its checks; `Display` is the kubelet's text.
    #[error(transparent)]
    HostPath(crate::plugins::HostPathError),
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

/// A node-side fault: the node could not take a volume's write, whatever the pod and its
/// objects hold — the filesystem under the root directory is full, over quota, read-only or
/// failing, or the kernel is out of memory or open files. Retrying the same SetUp fails the
/// same way until someone frees space or repairs the node, so the operator must hear of it: a
/// volume whose SetUp enters such a fault is logged at WARN, once (see [Logging](crate#logging)).
///
/// Everything else a SetUp fails with (an object or key missing, a payload the writer rejects,
/// a token or certificate refused by the API, an unsupported source) is about the pod or the
/// cluster, not the node, and is reported by `FailedMount` events only.
///
/// Obtained by classifying the typed error ([`SetUpError::node_fault`], [`NodeFault::of`]),
/// never its message text. `Display` is the `errno` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeFault {
    /// `ENOSPC`: no space left on the device ([`io::ErrorKind::StorageFull`]).
    NoSpace,
    /// `EDQUOT`: a disk quota is used up ([`io::ErrorKind::QuotaExceeded`]).
    QuotaExceeded,
    /// `EROFS`: the file system is read-only ([`io::ErrorKind::ReadOnlyFilesystem`]), e.g.
    /// remounted read-only after errors.
    ReadOnly,
    /// `EIO`: the device or the file system failed the operation.
    Io,
    /// `ENOMEM`: the kernel could not allocate memory for the operation
    /// ([`io::ErrorKind::OutOfMemory`]).
    OutOfMemory,
    /// `EMFILE` / `ENFILE`: the agent's or the system's open file table is full.
    TooManyOpenFiles,
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

    /// The node-side fault this error reports, if any (see [`NodeFault`]): the I/O error of a
    /// failed write ([`SetUpError::Write`]), of the volume directory ([`SetUpError::Wrapper`],
    /// [`SetUpError::NestedMountpoints`], [`SetUpError::TearDown`]) or of another crate's
    /// plugin ([`SetUpError::Other`] holding an [`io::Error`] or an atomic writer error),
    /// classified by [`NodeFault::of`]; the first such fault of an
    /// [`SetUpError::Aggregate`]. Every other variant is not node-side: `None`.
    pub fn node_fault(&self) -> Option<NodeFault> {
        match self {
            SetUpError::Wrapper { cause, .. }
            | SetUpError::NestedMountpoints { cause }
            | SetUpError::TearDown { cause, .. } => NodeFault::of(cause),
            SetUpError::Write(e) => e.io_error().and_then(NodeFault::of),
            SetUpError::Aggregate(errors) => errors.iter().find_map(SetUpError::node_fault),
            SetUpError::Other(e) => e
                .downcast_ref::<io::Error>()
                .or_else(|| {
                    e.downcast_ref::<nodelet_atomic_writer::Error>()
                        .and_then(nodelet_atomic_writer::Error::io_error)
                })
                .and_then(NodeFault::of),
            SetUpError::NoDefaultMode
            | SetUpError::MissingConfigMapKey { .. }
            | SetUpError::MissingSecretKey { .. }
            | SetUpError::Fetch(_)
            | SetUpError::Source(_)
            | SetUpError::DownwardApi(_)
            | SetUpError::Unsupported { .. }
            | SetUpError::EmptyDir(_)
            | SetUpError::HostPath(_)
            | SetUpError::TaskFailed { .. } => None,
        }
    }

    /// Whether the node itself failed the operation ([`node_fault`](Self::node_fault) is
    /// `Some`): a full, over-quota, read-only or failing file system, or no memory or file
    /// descriptors left. A SetUp failing so is logged at WARN once per volume and fault (see
    /// [Logging](crate#logging)); the other failures (objects, keys, payload validation, API
    /// refusals) are `FailedMount` events only.
    pub fn is_node_side(&self) -> bool {
        self.node_fault().is_some()
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

impl NodeFault {
    /// The node-side fault an I/O error reports: by [`io::ErrorKind`] (`StorageFull`,
    /// `QuotaExceeded`, `ReadOnlyFilesystem`, `OutOfMemory`), else by raw OS error (`EIO`,
    /// `EMFILE`, `ENFILE`, which have no kind of their own). `None` for every other error
    /// (not found, permission denied, invalid input, ...).
    pub fn of(error: &io::Error) -> Option<NodeFault> {
        match error.kind() {
            io::ErrorKind::StorageFull => return Some(NodeFault::NoSpace),
            io::ErrorKind::QuotaExceeded => return Some(NodeFault::QuotaExceeded),
            io::ErrorKind::ReadOnlyFilesystem => return Some(NodeFault::ReadOnly),
            io::ErrorKind::OutOfMemory => return Some(NodeFault::OutOfMemory),
            _ => {}
        }
        match nix::errno::Errno::from_raw(error.raw_os_error()?) {
            nix::errno::Errno::EIO => Some(NodeFault::Io),
            nix::errno::Errno::EMFILE | nix::errno::Errno::ENFILE => {
                Some(NodeFault::TooManyOpenFiles)
            }
            _ => None,
        }
    }

    /// The `errno` name, as `Display` prints it (`ENOSPC`, `EROFS`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeFault::NoSpace => "ENOSPC",
            NodeFault::QuotaExceeded => "EDQUOT",
            NodeFault::ReadOnly => "EROFS",
            NodeFault::Io => "EIO",
            NodeFault::OutOfMemory => "ENOMEM",
            NodeFault::TooManyOpenFiles => "EMFILE/ENFILE",
        }
    }
}

impl fmt::Display for NodeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

    fn write_error(cause: io::Error) -> SetUpError {
        SetUpError::Write(Arc::new(nodelet_atomic_writer::Error::WriteFile {
            path: PathBuf::from("/root/pods/uid/volumes/kubernetes.io~configmap/cfg/app.conf"),
            cause,
        }))
    }

    #[test]
    fn node_side_io_errors_are_classified_by_kind_and_raw_os_error() {
        let cases = [
            (nix::errno::Errno::ENOSPC, Some(NodeFault::NoSpace)),
            (nix::errno::Errno::EDQUOT, Some(NodeFault::QuotaExceeded)),
            (nix::errno::Errno::EROFS, Some(NodeFault::ReadOnly)),
            (nix::errno::Errno::EIO, Some(NodeFault::Io)),
            (nix::errno::Errno::ENOMEM, Some(NodeFault::OutOfMemory)),
            (nix::errno::Errno::EMFILE, Some(NodeFault::TooManyOpenFiles)),
            (nix::errno::Errno::ENFILE, Some(NodeFault::TooManyOpenFiles)),
            (nix::errno::Errno::ENOENT, None),
            (nix::errno::Errno::EACCES, None),
            (nix::errno::Errno::EPERM, None),
            (nix::errno::Errno::EEXIST, None),
            (nix::errno::Errno::EINVAL, None),
        ];
        for (errno, fault) in cases {
            let io = io::Error::from_raw_os_error(errno as i32);
            assert_eq!(NodeFault::of(&io), fault, "{errno}");
            assert_eq!(write_error(io).node_fault(), fault, "{errno}");
        }
        // A kind without an OS error (e.g. made by a plugin) counts as well.
        assert_eq!(
            NodeFault::of(&io::Error::from(io::ErrorKind::StorageFull)),
            Some(NodeFault::NoSpace)
        );
        assert_eq!(NodeFault::of(&io::Error::other("disk full")), None);
        assert_eq!(NodeFault::NoSpace.to_string(), "ENOSPC");
    }

    #[test]
    fn every_variant_with_an_io_cause_is_classified_and_the_others_are_not_node_side() {
        let full = || {
            Arc::new(io::Error::from_raw_os_error(
                nix::errno::Errno::ENOSPC as i32,
            ))
        };
        let node_side = [
            SetUpError::Wrapper {
                path: PathBuf::from("/v"),
                cause: full(),
            },
            SetUpError::NestedMountpoints { cause: full() },
            SetUpError::TearDown {
                path: PathBuf::from("/v"),
                cause: full(),
            },
            SetUpError::Other(full()),
            SetUpError::Aggregate(vec![
                SetUpError::MissingSecretKey { key: "k".into() },
                write_error(io::Error::from_raw_os_error(
                    nix::errno::Errno::EROFS as i32,
                )),
            ]),
        ];
        for e in &node_side {
            assert!(e.is_node_side(), "{e}");
        }
        assert_eq!(node_side[4].node_fault(), Some(NodeFault::ReadOnly));
        let not_node_side = [
            SetUpError::NoDefaultMode,
            SetUpError::MissingConfigMapKey { key: "k".into() },
            SetUpError::Unsupported { what: "x".into() },
            SetUpError::TaskFailed {
                path: PathBuf::from("/v"),
            },
            // The writer rejected the payload: nothing on disk was touched.
            SetUpError::Write(Arc::new(nodelet_atomic_writer::Error::from(
                nodelet_atomic_writer::InvalidPath::Empty,
            ))),
            SetUpError::Other(Arc::new(io::Error::from(io::ErrorKind::NotFound))),
        ];
        for e in &not_node_side {
            assert!(!e.is_node_side(), "{e}");
        }
    }
}
