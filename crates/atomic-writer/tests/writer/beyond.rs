//! Behaviour beyond the kubelet (crate docs, "Where this crate goes beyond the kubelet").

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodelet_atomic_writer::fault::FaultPoint;
use nodelet_atomic_writer::{
    AtomicWriter, Error, FileProjection, Payload, WriteOutcome, WriterConfig, read_visible,
};

use crate::support::{assert_layout, data_dirs, data_link, payload, snapshot, text, writer};

fn written(dir: &Path, p: &Payload) -> AtomicWriter {
    let mut w = writer(dir);
    assert_eq!(w.write(p, None).unwrap(), WriteOutcome::Written);
    w
}

// ---- 1. Durability ----

#[test]
fn fsync_is_on_by_default_and_a_synced_write_has_the_same_layout() {
    assert!(WriterConfig::default().fsync);
    let dir = tempfile::tempdir().unwrap();
    let mut w = AtomicWriter::new(dir.path(), WriterConfig::default()).unwrap();
    let first = text(&[("a/b", "1"), ("c", "2")]);
    let next = text(&[("a/b", "3"), ("d", "4")]);
    assert_eq!(w.write(&first, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), &first);
    assert_eq!(w.write(&next, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), &next);
    assert_eq!(w.write(&next, None).unwrap(), WriteOutcome::Unchanged);
}

// ---- 2. Recovery ----

#[test]
fn a_stale_data_tmp_from_a_crash_is_removed_and_the_write_succeeds() {
    // Upstream quirk 7.6: every later changing write failed with "file exists".
    let dir = tempfile::tempdir().unwrap();
    let mut w = written(dir.path(), &text(&[("a", "1")]));
    symlink("..2020_01_01_00_00_00.1", dir.path().join("..data_tmp")).unwrap();
    assert_eq!(
        w.write(&text(&[("a", "2")]), None).unwrap(),
        WriteOutcome::Written
    );
    assert_layout(dir.path(), &text(&[("a", "2")]));
}

#[test]
fn a_stale_data_tmp_is_removed_even_when_the_payload_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let p = text(&[("a", "1")]);
    let mut w = written(dir.path(), &p);
    symlink("..2020_01_01_00_00_00.1", dir.path().join("..data_tmp")).unwrap();
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Unchanged);
    assert_layout(dir.path(), &p);
}

#[test]
fn orphaned_data_directories_are_removed_after_a_successful_write() {
    let dir = tempfile::tempdir().unwrap();
    let p = text(&[("a", "1")]);
    let mut w = written(dir.path(), &p);
    let orphan = dir.path().join("..2020_01_01_00_00_00.42");
    fs::create_dir_all(orphan.join("half/written")).unwrap();
    fs::write(orphan.join("half/written/file"), b"x").unwrap();
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Unchanged);
    assert_layout(dir.path(), &p);
}

#[test]
fn entries_that_merely_start_with_two_dots_are_not_mistaken_for_data_directories() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("..keep")).unwrap();
    fs::write(
        dir.path().join("..2020_01_01_00_00_00.7"),
        b"a file, not a dir",
    )
    .unwrap();
    let mut w = written(dir.path(), &text(&[("a", "1")]));
    w.write(&text(&[("a", "2")]), None).unwrap();
    assert!(dir.path().join("..keep").is_dir());
    assert!(dir.path().join("..2020_01_01_00_00_00.7").is_file());
}

#[test]
fn a_missing_visible_symlink_is_recreated_when_the_payload_is_unchanged() {
    // Upstream #121472; AW-5 step 4.
    let dir = tempfile::tempdir().unwrap();
    let p = text(&[("a", "1"), ("b/c", "2")]);
    let mut w = written(dir.path(), &p);
    fs::remove_file(dir.path().join("b")).unwrap();
    let before = data_link(dir.path());
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Unchanged);
    assert_eq!(data_link(dir.path()), before);
    assert_layout(dir.path(), &p);
}

#[test]
fn a_dangling_visible_symlink_of_ours_is_removed() {
    // State after a crash between the swap (9) and stale-link removal (11).
    let dir = tempfile::tempdir().unwrap();
    let p = text(&[("a", "1")]);
    let mut w = written(dir.path(), &p);
    symlink("..data/gone", dir.path().join("gone")).unwrap();
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Unchanged);
    assert!(fs::symlink_metadata(dir.path().join("gone")).is_err());
}

