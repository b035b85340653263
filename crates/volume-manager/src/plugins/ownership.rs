//! fsGroup ownership of a volume directory (PL-11) and nested mountpoints (PL-12).

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

/// Bits added to every non-symlink entry of a read-only volume (PL-11).
const READ_ONLY_BITS: u32 = 0o440;
/// Bits added to every non-symlink entry of a writable volume (emptyDir, PL-31).
const READ_WRITE_BITS: u32 = 0o660;
/// Bits added to directories in addition: setgid and group/owner search.
const DIR_BITS: u32 = 0o2000 | 0o110;

/// PL-11: give every entry under `dir` (including `dir`) the group `gid`, add `0440` to files
/// and directories and setgid + `0110` to directories. Depth-first, children before parents,
/// symlinks not followed (their own group is changed). Individual failures do not stop the
/// walk; the number of entries that could not be changed is returned (the kubelet only logs
/// them).
///
/// Resulting modes: file `0644`→`0644`, `0400`→`0440`, `0600`→`0640`; data directory
/// `0755`→`2755`; volume root `0777`→`2777`.
pub fn set_volume_ownership(dir: &Path, gid: u32) -> usize {
    set_ownership(dir, gid, READ_ONLY_BITS)
}

/// PL-31: [`set_volume_ownership`] for a writable volume (emptyDir): files and directories
/// gain `0660` instead of `0440` (directories still setgid + `0110`), so an emptyDir root
/// `0777` becomes `2777`, a tmpfs root `1777` becomes `3777`.
pub fn set_writable_volume_ownership(dir: &Path, gid: u32) -> usize {
    set_ownership(dir, gid, READ_WRITE_BITS)
}

fn set_ownership(dir: &Path, gid: u32, bits: u32) -> usize {
    let mut failures = 0;
    walk(dir, gid, bits, &mut failures);
    if failures > 0 {
        tracing::warn!(
            dir = %dir.display(),
            gid,
            failures,
            "could not apply fsGroup ownership to every entry"
        );
    }
    failures
}

fn walk(path: &Path, gid: u32, bits: u32, failures: &mut usize) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        *failures += 1;
        return;
    };
    if meta.is_dir() {
        match fs::read_dir(path) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    walk(&entry.path(), gid, bits, failures);
                }
            }
            Err(_) => *failures += 1,
        }
    }
    // An entry that has the group and the bits already is left alone: no syscall, and its
    // inode is not dirtied (an update walks the old data and the symlinks again).
    let chowned = meta.gid() != gid;
    if chowned && lchown(path, None, Some(gid)).is_err() {
        *failures += 1;
    }
    if meta.file_type().is_symlink() {
        return;
    }
    let current = meta.permissions().mode() & 0o7777;
    let mut mode = current | bits;
    if meta.is_dir() {
        mode |= DIR_BITS;
    }
    // After a `chown` the mode is set again: it may have cleared set-id bits.
    if (chowned || mode != current)
        && fs::set_permissions(path, fs::Permissions::from_mode(mode)).is_err()
    {
        *failures += 1;
    }
}

/// PL-12: the paths, relative to the volume directory, at which other volumes are mounted
/// inside this one by some container (init, regular, ephemeral). Mounts nested below an
/// already chosen nested mount are skipped.
pub(crate) fn nested_mountpoints(pod: &Pod, volume_name: &str) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|e| e.volume_mounts.as_deref().unwrap_or_default());
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c: &Container| c.volume_mounts.as_deref().unwrap_or_default())
        .chain(ephemeral);
    for mounts in containers {
        let mine = mounts.iter().filter(|m| m.name == volume_name);
        for me in mine {
            let parent = format!("{}/", me.mount_path.trim_end_matches('/'));
            let mut nested: Vec<&str> = mounts
                .iter()
                .map(|m| m.mount_path.as_str())
                .filter(|p| p.starts_with(&parent) && p.len() > parent.len())
                .collect();
            nested.sort_unstable();
            let mut last: Option<String> = None;
            for path in nested {
                if last.as_deref().is_some_and(|l| path.starts_with(l)) {
                    continue;
                }
                last = Some(format!("{}/", path.trim_end_matches('/')));
                let relative = path[parent.len()..].trim_end_matches('/').to_owned();
                if !out.contains(&relative) {
                    out.push(relative);
                }
            }
        }
    }
    out
}

