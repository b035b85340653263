//! A container's bind mounts as the kubelet computes them (`makeMounts`, kubelet_pods.go):
//! volume mounts with `subPath` / `subPathExpr` and the pod's managed `/etc/hosts`; the
//! pod's host name (`GeneratePodHostNameAndDomain`) and the hosts file's content.
//!
//! The pod worker computes the mounts, the runtime only bind-mounts them. On disk:
//!
//! ```text
//! <root>/pods/<uid>/
//!     etc-hosts                              hosts_file_content() → /etc/hosts (writable)
//!     volumes/<escaped plugin>/<volume>/     a volume → its mountPath
//!         <subPath>                          one file or directory of it → its mountPath
//! ```
//!
//! [`make_mounts`] follows the kubelet. First (0) the pod's host name, domain and override
//! must be valid DNS names (the kubelet checks them before it makes the mounts). Then for each
//! `volumeMounts[]` entry, in order:
//! 1. The pod volume of that name (`cannot find volume ...` when missing); its directory is
//!    `PodDirs::volume(uid, plugin, name)`. A volume type without a nodelet plugin (hostPath,
//!    persistentVolumeClaim, ...) fails naming the volume and its type.
//! 2. The subPath: `subPathExpr` (which wins over `subPath`) expanded with the container's
//!    environment, `$(VAR)` syntax; a referenced variable that is unset or empty is an error.
//!    The result must be relative and must not contain a `..` element.
//! 3. With a subPath: a missing `<volume>/<subPath>` is created as directories with the
//!    volume directory's mode, never outside the volume (the kubelet's `SafeMakeDir`; also in
//!    configMap/secret/projected/downwardAPI volumes). Then the path is resolved (symlinks
//!    followed) and must lie within the resolved volume directory with no symlink below it
//!    (`PrepareSafeSubpath`); the resolved path is the host path.
//! 4. `mountPath` is made absolute (`data` → `/data`, as the kubelet does on Linux).
//! 5. `mountPropagation` must be a known mode; `recursiveReadOnly` is resolved for a runtime
//!    without recursive read-only mounts.
//! 6. Read-only when `readOnly` is set, and always for configMap, secret, projected and
//!    downwardAPI volumes (their kubelet mounters are `ReadOnly`); emptyDir is writable.
//!
//! 7. Last, the pod's hosts file at `/etc/hosts`, writable, unless a volume mount's
//!    `mountPath` is exactly `/etc/hosts`.
//!
//! # Differences from the kubelet
//!
//! * The kubelet bind-mounts the opened subPath (`/proc/<pid>/fd/<n>`) under
//!   `<pod>/volume-subpaths/`, so nothing can swap a component for a symlink between its
//!   check and the container's mount; here the checked, resolved path is returned and the
//!   runtime mounts it later.
//! * `mountPropagation` is checked but not carried: every mount is private.
//! * The kubelet rewrites `etc-hosts` in `makeMounts`; here the caller writes it
//!   ([`hosts_file_content`]).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, Volume, VolumeMount};
use nodelet_core::runtime::ContainerMount;
use nodelet_core::{AdmittedPod, PodDirs};
use nodelet_volume_manager::PluginRegistry;

use crate::env::ContainerEnv;
use crate::expand::expand;

/// The cluster domain of a pod's domain `<subdomain>.<namespace>.svc.cluster.local`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

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
         nodelet supports only configMap, secret, projected, downwardAPI and emptyDir volumes"
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

    /// [`kernel_hostname`] with `setHostnameAsFQDN`: the FQDN does not fit the kernel.
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

/// The bind mounts of `container`, one of `pod`'s containers: its volume mounts in order,
/// then `hosts_file` at `/etc/hosts` (steps 0 … 7 of the module docs). `env` is the
/// container's resolved environment (for `subPathExpr`); `hosts_file` is the pod's
/// `etc-hosts`, already written, or `None` when the pod gets none (see
/// [`should_mount_hosts_file`]).
///
/// Touches the disk where the kubelet does: it creates a missing subPath inside its volume
/// and resolves subPaths. Call it when the container is started, after the pod's volumes are
/// mounted; a restart computes the mounts again.
///
/// # Errors
/// The first [`MountError`]; its `Display` is the kubelet's text.
pub fn make_mounts(
    pod: &AdmittedPod,
    container: &Container,
    dirs: &PodDirs,
    env: &ContainerEnv,
    hosts_file: Option<&Path>,
) -> Result<Vec<ContainerMount>, MountError> {
    // (0)
    if let Some(invalid) = generate_hostname(pod, DEFAULT_CLUSTER_DOMAIN).invalid {
        return Err(invalid);
    }
    let registry = PluginRegistry::default();
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut mount_hosts_file = hosts_file.is_some();
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let at = MountAt {
            container: &container.name,
            volume: &m.name,
        };
        mount_hosts_file &= m.mount_path != ETC_HOSTS;
        // (1)
        let volume = volumes.iter().find(|v| v.name == m.name).ok_or_else(|| {
            MountError::VolumeNotFound {
                container: at.container.to_owned(),
                volume: at.volume.to_owned(),
            }
        })?;
        let plugin = registry
            .find(volume)
            .ok_or_else(|| MountError::UnsupportedVolume {
                container: at.container.to_owned(),
                volume: at.volume.to_owned(),
                volume_type: volume_type(volume),
            })?;
        let volume_path = dirs.volume(pod.uid(), plugin.name(), &volume.name);
        // (2), (3)
        let host_path = match sub_path(m, env, &at)? {
            Some(sub_path) => prepare_sub_path(&volume_path, Path::new(&sub_path), &at)?,
            None => volume_path,
        };
        // (4)
        let container_path = container_path(&m.mount_path);
        // (5)
        check_propagation(m, &at)?;
        check_recursive_read_only(m, &at)?;
        // (6)
        mounts.push(ContainerMount {
            host_path,
            container_path,
            read_only: m.read_only.unwrap_or(false) || read_only_by_nature(volume),
        });
    }
    // (7)
    if let Some(path) = hosts_file.filter(|_| mount_hosts_file) {
        mounts.push(ContainerMount {
            host_path: path.to_path_buf(),
            container_path: PathBuf::from(ETC_HOSTS),
            read_only: false,
        });
    }
    Ok(mounts)
}

