//! Two agents on one root directory would fight over it: the second exits non-zero naming the
//! directory and the pid of the first, and changes nothing there — the first agent's
//! `admin.kubeconfig` in particular.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::support::PATIENCE;

/// `nodelet --manifests <manifests> --root-dir <root>` on a free port.
fn agent(manifests: &Path, root: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(["--node-name", "lock-node", "--listen", "127.0.0.1:0"])
        .arg("--manifests")
        .arg(manifests)
        .arg("--root-dir")
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting nodelet: {e}"))
}

/// Every entry of the root directory (recursively) with its modification time.
fn tree(root: &Path) -> BTreeMap<String, SystemTime> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{e}")) {
            let entry = entry.unwrap_or_else(|e| panic!("{e}"));
            let meta = entry.metadata().unwrap_or_else(|e| panic!("{e}"));
            let path = entry.path();
            let name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            out.insert(name, meta.modified().unwrap_or(SystemTime::UNIX_EPOCH));
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

#[test]
fn a_second_agent_on_the_same_root_dir_exits_naming_the_dir_and_the_pid_and_changes_nothing() {
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = root.path().join("admin.kubeconfig");
    let mut first = agent(manifests.path(), root.path());
    let deadline = Instant::now() + PATIENCE;
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "the first agent did not start");
        assert!(
            first.try_wait().ok().flatten().is_none(),
            "the first agent exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the first agent settle (its start-up writes are done once the kubeconfig is there).
    std::thread::sleep(Duration::from_millis(200));
    let before_kubeconfig = std::fs::read(&kubeconfig).unwrap_or_else(|e| panic!("{e}"));
    let before = tree(root.path());

    let mut second = agent(manifests.path(), root.path());
    let status = loop {
        if let Some(status) = second.try_wait().unwrap_or_else(|e| panic!("{e}")) {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = second.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let after_kubeconfig = std::fs::read(&kubeconfig).unwrap_or_else(|e| panic!("{e}"));
    let after = tree(root.path());
    let _ = first.kill();
    let _ = first.wait();

    let status = status.unwrap_or_else(|| panic!("the second agent kept running: {text}"));
    assert!(!status.success(), "{status}: {text}");
    assert!(
        text.contains(&root.path().display().to_string()),
        "the error names the root directory: {text}"
    );
    assert!(
        text.contains(&format!("pid {}", first.id())),
        "the error names the first agent's pid: {text}"
    );
    assert!(
        after_kubeconfig == before_kubeconfig,
        "admin.kubeconfig was rewritten: {text}"
    );
    assert_eq!(after, before, "the root directory changed: {text}");
}