#[test]
fn a_data_link_to_a_vanished_directory_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let p = text(&[("a", "1")]);
    let mut w = written(dir.path(), &p);
    let current = dir.path().join(data_link(dir.path()).unwrap());
    fs::remove_dir_all(current).unwrap();
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), &p);
}

#[test]
fn a_failed_write_removes_its_new_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let p = text(&[("a", "1")]);
    let mut w = written(dir.path(), &p);
    let before = snapshot(dir.path());
    let mut hook = |_: &Path| Err(io::Error::other("no"));
    let err = w.write(&text(&[("a", "2")]), Some(&mut hook)).unwrap_err();
    assert!(matches!(err, Error::SetPerms { .. }), "{err}");
    assert_eq!(snapshot(dir.path()), before);
}

// ---- 3. Mode and owner changes ----

#[test]
fn a_mode_only_change_is_applied_with_a_new_data_directory() {
    // Upstream quirk 7.4 / AW-7: mode-only changes were never applied.
    let dir = tempfile::tempdir().unwrap();
    let mut w = written(dir.path(), &payload(&[("key", b"same", 0o644)]));
    let before = data_link(dir.path());
    let tightened = payload(&[("key", b"same", 0o600)]);
    assert_eq!(w.write(&tightened, None).unwrap(), WriteOutcome::Written);
    assert_ne!(data_link(dir.path()), before);
    assert_layout(dir.path(), &tightened);
}

#[test]
fn an_owner_change_is_applied_and_chown_uses_the_given_uid() {
    let dir = tempfile::tempdir().unwrap();
    let uid = fs::metadata(dir.path()).unwrap().uid();
    let mut w = written(dir.path(), &text(&[("key", "v")]));
    let owned: Payload = [(
        "key",
        FileProjection::new(b"v".to_vec(), 0o644).with_fs_user(uid),
    )]
    .into_iter()
    .collect();
    assert_eq!(w.write(&owned, None).unwrap(), WriteOutcome::Written);
    assert_eq!(fs::metadata(dir.path().join("key")).unwrap().uid(), uid);
    assert_eq!(w.write(&owned, None).unwrap(), WriteOutcome::Unchanged);
}

