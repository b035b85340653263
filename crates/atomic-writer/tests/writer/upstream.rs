//! Our versions of the kubelet's atomic writer tests (AW-12); rule numbers cited per test.

use std::fs;
use std::path::PathBuf;

use nodelet_atomic_writer::{AtomicWriter, Error, Payload, WriteOutcome, WriterConfig};

use crate::support::{
    assert_layout, binary_bytes, data_dirs, data_link, payload, snapshot, text, writer,
};

// ---- TestNewAtomicWriter (AW-1) ----

#[test]
fn new_writer_fails_only_when_the_target_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    assert!(AtomicWriter::new(dir.path(), WriterConfig::default()).is_ok());
    let missing = dir.path().join("nope");
    let err = AtomicWriter::new(&missing, WriterConfig::default()).unwrap_err();
    assert!(
        matches!(err, Error::TargetMissing { ref path } if *path == missing),
        "{err}"
    );
}

#[test]
fn new_writer_does_not_touch_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let writer = AtomicWriter::new(dir.path(), WriterConfig::default()).unwrap();
    assert_eq!(writer.target_dir(), dir.path());
    assert!(snapshot(dir.path()).is_empty());
}

// ---- TestWriteOnce (AW-3, AW-5, AW-11) ----

/// Writes `payload` once into a fresh directory and checks the oracle.
fn write_once(payload: &Payload) {
    let dir = tempfile::tempdir().unwrap();
    let outcome = writer(dir.path()).write(payload, None).unwrap();
    assert_eq!(outcome, WriteOutcome::Written);
    assert_layout(dir.path(), payload);
}

/// Writes `payload` once and expects a validation error that changed nothing (AW-3).
fn write_once_fails(payload: &Payload) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let err = writer(dir.path()).write(payload, None).unwrap_err();
    assert!(err.is_invalid_payload(), "{err}");
    assert!(snapshot(dir.path()).is_empty(), "nothing on disk changes");
    err
}

#[test]
fn write_once_invalid_payload_1_reserved_prefix_is_rejected_and_nothing_written() {
    let binary = binary_bytes();
    let p = payload(&[
        ("foo", b"foo", 0o644),
        ("..bar", b"bar", 0o644),
        ("binary.bin", &binary, 0o644),
    ]);
    let err = write_once_fails(&p);
    assert_eq!(
        err.to_string(),
        "invalid path: must not start with '..': ..bar"
    );
}

#[test]
fn write_once_invalid_payload_2_dotdot_element_is_rejected_and_nothing_written() {
    let err = write_once_fails(&text(&[("foo/../bar", "foo")]));
    assert_eq!(
        err.to_string(),
        "invalid path: must not contain '..': foo/../bar"
    );
}

#[test]
fn write_once_basic_1() {
    write_once(&text(&[("foo", "foo"), ("bar", "bar")]));
}

#[test]
fn write_once_basic_2_binary_data() {
    let binary = binary_bytes();
    write_once(&payload(&[
        ("binary.bin", &binary, 0o644),
        (".binary.bin", &binary, 0o644),
    ]));
}

#[test]
fn write_once_basic_mode_1() {
    write_once(&payload(&[("foo", b"foo", 0o777), ("bar", b"bar", 0o400)]));
}

#[test]
fn write_once_dotfiles() {
    write_once(&text(&[
        (".dotfile", "dotfile"),
        (".dotfile.file", "dotfile.file"),
    ]));
}

#[test]
fn write_once_dotfiles_mode() {
    write_once(&payload(&[
        (".dotfile", b"dotfile", 0o717),
        (".dotfile.file", b"dotfile.file", 0o400),
    ]));
}

#[test]
fn write_once_subdirectories_1() {
    write_once(&text(&[
        ("foo/bar.txt", "foo/bar"),
        ("bar/zab.txt", "bar/zab.txt"),
    ]));
}

