//! Inodes and file-system calls per write, pinned: a regression in what a volume costs fails
//! here. Counted in-process by the hidden `probe` seam (one thread per test, so the counts are
//! this test's own); the README's table shows the same numbers with `strace`'s view beside.

use nodelet_atomic_writer::{AtomicWriter, Payload, WriterConfig, probe};

use crate::support::{payload, text};

/// The counts of one write of `p` into `dir`.
fn counted(writer: &mut AtomicWriter, p: &Payload) -> String {
    probe::take();
    writer.write(p, None).unwrap();
    probe::take().to_string()
}

fn writer(dir: &std::path::Path, fsync: bool) -> AtomicWriter {
    AtomicWriter::new(dir, WriterConfig::default().fsync(fsync)).unwrap()
}

/// `n` top-level keys of 8 bytes, all changing with `version`.
fn keys(n: usize, version: &str) -> Payload {
    let entries: Vec<(String, String)> = (0..n)
        .map(|i| (format!("key{i}"), format!("{version}-{i:06}")))
        .collect();
    let refs: Vec<(&str, &str)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    text(&refs)
}

#[test]
fn a_first_write_allocates_exactly_the_layout_two_inodes_per_key_and_two_more() {
    for n in [0, 1, 3, 10] {
        let dir = tempfile::tempdir().unwrap();
        probe::take();
        writer(dir.path(), true).write(&keys(n, "a"), None).unwrap();
        // The data directory and `..data`, then per key its file and its visible symlink.
        let counts = probe::take();
        assert_eq!(counts.inodes() as usize, 2 + 2 * n, "{n} keys: {counts}");
    }
}

#[test]
fn a_synced_first_write_of_one_key() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        counted(&mut writer(dir.path(), true), &keys(1, "a")),
        "inodes 4: creates 1, mkdirs 1, symlinks 2, fsyncs 2, chmods 2, writes 1, read_dirs 1, \
         opens 1"
    );
}

#[test]
fn a_synced_first_write_of_three_keys() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        counted(&mut writer(dir.path(), true), &keys(3, "a")),
        "inodes 8: creates 3, mkdirs 1, symlinks 4, fsyncs 4, chmods 4, writes 3, read_dirs 1, \
         opens 1"
    );
}

// A writer for a directory its caller has just created lists nothing on its first write and
// writes the same layout; its next write lists the directory as any other.
#[test]
fn a_first_write_into_a_new_directory_lists_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("volume");
    std::fs::create_dir(&target).unwrap();
    let mut writer = AtomicWriter::for_new_dir(&target, WriterConfig::default());
    assert_eq!(
        counted(&mut writer, &keys(3, "a")),
        "inodes 8: creates 3, mkdirs 1, symlinks 4, fsyncs 4, chmods 4, writes 3, opens 1"
    );
    let seen = nodelet_atomic_writer::read_visible(&target).unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen["key1"].0, b"a-000001");
    let again = counted(&mut writer, &keys(3, "a"));
    assert_eq!(
        again, "inodes 0: stats 3, readlinks 4, read_dirs 2, opens 3, reads 3",
        "the target and the data directory listed"
    );
}

#[test]
fn a_first_write_on_tmpfs_without_fsync() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        counted(&mut writer(dir.path(), false), &keys(3, "a")),
        "inodes 8: creates 3, mkdirs 1, symlinks 4, chmods 4, writes 3, read_dirs 1"
    );
}

/// A projected volume of three sources, one of them in a subdirectory.
fn projected(version: &[u8]) -> Payload {
    payload(&[
        ("token", version, 0o644),
        ("certs/ca.crt", version, 0o644),
        ("namespace", b"default", 0o644),
    ])
}

#[test]
fn a_synced_first_write_of_a_projected_volume_with_a_subdirectory() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        counted(&mut writer(dir.path(), true), &projected(b"a")),
        "inodes 9: creates 3, mkdirs 2, symlinks 4, fsyncs 5, chmods 5, writes 3, read_dirs 1, \
         opens 2"
    );
}

#[test]
fn a_synced_update_of_three_keys_rewrites_them_and_removes_the_old_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), true);
    w.write(&keys(3, "a"), None).unwrap();
    // Change detection stops at the first differing file (stat, open, read); `..data_tmp` is
    // the one new symlink; the old directory goes with one `remove_dir_all`.
    assert_eq!(
        counted(&mut w, &keys(3, "b")),
        "inodes 5: creates 3, mkdirs 1, symlinks 1, renames 1, fsyncs 6, remove_trees 1, \
         chmods 4, writes 3, stats 1, readlinks 4, read_dirs 2, opens 4, reads 1"
    );
}

#[test]
fn an_update_that_adds_and_removes_names_syncs_the_target_before_removing_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), true);
    w.write(&text(&[("a", "1"), ("b", "2")]), None).unwrap();
    // `b` goes, `c` comes: the target is synced before the rename, before `b` is unlinked
    // (the switch must be durable first) and once more before the old data is removed.
    assert_eq!(
        counted(&mut w, &text(&[("a", "1"), ("c", "3")])),
        "inodes 5: creates 2, mkdirs 1, symlinks 2, renames 1, fsyncs 6, unlinks 1, \
         remove_trees 1, chmods 3, writes 2, readlinks 3, read_dirs 2, opens 4"
    );
}

#[test]
fn an_unchanged_write_reads_each_file_once_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), true);
    w.write(&keys(3, "a"), None).unwrap();
    assert_eq!(
        counted(&mut w, &keys(3, "a")),
        "inodes 0: stats 3, readlinks 4, read_dirs 2, opens 3, reads 3"
    );
}

#[test]
fn the_projected_update_and_unchanged_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), true);
    w.write(&projected(b"a"), None).unwrap();
    assert_eq!(
        counted(&mut w, &projected(b"b")),
        "inodes 6: creates 3, mkdirs 2, symlinks 1, renames 1, fsyncs 7, remove_trees 1, \
         chmods 5, writes 3, stats 1, readlinks 4, read_dirs 3, opens 5, reads 1"
    );
    assert_eq!(
        counted(&mut w, &projected(b"b")),
        "inodes 0: stats 3, readlinks 4, read_dirs 3, opens 3, reads 3"
    );
}