#[test]
fn modes_changed_by_set_perms_do_not_count_as_a_change() {
    // An fsGroup-style hook adds group read to every file (PL-11); without the record of the
    // requested modes the next identical write would see 0640 != 0600 and rewrite on every
    // sync.
    let dir = tempfile::tempdir().unwrap();
    let p = payload(&[("tls/key", b"k", 0o600), ("ca", b"c", 0o644)]);
    let mut add_group_read = |data_dir: &Path| -> io::Result<()> {
        for path in [data_dir.join("tls/key"), data_dir.join("ca")] {
            let mode = fs::metadata(&path)?.permissions().mode();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode | 0o040))?;
        }
        Ok(())
    };
    let mut w = writer(dir.path());
    assert_eq!(
        w.write(&p, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(read_visible(dir.path()).unwrap()["tls/key"].1, 0o640);
    assert_eq!(
        w.write(&p, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Unchanged
    );
    // A real mode change is still seen.
    let loosened = payload(&[("tls/key", b"k", 0o644), ("ca", b"c", 0o644)]);
    assert_eq!(
        w.write(&loosened, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Written
    );
}

#[test]
fn a_directory_written_without_a_manifest_is_compared_by_the_modes_on_disk() {
    // A volume laid out by the kubelet (no manifest) is taken over without a rewrite.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("..2024_01_31_12_00_05.84130917");
    fs::create_dir_all(data.join("user")).unwrap();
    fs::write(data.join("podName"), b"web-0").unwrap();
    fs::write(data.join("user/labels"), b"app=web").unwrap();
    fs::set_permissions(data.join("podName"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(data.join("user/labels"), fs::Permissions::from_mode(0o400)).unwrap();
    symlink("..2024_01_31_12_00_05.84130917", dir.path().join("..data")).unwrap();
    symlink("..data/podName", dir.path().join("podName")).unwrap();
    symlink("..data/user", dir.path().join("user")).unwrap();
    let p = payload(&[
        ("podName", b"web-0", 0o644),
        ("user/labels", b"app=web", 0o400),
    ]);
    let mut w = writer(dir.path());
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Unchanged);
    let changed = payload(&[
        ("podName", b"web-0", 0o644),
        ("user/labels", b"app=web", 0o444),
    ]);
    assert_eq!(w.write(&changed, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), &changed);
}

#[test]
fn a_directory_of_an_older_nodelet_is_adopted_and_its_manifest_removed_on_the_next_write() {
    // Containers list the data directory; older versions kept `..nodelet_manifest` in it.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("..2024_01_31_12_00_05.84130917");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("a"), b"1").unwrap();
    fs::set_permissions(data.join("a"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::write(
        data.join("..nodelet_manifest"),
        b"nodelet-atomic-writer manifest 1\n600 - 1 a\n",
    )
    .unwrap();
    symlink("..2024_01_31_12_00_05.84130917", dir.path().join("..data")).unwrap();
    symlink("..data/a", dir.path().join("a")).unwrap();
    let p = payload(&[("a", b"1", 0o600)]);
    let mut w = writer(dir.path());
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), &p);
    assert_eq!(w.write(&p, None).unwrap(), WriteOutcome::Unchanged);
}

#[test]
fn the_data_directory_holds_exactly_the_payload_and_mode_changes_are_still_seen() {
    // A container listing `..data/` sees its ConfigMap's keys and nothing
    // else, while mode and owner changes are detected and fsGroup-style hook bits are not.
    let dir = tempfile::tempdir().unwrap();
    let p = payload(&[("a", b"1", 0o600), ("sub/b", b"2", 0o400)]);
    let mut add_group_read = |data_dir: &Path| -> io::Result<()> {
        for path in [data_dir.join("a"), data_dir.join("sub/b")] {
            let mode = fs::metadata(&path)?.permissions().mode();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode | 0o040))?;
        }
        Ok(())
    };
    let mut w = writer(dir.path());
    assert_eq!(
        w.write(&p, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Written
    );
    let listing = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir.join("..data"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(listing(dir.path()), ["a", "sub"]);
    assert_eq!(
        w.write(&p, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Unchanged
    );
    // 0600 + hook = 0640 on disk; asking for 0640 is still a change of the requested mode.
    let asked = payload(&[("a", b"1", 0o640), ("sub/b", b"2", 0o400)]);
    assert_eq!(
        w.write(&asked, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(listing(dir.path()), ["a", "sub"]);
    let uid = fs::metadata(dir.path()).unwrap().uid();
    let owned: Payload = [
        (
            "a",
            FileProjection::new(b"1".to_vec(), 0o640).with_fs_user(uid),
        ),
        ("sub/b", FileProjection::new(b"2".to_vec(), 0o400)),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        w.write(&owned, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Written
    );
    assert_eq!(
        w.write(&owned, Some(&mut add_group_read)).unwrap(),
        WriteOutcome::Unchanged
    );
}

#[test]
fn a_file_replacing_a_directory_is_a_change_not_an_error() {
    // Upstream quirk 7.7: reading the old directory as a file failed the write.
    let dir = tempfile::tempdir().unwrap();
    let mut w = written(dir.path(), &text(&[("a/b", "nested"), ("z", "1")]));
    let flat = text(&[("a", "flat"), ("z", "1")]);
    assert_eq!(w.write(&flat, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), &flat);
    let nested = text(&[("a/b", "nested again"), ("z", "1")]);
    assert_eq!(w.write(&nested, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), &nested);
}

// ---- 4. Hostile target contents ----

fn assert_refused(dir: &Path, p: &Payload, check: impl Fn(&Error) -> bool) {
    let before = snapshot(dir);
    let err = writer(dir).write(p, None).unwrap_err();
    assert!(check(&err), "unexpected error: {err}");
    assert_eq!(snapshot(dir), before, "nothing changed");
}

#[test]
fn a_visible_name_occupied_by_a_regular_file_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("config"), b"precious").unwrap();
    assert_refused(
        dir.path(),
        &text(&[("config", "new")]),
        |e| matches!(e, Error::VisibleNameOccupied { path, found } if path.ends_with("config") && found == "a regular file"),
    );
}

#[test]
fn a_visible_name_occupied_by_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    assert_refused(
        dir.path(),
        &text(&[("sub/file", "x")]),
        |e| matches!(e, Error::VisibleNameOccupied { found, .. } if found == "a directory"),
    );
}

#[test]
fn a_visible_name_that_is_a_foreign_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    symlink("/etc", dir.path().join("etc")).unwrap();
    let err_text = {
        let before = snapshot(dir.path());
        let err = writer(dir.path())
            .write(&text(&[("etc/passwd", "x")]), None)
            .unwrap_err();
        assert_eq!(snapshot(dir.path()), before);
        err.to_string()
    };
    assert!(
        err_text.ends_with(
            "exists and is not a symlink into ..data (found a symlink to /etc); refusing to write"
        ),
        "{err_text}"
    );
}

#[test]
fn a_data_link_that_is_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("..data")).unwrap();
    fs::write(dir.path().join("..data/file"), b"x").unwrap();
    assert_refused(dir.path(), &text(&[("a", "1")]), |e| {
        matches!(e, Error::ForeignData { .. })
    });
}

#[test]
fn a_data_link_pointing_outside_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    symlink("/tmp", dir.path().join("..data")).unwrap();
    assert_refused(
        dir.path(),
        &text(&[("a", "1")]),
        |e| matches!(e, Error::ForeignData { found, .. } if found == "a symlink to /tmp"),
    );
}

#[test]
fn a_data_link_to_a_data_directory_name_that_is_a_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    symlink("/etc", dir.path().join("..2024_01_01_00_00_00.1")).unwrap();
    symlink("..2024_01_01_00_00_00.1", dir.path().join("..data")).unwrap();
    assert_refused(
        dir.path(),
        &text(&[("passwd", "x")]),
        |e| matches!(e, Error::ForeignData { found, .. } if found.ends_with("which is a symlink to /etc")),
    );
}

