//! The agent runs with glibc's per-thread caches off: it runs its own binary again, in the
//! same process, with `glibc.malloc.tcache_count=0` added to `GLIBC_TUNABLES` (glibc reads its
//! tunables only when a program starts); an operator's own setting of them is kept.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::PATIENCE;

/// `nodelet --manifests <dir> --root-dir <root>` with `GLIBC_TUNABLES` = `tunables` (unset
/// with `None`), its log in `root/../log`.
fn agent(dir: &Path, tunables: Option<&str>) -> Child {
    let (manifests, root) = (dir.join("manifests"), dir.join("root"));
    for d in [&manifests, &root] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    let log = std::fs::File::create(dir.join("log")).unwrap_or_else(|e| panic!("log: {e}"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodelet"));
    command
        .args(["--node-name", "caches", "--listen", "127.0.0.1:0"])
        .args(["--kubelet-port", "0"])
        .arg("--manifests")
        .arg(&manifests)
        .arg("--root-dir")
        .arg(&root)
        .env("RUST_LOG", "info")
        .env_remove("NODELET_GLIBC_TUNABLES")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(Stdio::null());
    match tunables {
        Some(t) => command.env("GLIBC_TUNABLES", t),
        None => command.env_remove("GLIBC_TUNABLES"),
    };
    command
        .spawn()
        .unwrap_or_else(|e| panic!("starting nodelet: {e}"))
}

/// Waits for the agent's log line about its allocator; returns it and the environment the
/// process (the same pid) was last executed with.
fn started(dir: &Path, child: &mut Child) -> (String, Vec<String>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.contains("memory allocator")) {
            let environ = std::fs::read(format!("/proc/{}/environ", child.id()))
                .unwrap_or_else(|e| panic!("environ of the agent: {e}"));
            let vars = environ
                .split(|&b| b == 0)
                .filter(|v| v.starts_with(b"GLIBC_TUNABLES=") || v.starts_with(b"NODELET_GLIBC"))
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            return (line.to_owned(), vars);
        }
        if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("{e}")) {
            panic!("the agent exited ({status}) before it started; log:\n{log}");
        }
        assert!(
            Instant::now() < deadline,
            "the agent never started; log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_agent_runs_again_in_the_same_process_with_the_thread_caches_off() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut child = agent(dir.path(), None);
    let (line, vars) = started(dir.path(), &mut child);
    stop(child);
    assert!(line.contains("thread_caches=off"), "{line}");
    // The pid spawned is the one that runs, executed with the tunable and the mark of "none".
    assert_eq!(
        vars,
        [
            "GLIBC_TUNABLES=glibc.malloc.tcache_count=0",
            "NODELET_GLIBC_TUNABLES="
        ]
    );
}

#[test]
fn the_operators_tunables_are_kept_beside_ours_and_their_own_cache_size_wins() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let theirs = "glibc.malloc.mmap_threshold=131072";
    let mut child = agent(dir.path(), Some(theirs));
    let (line, vars) = started(dir.path(), &mut child);
    stop(child);
    assert!(line.contains("thread_caches=off"), "{line}");
    // The mark keeps the operator's own value for what the agent starts. (What
    // `/proc/PID/environ` shows of `GLIBC_TUNABLES` itself is glibc's to rewrite when it reads
    // it: it may show only the first entry, though every entry applies.)
    assert!(
        vars.contains(&format!("NODELET_GLIBC_TUNABLES=={theirs}")),
        "{vars:?}"
    );

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut child = agent(dir.path(), Some("glibc.malloc.tcache_count=2"));
    let (line, vars) = started(dir.path(), &mut child);
    stop(child);
    assert!(
        line.contains("thread_caches=as GLIBC_TUNABLES sets them"),
        "{line}"
    );
    assert_eq!(vars, ["GLIBC_TUNABLES=glibc.malloc.tcache_count=2"]);
}
