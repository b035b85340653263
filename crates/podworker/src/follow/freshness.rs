//! Visible freshness (FC-8): which resourceVersion of each object a running container sees
//! through each of its configMap, secret, projected and downwardAPI volume mounts, and
//! whether that is the volume's current content; and through its environment (the objects
//! it was started with, from `env/`).
//!
//! A whole-volume mount sees the volume's current data (the `..data` swap shows inside at
//! once). A subPath mount sees the data directory its bind comes from: the one current when
//! the container started, or, for a subPath that follows (FC-3), the one of its last move.
//! The versions of each data directory are recorded as the volume manager reports them
//! ([`Versions::note`]: at each update, and from its snapshot for the data current when a
//! container is looked at); a data directory older than those kept shows no version.

use std::collections::{HashMap, VecDeque};
use std::path::{Component, Path, PathBuf};

use nodelet_core::{ObjectRef, PodUid};
use nodelet_volume_manager::plugins::ObjectVersion;

/// Data directories remembered per volume (a subPath that does not follow may keep an old
/// one as long as its container runs).
const KEPT: usize = 16;

/// What one container sees through one volume mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountFreshness {
    /// The volume's name.
    pub volume: String,
    /// The mount's path in the container.
    pub mount_path: String,
    /// A subPath mount.
    pub sub_path: bool,
    /// A subPath mount that follows updates (FC-3).
    pub follows: bool,
    /// The objects it sees, with their resourceVersions (empty when unknown).
    pub objects: Vec<ObjectVersion>,
    /// It sees the volume's current content, and no change waits to be written.
    pub current: bool,
}

/// What one running container sees through its volumes and its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerFreshness {
    /// The container's name.
    pub container: String,
    /// One entry per configMap, secret, projected or downwardAPI volume mount, in order.
    pub mounts: Vec<MountFreshness>,
    /// One entry per ConfigMap or Secret its `env` and `envFrom` read, in the order read
    /// (FC-15).
    pub env: Vec<super::env::EnvFreshness>,
}

impl ContainerFreshness {
    /// Every mount and every object its environment read is current.
    pub fn current(&self) -> bool {
        self.mounts.iter().all(|m| m.current) && self.env.iter().all(|e| e.current)
    }

    /// What this container does not see current (FC-20), each once, in order: the objects
    /// each mount that is not current shows (its volume, for a mount that names none: a
    /// downwardAPI volume reads its pod), then the objects its environment read that are not
    /// current (FC-15). Empty exactly when [`current`](Self::current).
    pub fn stale(&self) -> Vec<StaleSource> {
        let mut out = Vec::new();
        for m in self.mounts.iter().filter(|m| !m.current) {
            let sources: Vec<StaleSource> = if m.objects.is_empty() {
                vec![StaleSource::Volume(m.volume.clone())]
            } else {
                m.objects
                    .iter()
                    .map(|o| StaleSource::Object(o.object.clone()))
                    .collect()
            };
            for s in sources {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        for e in self.env.iter().filter(|e| !e.current) {
            let s = StaleSource::Object(e.object.clone());
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

/// Something a container does not see current: the pod condition names it (FC-20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleSource {
    /// A ConfigMap or Secret.
    Object(ObjectRef),
    /// A volume whose objects are not known (a downwardAPI volume, a data directory older
    /// than those remembered).
    Volume(String),
}

/// `ConfigMap ns/name`, `Secret ns/name`, `volume name`.
impl std::fmt::Display for StaleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleSource::Object(o) => write!(f, "{:?} {o}", o.kind),
            StaleSource::Volume(v) => write!(f, "volume {v}"),
        }
    }
}

/// The resourceVersion the node's object managers hold of each object a pod that follows
/// reads, as last told ([`FollowChange::object_changed`](super::FollowChange::object_changed)):
/// a mount showing another version of it is not current, also before the volume manager marks
/// the volume for a remount (FC-20).
#[derive(Debug, Default)]
pub(crate) struct Latest {
    by_pod: HashMap<PodUid, HashMap<ObjectRef, String>>,
}

impl Latest {
    /// The managers hold `resource_version` of `object`, which pod `uid` reads.
    pub(crate) fn set(&mut self, uid: &PodUid, object: &ObjectRef, resource_version: &str) {
        self.by_pod
            .entry(uid.clone())
            .or_default()
            .insert(object.clone(), resource_version.to_owned());
    }

