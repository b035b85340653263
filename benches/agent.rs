//! Whole-agent figures for the README: the real `nodelet` binary (a child process, so its RSS
//! and CPU are its own) against `nodelet-apiserver` (in this process) with a node identity.
//!
//! 1. Start the API server with auth; write a node kubeconfig; start `nodelet`.
//! 2. Create 110 pods × 3 volumes (configMap, secret, projected configMap + secret), each pod
//!    with its own ConfigMap and Secret; time until every volume's file is on disk.
//! 3. Idle: sample the agent's RSS and its CPU time over an idle window.
//! 4. Update latency: 200 × (update a ConfigMap through the API → new content visible in the
//!    pod's configMap volume), p50 / p90 / p99 / max.
//!
//! `cargo bench -p nodelet --bench agent` (about 30 s). Prints one line per figure.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodelet_apiserver::{ApiServer, User};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
use serde_json::json;
use support::{percentile, rss_kib};

const PODS: usize = 110;
const UPDATES: usize = 200;
const IDLE: Duration = Duration::from_secs(10);
const NODE: &str = "bench-node";

fn main() {
    if !support::selected("agent") {
        return;
    }
    let rt = support::runtime();
    rt.block_on(run());
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields after the command: state is index 0, utime 11, stime 12.
    get(11) + get(12)
}

async fn wait_for(path: &Path, expected: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read(path).ok().as_deref() != Some(expected) {
        assert!(
            Instant::now() < deadline,
            "{} never became {:?}",
            path.display(),
            expected
        );
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// ConfigMap `default/cm-<i>` with `data-1` = `data_1` and `data-2` = `value-2`.
fn config_map(i: usize, data_1: &str) -> serde_json::Value {
    ConfigMapBuilder::new("default", &format!("cm-{i}"))
        .data("data-1", data_1)
        .data("data-2", "value-2")
        .json()
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
    let root = dir.path().join("root");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap_or_default(),
            "--node-name",
            NODE,
        ])
        .args([
            "--root-dir",
            root.to_str().unwrap_or_default(),
            "--listen",
            "none",
        ])
        // No kubelet API: a node's own kubelet (or another bench) may hold 10250.
        .args(["--kubelet-port", "0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning nodelet: {e}"));
    let pid = child.id();

    // (2) 110 pods × 3 volumes.
    let started = Instant::now();
    let mut files = Vec::new();
    for i in 0..PODS {
        let ns = "default";
        h.create(config_map(i, "value-1"))
            .unwrap_or_else(|e| panic!("{e}"));
        h.create(
            SecretBuilder::new(ns, &format!("s-{i}"))
                .data("data-1", "value-1")
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let pod = h
            .create(
                PodBuilder::new(ns, &format!("p-{i}"))
                    .node(NODE)
                    .container(json!({"name": "c", "image": "x",
                        "volumeMounts": [{"name": "cm", "mountPath": "/cm"}, {"name": "s", "mountPath": "/s"},
                                         {"name": "pr", "mountPath": "/pr"}]}))
                    .config_map_volume("cm", &format!("cm-{i}"))
                    .secret_volume("s", &format!("s-{i}"))
                    .volume(json!({"name": "pr", "projected": {"sources": [
                        {"configMap": {"name": format!("cm-{i}")}},
                        {"secret": {"name": format!("s-{i}")}}]}}))
                    .json(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let vols = root.join("pods").join(&uid).join("volumes");
        files.push(vols.join("kubernetes.io~configmap/cm/data-1"));
        files.push(vols.join("kubernetes.io~secret/s/data-1"));
        files.push(vols.join("kubernetes.io~projected/pr/data-2"));
    }
    for f in &files {
        let expected: &[u8] = if f.ends_with("data-2") {
            b"value-2"
        } else {
            b"value-1"
        };
        wait_for(f, expected).await;
    }
    let mount_all = started.elapsed();
    println!(
        "agent/mount: {PODS} pods x 3 volumes all on disk {mount_all:.2?} after the first create"
    );

    // (3) idle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let t0 = cpu_ticks(pid);
    tokio::time::sleep(IDLE).await;
    let t1 = cpu_ticks(pid);
    let cpu = (t1 - t0) as f64 / ticks_per_sec / IDLE.as_secs_f64() * 100.0;
    println!(
        "agent/idle: RSS {:.1} MiB, CPU {cpu:.2} % of one core over {IDLE:?} ({PODS} pods, {} volumes, {} objects watched)",
        rss_kib(pid) as f64 / 1024.0,
        PODS * 3,
        PODS * 2
    );

    // (4) update latency, API write -> file visible.
    let mut latencies = Vec::with_capacity(UPDATES);
    for n in 0..UPDATES {
        let i = n % PODS;
        let value = format!("update-{n}");
        let t = Instant::now();
        h.update(config_map(i, &value))
            .unwrap_or_else(|e| panic!("{e}"));
        wait_for(&files[i * 3], value.as_bytes()).await;
        latencies.push(t.elapsed());
    }
    latencies.sort();
    println!(
        "agent/update-latency: API write -> file visible, n={UPDATES}: p50 {:.2?}, p90 {:.2?}, p99 {:.2?}, max {:.2?}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
    println!(
        "agent/rss-after-updates: {:.1} MiB",
        rss_kib(pid) as f64 / 1024.0
    );
    let _ = child.kill();
    let _ = child.wait();
    server.shutdown().await;
}