/// Whether the pod gets the managed `/etc/hosts` (the kubelet's `shouldMountHostsFile`): it
/// has addresses, or is hostNetwork.
pub fn should_mount_hosts_file(pod: &Pod, host_ips: &[String]) -> bool {
    !host_ips.is_empty() || is_host_network(pod)
}

/// The kubelet's managed hosts file for `pod`, to be written (mode 0644) as the pod's
/// `etc-hosts`:
///
/// * not hostNetwork: the header `# Kubernetes-managed hosts file.`, the localhost and IPv6
///   lines, then per address `<ip>\t<hostname>.<domain>\t<hostname>`, or `<ip>\t<hostname>`
///   without a domain ([`pod_hostname`]). The addresses are the pod's IPs; nodelet's
///   processes share the node's network, so they are the node's. `node_hosts` is not used.
/// * hostNetwork: the header `# Kubernetes-managed hosts file (host network).` followed by
///   `node_hosts`, the node's `/etc/hosts`, unchanged. `host_ips` is not used.
///
/// Both end with the `hostAliases` section when the pod has aliases: an empty line,
/// `# Entries added by HostAliases.` and `<ip>\t<name>\t<name>...` per alias.
pub fn hosts_file_content(pod: &Pod, host_ips: &[String], node_hosts: &str) -> String {
    let aliases: Vec<(&str, Vec<&str>)> = pod
        .spec
        .iter()
        .flat_map(|s| s.host_aliases.iter().flatten())
        .map(|a| {
            let names = a.hostnames.iter().flatten().map(String::as_str).collect();
            (a.ip.as_str(), names)
        })
        .collect();
    let mut out = if is_host_network(pod) {
        format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}")
    } else {
        let (hostname, domain) = pod_hostname(pod);
        managed_hosts(host_ips, &hostname, &domain)
    };
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for (ip, names) in aliases {
            out.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
    }
    out
}

/// The pod's host name and domain (the kubelet's `GeneratePodHostNameAndDomain`, with the
/// `HostnameOverride` gate on, its v1.36 default):
/// 1. `spec.hostnameOverride`, when set, is the host name, without a domain;
/// 2. else `spec.hostname` if set, else the pod's name;
/// 3. longer than 63 characters: truncated to 63, then trailing `-` and `.` trimmed;
/// 4. the domain is `<subdomain>.<namespace>.svc.cluster.local` when `spec.subdomain` is
///    set, else empty ([`DEFAULT_CLUSTER_DOMAIN`]).
///
/// The kubelet refuses names that are not DNS labels (the override: a DNS subdomain);
/// [`make_mounts`] fails such a pod's containers with its texts.
pub fn pod_hostname(pod: &Pod) -> (String, String) {
    let generated = generate_hostname(pod, DEFAULT_CLUSTER_DOMAIN);
    (generated.hostname, generated.domain)
}

/// The host name a container's kernel reports (its UTS namespace's): the node's for a
/// hostNetwork pod (the kubelet sets none in its sandbox); else [`pod_hostname`], or
/// `<hostname>.<domain>` when `setHostnameAsFQDN` is true and there is a domain (the
/// kubelet's `GetNodenameForKernel`).
///
/// # Errors
/// The invalid names of [`make_mounts`] (0); [`MountError::FqdnTooLong`] when the FQDN is
/// longer than 64 characters.
pub fn kernel_hostname(pod: &Pod, node_hostname: &str) -> Result<String, MountError> {
    if is_host_network(pod) {
        return Ok(node_hostname.to_owned());
    }
    let generated = generate_hostname(pod, DEFAULT_CLUSTER_DOMAIN);
    if let Some(invalid) = generated.invalid {
        return Err(invalid);
    }
    let as_fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    if !as_fqdn || generated.domain.is_empty() {
        return Ok(generated.hostname);
    }
    let fqdn = format!("{}.{}", generated.hostname, generated.domain);
    if fqdn.len() > FQDN_MAX_LEN {
        return Err(MountError::FqdnTooLong { fqdn });
    }
    Ok(fqdn)
}

/// The content of a host name file (`/etc/hostname`): the name and a newline.
pub fn hostname_file_content(hostname: &str) -> String {
    format!("{hostname}\n")
}

/// The hosts file, in a container and on the node.
const ETC_HOSTS: &str = "/etc/hosts";

/// The kernel's limit for a host name set as FQDN.
const FQDN_MAX_LEN: usize = 64;

/// A host name's limit (64 bytes with the terminating NUL); also a DNS label's.
const HOSTNAME_MAX_LEN: usize = 63;

/// A DNS subdomain's limit.
const SUBDOMAIN_MAX_LEN: usize = 253;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

/// The container and volume mount an error is about.
struct MountAt<'a> {
    container: &'a str,
    volume: &'a str,
}

impl MountAt<'_> {
    fn names(&self) -> (String, String) {
        (self.container.to_owned(), self.volume.to_owned())
    }
}

/// A pod's host name and domain, and the first reason the kubelet would refuse them.
struct Generated {
    hostname: String,
    domain: String,
    invalid: Option<MountError>,
}