    /// Whether `seen` (what a mount shows) is older than the latest known of its object.
    pub(crate) fn behind(&self, uid: &PodUid, seen: &ObjectVersion) -> bool {
        let latest = self.by_pod.get(uid).and_then(|o| o.get(&seen.object));
        latest.is_some_and(|l| seen.resource_version.as_deref() != Some(l.as_str()))
    }

    /// Forgets pod `uid`.
    pub(crate) fn forget(&mut self, uid: &PodUid) {
        self.by_pod.remove(uid);
    }

    /// Forgets every version (what was told may have been missed).
    pub(crate) fn clear(&mut self) {
        self.by_pod.clear();
    }
}

/// The versions of each volume's recent data directories.
#[derive(Debug, Default)]
pub(crate) struct Versions {
    by_volume: HashMap<(PodUid, String), VecDeque<DataDirVersions>>,
}

/// A data directory's name and the objects it holds.
type DataDirVersions = (String, Vec<ObjectVersion>);

impl Versions {
    /// Records that `data_dir` of `volume` holds `objects`: from the volume manager's report
    /// of the write that made it (`sure`, it replaces what was noted), or from its snapshot
    /// (a no-op when known: the snapshot trails a switch until the write's SetUp completes).
    pub(crate) fn note(
        &mut self,
        uid: &PodUid,
        volume: &str,
        data_dir: &str,
        objects: &[ObjectVersion],
        sure: bool,
    ) {
        let kept = self
            .by_volume
            .entry((uid.clone(), volume.to_owned()))
            .or_default();
        if let Some(known) = kept.iter_mut().find(|(d, _)| d == data_dir) {
            if sure {
                known.1 = objects.to_vec();
            }
            return;
        }
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((data_dir.to_owned(), objects.to_vec()));
    }

    /// The objects of `data_dir` of `volume`, if recorded.
    pub(crate) fn get(
        &self,
        uid: &PodUid,
        volume: &str,
        data_dir: &str,
    ) -> Option<&[ObjectVersion]> {
        let kept = self.by_volume.get(&(uid.clone(), volume.to_owned()))?;
        kept.iter()
            .find(|(d, _)| d == data_dir)
            .map(|(_, o)| o.as_slice())
    }

    /// Forgets pod `uid`.
    pub(crate) fn forget(&mut self, uid: &PodUid) {
        self.by_volume.retain(|(u, _), _| u != uid);
    }
}

/// The data directory `..data` names in `volume_dir`.
pub(crate) fn current_data_dir(volume_dir: &Path) -> Option<String> {
    let target = std::fs::read_link(volume_dir.join("..data")).ok()?;
    target.to_str().map(str::to_owned)
}

/// The data directory a bind `source` inside `volume_dir` comes from.
pub(crate) fn data_dir_of(volume_dir: &Path, source: &Path) -> Option<String> {
    let real = std::fs::canonicalize(volume_dir).ok()?;
    let rest = source.strip_prefix(&real).ok()?;
    match rest.components().next()? {
        Component::Normal(first) => first.to_str().map(str::to_owned),
        _ => None,
    }
}

/// `mountPath` as the container sees it (absolute).
pub(crate) fn container_path(mount_path: &str) -> PathBuf {
    crate::mounts::container_path(mount_path)
}

#[cfg(test)]
mod tests {
    use nodelet_core::{ObjectKind, ObjectRef};

    use super::*;

    fn version(rv: &str) -> Vec<ObjectVersion> {
        vec![ObjectVersion {
            object: ObjectRef::new(ObjectKind::ConfigMap, "ns", "cfg"),
            resource_version: Some(rv.to_owned()),
        }]
    }

