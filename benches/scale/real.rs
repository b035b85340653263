//! The scale bench's server side on a real kube-apiserver (`SCALE_SERVER=realk8s`, see
//! `support/realk8s.rs`): the `real-991` workload (110 pods × 9 objects as `kubectl apply`
//! makes them, plus each pod's `kube-root-ca.crt` and service-account token), measured as the
//! server sees it.
//!
//! Per round (`SCALE_REPEAT=N` rounds, default 2; the two modes alternate which goes first):
//! 1. **No agent**: 110 pod POSTs one after the other, as the bench does; the time from the
//!    first sent to the last answered, and each POST's own time; the server's requests by verb
//!    and code over that window (`apiserver_request_total` diffed), its APF queue waits and
//!    rejections, and the CPU of kube-apiserver and etcd. Then the pods are deleted (grace 0)
//!    and the bench waits until they are gone.
//! 2. **nodelet starting**: a fresh agent on the node identity (`system:node:bench-node`),
//!    settled until its Node exists and 3 s more; then the same POSTs, and the same figures
//!    from the first POST until every volume's file is on disk, plus when that was, the
//!    agent's CPU (during the POSTs and until then) and RSS (then); its RSS and live heap 2 s
//!    later, and the `FailedMount` events posted since it started; and (first round only, unless `SCALE_NO_UPDATES`) 50 updates/s for 20 s: API
//!    write (a merge patch, as a controller) → new content visible, p50 / p99, phase by phase
//!    (`scale/steady.rs`).
//!    The agent is stopped and the pods deleted.
//!
//! With `SCALE_SERVER_PROFILE=DIR`, kube-apiserver's CPU profile is saved in `DIR` for each
//! window: `round-N-no-agent.pprof` (1 s from the first POST) and `round-N-nodelet.pprof`
//! (`SCALE_SERVER_PROFILE_SECS`, default 2 s, from the first POST: the POSTs and the start);
//! `go tool pprof -top -cum FILE` names the server's functions (`docs/figures.md`, "Where the
//! server's CPU goes").
//!
//! The objects (990, in `default`) are created once, before the first round; a state directory
//! kept with `REALK8S_STATE` keeps them for the next bench.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use nodelet_core::{PodDirs, PodUid};

use crate::support::applied::{self, KUBECTL_USER_AGENT, Writer};
use crate::support::disk::Disk;
use crate::support::realk8s::{RealK8s, ServerCounts};
use crate::support::{
    NODE, cpu_time, free_port, rss_kib, scrape, spawn_agent_with, summary, volume_dir, wait_all,
};

/// Pods and objects: `real-991` (a multiple of the pods).
const PODS: usize = 110;
const OBJECTS: usize = 990;