#[test]
fn a_data_tmp_that_is_not_a_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("..data_tmp")).unwrap();
    assert_refused(dir.path(), &text(&[("a", "1")]), |e| {
        matches!(e, Error::ForeignData { .. })
    });
}

#[test]
fn a_stale_name_replaced_by_the_user_is_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = written(dir.path(), &text(&[("a", "1"), ("b", "2")]));
    fs::remove_file(dir.path().join("b")).unwrap();
    fs::write(dir.path().join("b"), b"mine").unwrap();
    w.write(&text(&[("a", "1")]), None).unwrap();
    assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"mine");
}

#[test]
fn nested_mountpoint_directories_outside_the_payload_are_kept() {
    // PL-12: real directories created next to the visible names survive every write.
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("nested-mount")).unwrap();
    let mut w = written(dir.path(), &text(&[("a", "1")]));
    w.write(&Payload::new(), None).unwrap();
    assert!(dir.path().join("nested-mount").is_dir());
}

// ---- 5. Stricter validation ----

#[test]
fn a_path_conflict_is_refused_before_the_disk_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let err = writer(dir.path())
        .write(&text(&[("a", "1"), ("a/b", "2")]), None)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid payload: a is a file, but a/b needs it to be a directory"
    );
    assert!(err.is_invalid_payload());
    assert!(snapshot(dir.path()).is_empty());
}

#[test]
fn validation_failure_on_a_populated_directory_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = written(dir.path(), &text(&[("a", "1")]));
    let before = snapshot(dir.path());
    let err = w
        .write(&text(&[("b", "2"), ("/abs", "3")]), None)
        .unwrap_err();
    assert_eq!(err.to_string(), "invalid path: must be relative path: /abs");
    assert_eq!(snapshot(dir.path()), before);
}

// ---- 7. set_perms ----

#[test]
fn set_perms_gets_the_new_data_directory_path_before_it_becomes_visible() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut hook = |path: &Path| -> io::Result<()> {
        assert!(
            path.join("a").is_file(),
            "files are written before the hook"
        );
        assert!(
            fs::symlink_metadata(path.parent().unwrap().join("a")).is_err(),
            "not yet visible"
        );
        seen.push(path.to_path_buf());
        Ok(())
    };
    let mut w = writer(dir.path());
    w.write(&text(&[("a", "1")]), Some(&mut hook)).unwrap();
    assert_eq!(
        w.write(&text(&[("a", "1")]), Some(&mut hook)).unwrap(),
        WriteOutcome::Unchanged
    );
    let names = data_dirs(dir.path());
    assert_eq!(
        seen,
        [dir.path().join(&names[0])],
        "called once, not for the unchanged write"
    );
}