    #[test]
    fn a_write_report_replaces_a_snapshot_guess_and_old_data_dirs_are_forgotten_in_time() {
        let uid = PodUid::new("u").unwrap();
        let mut v = Versions::default();
        v.note(&uid, "cfg", "..1", &version("10"), false);
        v.note(&uid, "cfg", "..1", &version("99"), false);
        assert_eq!(v.get(&uid, "cfg", "..1"), Some(version("10").as_slice()));
        v.note(&uid, "cfg", "..1", &version("11"), true);
        assert_eq!(v.get(&uid, "cfg", "..1"), Some(version("11").as_slice()));
        for i in 2..=KEPT {
            v.note(
                &uid,
                "cfg",
                &format!("..{i}"),
                &version(&i.to_string()),
                true,
            );
        }
        assert!(v.get(&uid, "cfg", "..1").is_some());
        v.note(&uid, "cfg", "..new", &version("1000"), true);
        assert_eq!(v.get(&uid, "cfg", "..1"), None);
        assert!(v.get(&uid, "other", "..new").is_none());
        v.forget(&uid);
        assert_eq!(v.get(&uid, "cfg", "..new"), None);
    }

    #[test]
    fn a_bind_names_its_data_dir_and_the_link_the_current_one() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("cfg");
        std::fs::create_dir_all(vol.join("..ts1")).unwrap();
        std::os::unix::fs::symlink("..ts1", vol.join("..data")).unwrap();
        let real = std::fs::canonicalize(&vol).unwrap();
        assert_eq!(
            data_dir_of(&vol, &real.join("..ts1/app.conf")).as_deref(),
            Some("..ts1")
        );
        assert_eq!(current_data_dir(&vol).as_deref(), Some("..ts1"));
        assert_eq!(data_dir_of(&vol, Path::new("/elsewhere")), None);
    }

    #[test]
    fn a_mount_is_behind_once_the_managers_hold_another_version_until_forgotten() {
        let uid = PodUid::new("u").unwrap();
        let object = ObjectRef::new(ObjectKind::ConfigMap, "ns", "cfg");
        let seen = &version("10")[0];
        let mut latest = Latest::default();
        assert!(!latest.behind(&uid, seen), "nothing told: not behind");
        latest.set(&uid, &object, "10");
        assert!(!latest.behind(&uid, seen));
        latest.set(&uid, &object, "11");
        assert!(latest.behind(&uid, seen));
        assert!(!latest.behind(&uid, &version("11")[0]));
        let other = PodUid::new("v").unwrap();
        assert!(!latest.behind(&other, seen), "another pod was told nothing");
        latest.forget(&uid);
        assert!(!latest.behind(&uid, seen));
        latest.set(&uid, &object, "12");
        latest.clear();
        assert!(!latest.behind(&uid, seen));
    }

    #[test]
    fn fc20_an_object_the_environment_read_that_is_not_current_is_named_once_after_the_mounts() {
        let cfg = ObjectRef::new(ObjectKind::ConfigMap, "ns", "cfg");
        let token = ObjectRef::new(ObjectKind::Secret, "ns", "token");
        let env = |object: &ObjectRef, current| crate::follow::env::EnvFreshness {
            object: object.clone(),
            resource_version: Some("5".into()),
            current,
        };
        let mut seen = ContainerFreshness {
            container: "app".into(),
            mounts: vec![MountFreshness {
                volume: "config".into(),
                mount_path: "/etc/app".into(),
                sub_path: false,
                follows: false,
                objects: version("10"),
                current: false,
            }],
            env: vec![env(&cfg, false), env(&token, true)],
        };
        assert!(!seen.current());
        assert_eq!(seen.stale(), [StaleSource::Object(cfg.clone())]);
        seen.mounts[0].current = true;
        assert!(!seen.current(), "the environment is still behind");
        assert_eq!(seen.stale(), [StaleSource::Object(cfg)]);
        seen.env[0].current = false;
        seen.env[1].current = false;
        assert_eq!(seen.stale().len(), 2);
        seen.env.iter_mut().for_each(|e| e.current = true);
        assert!(seen.current());
        assert!(seen.stale().is_empty());
    }
}
