//! Which subPath binds of a running container an update of one volume replaces (FC-3, FC-4),
//! and with what.
//!
//! A subPath of a configMap, secret, projected or downwardAPI volume resolves (the kubelet's
//! `PrepareSafeSubpath`, at the container's start) into the data directory the atomic writer
//! had current then: `<volume>/..<timestamp>/<inner>`. After a `..data` swap the same item is
//! `<volume>/..data/<inner>`, resolved with the same checks: that is the new source. A bind
//! whose source is not inside a data directory of the volume (a directory the kubelet created
//! for a missing subPath, the volume itself) is left alone.
//!
//! ```text
//! <volume>/
//!     ..2026_12_05_08_00_00.1/app.conf   the source the container started with (removed by the swap)
//!     ..2026_12_05_08_01_00.2/app.conf   the new source
//!     ..data -> ..2026_12_05_08_01_00.2
//!     app.conf -> ..data/app.conf
//! ```

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use nodelet_runtime::Rebind;
use nodelet_runtime::spec::MountSpec;

use crate::mounts::resolve_within;

/// Why one bind keeps its old content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Kept {
    /// The item is gone from the new payload (a key removed).
    #[error("{inner} is no longer in the volume: the old content stays")]
    Gone {
        /// The item's path inside the payload.
        inner: String,
    },
    /// The item changed between a file and a directory.
    #[error("{inner} changed between a file and a directory: the old content stays")]
    TypeChanged {
        /// The item's path inside the payload.
        inner: String,
    },
}

/// One bind to replace, or kept with why, by the mount's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The binds to replace.
    pub(crate) rebinds: Vec<Rebind>,
    /// The binds kept (target, why).
    pub(crate) kept: Vec<(PathBuf, Kept)>,
}

/// The plan for `mounts` (a running container's launch binds) after an update of the volume
/// at `volume_dir`. `bound` is what a replaced bind shows now (target → source), for binds
/// replaced before.
pub(crate) fn plan(
    volume_dir: &Path,
    mounts: &[MountSpec],
    bound: &HashMap<PathBuf, PathBuf>,
) -> Plan {
    let mut out = Plan {
        rebinds: Vec::new(),
        kept: Vec::new(),
    };
    let Ok(real_volume) = std::fs::canonicalize(volume_dir) else {
        return out;
    };
    for m in mounts {
        let current = bound.get(&m.target).unwrap_or(&m.source);
        let Some(inner) = data_relative(&real_volume, current) else {
            continue;
        };
        let text = inner.display().to_string();
        let candidate = real_volume.join("..data").join(&inner);
        let Ok(new) = resolve_within(&candidate, &real_volume) else {
            out.kept
                .push((m.target.clone(), Kept::Gone { inner: text }));
            continue;
        };
        if &new == current {
            continue;
        }
        // The old source may be gone already; a bind keeps its type, so compare with the
        // container's view only when the old one is still there.
        let old_is_dir = std::fs::metadata(current).map(|m| m.is_dir()).ok();
        let new_is_dir = std::fs::metadata(&new).map(|m| m.is_dir()).unwrap_or(false);
        if old_is_dir.is_some_and(|d| d != new_is_dir) {
            out.kept
                .push((m.target.clone(), Kept::TypeChanged { inner: text }));
            continue;
        }
        out.rebinds.push(Rebind {
            source: new,
            target: m.target.clone(),
            read_only: m.read_only,
        });
    }
    out
}