#[test]
fn write_once_subdirectories_mode_1() {
    write_once(&payload(&[
        ("foo/bar.txt", b"foo/bar", 0o400),
        ("bar/zab.txt", b"bar/zab.txt", 0o644),
    ]));
}

#[test]
fn write_once_subdirectories_2_unclean_paths_are_cleaned() {
    let p = text(&[
        ("foo//bar.txt", "foo//bar"),
        ("bar///bar/zab.txt", "bar/../bar/zab.txt"),
    ]);
    write_once(&p);
    let dir = tempfile::tempdir().unwrap();
    writer(dir.path()).write(&p, None).unwrap();
    assert_eq!(
        fs::read(dir.path().join("bar/bar/zab.txt")).unwrap(),
        b"bar/../bar/zab.txt"
    );
}

#[test]
fn write_once_subdirectories_3() {
    write_once(&text(&[
        ("foo/bar.txt", "foo/bar"),
        ("bar/zab.txt", "bar/zab.txt"),
        ("foo/blaz/bar.txt", "foo/blaz/bar"),
        ("bar/zib/zab.txt", "bar/zib/zab.txt"),
    ]));
}

#[test]
fn write_once_kitchen_sink() {
    let binary = binary_bytes();
    write_once(&payload(&[
        ("foo.log", b"foo.log", 0o644),
        ("bar.zap", b"bar.zap", 0o644),
        ("foo/bar.txt", b"foo/bar.txt", 0o644),
        ("foo/blaz/bar.txt", b"foo/blaz/bar.txt", 0o444),
        ("zip/zap/zup/fop.txt", b"zip/zap/zup/fop.txt", 0o644),
        ("zap/zip/zup/fop.txt", b"zap/zip/zup/fop.txt", 0o600),
        ("1/2/3/4/5/6/7/8/9/10/.dotfile.lib", b"1-2-3-dotfile", 0o777),
        ("1/2/3/4/5/6/7/8/9/10/binary.bin", &binary, 0o755),
    ]));
}

#[test]
fn write_once_empty_payload_creates_data_link_and_an_empty_data_dir() {
    // AW-11: watchers can rely on `..data` existing.
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        writer(dir.path()).write(&Payload::new(), None).unwrap(),
        WriteOutcome::Written
    );
    assert_layout(dir.path(), &Payload::new());
    let data = dir.path().join(data_link(dir.path()).unwrap());
    let names: Vec<_> = fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(names.is_empty(), "an empty data directory: {names:?}");
}

// ---- TestUpdate (AW-5, AW-7, AW-8, AW-10) ----

/// Writes `first`, then `next` through the same writer; checks the oracle after each.
fn update(first: &Payload, next: &Payload) -> WriteOutcome {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    assert_eq!(w.write(first, None).unwrap(), WriteOutcome::Written);
    assert_layout(dir.path(), first);
    let before = data_link(dir.path());
    let outcome = w.write(next, None).unwrap();
    assert_layout(dir.path(), next);
    // `..data` changes exactly when data was written (AW-6).
    assert_eq!(
        data_link(dir.path()) != before,
        outcome == WriteOutcome::Written
    );
    outcome
}

#[test]
fn update_changes_contents() {
    let outcome = update(
        &text(&[("foo", "foo"), ("bar", "bar")]),
        &text(&[("foo", "foo2"), ("bar", "bar2")]),
    );
    assert_eq!(outcome, WriteOutcome::Written);
}

#[test]
fn update_no_update_leaves_data_alone() {
    let p = text(&[("foo", "foo"), ("bar", "bar")]);
    assert_eq!(update(&p, &p), WriteOutcome::Unchanged);
}

#[test]
fn update_no_update_2_nested() {
    let p = text(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]);
    assert_eq!(update(&p, &p), WriteOutcome::Unchanged);
}

#[test]
fn update_add_1() {
    let first = text(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]);
    let next = text(&[
        ("foo/bar.txt", "foo"),
        ("bar/zab.txt", "bar"),
        ("blu/zip.txt", "zip"),
    ]);
    assert_eq!(update(&first, &next), WriteOutcome::Written);
}