/// Creates the nested mountpoint directories (mode 0755) inside `dir`.
///
/// # Errors
/// The first failure; a relative path leaving the volume (`..`) is `InvalidInput`.
pub(crate) fn make_nested_mountpoints(dir: &Path, nested: &[String]) -> io::Result<()> {
    for relative in nested {
        let rel = Path::new(relative);
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("nested mountpoint {relative:?} leaves the volume directory"),
            ));
        }
        let target: PathBuf = dir.join(rel);
        fs::create_dir_all(&target)?;
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    // PL-11 with the current gid (no privileges needed), independent of the umask.
    #[test]
    fn fs_group_adds_group_read_and_setgid_with_the_current_gid() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("vol");
        let data = root.join("..data_dir");
        fs::create_dir_all(&data).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o755)).unwrap();
        for (name, m) in [("a", 0o644), ("b", 0o400), ("c", 0o600)] {
            fs::write(data.join(name), name).unwrap();
            fs::set_permissions(data.join(name), fs::Permissions::from_mode(m)).unwrap();
        }
        std::os::unix::fs::symlink("..data_dir/a", root.join("a")).unwrap();
        let gid = nix::unistd::getegid().as_raw();
        assert_eq!(set_volume_ownership(&root, gid), 0);
        assert_eq!(mode(&data.join("a")), 0o644);
        assert_eq!(mode(&data.join("b")), 0o440);
        assert_eq!(mode(&data.join("c")), 0o640);
        assert_eq!(mode(&data), 0o2755);
        assert_eq!(mode(&root), 0o2777);
        assert_eq!(fs::symlink_metadata(root.join("a")).unwrap().gid(), gid);

        // Applied again, it changes nothing, not even an inode's ctime.
        let ctimes = |paths: &[PathBuf]| -> Vec<(i64, i64)> {
            paths
                .iter()
                .map(|p| fs::symlink_metadata(p).unwrap())
                .map(|m| (m.ctime(), m.ctime_nsec()))
                .collect()
        };
        let all = [root.clone(), data.clone(), data.join("b"), root.join("a")];
        let before = ctimes(&all);
        // Long enough for a change to show in the coarse kernel clock behind ctime.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(set_volume_ownership(&root, gid), 0);
        assert_eq!(ctimes(&all), before);
    }

    /// Pod `p` whose one container `c` has the volume mounts `mounts`.
    fn pod(mounts: serde_json::Value) -> Pod {
        nodelet_testutil::PodBuilder::new("", "p")
            .container(serde_json::json!({"name": "c", "volumeMounts": mounts}))
            .build()
    }

    // PL-12: nested mounts below an already chosen nested mount are skipped.
    #[test]
    fn nested_mountpoints_are_found_below_the_volume_mount_path() {
        let p = pod(serde_json::json!([
            {"name": "cfg", "mountPath": "/etc/app"},
            {"name": "other", "mountPath": "/etc/app/sub"},
            {"name": "deeper", "mountPath": "/etc/app/sub/deeper"},
            {"name": "x", "mountPath": "/etc/application"},
            {"name": "y", "mountPath": "/etc/app/z/"},
        ]));
        assert_eq!(nested_mountpoints(&p, "cfg"), vec!["sub", "z"]);
        assert!(nested_mountpoints(&p, "x").is_empty());
    }

    #[test]
    fn nested_mountpoint_directories_are_created_and_escapes_refused() {
        let tmp = tempfile::tempdir().unwrap();
        make_nested_mountpoints(tmp.path(), &["a/b".into()]).unwrap();
        assert_eq!(mode(&tmp.path().join("a/b")), 0o755);
        let err = make_nested_mountpoints(tmp.path(), &["../x".into()]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
