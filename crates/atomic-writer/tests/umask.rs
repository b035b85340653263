//! Umask independence (AW-5 steps 5-6): modes are exact whatever the process umask.
//!
//! The umask is process-wide, so this lives in its own test binary and sets it in a child:
//! the test re-runs itself under `sh -c 'umask 077; exec ...'` with `UMASK_CHILD` set, and the
//! child does the write and the checks.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use nodelet_atomic_writer::{AtomicWriter, FileProjection, Payload, WriterConfig, read_visible};

const CHILD_ENV: &str = "NODELET_AW_UMASK_CHILD";

fn check_modes_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let payload: Payload = [
        ("open", FileProjection::new(b"a".to_vec(), 0o777)),
        ("nested/dir/file", FileProjection::new(b"b".to_vec(), 0o666)),
        ("private", FileProjection::new(b"c".to_vec(), 0o400)),
    ]
    .into_iter()
    .collect();
    AtomicWriter::new(dir.path(), WriterConfig::default().fsync(false))
        .unwrap()
        .write(&payload, None)
        .unwrap();
    let seen = read_visible(dir.path()).unwrap();
    assert_eq!(seen["open"].1, 0o777);
    assert_eq!(seen["nested/dir/file"].1, 0o666);
    assert_eq!(seen["private"].1, 0o400);
    for dir_path in [
        dir.path().join("..data/"),
        dir.path().join("nested/"),
        dir.path().join("nested/dir/"),
    ] {
        let mode = std::fs::metadata(&dir_path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755, "{}", dir_path.display());
    }
}

#[test]
fn modes_are_exact_under_a_restrictive_umask() {
    if std::env::var_os(CHILD_ENV).is_some() {
        check_modes_are_exact();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let output = Command::new("sh")
        .arg("-c")
        .arg(r#"umask 077 && exec "$0" --exact modes_are_exact_under_a_restrictive_umask --test-threads=1"#)
        .arg(&exe)
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "the child ran the check:\n{stdout}"
    );
}
