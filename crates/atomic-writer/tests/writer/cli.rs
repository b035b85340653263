//! The `atomic-write` example as scripts run it: JSON on stdin, `written`/`unchanged` on stdout.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use nodelet_atomic_writer::read_visible;

use crate::support::{assert_layout, payload};

/// The example binary; `cargo test` builds examples next to the test binaries.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let path = profile_dir.join("examples").join("atomic-write");
    assert!(
        path.is_file(),
        "example not built at {}: run `cargo test -p nodelet-atomic-writer` without a target \
         filter (it builds examples) or `cargo build -p nodelet-atomic-writer --example atomic-write`",
        path.display()
    );
    path
}

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(example())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).trim().to_owned()
}

#[test]
fn the_cli_writes_then_reports_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().to_str().unwrap();
    // "aGVsbG8=" is "hello", "AAEC/w==" is [0, 1, 2, 255].
    let json = r#"{"files": {"greeting": {"data": "aGVsbG8="}, "bin/raw": {"data": "AAEC/w==", "mode": 384}}}"#;
    let first = run(&[target], json);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(stdout(&first), "written");
    assert_layout(
        dir.path(),
        &payload(&[
            ("greeting", b"hello", 0o644),
            ("bin/raw", &[0, 1, 2, 255], 0o600),
        ]),
    );
    let second = run(&[target, "--no-fsync"], json);
    assert!(second.status.success());
    assert_eq!(stdout(&second), "unchanged");
}

#[test]
fn the_cli_prints_the_kubelet_error_text_and_fails_on_an_invalid_path() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(
        &[dir.path().to_str().unwrap()],
        r#"{"files": {"../escape": {"data": ""}}}"#,
    );
    assert!(!output.status.success());
    assert_eq!(
        stderr(&output),
        "invalid path: must not contain '..': ../escape"
    );
    assert!(read_visible(dir.path()).unwrap().is_empty());
}

#[test]
fn the_cli_fails_on_malformed_input_and_a_missing_target() {
    let dir = tempfile::tempdir().unwrap();
    let bad_json = run(&[dir.path().to_str().unwrap()], "{not json");
    assert!(!bad_json.status.success());
    assert!(
        stderr(&bad_json).starts_with("parse payload JSON"),
        "{}",
        stderr(&bad_json)
    );

    let bad_base64 = run(
        &[dir.path().to_str().unwrap()],
        r#"{"files": {"a": {"data": "%%%"}}}"#,
    );
    assert!(!bad_base64.status.success());
    assert!(
        stderr(&bad_base64).starts_with("decode base64 data of a"),
        "{}",
        stderr(&bad_base64)
    );

    let missing = dir.path().join("missing");
    let output = run(&[missing.to_str().unwrap()], r#"{"files": {}}"#);
    assert!(!output.status.success());
    assert_eq!(
        stderr(&output),
        format!("target directory {} does not exist", missing.display())
    );

    let usage = run(&[], "");
    assert_eq!(usage.status.code(), Some(2));
}