fn generate_hostname(pod: &Pod, cluster_domain: &str) -> Generated {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut invalid = None;
    let mut flag = |error: MountError| {
        invalid.get_or_insert(error);
    };
    // (1)
    if let Some(hostname) = spec.and_then(|s| s.hostname_override.as_deref()) {
        let reasons = dns1123_subdomain_errors(hostname);
        if !reasons.is_empty() {
            flag(MountError::InvalidHostnameOverride {
                hostname: hostname.to_owned(),
                reasons,
            });
        }
        let hostname = truncate_hostname(pod_name, hostname).unwrap_or_else(|(t, e)| {
            flag(e);
            t
        });
        return Generated {
            hostname,
            domain: String::new(),
            invalid,
        };
    }
    // (2)
    let mut hostname = pod_name;
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        let reasons = dns1123_label_errors(h);
        if !reasons.is_empty() {
            flag(MountError::InvalidHostname {
                hostname: h.to_owned(),
                reasons,
            });
        }
        hostname = h;
    }
    // (3)
    let hostname = truncate_hostname(pod_name, hostname).unwrap_or_else(|(t, e)| {
        flag(e);
        t
    });
    // (4)
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        let reasons = dns1123_label_errors(sub);
        if !reasons.is_empty() {
            flag(MountError::InvalidSubdomain {
                subdomain: sub.to_owned(),
                reasons,
            });
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        domain = format!("{sub}.{namespace}.svc.{cluster_domain}");
    }
    Generated {
        hostname,
        domain,
        invalid,
    }
}

/// At most 63 characters, no trailing `-` or `.` after truncation. Err: the cut name (kept
/// for a pod the kubelet would refuse) and the error.
fn truncate_hostname(pod_name: &str, hostname: &str) -> Result<String, (String, MountError)> {
    if hostname.len() <= HOSTNAME_MAX_LEN {
        return Ok(hostname.to_owned());
    }
    let mut end = HOSTNAME_MAX_LEN;
    while !hostname.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &hostname[..end];
    let trimmed = cut.trim_end_matches(['-', '.']);
    if trimmed.is_empty() {
        let error = MountError::HostnameTruncation {
            pod: pod_name.to_owned(),
            hostname: hostname.to_owned(),
        };
        return Err((cut.to_owned(), error));
    }
    Ok(trimmed.to_owned())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_dns1123_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    bytes.first().is_some_and(|b| *b != b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
        && bytes.iter().all(allowed)
}

fn is_dns1123_subdomain(value: &str) -> bool {
    value.split('.').all(is_dns1123_label)
}

/// The API's `IsDNS1123Label` messages.
fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > HOSTNAME_MAX_LEN {
        errors.push(format!(
            "must be no more than {HOSTNAME_MAX_LEN} characters"
        ));
    }
    if !is_dns1123_label(value) {
        if is_dns1123_subdomain(value) {
            errors.push("must not contain dots".to_owned());
        } else {
            errors.push(format!(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
                 or '123-abc', regex used for validation is '{DNS1123_LABEL_FMT}')"
            ));
        }
    }
    errors
}

/// The API's `IsDNS1123Subdomain` messages.
fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > SUBDOMAIN_MAX_LEN {
        errors.push(format!(
            "must be no more than {SUBDOMAIN_MAX_LEN} characters"
        ));
    }
    if !is_dns1123_subdomain(value) {
        errors.push(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character (e.g. \
             'example.com', regex used for validation is \
             '{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*')"
        ));
    }
    errors
}

/// The managed hosts file up to the aliases.
fn managed_hosts(host_ips: &[String], hostname: &str, domain: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    for ip in host_ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out
}

fn is_host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// (6) The volume types whose kubelet mounter is `ReadOnly`.
fn read_only_by_nature(volume: &Volume) -> bool {
    volume.config_map.is_some()
        || volume.secret.is_some()
        || volume.projected.is_some()
        || volume.downward_api.is_some()
}

/// The source field set on a volume (`hostPath`, `persistentVolumeClaim`, ...).
fn volume_type(volume: &Volume) -> String {
    match serde_json::to_value(volume) {
        Ok(serde_json::Value::Object(map)) => map
            .keys()
            .find(|k| k.as_str() != "name")
            .cloned()
            .unwrap_or_else(|| "unknown".into()),
        _ => "unknown".into(),
    }
}

/// (2) The mount's subPath, `subPathExpr` expanded; `None` when there is none.
fn sub_path(
    m: &VolumeMount,
    env: &ContainerEnv,
    at: &MountAt<'_>,
) -> Result<Option<OsString>, MountError> {
    let raw = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
        Some(expr) => {
            let missing = RefCell::new(BTreeSet::new());
            let expanded = expand(expr.as_bytes(), |name| match env.get(name) {
                Some(value) if !value.is_empty() => Some(value.to_vec()),
                _ => {
                    missing.borrow_mut().insert(name.to_owned());
                    Some(Vec::new())
                }
            });
            let missing = missing.into_inner();
            if !missing.is_empty() {
                let (container, volume) = at.names();
                let missing = missing.into_iter().collect();
                return Err(MountError::SubPathExprMissingValue {
                    container,
                    volume,
                    missing,
                });
            }
            expanded
        }
        None => m.sub_path.clone().unwrap_or_default().into_bytes(),
    };
    if raw.is_empty() {
        return Ok(None);
    }
    let (container, volume) = at.names();
    let sub_path = String::from_utf8_lossy(&raw).into_owned();
    if raw.starts_with(b"/") {
        return Err(MountError::SubPathAbsolute {
            container,
            volume,
            sub_path,
        });
    }
    if raw.split(|b| *b == b'/').any(|part| part == b"..") {
        return Err(MountError::SubPathBacksteps {
            container,
            volume,
            sub_path,
        });
    }
    Ok(Some(OsString::from_vec(raw)))
}