#[test]
fn update_add_2_into_an_existing_directory() {
    let first = text(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]);
    let next = text(&[
        ("foo/bar.txt", "foo"),
        ("bar/zab.txt", "bar"),
        ("bar/zib/zab.txt", "zib"),
    ]);
    assert_eq!(update(&first, &next), WriteOutcome::Written);
}

#[test]
fn update_add_3_deeper_and_new_top_level() {
    let first = text(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]);
    let next = text(&[
        ("foo/bar.txt", "foo"),
        ("bar/zab.txt", "bar"),
        ("bar/1/2/3/4/zab.txt", "deep"),
        ("blu/zip.txt", "zip"),
    ]);
    assert_eq!(update(&first, &next), WriteOutcome::Written);
}

#[test]
fn update_delete_1() {
    let first = text(&[("foo/bar.txt", "foo"), ("bar/zab.txt", "bar")]);
    assert_eq!(
        update(&first, &text(&[("foo/bar.txt", "foo")])),
        WriteOutcome::Written
    );
}

#[test]
fn update_delete_2_nested() {
    let first = text(&[("foo/bar.txt", "foo"), ("bar/1/2/3/zab.txt", "bar")]);
    assert_eq!(
        update(&first, &text(&[("foo/bar.txt", "foo")])),
        WriteOutcome::Written
    );
}

#[test]
fn update_delete_3_inner_directory() {
    let first = text(&[
        ("foo/bar.txt", "foo"),
        ("bar/1/2/sip.txt", "sip"),
        ("bar/1/2/3/zab.txt", "zab"),
    ]);
    let next = text(&[("foo/bar.txt", "foo"), ("bar/1/2/sip.txt", "sip")]);
    assert_eq!(update(&first, &next), WriteOutcome::Written);
}

#[test]
fn update_delete_4_deep_inner_directory() {
    let first = text(&[
        ("foo/bar.txt", "foo"),
        ("bar/1/2/sip.txt", "sip"),
        ("bar/1/2/3/4/5/6zab.txt", "zab"),
    ]);
    let next = text(&[("foo/bar.txt", "foo"), ("bar/1/2/sip.txt", "sip")]);
    assert_eq!(update(&first, &next), WriteOutcome::Written);
}

