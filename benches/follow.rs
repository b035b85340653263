//! Configuration that follows a change (FC-3, FC-5, FC-20), measured from the patch's answer:
//! the real `nodelet` binary with `--runtime process` (needs root) against `nodelet-apiserver`
//! (in this process), or a real kube-apiserver with `FOLLOW_SERVER=realk8s
//! REALK8S_DIR=<the realk8s scripts>` (as the scale bench's `SCALE_SERVER=realk8s`).
//!
//! 1. Start the server and the agent; create ConfigMap `cfg` and pod `follow` whose container
//!    `app` mounts `cfg`'s `app.conf` with `subPath` (`nodelet.io/follow-subpath.app`) and asks
//!    for SIGUSR1 after each update (`nodelet.io/reload-signal.app`, the default 20 ms quiet
//!    time); its shell prints `USR1 <ns> <content>` at each signal.
//! 2. Watch the pod: each event's time and its `nodelet.io/ConfigCurrent` status.
//! 3. 100 patches of `app.conf`, 2 per second (`FOLLOW_UPDATES`, `FOLLOW_INTERVAL_MS`). After
//!    each: poll `/proc/<pid>/root/etc/app.conf` (the file as the container sees it, in its
//!    mount namespace) until it reads the new content.
//! 4. Print, each as p50 / p99 / max: patch answered → subPath file replaced; file replaced →
//!    signal handled (the trap's time), and where that time goes (from the agent's debug log:
//!    its bind → this process saw the file; file seen → the agent sent the signal; sent → the
//!    trap ran); patch answered → condition `False` seen in the watch, → `True` seen again
//!    (only updates whose `False` reached the API: a swap faster than a status patch leaves
//!    none, FC-21).
//!
//! `cargo bench -p nodelet --bench follow` (about a minute). Times are the host's real-time
//! clock (the container's `date +%s%N` and this process share it).

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use nodelet_apiserver::{ApiServer, User};
use serde_json::json;
use support::{NODE, agent_command, summary};

const CONDITION: &str = "nodelet.io/ConfigCurrent";

/// The container: the subPath file at `/etc/app.conf`; at SIGUSR1 the time, then the file.
const SCRIPT: &str = r#"trap 't=$(date +%s%N); echo "USR1 $t $(cat /etc/app.conf)"' USR1
echo ready
while true; do sleep 1 & wait $!; done"#;