/// Runs the rounds (see the module docs).
pub(crate) async fn run(disk: &Disk) {
    let rounds: usize = std::env::var("SCALE_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let k8s = RealK8s::start();
    let admin = k8s.admin_client(KUBECTL_USER_AGENT).await;
    let writer = Writer::from_client(admin.clone());
    let node_kubeconfig = k8s.node_kubeconfig(NODE);
    let label = format!("k8s-991@{}", disk.kind().name());
    delete_pods(&admin).await;
    let made = futures::stream::iter(0..OBJECTS)
        .map(|j| {
            let w = writer.clone();
            async move { w.try_create(applied::object(j, "v0")).await.is_ok() }
        })
        .buffer_unordered(16)
        .collect::<Vec<bool>>()
        .await;
    // Objects left by an earlier run on a kept state directory are set back to v0.
    for (j, new) in made.iter().enumerate() {
        if !new {
            writer.set_key(j, "v0").await;
        }
    }
    println!(
        "scale/{label}/server: kube-apiserver on 127.0.0.1:{} ({} objects created, {} there already)",
        k8s.port,
        made.iter().filter(|n| **n).count(),
        made.iter().filter(|n| !**n).count()
    );
    for round in 0..rounds {
        let agent_first = round % 2 == 1;
        for with_agent in [agent_first, !agent_first] {
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            let load = load
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            if with_agent {
                let root = disk.dir().join(format!("root-{round}"));
                with_nodelet(&k8s, &writer, &node_kubeconfig, &root, &label, round, &load).await;
            } else {
                no_agent(&k8s, &writer, &label, round, &load).await;
            }
            delete_pods(&admin).await;
        }
    }
}

/// What the server did over a window: its requests, queue waits and CPU.
struct Window {
    counts: ServerCounts,
    cpu: (Duration, Duration),
}

impl Window {
    async fn open(k8s: &RealK8s, client: &kube::Client) -> Window {
        Window {
            counts: k8s.counts(client).await,
            cpu: k8s.cpu(),
        }
    }

    /// The window's figures, closed now: `(server CPU line, requests line)`.
    async fn close(
        &self,
        k8s: &RealK8s,
        client: &kube::Client,
        elapsed: Duration,
    ) -> (String, ServerCounts) {
        let cpu = k8s.cpu();
        let counts = k8s.counts(client).await;
        let (api, etcd) = (cpu.0 - self.cpu.0, cpu.1 - self.cpu.1);
        (
            format!(
                "kube-apiserver {api:.2?} ({:.0} % of one core), etcd {etcd:.2?} ({:.0} %) in {elapsed:.2?}",
                100.0 * api.as_secs_f64() / elapsed.as_secs_f64(),
                100.0 * etcd.as_secs_f64() / elapsed.as_secs_f64(),
            ),
            counts,
        )
    }
}

/// Where `SCALE_SERVER_PROFILE` asks for the server's CPU profiles (see the module docs).
fn profile_dir() -> Option<PathBuf> {
    std::env::var_os("SCALE_SERVER_PROFILE").map(PathBuf::from)
}

/// Starts `seconds` of kube-apiserver's CPU profile now, saved as `DIR/<name>.pprof` when it
/// ends (`None` without `SCALE_SERVER_PROFILE`); join the handle to have the file written.
fn start_profile(
    client: &kube::Client,
    name: &str,
    seconds: u64,
) -> Option<tokio::task::JoinHandle<PathBuf>> {
    let dir = profile_dir()?;
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let file = dir.join(format!("{name}.pprof"));
    let client = client.clone();
    let fut = async move {
        let bytes = RealK8s::cpu_profile(client, seconds).await;
        std::fs::write(&file, bytes).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        file
    };
    Some(tokio::spawn(fut))
}

/// Prints where a profile started with [`start_profile`] was saved.
async fn report_profile(label: &str, handle: Option<tokio::task::JoinHandle<PathBuf>>) {
    if let Some(h) = handle {
        let file = h.await.unwrap_or_else(|e| panic!("server profile: {e}"));
        println!(
            "{label}: kube-apiserver CPU profile in {} (`go tool pprof -top -cum` reads it)",
            file.display()
        );
    }
}

/// POSTs the pods one after the other: each pod's UID and objects, each POST's time, and the
/// time from the first sent to the last answered.
async fn post_pods(writer: &Writer) -> (Vec<(PodUid, Vec<usize>)>, Vec<Duration>, Duration) {
    let started = Instant::now();
    let mut pods = Vec::with_capacity(PODS);
    let mut each = Vec::with_capacity(PODS);
    let mut next = 0;
    const _: () = assert!(OBJECTS.is_multiple_of(PODS));
    for i in 0..PODS {
        // 990 objects: 9 per pod.
        let objs: Vec<usize> = (next..next + OBJECTS / PODS).collect();
        next += OBJECTS / PODS;
        let sent = Instant::now();
        let pod = writer.create(applied::pod(i, &objs)).await;
        each.push(sent.elapsed());
        let uid = PodUid::new(pod["metadata"]["uid"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("the server's pod: {e}"));
        pods.push((uid, objs));
    }
    (pods, each, started.elapsed())
}

async fn no_agent(k8s: &RealK8s, writer: &Writer, label: &str, round: usize, load: &str) {
    let client = writer.client();
    let window = Window::open(k8s, client).await;
    let profile = start_profile(client, &format!("round-{round}-no-agent"), 1);
    let (_, each, posts) = post_pods(writer).await;
    let (cpu, counts) = window.close(k8s, client, posts).await;
    println!(
        "scale/{label}/round-{round}/no-agent: load {load}; {PODS} pod POSTs done in {posts:.2?} (each: {}); server CPU: {cpu}",
        summary(each)
    );
    println!(
        "scale/{label}/round-{round}/no-agent-requests: {}",
        counts.since(&window.counts)
    );
    report_profile(
        &format!("scale/{label}/round-{round}/no-agent-profile"),
        profile,
    )
    .await;
}

async fn with_nodelet(
    k8s: &RealK8s,
    writer: &Writer,
    kubeconfig: &std::path::Path,
    root: &std::path::Path,
    label: &str,
    round: usize,
    load: &str,
) {
    let client = writer.client();
    let metrics_port = free_port();
    let spawned_at = unix_seconds();
    // As a kubelet: its Node registered and its Lease renewed.
    let child = spawn_agent_with(
        kubeconfig,
        root,
        "auto",
        &format!("127.0.0.1:{metrics_port}"),
        &["--register-node"],
    );
    let pid = child.pid();
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    while nodes.get_opt(NODE).await.ok().flatten().is_none() {
        assert!(
            Instant::now() < deadline,
            "the agent never registered its Node"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let window = Window::open(k8s, client).await;
    let agent_cpu0 = cpu_time(pid);
    let seconds = std::env::var("SCALE_SERVER_PROFILE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let profile = start_profile(client, &format!("round-{round}-nodelet"), seconds);
    let started = Instant::now();
    let (pods, each, posts) = post_pods(writer).await;
    let agent_cpu_posts = cpu_time(pid) - agent_cpu0;
    let (posts_cpu, posts_counts) = window.close(k8s, client, posts).await;
    let mut files = vec![PathBuf::new(); OBJECTS];
    for (uid, objs) in &pods {
        let vols = PodDirs::new(root).volumes(uid);
        for j in objs {
            files[*j] = vols.join(volume_dir(*j)).join("k");
        }
    }
    let mounted = wait_all(
        files
            .iter()
            .map(|f| (f.clone(), "v0".to_owned(), started))
            .collect(),
    )
    .await;
    let all = mounted.iter().max().copied().unwrap_or_default();
    let (cpu, counts) = window.close(k8s, client, started.elapsed()).await;
    println!(
        "scale/{label}/round-{round}/nodelet: load {load}; {PODS} pod POSTs done in {posts:.2?} (each: {}); all {OBJECTS} volumes on disk {all:.2?} after the first POST; agent CPU {:.2?}, RSS {:.1} MiB; server CPU: {cpu}",
        summary(each),
        cpu_time(pid) - agent_cpu0,
        rss_kib(pid) as f64 / 1024.0,
    );
    println!(
        "scale/{label}/round-{round}/nodelet-during-posts: server CPU: {posts_cpu}; agent CPU {agent_cpu_posts:.2?}; requests: {}",
        posts_counts.since(&window.counts)
    );
    println!(
        "scale/{label}/round-{round}/nodelet-requests: until all on disk: {}",
        counts.since(&window.counts)
    );
    report_profile(
        &format!("scale/{label}/round-{round}/nodelet-profile"),
        profile,
    )
    .await;
    let metrics = scrape(metrics_port).await;
    let phases: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("nodelet_first_read")
                || l.starts_with("nodelet_paced")
                || l.starts_with("nodelet_api_requests_retried")
                || l.starts_with("nodelet_request_window")
        })
        .collect();
    println!(
        "scale/{label}/round-{round}/nodelet-agent-metrics: {}",
        phases.join("; ")
    );
    crate::steady::memory(
        &format!("scale/{label}/round-{round}"),
        pid,
        metrics_port,
        Duration::from_secs(2),
    )
    .await;
    println!(
        "scale/{label}/round-{round}/nodelet-failed-mounts: {} FailedMount events since the agent started",
        failed_mounts(client, spawned_at).await
    );
    if round == 0 && std::env::var_os("SCALE_NO_UPDATES").is_none() {
        crate::steady::updates(writer, &files, &format!("scale/{label}"), pid, metrics_port).await;
        // Every object back to v0 for the next round.
        futures::stream::iter(0..OBJECTS)
            .map(|j| {
                let w = writer.clone();
                async move { w.set_key(j, "v0").await }
            })
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await;
    }
    drop(child);
}

/// Seconds since the epoch now (the second Kubernetes stamps objects with).
fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `FailedMount` events of `default` created since `since` (seconds since the epoch): a volume
/// that failed at the start, as the cluster sees it (OM-36: none for the node's own pacing).
async fn failed_mounts(client: &kube::Client, since: i64) -> usize {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default().fields("reason=FailedMount"))
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|e| {
                    e.metadata
                        .creation_timestamp
                        .as_ref()
                        .is_some_and(|t| t.0.as_second() >= since)
                })
                .count()
        })
        .unwrap_or_else(|e| panic!("listing events: {e}"))
}

/// Deletes every pod in `default` at once (grace 0: no kubelet needs to confirm) and waits
/// until they are gone.
async fn delete_pods(client: &kube::Client) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = pods
            .list_metadata(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(usize::MAX);
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{left} pods never went away");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
