//! Environments that follow a change (FC-10 … FC-12), the README's figures: the real
//! `nodelet` binary with the process runtime (needs root) against `nodelet-apiserver` (in this
//! process) with a node identity.
//!
//! 1. Start the API server with auth, write a node kubeconfig, start `nodelet --runtime
//!    process`; one pod `nodelet.io/follow-env: "true"`, grace period 0, whose container
//!    (`sleep`) reads `MODE` from a ConfigMap.
//! 2. Latency: 100 changes at 2 per second, each from the update returning to the restarted
//!    process running with the new value (read from `/proc/<pid>/environ`), p50 / p99 / max;
//!    with the default quiet time (200 ms) and with `nodelet.io/env-debounce: 0s`.
//! 3. Burst: 100 updates 10 ms apart; the restarts they caused (the kubelet: none, ever).
//!
//! `cargo bench -p nodelet --bench follow_env` (about two minutes). Prints one line per figure.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodelet_apiserver::{ApiServer, User};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::{Value, json};
use support::{NODE, percentile, spawn_agent_with};

const CHANGES: usize = 100;
const EVERY: Duration = Duration::from_millis(500);
const BURST_GAP: Duration = Duration::from_millis(10);

fn main() {
    if !support::selected("follow_env") {
        return;
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "this bench needs root (uid 0): the process runtime makes a mount namespace per container"
    );
    support::runtime().block_on(run());
}

fn config_map(name: &str, mode: &str) -> Value {
    ConfigMapBuilder::new("default", name)
        .data("mode", mode)
        .json()
}

/// The pid and start count of `container`'s running instance (its `state.json`).
fn state(root: &Path, uid: &str, container: &str) -> Option<(i32, u64)> {
    let path = root
        .join("pods")
        .join(uid)
        .join("containers")
        .join(container)
        .join("state.json");
    let state: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let pid = i32::try_from(state["pid"].as_i64()?).ok()?;
    Some((pid, state["starts"].as_u64()?))
}

/// Waits until the running instance has `MODE=<mode>` in its environment; returns its start
/// count.
async fn wait_for_mode(root: &Path, uid: &str, mode: &str) -> u64 {
    let want = format!("MODE={mode}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((pid, starts)) = state(root, uid, "app") {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if environ.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
                return starts;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the container never ran with {want}"
        );
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

/// A pod reading `MODE` from ConfigMap `cm`, following it with `debounce` (none: the default).
fn pod(name: &str, cm: &str, debounce: Option<&str>) -> Value {
    let mut pod = PodBuilder::new("default", name)
        .node(NODE)
        .annotation("nodelet.io/follow-env", "true")
        .spec(json!({"terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsUser": 1000}}))
        .container(json!({"name": "app", "image": "busybox:1.36",
            "command": ["sh", "-c", "exec sleep 100000"],
            "env": [{"name": "MODE",
                "valueFrom": {"configMapKeyRef": {"name": cm, "key": "mode"}}}]}));
    if let Some(d) = debounce {
        pod = pod.annotation("nodelet.io/env-debounce", d);
    }
    pod.json()
}

async fn run() {
    let server = ApiServer::start(nodelet_apiserver::Config::default().with_auth())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let h = server.handle();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = dir.path().join("node.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, &User::node(NODE))
        .unwrap_or_else(|e| panic!("{e}"));
    let root: PathBuf = dir.path().join("root");
    let _agent = spawn_agent_with(
        &kubeconfig,
        &root,
        "auto",
        "none",
        &["--runtime", "process"],
    );

    for (label, cm, debounce) in [
        ("default quiet time 200ms", "cm-a", None),
        ("env-debounce 0s", "cm-b", Some("0s")),
    ] {
        h.create(config_map(cm, "0"))
            .unwrap_or_else(|e| panic!("{e}"));
        let created = h
            .create(pod(&format!("p-{cm}"), cm, debounce))
            .unwrap_or_else(|e| panic!("{e}"));
        let uid = created["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        wait_for_mode(&root, &uid, "0").await;
        // (2)
        let mut latencies = Vec::with_capacity(CHANGES);
        for n in 1..=CHANGES {
            let t = Instant::now();
            h.update(config_map(cm, &n.to_string()))
                .unwrap_or_else(|e| panic!("{e}"));
            wait_for_mode(&root, &uid, &n.to_string()).await;
            latencies.push(t.elapsed());
            tokio::time::sleep(EVERY.saturating_sub(t.elapsed())).await;
        }
        latencies.sort();
        println!(
            "follow_env/latency ({label}): update returned -> restarted process runs with the new value, {CHANGES} changes at 2/s, grace 0: p50 {:.1?}, p99 {:.1?}, max {:.1?}",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies[latencies.len() - 1]
        );
        // (3)
        let before = state(&root, &uid, "app").map_or(0, |s| s.1);
        let began = Instant::now();
        for n in 1..=CHANGES {
            h.update(config_map(cm, &format!("burst-{n}")))
                .unwrap_or_else(|e| panic!("{e}"));
            tokio::time::sleep(BURST_GAP).await;
        }
        let sent = began.elapsed();
        wait_for_mode(&root, &uid, &format!("burst-{CHANGES}")).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = state(&root, &uid, "app").map_or(0, |s| s.1);
        println!(
            "follow_env/burst ({label}): {CHANGES} updates in {sent:.0?} -> {} restart(s)",
            after - before
        );
    }
    server.shutdown().await;
}
