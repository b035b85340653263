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
//! 1. The pod volume of that name (`cannot find volume ...` when missing); its path is the one
//!    the volume manager mounted (`Volumes::mounted_volumes`: `PodDirs::volume(uid, plugin,
//!    name)`, or for a hostPath volume the node's path itself, PL-34). A volume the volume
//!    manager did not mount, a type without a nodelet plugin (persistentVolumeClaim, csi, ...),
//!    fails naming the volume and its type.
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
//!    downwardAPI volumes (their kubelet mounters are `ReadOnly`); emptyDir and hostPath are
//!    writable.
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

mod error;
mod hosts;
mod subpath;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, VolumeMount};
use nodelet_core::runtime::ContainerMount;
use nodelet_core::{AdmittedPod, PodVolume};

use crate::env::ContainerEnv;
use error::MountAt;
use hosts::generate_hostname;
pub(crate) use subpath::resolve_within;
use subpath::{prepare_sub_path, sub_path};

pub use error::{MountError, SubPathError};
pub use hosts::{
    DEFAULT_CLUSTER_DOMAIN, hostname_file_content, hosts_file_content, kernel_hostname,
    pod_hostname, should_mount_hosts_file,
};

/// The bind mounts of `container`, one of `pod`'s containers: its volume mounts in order,
/// then `hosts_file` at `/etc/hosts` (steps 0 … 7 of the module docs). `volumes` are the
/// pod's mounted volumes by name, with their paths (`Volumes::mounted_volumes`). `env` is the
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
    volumes: &BTreeMap<String, PathBuf>,
    env: &ContainerEnv,
    hosts_file: Option<&Path>,
) -> Result<Vec<ContainerMount>, MountError> {
    // (0)
    if let Some(invalid) = generate_hostname(pod, DEFAULT_CLUSTER_DOMAIN).invalid {
        return Err(invalid);
    }
    let mut mount_hosts_file = hosts_file.is_some();
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let at = MountAt {
            container: &container.name,
            volume: &m.name,
        };
        mount_hosts_file &= m.mount_path != ETC_HOSTS;
        // (1)
        let volume = pod
            .volume(&m.name)
            .ok_or_else(|| MountError::VolumeNotFound {
                container: at.container.to_owned(),
                volume: at.volume.to_owned(),
            })?;
        // Every volume a plugin supports is mounted before containers start.
        let volume_path =
            volumes
                .get(volume.name())
                .cloned()
                .ok_or_else(|| MountError::UnsupportedVolume {
                    container: at.container.to_owned(),
                    volume: at.volume.to_owned(),
                    volume_type: volume.type_name().to_owned(),
                })?;
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

/// The hosts file, in a container and on the node.
const ETC_HOSTS: &str = "/etc/hosts";

/// (6) The volume types whose kubelet mounter is `ReadOnly`.
fn read_only_by_nature(volume: &PodVolume) -> bool {
    volume.config_map().is_some()
        || volume.secret().is_some()
        || volume.projected().is_some()
        || volume.downward_api().is_some()
}

/// (4) `mountPath` as an absolute path: a relative one is cleaned below `/`.
pub(crate) fn container_path(mount_path: &str) -> PathBuf {
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
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};

    use k8s_openapi::api::core::v1::Pod;
    use nodelet_core::{PodDirs, PodUid};
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
            ..ContainerEnv::default()
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

        /// What the volume manager reports mounted for `pod`: each volume of a type it
        /// supports, at its plugin's directory (a hostPath volume at the node's path).
        fn mounted(&self, pod: &AdmittedPod) -> BTreeMap<String, PathBuf> {
            pod.volumes()
                .iter()
                .filter_map(|v| {
                    let path = match v.type_name() {
                        "hostPath" => PathBuf::from(&v.host_path()?.path),
                        "emptyDir" => self.dirs.volume(&uid(), EMPTY_DIR, v.name()),
                        "configMap" => self.dirs.volume(&uid(), CONFIGMAP, v.name()),
                        _ => return None,
                    };
                    Some((v.name().to_owned(), path))
                })
                .collect()
        }

        fn mounts(
            &self,
            pod: &AdmittedPod,
            env: &ContainerEnv,
        ) -> Result<Vec<ContainerMount>, MountError> {
            make_mounts(pod, &container(pod), &self.mounted(pod), env, None)
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
            json!([{"name": "claim", "persistentVolumeClaim": {"claimName": "c"}}]),
            json!([{"name": "claim", "mountPath": "/x"}]),
        );
        assert_eq!(
            fx.error(&pod, &env(&[])),
            "cannot mount volume \"claim\" of type persistentVolumeClaim into container \"c\": \
             nodelet supports only configMap, secret, projected, downwardAPI, emptyDir and hostPath \
             volumes"
        );
    }

    // PL-34: a hostPath volume is the node's path itself, writable unless the mount says
    // readOnly; a subPath of it is created inside it with its mode.
    #[test]
    fn a_host_path_volume_mounts_the_nodes_path_and_its_sub_paths() {
        let fx = Fixture::new();
        let host = tempfile::tempdir().unwrap();
        fs::set_permissions(host.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        let path = host.path().to_str().unwrap();
        let pod = pod_with(
            json!([{"name": "host", "hostPath": {"path": path}}]),
            json!([
                {"name": "host", "mountPath": "/h"},
                {"name": "host", "mountPath": "/ro", "readOnly": true},
                {"name": "host", "mountPath": "/sub", "subPath": "sub-path"},
            ]),
        );
        let mounts = fx.mounts(&pod, &env(&[])).unwrap();
        let got: Vec<_> = mounts
            .iter()
            .map(|m| (m.host_path.clone(), m.read_only))
            .collect();
        let sub = fs::canonicalize(host.path().join("sub-path")).unwrap();
        assert_eq!(
            got,
            [
                (host.path().to_path_buf(), false),
                (host.path().to_path_buf(), true),
                (sub.clone(), false),
            ]
        );
        let mode = fs::metadata(&sub).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777);
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
        let mounts = make_mounts(
            &pod,
            &container(&pod),
            &fx.mounted(&pod),
            &env(&[]),
            Some(&hosts),
        );
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
        let mounts = make_mounts(
            &pod,
            &container(&pod),
            &fx.mounted(&pod),
            &env(&[]),
            Some(&hosts),
        )
        .unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].container_path, Path::new("/etc/hosts"));
        assert!(
            mounts[0]
                .host_path
                .starts_with(fs::canonicalize(&data).unwrap())
        );
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
}