fn main() {
    if !support::selected("follow") {
        return;
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "the follow bench needs root: the process runtime makes a mount namespace per container"
    );
    support::runtime().block_on(run());
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let k = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    let config = kube::Config::from_custom_kubeconfig(k, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
}

/// The server: the stand-in (kept alive in the first slot) or a real one (the second).
enum Server {
    StandIn(ApiServer),
    Real(support::realk8s::RealK8s),
}

/// `(admin kubeconfig, node kubeconfig)` of `server`, written under `dir`.
fn kubeconfigs(server: &Server, dir: &Path) -> (PathBuf, PathBuf) {
    match server {
        Server::StandIn(s) => {
            let (admin, node) = (dir.join("admin.kubeconfig"), dir.join("node.kubeconfig"));
            s.write_kubeconfig(&admin, &User::admin())
                .unwrap_or_else(|e| panic!("{e}"));
            s.write_kubeconfig(&node, &User::node(NODE))
                .unwrap_or_else(|e| panic!("{e}"));
            (admin, node)
        }
        Server::Real(k8s) => (k8s.admin_kubeconfig.clone(), k8s.node_kubeconfig(NODE)),
    }
}

/// Waits (polling every 200 µs, at most 60 s) until `check` holds; the time it first held.
async fn until(what: &str, mut check: impl FnMut() -> bool) -> u128 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if check() {
            return now_ns();
        }
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// The times (ns since the epoch) of the agent's log lines that contain `message` (its text
/// format: an RFC 3339 UTC time first).
fn agent_times(log: &str, message: &str) -> Vec<u128> {
    log.lines()
        .filter(|l| l.contains(message))
        .filter_map(|l| {
            let time = l.split_whitespace().next()?;
            let t = chrono::DateTime::parse_from_rfc3339(time).ok()?;
            u128::try_from(t.timestamp_nanos_opt()?).ok()
        })
        .collect()
}

fn ms(ns: u128) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

async fn run() {
    let updates = env_usize("FOLLOW_UPDATES", 100);
    let interval = Duration::from_millis(env_usize("FOLLOW_INTERVAL_MS", 500) as u64);
    let server = match std::env::var("FOLLOW_SERVER").as_deref() {
        Ok("realk8s") => Server::Real(support::realk8s::RealK8s::start()),
        Ok("stand-in") | Err(_) => Server::StandIn(
            ApiServer::start(nodelet_apiserver::Config::default().with_auth())
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        ),
        Ok(other) => panic!("FOLLOW_SERVER={other}: realk8s or stand-in"),
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (admin_kubeconfig, node_kubeconfig) = kubeconfigs(&server, dir.path());
    let admin = client(&admin_kubeconfig).await;
    let root = dir.path().join("root");
    let port = support::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    // The agent's log keeps the times of its binds and signals, for the breakdown in (4).
    let agent_log = dir.path().join("agent.log");
    let log_file = std::fs::File::create(&agent_log).unwrap_or_else(|e| panic!("{e}"));
    let _agent = support::Agent(
        agent_command(
            &node_kubeconfig,
            &root,
            "auto",
            &listen,
            &["--runtime", "process"],
        )
        .env("RUST_LOG", "warn,nodelet_podworker::follow=debug")
        .stdout(log_file)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning nodelet: {e}")),
    );

    // (1)
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "cfg"}, "data": {"app.conf": "v0"}}))
    .unwrap_or_else(|e| panic!("{e}"));
    cms.create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("creating cfg: {e}"));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "follow", "annotations": {
            "nodelet.io/follow-subpath.app": "true",
            "nodelet.io/reload-signal.app": "SIGUSR1"}},
        "spec": {"nodeName": NODE, "securityContext": {"runAsUser": 1000},
            "containers": [{"name": "app", "image": "busybox:1.36",
                "command": ["sh", "-c", SCRIPT],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}}))
    .unwrap_or_else(|e| panic!("{e}"));
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating the pod: {e}"));
    let uid = created.metadata.uid.unwrap_or_default();
    let state = root.join(format!("pods/{uid}/containers/app/state.json"));
    let log = root.join(format!("logs/pods/default_follow_{uid}/app/0.log"));
    let pid_of = || -> Option<i64> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).ok()?).ok()?;
        v["pid"].as_i64()
    };
    until("the container's start", || {
        pid_of().is_some() && std::fs::read_to_string(&log).is_ok_and(|l| l.contains("ready"))
    })
    .await;
    let pid = pid_of().unwrap_or_default();
    let file = PathBuf::from(format!("/proc/{pid}/root/etc/app.conf"));

    // (2)
    let seen: Arc<Mutex<Vec<(u128, String)>>> = Arc::default();
    let watch = tokio::spawn({
        let seen = seen.clone();
        let watched = pods.clone();
        let config = watcher::Config::default().fields("metadata.name=follow");
        async move {
            let mut stream = watcher::watcher(watched, config).boxed();
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                    _ => continue,
                };
                let status = pod
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == CONDITION)
                    .map(|c| c.status)
                    .unwrap_or_default();
                if let Ok(mut s) = seen.lock() {
                    s.push((now_ns(), status));
                }
            }
        }
    });
    until("ConfigCurrent True", || {
        seen.lock()
            .is_ok_and(|s| s.last().is_some_and(|(_, st)| st == "True"))
    })
    .await;

    // (3)
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut replaced = Vec::new();
    let mut patched_at = Vec::new();
    let mut replaced_at = Vec::new();
    for n in 1..=updates {
        let next = Instant::now() + interval;
        let value = format!("v{n}");
        cms.patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"app.conf": value}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patching cfg: {e}"));
        let patched = now_ns();
        let at = until(&format!("{} showing {value}", file.display()), || {
            std::fs::read_to_string(&file).is_ok_and(|c| c == value)
        })
        .await;
        replaced.push(ms(at.saturating_sub(patched)));
        patched_at.push(patched);
        replaced_at.push(at);
        tokio::time::sleep_until(next.into()).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    watch.abort();

    // (4)
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let agent_text = std::fs::read_to_string(&agent_log).unwrap_or_default();
    let (binds, sent) = (
        agent_times(&agent_text, "subPath binds replaced"),
        agent_times(&agent_text, "reload signal sent"),
    );
    let mut signals = Vec::new();
    let (mut replaced_to_sent, mut sent_to_handled, mut bind_to_seen) =
        (Vec::new(), Vec::new(), Vec::new());
    for (n, at) in replaced_at.iter().enumerate() {
        let content = format!("v{}", n + 1);
        let signal = text.lines().find_map(|l| {
            let rest = l.split_once("USR1 ")?.1;
            let (t, c) = rest.split_once(' ')?;
            (c.trim() == content)
                .then(|| t.parse::<u128>().ok())
                .flatten()
        });
        let Some(t) = signal else { continue };
        signals.push(ms(t.saturating_sub(*at)));
        // The agent's bind and signal of this update: the last of each before the handler ran,
        // after the patch.
        let within = |times: &[u128]| {
            let from = patched_at[n];
            times.iter().rev().find(|x| **x > from && **x <= t).copied()
        };
        if let Some(kill) = within(&sent) {
            replaced_to_sent.push(ms(kill.saturating_sub(*at)));
            sent_to_handled.push(ms(t.saturating_sub(kill)));
        }
        if let Some(bind) = within(&binds) {
            bind_to_seen.push(ms(at.saturating_sub(bind)));
        }
    }
    let events = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let (mut to_false, mut to_true) = (Vec::new(), Vec::new());
    for (i, patched) in patched_at.iter().enumerate() {
        let end = patched_at.get(i + 1).copied().unwrap_or(u128::MAX);
        let window: Vec<&(u128, String)> = events
            .iter()
            .filter(|(t, _)| t > patched && *t < end)
            .collect();
        let Some(pos) = window.iter().position(|(_, s)| s == "False") else {
            continue;
        };
        to_false.push(ms(window[pos].0 - patched));
        if let Some((t, _)) = window[pos..].iter().find(|(_, s)| s == "True") {
            to_true.push(ms(t - patched));
        }
    }
    let server_name = match &server {
        Server::StandIn(_) => "stand-in",
        Server::Real(_) => "realk8s",
    };
    println!(
        "follow: {updates} patches every {interval:?} on {server_name}; load average before {} after {}",
        load_before.trim(),
        load_after.trim()
    );
    println!(
        "follow/subpath: patch answered -> subPath file replaced in the container: {}",
        summary(replaced)
    );
    println!(
        "follow/signal: file replaced -> SIGUSR1 handled (20 ms quiet time): {}",
        summary(signals)
    );
    // Where the time goes: the agent's own part (its bind, the quiet time, the signal) and the
    // container's (the shell wakes and runs its trap).
    println!(
        "follow/signal breakdown: agent replaced the bind -> this process saw the file: {}; \
         file seen -> agent sent the signal: {}; signal sent -> trap ran in the container: {}",
        summary(bind_to_seen),
        summary(replaced_to_sent),
        summary(sent_to_handled)
    );
    println!(
        "follow/condition: patch answered -> {CONDITION} False in the watch: {}; -> True again: {}",
        summary(to_false),
        summary(to_true)
    );
    let _ = pods
        .delete(
            "follow",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await;
    drop(server);
}