#[test]
fn io_errors_can_be_classified_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let mut hook = |_: &Path| Err(io::Error::from(io::ErrorKind::PermissionDenied));
    let err = writer(dir.path())
        .write(&text(&[("a", "1")]), Some(&mut hook))
        .unwrap_err();
    assert_eq!(
        err.io_error().map(io::Error::kind),
        Some(io::ErrorKind::PermissionDenied)
    );
    assert!(err.to_string().starts_with("set permissions on "), "{err}");
}

// ---- 8. Error texts name the payload path ----

/// The error of a write of `p` into `dir` whose step `point` fails (or whose `set_perms` hook
/// fails, with `point` = `None`).
fn failing_write(dir: &Path, p: &Payload, point: Option<FaultPoint>) -> Error {
    let hook = Arc::new(move |at| {
        if Some(at) == point {
            Err(io::Error::other("injected"))
        } else {
            Ok(())
        }
    });
    let config = WriterConfig::default().fsync(true).fault_hook(hook);
    let mut w = AtomicWriter::new(dir, config).unwrap();
    let mut failing_hook = |_: &Path| -> io::Result<()> { Err(io::Error::other("hook")) };
    let set_perms: Option<nodelet_atomic_writer::SetPerms<'_>> = match point {
        None => Some(&mut failing_hook),
        Some(_) => None,
    };
    w.write(p, set_perms).unwrap_err()
}

// Repeated failures must aggregate into one event: an error embedding the random data-directory
// name made every retry's
// FailedMount message new, so events never aggregated. Errors name the payload path instead
// and repeat identically.
#[test]
fn errors_name_the_payload_path_never_the_timestamped_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let p = text(&[("conf/app.yaml", "x")]);
    for point in [
        Some(FaultPoint::CreateDataDir),
        Some(FaultPoint::WriteFile),
        Some(FaultPoint::SyncDataDir),
        None,
    ] {
        let first = failing_write(dir.path(), &p, point).to_string();
        let again = failing_write(dir.path(), &p, point).to_string();
        assert!(!first.contains("..20"), "{point:?}: {first}");
        assert!(
            first.contains(&dir.path().display().to_string()),
            "{point:?}: {first}"
        );
        assert_eq!(first, again, "{point:?}");
    }
    let write = failing_write(dir.path(), &p, Some(FaultPoint::WriteFile)).to_string();
    assert_eq!(
        write,
        format!(
            "write file {}: injected",
            dir.path().join("conf/app.yaml").display()
        )
    );
}

#[test]
fn with_an_fs_user_the_visible_symlink_is_owned_by_it_too() {
    // Kubernetes 1.36 (PR #137332): the file in the timestamped directory and the user-visible
    // symlink are both given the fs_user. A uid other than ours needs root (CAP_CHOWN); without
    // it the write must fail naming the chown, never succeed half-owned.
    let dir = tempfile::tempdir().unwrap();
    let uid = 4242;
    let owned: Payload = [
        (
            "key",
            FileProjection::new(b"v".to_vec(), 0o644).with_fs_user(uid),
        ),
        ("plain", FileProjection::new(b"p".to_vec(), 0o644)),
    ]
    .into_iter()
    .collect();
    // Our uid: the owner of the directory we just created.
    let me = fs::metadata(dir.path()).unwrap().uid();
    let mut w = AtomicWriter::new(dir.path(), WriterConfig::default()).unwrap();
    let result = w.write(&owned, None);
    if me == 0 {
        assert_eq!(result.unwrap(), WriteOutcome::Written);
        let link = fs::symlink_metadata(dir.path().join("key")).unwrap();
        assert!(link.file_type().is_symlink());
        assert_eq!(link.uid(), uid, "the visible symlink");
        assert_eq!(
            fs::metadata(dir.path().join("key")).unwrap().uid(),
            uid,
            "the file"
        );
        assert_eq!(
            fs::symlink_metadata(dir.path().join("plain"))
                .unwrap()
                .uid(),
            me
        );
        assert_eq!(w.write(&owned, None).unwrap(), WriteOutcome::Unchanged);
    } else {
        let err = result.unwrap_err().to_string();
        assert!(
            err.starts_with("chown ") && err.contains("to uid 4242"),
            "{err}"
        );
    }
}