/// (3) Creates a missing subPath, then resolves and checks it; returns the host path.
fn prepare_sub_path(
    volume_path: &Path,
    sub_path: &Path,
    at: &MountAt<'_>,
) -> Result<PathBuf, MountError> {
    let path = volume_path.join(sub_path);
    // An error other than "missing" is the kubelet's cue to leave the path alone.
    if let Ok(false) = path.try_exists() {
        let mode = match fs::metadata(volume_path) {
            Ok(meta) => meta.permissions().mode() & 0o7777,
            Err(e) => {
                let (container, volume) = at.names();
                let path = volume_path.to_path_buf();
                let source = Arc::new(e);
                return Err(MountError::VolumeMode {
                    container,
                    volume,
                    path,
                    source,
                });
            }
        };
        if let Err(source) = safe_make_dir(sub_path, volume_path, mode) {
            let (container, volume) = at.names();
            return Err(MountError::CreateSubPath {
                container,
                volume,
                path,
                source: Box::new(source),
            });
        }
    }
    resolve_within(&path, volume_path).map_err(|source| {
        let (container, volume) = at.names();
        MountError::PrepareSubPath {
            container,
            volume,
            path,
            source: Box::new(source),
        }
    })
}

/// The kubelet's `PrepareSafeSubpath` checks: `path` resolved must lie within `volume_path`
/// resolved, with no symlink below it.
fn resolve_within(path: &Path, volume_path: &Path) -> Result<PathBuf, SubPathError> {
    let real_volume = canonicalize(volume_path)?;
    let real_path = canonicalize(path)?;
    if !real_path.starts_with(&real_volume) {
        return Err(SubPathError::NotWithinVolume {
            path: real_path,
            volume_path: real_volume,
        });
    }
    check_no_symlinks(&real_path, &real_volume)?;
    Ok(real_path)
}

/// The kubelet's `SafeMakeDir`: creates `base/sub_path` and its missing parents with `mode`,
/// never outside `base` (resolved).
fn safe_make_dir(sub_path: &Path, base: &Path, mode: u32) -> Result<(), SubPathError> {
    let real_base = canonicalize(base)?;
    let parts: Vec<&OsStr> = sub_path
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect();
    let full: PathBuf = parts.iter().fold(real_base.clone(), |p, c| p.join(c));
    match fs::metadata(&full) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => return Err(SubPathError::NotADirectory { path: full }),
        Err(_) => {}
    }
    // The longest existing prefix (symlinks followed) and the directories to create.
    let mut existing = real_base.clone();
    let mut to_create: &[&OsStr] = &[];
    for (i, part) in parts.iter().enumerate() {
        let next = existing.join(part);
        match fs::metadata(&next) {
            Ok(_) => existing = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                to_create = &parts[i..];
                break;
            }
            Err(e) => return Err(open_error(next, e)),
        }
    }
    let mut current = canonicalize(&existing)?;
    if !current.starts_with(&real_base) {
        return Err(SubPathError::OutsideBase {
            path: current,
            base: real_base,
        });
    }
    check_no_symlinks(&current, &real_base)?;
    for part in to_create {
        current.push(part);
        let created = fs::DirBuilder::new().mode(mode).create(&current);
        // mkdir's mode was narrowed by the umask.
        let chmod = || fs::set_permissions(&current, fs::Permissions::from_mode(mode));
        if let Err(e) = created.and_then(|()| chmod()) {
            return Err(SubPathError::CreateDir {
                path: current,
                source: Arc::new(e),
            });
        }
        let meta = fs::symlink_metadata(&current).map_err(|e| open_error(current.clone(), e))?;
        if !meta.is_dir() {
            return Err(SubPathError::SymlinkFound { path: current });
        }
    }
    Ok(())
}

/// `base` and every component of `path` below it exist and none is a symlink.
fn check_no_symlinks(path: &Path, base: &Path) -> Result<(), SubPathError> {
    let below = path
        .strip_prefix(base)
        .map_err(|_| SubPathError::OutsideBase {
            path: path.to_path_buf(),
            base: base.to_path_buf(),
        })?;
    let mut current = base.to_path_buf();
    let check = |p: &Path| match fs::symlink_metadata(p) {
        Ok(meta) if meta.file_type().is_symlink() => Err(SubPathError::SymlinkFound {
            path: p.to_path_buf(),
        }),
        Ok(_) => Ok(()),
        Err(e) => Err(open_error(p.to_path_buf(), e)),
    };
    check(&current)?;
    for part in below.components() {
        current.push(part);
        check(&current)?;
    }
    Ok(())
}

fn open_error(path: PathBuf, e: io::Error) -> SubPathError {
    SubPathError::Open {
        path,
        source: Arc::new(e),
    }
}

fn canonicalize(path: &Path) -> Result<PathBuf, SubPathError> {
    fs::canonicalize(path).map_err(|e| SubPathError::ResolveSymlinks {
        path: path.to_path_buf(),
        source: Arc::new(e),
    })
}

