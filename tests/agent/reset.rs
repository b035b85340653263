//! `nodelet reset --root-dir DIR`: the binary unmounts and removes what the agent left, leaves
//! the rest, refuses while an agent holds the directory, and changes nothing with `--dry-run`.

use std::path::Path;
use std::process::Command;

fn reset(root: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .arg("reset")
        .arg("--root-dir")
        .arg(root)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("running nodelet reset: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A root directory as a stopped agent leaves it, plus a file of the user's.
fn left_by_an_agent(root: &Path) {
    let vol = root.join("pods/u1/volumes/kubernetes.io~secret/s");
    std::fs::create_dir_all(vol.join("..2026_01_01")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(vol.join("..2026_01_01/key"), "v").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("..2026_01_01", vol.join("..data"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("..data/key", vol.join("key")).unwrap_or_else(|e| panic!("{e}"));
    // A symlink out of the directory: removed, never followed.
    std::fs::write(root.join("../outside.txt"), "keep").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("../../../outside.txt", root.join("pods/u1/escape"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("admin.kubeconfig"), "x").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("nodelet.lock"), "123\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("notes.txt"), "mine").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn reset_removes_the_agents_files_and_leaves_the_rest_naming_it() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tmp.path().join("data");
    left_by_an_agent(&root);

    let (code, out, err) = reset(&root, &["--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("would remove") && out.contains("pods"),
        "{out}"
    );
    assert!(root.join("pods/u1").exists(), "a dry run changed nothing");
    assert!(root.join("admin.kubeconfig").exists());

    let (code, out, err) = reset(&root, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!root.join("pods").exists(), "{out}");
    assert!(!root.join("admin.kubeconfig").exists());
    assert!(!root.join("nodelet.lock").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt"))
            .ok()
            .as_deref(),
        Some("mine")
    );
    assert!(out.contains("leave") && out.contains("notes.txt"), "{out}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("outside.txt"))
            .ok()
            .as_deref(),
        Some("keep")
    );

    std::fs::remove_file(root.join("notes.txt")).unwrap_or_else(|e| panic!("{e}"));
    let (code, out, _) = reset(&root, &[]);
    assert_eq!(code, 0);
    assert!(
        !root.exists(),
        "an emptied root directory is removed: {out}"
    );
}

#[test]
fn reset_refuses_while_an_agent_holds_the_directory_and_names_its_pid() {
    use nix::fcntl::{Flock, FlockArg};
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tmp.path().join("data");
    left_by_an_agent(&root);
    std::fs::write(
        root.join("nodelet.lock"),
        format!("{}\n", std::process::id()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let file = std::fs::File::open(root.join("nodelet.lock")).unwrap_or_else(|e| panic!("{e}"));
    let held = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .unwrap_or_else(|(_, e)| panic!("locking: {e}"));
    let (code, _, err) = reset(&root, &[]);
    assert_eq!(code, 75, "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    assert!(root.join("pods/u1").exists(), "nothing was touched");
    drop(held);
    let (code, _, err) = reset(&root, &[]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn reset_unmounts_the_volumes_a_stopped_agent_leaves_mounted() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tmp.path().join("data");
    left_by_an_agent(&root);
    let vol = root.join("pods/u1/volumes/kubernetes.io~secret/tmpfs");
    std::fs::create_dir_all(&vol).unwrap_or_else(|e| panic!("{e}"));
    let mounted = nix::mount::mount(
        Some("tmpfs"),
        &vol,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    );
    if let Err(e) = mounted {
        // Mounting needs CAP_SYS_ADMIN; without it the agent leaves no mounts either (secrets go
        // to node disk), and this case cannot arise.
        assert_eq!(e, nix::errno::Errno::EPERM, "mounting a tmpfs: {e}");
        return;
    }
    std::fs::write(vol.join("key"), "secret").unwrap_or_else(|e| panic!("{e}"));
    let (code, out, err) = reset(&root, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("unmount ") && out.contains("tmpfs"), "{out}");
    assert!(!root.join("pods").exists(), "{out}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(
        !mountinfo.contains(&root.display().to_string()),
        "still mounted"
    );
}

#[test]
fn cleanup_on_exit_removes_the_pods_directories_when_the_agent_stops() {
    use std::time::{Duration, Instant};
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        manifests.path().join("app.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: default}\n\
         data: {greeting: hello}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: app, namespace: default}\n\
         spec:\n  nodeName: cleanup-node\n  containers:\n  - name: c\n    image: x\n\
         \x20   volumeMounts: [{name: cfg, mountPath: /cfg}]\n  volumes:\n\
         \x20 - name: cfg\n    configMap: {name: cfg}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args([
            "--node-name",
            "cleanup-node",
            "--listen",
            "none",
            "--cleanup-on-exit",
        ])
        .arg("--manifests")
        .arg(manifests.path())
        .arg("--root-dir")
        .arg(root.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting nodelet: {e}"));
    let pods = root.path().join("pods");
    let deadline = Instant::now() + crate::support::PATIENCE;
    let greeting = loop {
        let found = std::fs::read_dir(&pods).ok().and_then(|mut d| {
            let pod = d.next()?.ok()?.path();
            std::fs::read(pod.join("volumes/kubernetes.io~configmap/cfg/greeting")).ok()
        });
        if let Some(g) = found {
            break g;
        }
        assert!(Instant::now() < deadline, "the volume never appeared");
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "the agent exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(greeting, b"hello");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or_default()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "{status}");
    assert!(!pods.exists(), "the pods' directories were left");
    assert!(
        root.path().join("admin.kubeconfig").exists(),
        "only pods/ is removed"
    );
}
