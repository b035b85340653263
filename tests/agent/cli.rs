//! The binary's configuration errors: exit code 64 and a message naming the field.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running nodelet: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_invalid_config_file_exits_64_naming_the_field() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("kubelet.yaml");
    std::fs::write(&file, "syncFrequency: sometime\n").unwrap_or_else(|e| panic!("{e}"));
    let f = file.to_str().unwrap_or_default();
    let (code, stderr) = run(&["--node-name", "n1", "--root-dir", "/tmp/x", "--config", f]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("syncFrequency"), "{stderr}");
}

#[test]
fn a_missing_node_name_or_unknown_flag_exits_64() {
    let (code, stderr) = run(&["--root-dir", "/tmp/x"]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("--node-name"), "{stderr}");
    let (code, _) = run(&["--no-such-flag"]);
    assert_eq!(code, Some(64));
    let (code, _) = run(&[
        "--node-name",
        "n1",
        "--root-dir",
        "/tmp/x",
        "--change-detection-strategy",
        "Often",
    ]);
    assert_eq!(code, Some(64));
}