/// (4) `mountPath` as an absolute path: a relative one is cleaned below `/`.
fn container_path(mount_path: &str) -> PathBuf {
    if mount_path.starts_with('/') {
        return PathBuf::from(mount_path);
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in mount_path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    let mut path = PathBuf::from("/");
    path.extend(parts);
    path
}

/// (5) The kubelet's `translateMountPropagation`: only known modes.
fn check_propagation(m: &VolumeMount, at: &MountAt<'_>) -> Result<(), MountError> {
    match m.mount_propagation.as_deref() {
        None | Some("None" | "HostToContainer" | "Bidirectional") => Ok(()),
        Some(mode) => {
            let (container, volume) = at.names();
            let mode = mode.to_owned();
            Err(MountError::InvalidPropagation {
                container,
                volume,
                mode,
            })
        }
    }
}

/// (5) The kubelet's `resolveRecursiveReadOnly` for a runtime without recursive read-only
/// mounts: `IfPossible` is a plain read-only mount, `Enabled` an error.
fn check_recursive_read_only(m: &VolumeMount, at: &MountAt<'_>) -> Result<(), MountError> {
    let mode = match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(()),
        Some(mode) => mode,
    };
    let requested = format!("volume {:?} requested recursive read-only mode", m.name);
    let propagation = m.mount_propagation.as_deref().filter(|p| *p != "None");
    let detail = if !m.read_only.unwrap_or(false) {
        format!("{requested}, but it is not read-only")
    } else if let Some(propagation) = propagation {
        format!("{requested}, but it is not compatible with propagation {propagation:?}")
    } else {
        match mode {
            "IfPossible" => return Ok(()),
            "Enabled" => format!("{requested}, but it is not supported by the runtime"),
            other => format!("unknown recursive read-only mode {other:?}"),
        }
    };
    let (container, volume) = at.names();
    Err(MountError::RecursiveReadOnly {
        container,
        volume,
        detail,
    })
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::os::unix::fs::symlink;

    use nodelet_core::PodUid;
    use serde_json::json;

    use super::*;
    use crate::env::EnvValue;

    const EMPTY_DIR: &str = "kubernetes.io/empty-dir";
    const CONFIGMAP: &str = "kubernetes.io/configmap";

    fn pod(spec: serde_json::Value) -> AdmittedPod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "web", "uid": "u1"},
            "spec": spec,
        }))
        .unwrap();
        AdmittedPod::new(pod).unwrap()
    }

    /// A pod with one container `c` mounting `mounts`, and `volumes`.
    fn pod_with(volumes: serde_json::Value, mounts: serde_json::Value) -> AdmittedPod {
        pod(json!({"containers": [{"name": "c", "volumeMounts": mounts}], "volumes": volumes}))
    }

    fn data_volume() -> serde_json::Value {
        json!([{"name": "data", "emptyDir": {}}])
    }

    fn container(pod: &AdmittedPod) -> Container {
        pod.spec.as_ref().unwrap().containers[0].clone()
    }

    fn env(vars: &[(&str, &str)]) -> ContainerEnv {
        let vars = vars
            .iter()
            .map(|(n, v)| EnvValue {
                name: (*n).to_owned(),
                value: v.as_bytes().to_vec(),
            })
            .collect();
        ContainerEnv {
            vars,
            warnings: Vec::new(),
        }
    }

    fn uid() -> PodUid {
        PodUid::new("u1").unwrap()
    }

    /// A root directory in a temporary directory.
    struct Fixture {
        _tmp: tempfile::TempDir,
        dirs: PodDirs,
    }

    impl Fixture {
        fn new() -> Self {
            let tmp = tempfile::tempdir().unwrap();
            let dirs = PodDirs::new(tmp.path());
            fs::create_dir_all(dirs.pod(&uid())).unwrap();
            Self { _tmp: tmp, dirs }
        }

        /// Creates the volume directory `<plugin>/<name>` with `mode`.
        fn volume(&self, plugin: &str, name: &str, mode: u32) -> PathBuf {
            let dir = self.dirs.volume(&uid(), plugin, name);
            fs::create_dir_all(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
            dir
        }

        fn mounts(
            &self,
            pod: &AdmittedPod,
            env: &ContainerEnv,
        ) -> Result<Vec<ContainerMount>, MountError> {
            make_mounts(pod, &container(pod), &self.dirs, env, None)
        }

        fn error(&self, pod: &AdmittedPod, env: &ContainerEnv) -> String {
            self.mounts(pod, env).unwrap_err().to_string()
        }
    }

    #[test]
    fn a_volume_is_mounted_from_its_plugin_directory_and_config_volumes_are_read_only() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let cfg = fx.volume(CONFIGMAP, "cfg", 0o777);
        let pod = pod_with(
            json!([{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}]),
            json!([
                {"name": "data", "mountPath": "/data"},
                {"name": "cfg", "mountPath": "/cfg"},
                {"name": "data", "mountPath": "/ro", "readOnly": true},
            ]),
        );
        let mounts = fx.mounts(&pod, &env(&[])).unwrap();
        let got: Vec<_> = mounts
            .into_iter()
            .map(|m| (m.host_path, m.container_path, m.read_only))
            .collect();
        let expected = [
            (data.clone(), PathBuf::from("/data"), false),
            (cfg, PathBuf::from("/cfg"), true),
            (data, PathBuf::from("/ro"), true),
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn a_sub_path_file_is_mounted_from_inside_the_volume() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        fs::create_dir(data.join("conf")).unwrap();
        fs::write(data.join("conf/app.ini"), "x").unwrap();
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/etc/app.ini", "subPath": "conf/app.ini"}]),
        );
        let mounts = fx.mounts(&pod, &env(&[])).unwrap();
        let file = fs::canonicalize(data.join("conf/app.ini")).unwrap();
        assert_eq!(mounts[0].host_path, file);
        assert_eq!(mounts[0].container_path, Path::new("/etc/app.ini"));
    }

    #[test]
    fn a_sub_path_dir_that_exists_is_mounted_as_it_is() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        fs::create_dir(data.join("logs")).unwrap();
        fs::set_permissions(data.join("logs"), fs::Permissions::from_mode(0o700)).unwrap();
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/logs", "subPath": "logs/"}]),
        );
        let mounts = fx.mounts(&pod, &env(&[])).unwrap();
        assert_eq!(
            mounts[0].host_path,
            fs::canonicalize(data.join("logs")).unwrap()
        );
        let mode = fs::metadata(data.join("logs"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o700);
    }

    #[test]
    fn a_sub_path_resolving_through_a_symlink_inside_the_volume_is_accepted() {
        let fx = Fixture::new();
        let cfg = fx.volume(CONFIGMAP, "cfg", 0o777);
        fs::create_dir(cfg.join("..2024_01")).unwrap();
        fs::write(cfg.join("..2024_01/key"), "v").unwrap();
        symlink("..2024_01", cfg.join("..data")).unwrap();
        symlink("..data/key", cfg.join("key")).unwrap();
        let pod = pod_with(
            json!([{"name": "cfg", "configMap": {"name": "x"}}]),
            json!([{"name": "cfg", "mountPath": "/key", "subPath": "key"}]),
        );
        let mounts = fx.mounts(&pod, &env(&[])).unwrap();
        let file = fs::canonicalize(cfg.join("..2024_01/key")).unwrap();
        assert_eq!(mounts[0].host_path, file);
        assert!(mounts[0].read_only);
    }

    #[test]
    fn a_missing_sub_path_is_created_as_directories_with_the_volume_mode() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o2770);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/logs", "subPath": "a/./b"}]),
        );
        let mounts = fx.mounts(&pod, &env(&[])).unwrap();
        let real = fs::canonicalize(&data).unwrap();
        assert_eq!(mounts[0].host_path, real.join("a/b"));
        for dir in ["a", "a/b"] {
            let mode = fs::metadata(data.join(dir)).unwrap().permissions().mode();
            assert_eq!(mode & 0o7777, 0o2770, "{dir}");
        }
    }

    #[test]
    fn a_missing_sub_path_of_a_config_map_volume_is_created_too() {
        let fx = Fixture::new();
        let cfg = fx.volume(CONFIGMAP, "cfg", 0o777);
        let pod = pod_with(
            json!([{"name": "cfg", "configMap": {"name": "x"}}]),
            json!([{"name": "cfg", "mountPath": "/k", "subPath": "absent-key"}]),
        );
        let mounts = fx.mounts(&pod, &env(&[])).unwrap();
        assert!(cfg.join("absent-key").is_dir());
        assert!(mounts[0].read_only);
    }

    #[test]
    fn a_sub_path_with_a_backstep_is_rejected_with_the_kubelet_text() {
        let fx = Fixture::new();
        fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/x", "subPath": "a/../../etc"}]),
        );
        assert_eq!(
            fx.error(&pod, &env(&[])),
            "unable to provision SubPath `a/../../etc`: must not contain '..'"
        );
    }

    #[test]
    fn an_absolute_sub_path_is_rejected_with_the_kubelet_text() {
        let fx = Fixture::new();
        fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/x", "subPath": "/etc"}]),
        );
        assert_eq!(
            fx.error(&pod, &env(&[])),
            "error SubPath `/etc` must not be an absolute path"
        );
    }

    #[test]
    fn a_sub_path_escaping_through_a_symlink_is_rejected_with_the_kubelet_text() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let outside = fx.dirs.root().join("outside");
        fs::create_dir(&outside).unwrap();
        symlink(&outside, data.join("evil")).unwrap();
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/x", "subPath": "evil"}]),
        );
        let err = fx.mounts(&pod, &env(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"failed to prepare subPath for volumeMount "data" of container "c""#
        );
        let detail = err.source().map(ToString::to_string).unwrap_or_default();
        let real_outside = fs::canonicalize(&outside).unwrap();
        let real_data = fs::canonicalize(&data).unwrap();
        assert_eq!(
            detail,
            format!("subpath {real_outside:?} not within volume path {real_data:?}")
        );
        assert!(matches!(
            &err,
            MountError::PrepareSubPath { source, .. }
                if matches!(**source, SubPathError::NotWithinVolume { .. })
        ));
    }

    #[test]
    fn a_missing_sub_path_below_an_escaping_symlink_is_not_created() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let outside = fx.dirs.root().join("outside");
        fs::create_dir(&outside).unwrap();
        symlink(&outside, data.join("evil")).unwrap();
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/x", "subPath": "evil/new"}]),
        );
        let err = fx.mounts(&pod, &env(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"failed to create subPath directory for volumeMount "data" of container "c""#
        );
        assert!(matches!(
            &err,
            MountError::CreateSubPath { source, .. }
                if matches!(**source, SubPathError::OutsideBase { .. })
        ));
        assert!(!outside.join("new").exists());
    }

    #[test]
    fn a_sub_path_on_a_dangling_symlink_is_not_created() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let target = fx.dirs.root().join("nowhere");
        symlink(&target, data.join("dangling")).unwrap();
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/x", "subPath": "dangling"}]),
        );
        let err = fx.mounts(&pod, &env(&[])).unwrap_err();
        assert!(matches!(err, MountError::CreateSubPath { .. }), "{err:?}");
        assert!(!target.exists());
    }

    #[test]
    fn a_sub_path_expr_is_expanded_from_the_container_environment() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/logs", "subPathExpr": "$(POD_NAME)/$$x"}]),
        );
        let mounts = fx.mounts(&pod, &env(&[("POD_NAME", "web-1")])).unwrap();
        let expected = fs::canonicalize(&data).unwrap().join("web-1/$x");
        assert_eq!(mounts[0].host_path, expected);
    }

    #[test]
    fn a_sub_path_expr_wins_over_a_sub_path() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/l", "subPath": "a", "subPathExpr": "$(B)"}]),
        );
        let mounts = fx.mounts(&pod, &env(&[("B", "b")])).unwrap();
        assert_eq!(
            mounts[0].host_path,
            fs::canonicalize(&data).unwrap().join("b")
        );
    }

    #[test]
    fn a_sub_path_expr_with_unset_or_empty_variables_names_them_sorted() {
        let fx = Fixture::new();
        fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/l", "subPathExpr": "$(ZED)/$(EMPTY)/$(OK)"}]),
        );
        let env = env(&[("EMPTY", ""), ("OK", "ok")]);
        assert_eq!(fx.error(&pod, &env), "missing value for EMPTY, ZED");
    }

    #[test]
    fn a_sub_path_expr_expanding_to_a_backstep_or_an_absolute_path_is_rejected() {
        let fx = Fixture::new();
        fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/l", "subPathExpr": "$(D)"}]),
        );
        assert_eq!(
            fx.error(&pod, &env(&[("D", "..")])),
            "unable to provision SubPath `..`: must not contain '..'"
        );
        assert_eq!(
            fx.error(&pod, &env(&[("D", "/root")])),
            "error SubPath `/root` must not be an absolute path"
        );
    }

    #[test]
    fn a_mount_of_a_missing_volume_fails_with_the_kubelet_text() {
        let fx = Fixture::new();
        let pod = pod_with(json!([]), json!([{"name": "nope", "mountPath": "/x"}]));
        assert_eq!(
            fx.error(&pod, &env(&[])),
            r#"cannot find volume "nope" to mount into container "c""#
        );
    }

    #[test]
    fn a_mount_of_an_unsupported_volume_type_names_the_volume_and_its_type() {
        let fx = Fixture::new();
        let pod = pod_with(
            json!([{"name": "host", "hostPath": {"path": "/var/log"}}]),
            json!([{"name": "host", "mountPath": "/x"}]),
        );
        assert_eq!(
            fx.error(&pod, &env(&[])),
            "cannot mount volume \"host\" of type hostPath into container \"c\": nodelet \
             supports only configMap, secret, projected, downwardAPI and emptyDir volumes"
        );
    }

    #[test]
    fn a_relative_mount_path_is_made_absolute() {
        assert_eq!(container_path("data/x"), Path::new("/data/x"));
        assert_eq!(container_path("../a/./b/"), Path::new("/a/b"));
        assert_eq!(container_path("/abs/./p"), Path::new("/abs/./p"));
    }

    #[test]
    fn an_unknown_propagation_or_an_unsupported_recursive_read_only_mount_fails() {
        let fx = Fixture::new();
        fx.volume(EMPTY_DIR, "data", 0o777);
        let rro = "failed to resolve recursive read-only mode: volume \"data\" requested \
                   recursive read-only mode, but it is";
        let cases = [
            (
                json!({"mountPropagation": "Sideways"}),
                r#"invalid MountPropagation mode: "Sideways""#.to_owned(),
            ),
            (
                json!({"recursiveReadOnly": "Enabled"}),
                format!("{rro} not read-only"),
            ),
            (
                json!({"readOnly": true, "recursiveReadOnly": "Enabled",
                       "mountPropagation": "HostToContainer"}),
                format!("{rro} not compatible with propagation \"HostToContainer\""),
            ),
            (
                json!({"readOnly": true, "recursiveReadOnly": "Enabled"}),
                format!("{rro} not supported by the runtime"),
            ),
            (
                json!({"readOnly": true, "recursiveReadOnly": "Always"}),
                "failed to resolve recursive read-only mode: unknown recursive read-only mode \
                 \"Always\""
                    .to_owned(),
            ),
        ];
        for (extra, text) in cases {
            let mut mount = json!({"name": "data", "mountPath": "/x"});
            mount
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let pod = pod_with(data_volume(), json!([mount]));
            assert_eq!(fx.error(&pod, &env(&[])), text);
        }
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/x", "readOnly": true,
                    "recursiveReadOnly": "IfPossible"}]),
        );
        assert!(fx.mounts(&pod, &env(&[])).unwrap()[0].read_only);
    }

    #[test]
    fn etc_hosts_is_mounted_writable_after_the_volumes() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(data_volume(), json!([{"name": "data", "mountPath": "/d"}]));
        let hosts = fx.dirs.pod(&uid()).join("etc-hosts");
        let mounts = make_mounts(&pod, &container(&pod), &fx.dirs, &env(&[]), Some(&hosts));
        let expected = [
            ContainerMount {
                host_path: data,
                container_path: "/d".into(),
                read_only: false,
            },
            ContainerMount {
                host_path: hosts,
                container_path: "/etc/hosts".into(),
                read_only: false,
            },
        ];
        assert_eq!(mounts.unwrap(), expected);
    }

    #[test]
    fn etc_hosts_is_not_mounted_when_a_volume_mount_targets_it() {
        let fx = Fixture::new();
        let data = fx.volume(EMPTY_DIR, "data", 0o777);
        let pod = pod_with(
            data_volume(),
            json!([{"name": "data", "mountPath": "/etc/hosts", "subPath": "h"}]),
        );
        let hosts = fx.dirs.pod(&uid()).join("etc-hosts");
        let mounts =
            make_mounts(&pod, &container(&pod), &fx.dirs, &env(&[]), Some(&hosts)).unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].container_path, Path::new("/etc/hosts"));
        assert!(
            mounts[0]
                .host_path
                .starts_with(fs::canonicalize(&data).unwrap())
        );
    }

    #[test]
    fn a_pod_gets_etc_hosts_when_it_has_addresses_or_the_host_network() {
        let plain = pod(json!({"containers": []}));
        let host = pod(json!({"containers": [], "hostNetwork": true}));
        assert!(!should_mount_hosts_file(&plain, &[]));
        assert!(should_mount_hosts_file(&plain, &["10.0.0.1".into()]));
        assert!(should_mount_hosts_file(&host, &[]));
    }

    const MANAGED: &str = "# Kubernetes-managed hosts file.\n\
        127.0.0.1\tlocalhost\n\
        ::1\tlocalhost ip6-localhost ip6-loopback\n\
        fe00::0\tip6-localnet\n\
        fe00::0\tip6-mcastprefix\n\
        fe00::1\tip6-allnodes\n\
        fe00::2\tip6-allrouters\n";

    #[test]
    fn the_managed_hosts_file_matches_the_kubelet_tests() {
        let one = ["123.45.67.89".to_owned()];
        assert_eq!(
            managed_hosts(&one, "podFoo", ""),
            format!("{MANAGED}123.45.67.89\tpodFoo\n")
        );
        let two = ["203.0.113.1".to_owned(), "fd00::6".to_owned()];
        assert_eq!(
            managed_hosts(&two, "podFoo", "domainFoo"),
            format!(
                "{MANAGED}203.0.113.1\tpodFoo.domainFoo\tpodFoo\n\
                 fd00::6\tpodFoo.domainFoo\tpodFoo\n"
            )
        );
    }

    #[test]
    fn the_hosts_file_of_a_plain_pod_names_it_at_each_address() {
        let pod = pod(json!({"containers": []}));
        let content = hosts_file_content(&pod, &["10.0.0.1".into()], "ignored");
        assert_eq!(content, format!("{MANAGED}10.0.0.1\tweb\n"));
    }

    #[test]
    fn the_hosts_file_of_a_pod_with_hostname_and_subdomain_has_its_fqdn() {
        let pod = pod(json!({"containers": [], "hostname": "db-0", "subdomain": "db"}));
        let content = hosts_file_content(&pod, &["10.0.0.1".into()], "");
        assert_eq!(
            content,
            format!("{MANAGED}10.0.0.1\tdb-0.db.ns.svc.cluster.local\tdb-0\n")
        );
    }

    #[test]
    fn the_hosts_file_ends_with_the_host_aliases() {
        let pod = pod(json!({"containers": [], "hostAliases": [
            {"ip": "123.45.67.89", "hostnames": ["foo", "bar", "baz"]},
            {"ip": "456.78.90.123", "hostnames": ["park", "doo", "boo"]},
        ]}));
        let content = hosts_file_content(&pod, &["203.0.113.1".into()], "");
        assert_eq!(
            content,
            format!(
                "{MANAGED}203.0.113.1\tweb\n\
                 \n\
                 # Entries added by HostAliases.\n\
                 123.45.67.89\tfoo\tbar\tbaz\n\
                 456.78.90.123\tpark\tdoo\tboo\n"
            )
        );
    }

    #[test]
    fn the_hosts_file_of_a_host_network_pod_is_the_node_file_under_its_own_header() {
        let node = "# hosts file for testing.\n127.0.0.1\tlocalhost\n123.45.67.89\tsome.domain\n";
        let pod = pod(
            json!({"containers": [], "hostNetwork": true, "hostAliases": [
                {"ip": "123.45.67.89", "hostnames": ["foo", "bar", "baz"]},
            ]}),
        );
        let content = hosts_file_content(&pod, &["10.0.0.1".into()], node);
        assert_eq!(
            content,
            format!(
                "# Kubernetes-managed hosts file (host network).\n{node}\
                 \n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n"
            )
        );
    }

    #[test]
    fn the_pod_hostname_follows_the_kubelet_rules() {
        let cases = [
            (json!({}), ("web", "")),
            (json!({"hostname": "custom"}), ("custom", "")),
            (
                json!({"subdomain": "sub"}),
                ("web", "sub.ns.svc.cluster.local"),
            ),
            (
                json!({"hostname": "custom", "subdomain": "sub"}),
                ("custom", "sub.ns.svc.cluster.local"),
            ),
            (
                json!({"hostname": "custom", "subdomain": "sub", "hostnameOverride": "o.v"}),
                ("o.v", ""),
            ),
        ];
        for (mut spec, (hostname, domain)) in cases {
            spec["containers"] = json!([]);
            let names = pod_hostname(&pod(spec));
            assert_eq!(names, (hostname.to_owned(), domain.to_owned()));
        }
        assert_eq!(hostname_file_content("web"), "web\n");
    }

    #[test]
    fn a_long_hostname_is_truncated_and_trimmed() {
        let cases = [
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567.",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567",
            ),
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456-1234567.",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456",
            ),
        ];
        for (long, short) in cases {
            let mut raw: Pod = (**pod(json!({"containers": []})).pod()).clone();
            raw.metadata.name = Some(long.to_owned());
            assert_eq!(pod_hostname(&raw).0, short);
        }
    }

    #[test]
    fn an_invalid_hostname_or_subdomain_fails_the_mounts_with_the_kubelet_text() {
        let fx = Fixture::new();
        let cases = [
            (
                json!({"hostname": "Invalid-Hostname-!"}),
                "pod Hostname \"Invalid-Hostname-!\" is not a valid DNS label: a lowercase RFC \
                 1123 label must consist of lower case alphanumeric characters or '-', and must \
                 start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
                 regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                    .to_owned(),
            ),
            (
                json!({"hostname": "a".repeat(64)}),
                format!(
                    "pod Hostname \"{}\" is not a valid DNS label: must be no more than 63 \
                     characters",
                    "a".repeat(64)
                ),
            ),
            (
                json!({"subdomain": "a.b"}),
                "pod Subdomain \"a.b\" is not a valid DNS label: must not contain dots".to_owned(),
            ),
            (
                json!({"hostnameOverride": "Bad_"}),
                "pod HostnameOverride \"Bad_\" is not a valid DNS subdomain: a lowercase RFC 1123 \
                 subdomain must consist of lower case alphanumeric characters, '-' or '.', and \
                 must start and end with an alphanumeric character (e.g. 'example.com', regex \
                 used for validation is \
                 '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                    .to_owned(),
            ),
        ];
        for (mut spec, text) in cases {
            spec["containers"] = json!([{"name": "c"}]);
            let pod = pod(spec);
            assert_eq!(fx.error(&pod, &env(&[])), text);
        }
    }

    #[test]
    fn the_kernel_hostname_is_the_fqdn_only_when_asked_and_short_enough() {
        let spec = |extra: serde_json::Value| {
            let mut spec = json!({"containers": [], "subdomain": "s"});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            pod(spec)
        };
        let fqdn = spec(json!({"setHostnameAsFQDN": true}));
        assert_eq!(
            kernel_hostname(&fqdn, "node").unwrap(),
            "web.s.ns.svc.cluster.local"
        );
        assert_eq!(kernel_hostname(&spec(json!({})), "node").unwrap(), "web");
        let host = spec(json!({"hostNetwork": true, "setHostnameAsFQDN": true}));
        assert_eq!(kernel_hostname(&host, "node").unwrap(), "node");
        let long = spec(json!({"setHostnameAsFQDN": true, "hostname": "a".repeat(42)}));
        assert_eq!(
            kernel_hostname(&long, "node").unwrap_err().to_string(),
            format!(
                "failed to construct FQDN from pod hostname and cluster domain, FQDN \
                 {}.s.ns.svc.cluster.local is too long (64 characters is the max, 65 characters \
                 requested)",
                "a".repeat(42)
            )
        );
    }
}
