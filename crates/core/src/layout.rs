//! [`PodDirs`]: the one spelling of the node's pod directories under the root directory
//! (the kubelet's `--root-dir`), as the kubelet lays them out (PL-1, PL-5):
//!
//! ```text
//! <root>/pods/<uid>/
//!     volumes/<escaped plugin>/<volume>/       one volume's files (kubernetes.io~configmap/cfg)
//!     plugins/kubernetes.io~empty-dir/wrapped_<volume>/   a wrapped volume's readiness marker
//!     containers/<container>/                  the container's resolved env files
//! ```
//!
//! A plugin name's `/` is `~` on disk ([`escape_plugin_name`]). Paths are only built here;
//! the [`PodUid`] guarantees `<uid>` is one path component.

use std::path::{Path, PathBuf};

use crate::PodUid;

/// The pod directories under one root directory. Builds paths only; touches no disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDirs {
    root: PathBuf,
}

/// The directory of a wrapped volume's readiness markers, under `plugins/`.
const WRAPPER_PLUGIN: &str = "kubernetes.io~empty-dir";

impl PodDirs {
    /// The layout under `root` (the agent's root directory).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/logs/pods`: the containers' log files, as the kubelet's `/var/log/pods`.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs").join("pods")
    }

    /// `<root>/logs/pods/<namespace>_<name>_<uid>`: one pod's log directory, named as the
    /// kubelet names it.
    pub fn pod_logs(&self, namespace: &str, name: &str, uid: &PodUid) -> PathBuf {
        self.logs().join(format!("{namespace}_{name}_{uid}"))
    }

    /// `<root>/pods`: one directory per pod UID.
    pub fn pods(&self) -> PathBuf {
        self.root.join("pods")
    }

    /// `<root>/pods/<uid>`.
    pub fn pod(&self, uid: &PodUid) -> PathBuf {
        self.pods().join(uid.as_str())
    }

    /// `<root>/pods/<uid>/volumes`.
    pub fn volumes(&self, uid: &PodUid) -> PathBuf {
        self.pod(uid).join("volumes")
    }

    /// `<root>/pods/<uid>/volumes/<escaped plugin>` (`kubernetes.io/configmap` →
    /// `kubernetes.io~configmap`).
    pub fn plugin_volumes(&self, uid: &PodUid, plugin: &str) -> PathBuf {
        self.volumes(uid).join(escape_plugin_name(plugin))
    }

    /// `<root>/pods/<uid>/volumes/<escaped plugin>/<volume>` (PL-1).
    pub fn volume(&self, uid: &PodUid, plugin: &str, volume: &str) -> PathBuf {
        self.plugin_volumes(uid, plugin).join(volume)
    }

    /// `<root>/pods/<uid>/plugins`.
    pub fn plugins(&self, uid: &PodUid) -> PathBuf {
        self.pod(uid).join("plugins")
    }

    /// `<root>/pods/<uid>/plugins/kubernetes.io~empty-dir/wrapped_<volume>`: the readiness
    /// marker of a volume wrapped in an emptyDir (PL-5).
    pub fn wrapper_marker(&self, uid: &PodUid, volume: &str) -> PathBuf {
        self.plugins(uid)
            .join(WRAPPER_PLUGIN)
            .join(format!("wrapped_{volume}"))
    }

    /// `<root>/pods/<uid>/containers`.
    pub fn containers(&self, uid: &PodUid) -> PathBuf {
        self.pod(uid).join("containers")
    }

    /// `<root>/pods/<uid>/containers/<container>`.
    pub fn container(&self, uid: &PodUid, container: &str) -> PathBuf {
        self.containers(uid).join(container)
    }
}

/// A plugin name as a directory name: `kubernetes.io/configmap` → `kubernetes.io~configmap`.
pub fn escape_plugin_name(name: &str) -> String {
    name.replace('/', "~")
}

/// A plugin directory's name back to the plugin name: `kubernetes.io~configmap` →
/// `kubernetes.io/configmap`.
pub fn unescape_plugin_name(name: &str) -> String {
    name.replace('~', "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pod_directory_is_spelled_as_the_kubelet_lays_it_out() {
        let dirs = PodDirs::new("/var/lib/nodelet");
        let uid = PodUid::new("u-1").unwrap();
        assert_eq!(dirs.pods(), Path::new("/var/lib/nodelet/pods"));
        assert_eq!(dirs.pod(&uid), Path::new("/var/lib/nodelet/pods/u-1"));
        assert_eq!(
            dirs.volume(&uid, "kubernetes.io/configmap", "cfg"),
            Path::new("/var/lib/nodelet/pods/u-1/volumes/kubernetes.io~configmap/cfg")
        );
        assert_eq!(
            dirs.wrapper_marker(&uid, "cfg"),
            Path::new("/var/lib/nodelet/pods/u-1/plugins/kubernetes.io~empty-dir/wrapped_cfg")
        );
        assert_eq!(
            dirs.container(&uid, "app"),
            Path::new("/var/lib/nodelet/pods/u-1/containers/app")
        );
        assert_eq!(
            dirs.plugins(&uid),
            Path::new("/var/lib/nodelet/pods/u-1/plugins")
        );
    }

    #[test]
    fn plugin_names_round_trip_through_their_directory_names() {
        let escaped = escape_plugin_name("kubernetes.io/projected");
        assert_eq!(escaped, "kubernetes.io~projected");
        assert_eq!(unescape_plugin_name(&escaped), "kubernetes.io/projected");
    }
}
