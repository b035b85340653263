//! `nodelet reset --root-dir DIR`: the binary unmounts and removes what the agent left, leaves
//! the rest, refuses while an agent holds the directory, and changes nothing with `--dry-run`;
//! with `--delete-node` it deletes the node's Lease and Node over real HTTP as far as its
//! credentials allow.

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

/// `nodelet reset` with `args` after the root directory, run off the async runtime.
async fn reset_async(root: &Path, args: Vec<String>) -> (i32, String, String) {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        reset(&root, &args)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `--delete-node --kubeconfig <kubeconfig> --node-name <node>`.
fn delete_node_args(kubeconfig: &Path, node: &str) -> Vec<String> {
    vec![
        "--delete-node".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--node-name".into(),
        node.into(),
    ]
}

/// The agent registered its Node and Lease and stopped; reset with its own node identity
/// deletes the Lease, is refused the Node (403, named with what to do instead), and still
/// cleans the root directory up; exit code 1 since the Node is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_node_with_the_node_identity_deletes_the_lease_and_reports_the_refused_node() {
    use crate::support::{NODE, PATIENCE, World};
    let world = World::start_with(|c| c.register_node = true).await;
    let h = world.server.handle();
    let registered = || {
        h.get("v1", "Node", None, NODE).is_some()
            && h.get(
                "coordination.k8s.io/v1",
                "Lease",
                Some("kube-node-lease"),
                NODE,
            )
            .is_some()
    };
    tokio::time::timeout(PATIENCE, async {
        while !registered() {
            crate::support::poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the agent never registered its Node and Lease"));
    world.stop_agent().await;
    let credentials = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = credentials.path().join("node.kubeconfig");
    world
        .server
        .write_kubeconfig(&kubeconfig, &nodelet_apiserver::User::node(NODE))
        .unwrap_or_else(|e| panic!("{e}"));
    let root = world.root_dir();

    let mut dry = delete_node_args(&kubeconfig, NODE);
    dry.push("--dry-run".into());
    let (code, out, err) = reset_async(&root, dry).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("would delete Lease kube-node-lease/{NODE}"))
            && out.contains(&format!("would delete Node {NODE}")),
        "{out}"
    );
    assert!(registered(), "a dry run deletes nothing");

    let (code, out, err) = reset_async(&root, delete_node_args(&kubeconfig, NODE)).await;
    assert_eq!(code, 1, "the Node is left: {out}{err}");
    assert!(
        out.contains(&format!("delete Lease kube-node-lease/{NODE}")),
        "{out}"
    );
    assert!(
        h.get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("kube-node-lease"),
            NODE
        )
        .is_none()
    );
    assert!(h.get("v1", "Node", None, NODE).is_some());
    assert!(
        err.contains(&format!("Node {NODE} not deleted: forbidden"))
            && err.contains(&format!(
                "User \"system:node:{NODE}\" cannot delete resource \"nodes\""
            ))
            && err.contains(&format!("kubectl delete node {NODE}")),
        "{err}"
    );
    assert!(!root.join("pods").exists(), "the local cleanup ran: {out}");
    world.stop().await;
}

/// With admin credentials both go; run again, both are reported gone and the exit code is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_node_with_admin_credentials_deletes_the_node_and_its_lease() {
    let server =
        nodelet_apiserver::ApiServer::start(nodelet_apiserver::Config::default().with_auth())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    let h = server.handle();
    let node = "retired-node";
    h.create(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = tmp.path().join("admin.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, &nodelet_apiserver::User::admin())
        .unwrap_or_else(|e| panic!("{e}"));
    let root = tmp.path().join("data");
    left_by_an_agent(&root);

    let (code, out, err) = reset_async(&root, delete_node_args(&kubeconfig, node)).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("delete Lease kube-node-lease/{node}"))
            && out.contains(&format!("delete Node {node}")),
        "{out}"
    );
    assert!(h.get("v1", "Node", None, node).is_none());
    assert!(
        h.get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("kube-node-lease"),
            node
        )
        .is_none()
    );
    assert!(!root.join("pods").exists(), "{out}");

    let (code, out, err) = reset_async(&root, delete_node_args(&kubeconfig, node)).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("Lease kube-node-lease/{node} not found"))
            && out.contains(&format!("Node {node} not found")),
        "{out}"
    );
    server.shutdown().await;
}
