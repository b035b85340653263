//! Reconstruction after an agent restart (PL-15): volume directories found on disk enter the
//! actual state as *uncertain*; desired ones are adopted by a SetUp that rewrites nothing
//! unchanged, the others are torn down once the agent says its pods are synced.
//!
//! Directory names become [`PodUid`]s here, at the edge: a `pods/<name>` directory whose name
//! is not a valid pod UID (not UTF-8) is skipped with a warning and left alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodelet_core::{PodDirs, PodUid, unescape_plugin_name};

use crate::asw::{MountState, MountedVolume};
use crate::manager::Inner;
use crate::populator::unique_volume_name;

/// A volume directory found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundVolume {
    pub(crate) pod_uid: PodUid,
    pub(crate) plugin: String,
    pub(crate) volume: String,
    pub(crate) dir: PathBuf,
}

/// Every `<root>/pods/<uid>/volumes/<escaped plugin>/<volume>` directory.
pub(crate) fn scan(root: &Path) -> Vec<FoundVolume> {
    let mut found = Vec::new();
    let layout = PodDirs::new(root);
    for pod in dirs(&layout.pods()) {
        let Some(pod_uid) = pod_uid_of(&pod) else {
            continue;
        };
        for plugin in dirs(&layout.volumes(&pod_uid)) {
            let plugin_name = unescape_plugin_name(&name_of(&plugin));
            for volume in dirs(&plugin) {
                found.push(FoundVolume {
                    pod_uid: pod_uid.clone(),
                    plugin: plugin_name.clone(),
                    volume: name_of(&volume),
                    dir: volume,
                });
            }
        }
    }
    found
}

fn dirs(path: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(path) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The UID a `pods/<uid>` directory is named after; `None`, with a warning naming the path,
/// when the name is not a valid [`PodUid`] (a name that is not UTF-8 would otherwise be
/// adopted under a lossy, different UID whose paths do not exist).
fn pod_uid_of(dir: &Path) -> Option<PodUid> {
    let uid = dir
        .file_name()
        .and_then(|n| n.to_str())
        .map(PodUid::new)
        .and_then(Result::ok);
    if uid.is_none() {
        tracing::warn!(
            path = %dir.display(),
            "skipping a pod directory whose name is not a pod UID"
        );
    }
    uid
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Inner {
    /// Adds the volume directories on disk to the actual state as uncertain and
    /// remount-required. Directories of plugins this manager does not know are left alone.
    pub(crate) async fn reconstruct(self: &Arc<Self>) {
        let root = self.config.root_dir.clone();
        let found = tokio::task::spawn_blocking(move || scan(&root))
            .await
            .unwrap_or_default();
        let mut adopted = 0usize;
        {
            let mut st = self.state.lock();
            for f in found {
                let Some(plugin) = self.registry.by_name(&f.plugin) else {
                    continue;
                };
                let unique = unique_volume_name(&f.plugin, &f.pod_uid, &f.volume);
                if st.asw.contains(&unique) || st.ops.is_pending(&unique) {
                    continue;
                }
                st.asw.insert(
                    unique,
                    MountedVolume {
                        pod_uid: f.pod_uid,
                        outer_name: f.volume,
                        plugin,
                        dir: f.dir,
                        state: MountState::Uncertain,
                        remount_required: true,
                        objects: Vec::new(),
                        refresh_at: None,
                        reconstructed: true,
                        pod: None,
                    },
                );
                adopted += 1;
            }
        }
        if adopted > 0 {
            tracing::info!(volumes = adopted, "reconstructed volumes from disk");
        }
        self.bump();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_volume_directories_by_pod_plugin_and_name() {
        let tmp = tempfile::tempdir().unwrap();
        let v = tmp
            .path()
            .join("pods/u1/volumes/kubernetes.io~configmap/cfg");
        fs::create_dir_all(&v).unwrap();
        fs::create_dir_all(tmp.path().join("pods/u2/plugins/x")).unwrap();
        fs::write(tmp.path().join("pods/u1/volumes/stray-file"), b"").unwrap();
        assert_eq!(
            scan(tmp.path()),
            vec![FoundVolume {
                pod_uid: PodUid::new("u1").unwrap(),
                plugin: "kubernetes.io/configmap".into(),
                volume: "cfg".into(),
                dir: v,
            }]
        );
        assert!(scan(&tmp.path().join("missing")).is_empty());
    }

    // A UID is checked where it enters, the disk included: a `pods/<name>` directory whose name is
    // not a valid
    // UID (here not UTF-8; `to_string_lossy` used to adopt it as `pods/\u{FFFD}/`, a directory
    // that does not exist) is skipped, its contents untouched; its valid neighbours are found.
    #[test]
    fn a_pod_directory_whose_name_is_not_a_pod_uid_is_skipped() {
        use std::os::unix::ffi::OsStrExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let bad = pods
            .join(std::ffi::OsStr::from_bytes(b"bad-\xff"))
            .join("volumes/kubernetes.io~configmap/cfg");
        fs::create_dir_all(&bad).unwrap();
        let good = pods.join("u1/volumes/kubernetes.io~configmap/cfg");
        fs::create_dir_all(&good).unwrap();
        let found = scan(tmp.path());
        assert_eq!(
            found.iter().map(|f| f.pod_uid.as_str()).collect::<Vec<_>>(),
            ["u1"]
        );
        assert_eq!(found[0].dir, good);
        assert!(bad.is_dir(), "left alone");
    }
}