/// `<inner>` when `source` is `<real_volume>/..<timestamp>/<inner>` (a data directory of the
/// atomic writer, not `..data` itself).
fn data_relative(real_volume: &Path, source: &Path) -> Option<PathBuf> {
    let rest = source.strip_prefix(real_volume).ok()?;
    let mut parts = rest.components();
    let Some(Component::Normal(first)) = parts.next() else {
        return None;
    };
    let first = first.to_str()?;
    if !first.starts_with("..") || first == "..data" || first == "..data_tmp" {
        return None;
    }
    let inner: PathBuf = parts.collect();
    (inner.as_os_str() != OsStr::new("..")).then_some(inner)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    /// A volume laid out as the atomic writer does, data dir `ts` current.
    fn volume(dir: &Path, ts: &str, files: &[(&str, &str)]) {
        let data = dir.join(ts);
        for (path, content) in files {
            let p = data.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
        }
        let _ = fs::remove_file(dir.join("..data_tmp"));
        symlink(ts, dir.join("..data_tmp")).unwrap();
        fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        for (path, _) in files {
            let top = Path::new(path).components().next().unwrap();
            let link = dir.join(top);
            if fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(top), link).unwrap();
            }
        }
    }

    fn mount(source: PathBuf, target: &str) -> MountSpec {
        MountSpec {
            source,
            target: PathBuf::from(target),
            read_only: true,
        }
    }

    #[test]
    fn a_sub_path_file_moves_to_the_new_data_dir_after_a_swap() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("cfg");
        fs::create_dir(&vol).unwrap();
        volume(&vol, "..ts1", &[("app.conf", "a"), ("conf/x.ini", "x")]);
        let real = fs::canonicalize(&vol).unwrap();
        let mounts = [
            mount(real.join("..ts1/app.conf"), "/etc/app.conf"),
            mount(real.join("..ts1/conf"), "/etc/conf"),
            mount(real.clone(), "/cfg"),
        ];
        volume(&vol, "..ts2", &[("app.conf", "b"), ("conf/x.ini", "y")]);
        fs::remove_dir_all(vol.join("..ts1")).unwrap();
        let plan = plan(&vol, &mounts, &HashMap::new());
        assert_eq!(plan.kept, []);
        let got: Vec<(PathBuf, PathBuf)> = plan
            .rebinds
            .into_iter()
            .map(|r| (r.target, r.source))
            .collect();
        assert_eq!(
            got,
            [
                ("/etc/app.conf".into(), real.join("..ts2/app.conf")),
                ("/etc/conf".into(), real.join("..ts2/conf")),
            ]
        );
    }

    #[test]
    fn a_bind_replaced_before_is_followed_from_where_it_is_now() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("cfg");
        fs::create_dir(&vol).unwrap();
        volume(&vol, "..ts1", &[("k", "1")]);
        let real = fs::canonicalize(&vol).unwrap();
        let mounts = [mount(real.join("..ts1/k"), "/k")];
        volume(&vol, "..ts2", &[("k", "2")]);
        let bound = HashMap::from([(PathBuf::from("/k"), real.join("..ts2/k"))]);
        assert_eq!(plan(&vol, &mounts, &bound).rebinds, []);
        volume(&vol, "..ts3", &[("k", "3")]);
        let plan = plan(&vol, &mounts, &bound);
        assert_eq!(plan.rebinds[0].source, real.join("..ts3/k"));
    }

    #[test]
    fn a_removed_key_keeps_the_old_bind_and_says_why() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("cfg");
        fs::create_dir(&vol).unwrap();
        volume(&vol, "..ts1", &[("k", "1"), ("other", "o")]);
        let real = fs::canonicalize(&vol).unwrap();
        let mounts = [mount(real.join("..ts1/k"), "/k")];
        volume(&vol, "..ts2", &[("other", "p")]);
        let plan = plan(&vol, &mounts, &HashMap::new());
        assert_eq!(plan.rebinds, []);
        assert_eq!(
            plan.kept,
            [(PathBuf::from("/k"), Kept::Gone { inner: "k".into() })]
        );
        assert_eq!(
            plan.kept[0].1.to_string(),
            "k is no longer in the volume: the old content stays"
        );
    }

    #[test]
    fn binds_outside_a_data_dir_are_not_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("cfg");
        fs::create_dir_all(vol.join("made-by-kubelet")).unwrap();
        volume(&vol, "..ts1", &[("k", "1")]);
        let real = fs::canonicalize(&vol).unwrap();
        let elsewhere = fs::canonicalize(tmp.path()).unwrap();
        let mounts = [
            mount(real.join("made-by-kubelet"), "/a"),
            mount(elsewhere, "/b"),
            mount(real.join("..data"), "/c"),
        ];
        volume(&vol, "..ts2", &[("k", "2")]);
        assert_eq!(plan(&vol, &mounts, &HashMap::new()).rebinds, []);
    }
}
