//! [`MountError`] and [`SubPathError`]: why a container's mounts could not be computed, and
//! the container and volume mount an error is about.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Why a container's mounts could not be computed.
///
/// `Display` is the kubelet's text where the kubelet has one; the pod worker publishes it as
/// the `Failed` event `Error: <text>` and the container waits with reason
/// `CreateContainerConfigError`, as for environment errors. As in the kubelet, the subPath
/// errors do not show host paths: the detail is their [`SubPathError`] source.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// (1) No pod volume has the volume mount's name.
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    VolumeNotFound {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
    },

    /// (1) The volume's type has no nodelet plugin.
    #[error(
        "cannot mount volume {volume:?} of type {volume_type} into container {container:?}: \
         nodelet supports only configMap, secret, projected, downwardAPI, emptyDir and hostPath volumes"
    )]
    UnsupportedVolume {
        /// The container.
        container: String,
        /// The volume.
        volume: String,
        /// The volume's source field, e.g. `hostPath`.
        volume_type: String,
    },

    /// (2) `subPathExpr` references variables that are unset or empty (sorted).
    #[error("missing value for {}", .missing.join(", "))]
    SubPathExprMissingValue {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// The variable names.
        missing: Vec<String>,
    },

    /// (2) The subPath is absolute.
    #[error("error SubPath `{sub_path}` must not be an absolute path")]
    SubPathAbsolute {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// The subPath (after expansion).
        sub_path: String,
    },

    /// (2) The subPath has a `..` element.
    #[error("unable to provision SubPath `{sub_path}`: must not contain '..'")]
    SubPathBacksteps {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// The subPath (after expansion).
        sub_path: String,
    },

    /// (3) The volume directory's mode could not be read (to create a missing subPath).
    #[error("stat {}", .path.display())]
    VolumeMode {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// The volume directory.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: Arc<io::Error>,
    },

    /// (3) A missing subPath could not be created inside the volume.
    #[error(
        "failed to create subPath directory for volumeMount {volume:?} of container {container:?}"
    )]
    CreateSubPath {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// `<volume directory>/<subPath>`.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: Box<SubPathError>,
    },

    /// (3) The subPath resolves outside the volume, through a symlink, or not at all.
    #[error("failed to prepare subPath for volumeMount {volume:?} of container {container:?}")]
    PrepareSubPath {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// `<volume directory>/<subPath>`.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: Box<SubPathError>,
    },

    /// (5) `mountPropagation` is not `None`, `HostToContainer` or `Bidirectional`.
    #[error("invalid MountPropagation mode: {mode:?}")]
    InvalidPropagation {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// The mode.
        mode: String,
    },

    /// (5) `recursiveReadOnly` cannot be honoured: the mount is not `readOnly`, has a
    /// propagation, asks for `Enabled` (the runtime has no recursive read-only mounts) or an
    /// unknown mode. `detail` is the kubelet's, e.g. `volume "v" requested recursive
    /// read-only mode, but it is not supported by the runtime`.
    #[error("failed to resolve recursive read-only mode: {detail}")]
    RecursiveReadOnly {
        /// The container.
        container: String,
        /// The volume mount's `name`.
        volume: String,
        /// Why.
        detail: String,
    },

    /// (0) `spec.hostname` is not a DNS-1123 label.
    #[error("pod Hostname {hostname:?} is not a valid DNS label: {}", .reasons.join(";"))]
    InvalidHostname {
        /// The value.
        hostname: String,
        /// Why (the API's validation messages).
        reasons: Vec<String>,
    },

    /// (0) `spec.subdomain` is not a DNS-1123 label.
    #[error("pod Subdomain {subdomain:?} is not a valid DNS label: {}", .reasons.join(";"))]
    InvalidSubdomain {
        /// The value.
        subdomain: String,
        /// Why (the API's validation messages).
        reasons: Vec<String>,
    },

    /// (0) `spec.hostnameOverride` is not a DNS-1123 subdomain.
    #[error(
        "pod HostnameOverride {hostname:?} is not a valid DNS subdomain: {}",
        .reasons.join(";")
    )]
    InvalidHostnameOverride {
        /// The value.
        hostname: String,
        /// Why (the API's validation messages).
        reasons: Vec<String>,
    },

    /// (0) A host name longer than 63 characters is empty once truncated and trimmed.
    #[error("hostname for pod {pod:?} was invalid: {hostname:?}")]
    HostnameTruncation {
        /// The pod's name.
        pod: String,
        /// The host name before truncation.
        hostname: String,
    },

    /// [`kernel_hostname`](super::kernel_hostname) with `setHostnameAsFQDN`: the FQDN does not
    /// fit the kernel.
    #[error(
        "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long \
         ({FQDN_MAX_LEN} characters is the max, {} characters requested)",
        .fqdn.len()
    )]
    FqdnTooLong {
        /// `<hostname>.<domain>`.
        fqdn: String,
    },
}

/// Why a subPath could not be created or prepared: the detail the kubelet logs (its texts)
/// and keeps out of the user-facing [`MountError`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SubPathError {
    /// Resolving symlinks failed (a missing path, a loop).
    #[error("error resolving symlinks in {path:?}")]
    ResolveSymlinks {
        /// The path.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: Arc<io::Error>,
    },
    /// The resolved subPath is not within the resolved volume directory.
    #[error("subpath {path:?} not within volume path {volume_path:?}")]
    NotWithinVolume {
        /// The resolved subPath.
        path: PathBuf,
        /// The resolved volume directory.
        volume_path: PathBuf,
    },
    /// A directory to create, or the existing part of it, is outside the volume.
    #[error("path {} is outside of allowed base {}", .path.display(), .base.display())]
    OutsideBase {
        /// The path.
        path: PathBuf,
        /// The resolved volume directory.
        base: PathBuf,
    },
    /// A component below the volume directory is a symlink.
    #[error("unexpected symlink found {}", .path.display())]
    SymlinkFound {
        /// The component.
        path: PathBuf,
    },
    /// A component could not be examined.
    #[error("cannot open {}", .path.display())]
    Open {
        /// The component.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: Arc<io::Error>,
    },
    /// The subPath exists and is not a directory (only a directory is created).
    #[error("mkdir {}: not a directory", .path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// Creating a directory or setting its mode failed.
    #[error("cannot create directory {}", .path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: Arc<io::Error>,
    },
}

/// The kernel's limit for a host name set as FQDN.
pub(super) const FQDN_MAX_LEN: usize = 64;

/// The container and volume mount an error is about.
pub(super) struct MountAt<'a> {
    pub(super) container: &'a str,
    pub(super) volume: &'a str,
}

impl MountAt<'_> {
    pub(super) fn names(&self) -> (String, String) {
        (self.container.to_owned(), self.volume.to_owned())
    }
}