#[test]
fn update_delete_all_leaves_only_data_link_and_an_empty_data_dir() {
    let first = text(&[
        ("foo/bar.txt", "foo"),
        ("bar/1/2/sip.txt", "sip"),
        ("bar/1/2/3/4/5/6zab.txt", "zab"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    w.write(&first, None).unwrap();
    assert_eq!(
        w.write(&Payload::new(), None).unwrap(),
        WriteOutcome::Written
    );
    assert_layout(dir.path(), &Payload::new());
    let names: Vec<String> = snapshot(dir.path())
        .into_keys()
        .filter(|n| !n.contains('/'))
        .collect();
    assert_eq!(
        names.len(),
        2,
        "only ..data and one data dir remain: {names:?}"
    );
}

#[test]
fn update_add_and_delete_1() {
    let outcome = update(
        &text(&[("foo/bar.txt", "foo")]),
        &text(&[("bar/baz.txt", "baz")]),
    );
    assert_eq!(outcome, WriteOutcome::Written);
}

// ---- TestMultipleUpdates (AW-5, AW-6) ----

/// Writes each payload in turn through one writer, checking the oracle after each.
fn multiple_updates(payloads: &[Payload]) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path());
    for p in payloads {
        w.write(p, None).unwrap();
        assert_layout(dir.path(), p);
    }
}

#[test]
fn multiple_updates_update_1() {
    multiple_updates(&[
        text(&[("foo", "foo"), ("bar", "bar")]),
        text(&[("foo", "foo2"), ("bar", "bar2")]),
        text(&[("foo", "foo3"), ("bar", "bar3")]),
    ]);
}

#[test]
fn multiple_updates_update_2_nested() {
    multiple_updates(&[
        text(&[("foo/bar.txt", "foo/bar"), ("bar/zab.txt", "bar/zab")]),
        text(&[("foo/bar.txt", "foo/bar2"), ("bar/zab.txt", "bar/zab2")]),
        text(&[("foo/bar.txt", "foo/bar3"), ("bar/zab.txt", "bar/zab3")]),
    ]);
}

#[test]
fn multiple_updates_clear_sentinel() {
    multiple_updates(&[
        text(&[("foo", "foo"), ("bar", "bar")]),
        text(&[("foo", "foo2")]),
        text(&[("foo", "foo3")]),
        text(&[("foo", "foo4")]),
    ]);
}

#[test]
fn multiple_updates_subdirectories_2() {
    multiple_updates(&[
        text(&[
            ("foo/bar.txt", "a"),
            ("bar/zab.txt", "b"),
            ("foo/blaz/bar.txt", "c"),
            ("bar/zib/zab.txt", "d"),
        ]),
        text(&[
            ("foo/bar.txt", "a2"),
            ("bar/zab.txt", "b2"),
            ("foo/blaz/bar.txt", "c2"),
            ("bar/zib/zab.txt", "d2"),
        ]),
    ]);
}

#[test]
fn multiple_updates_add_1() {
    multiple_updates(&[
        text(&[("foo/bar.txt", "a"), ("bar/zab.txt", "b")]),
        text(&[
            ("foo/bar.txt", "a"),
            ("bar/zab.txt", "b"),
            ("foo/blaz/bar.txt", "c"),
        ]),
        text(&[
            ("foo/bar.txt", "a"),
            ("bar/zab.txt", "b"),
            ("foo/blaz/bar.txt", "c"),
            ("zip/zap.txt", "d"),
        ]),
    ]);
}

#[test]
fn multiple_updates_add_2() {
    multiple_updates(&[
        text(&[("foo/bar.txt", "a")]),
        text(&[("foo/bar.txt", "a"), ("foo/bar/baz.txt", "b")]),
        text(&[
            ("foo/bar.txt", "a"),
            ("foo/bar/baz.txt", "b"),
            ("foo/bar/1/2/3.txt", "c"),
        ]),
    ]);
}

#[test]
fn multiple_updates_remove_1() {
    multiple_updates(&[
        text(&[
            ("foo/bar.txt", "a"),
            ("bar/zab.txt", "b"),
            ("zip/zap/zup.txt", "c"),
        ]),
        text(&[("foo/bar.txt", "a"), ("bar/zab.txt", "b")]),
        text(&[("foo/bar.txt", "a")]),
        Payload::new(),
    ]);
}

// ---- TestCreateUserVisibleFiles (AW-9) ----

fn visible_links(p: &Payload) -> Vec<(String, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    writer(dir.path()).write(p, None).unwrap();
    let mut links: Vec<(String, PathBuf)> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_name().to_string_lossy().starts_with(".."))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read_link(e.path()).unwrap(),
            )
        })
        .collect();
    links.sort();
    assert_eq!(data_dirs(dir.path()).len(), 1);
    links
}

#[test]
fn user_visible_files_simple_path() {
    assert_eq!(
        visible_links(&text(&[("foo", "x")])),
        [("foo".into(), "..data/foo".into())]
    );
}

#[test]
fn user_visible_files_simple_nested_path_shares_one_symlink() {
    let p = text(&[("foo/bar/baz.txt", "1"), ("foo/bar/blah.txt", "2")]);
    assert_eq!(visible_links(&p), [("foo".into(), "..data/foo".into())]);
}

#[test]
fn user_visible_files_unclean_nested_path() {
    let p = text(&[("./foo/bar/baz.txt", "1"), ("foo//bar/blah.txt", "2")]);
    assert_eq!(visible_links(&p), [("foo".into(), "..data/foo".into())]);
}
