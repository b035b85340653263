//! Pod churn: the real `nodelet` binary (a child process, so its heap and RSS are its own) on a
//! node identity, against `nodelet-apiserver` (in this process, TLS, auth, the Node
//! authorizer's lag: a new pod's objects are refused, "no relationship found", until the
//! authorizer's graph links the pod) or, with `SCALE_SERVER=realk8s REALK8S_DIR=<the realk8s
//! scripts>`, a real kube-apiserver v1.36.2 and etcd (`churn/cluster.rs`; the agent registers
//! its Node, each pod also gets its `kube-api-access` volume; never part of `cargo test`):
//!
//! 1. Start the server and the agent with its `/metrics` endpoint; once it is ready, settle
//!    10 s: the idle heap (`nodelet_heap_allocated_bytes`) and RSS, before the first pod.
//! 2. Create 30 pods, each mounting 5 objects of its own (3 ConfigMaps, 2 Secrets, created just
//!    before it).
//! 3. For `CHURN_SECS`: every 5 s delete the 6 oldest pods (as `kubectl delete`: the agent
//!    tears each down and removes it from the API, then the bench deletes its objects) and
//!    create 6 new ones; 3 updates/s, each to a random object of a random pod whose volumes are
//!    all on disk (a whole-object update on the stand-in, a merge patch on the real server).
//!    A thread of its own watches the disk (`churn/poll.rs`), so the bench's requests never
//!    delay a measurement. Heap and RSS sampled every 15 s; each minute a line with the
//!    minute's last sample (RSS anonymous and file-backed, threads), the agent's CPU over that
//!    minute and the load average.
//! 4. Delete every pod; wait until their volume directories are gone and they are removed from
//!    the API; delete their objects; wait 10 s: heap and RSS after the last pod.
//!
//! Prints: pod created → all 5 files on disk, p50 / p99 / max (the pods of the churn; the first
//! 30, a cold start, on a line of their own), and its phases (POST answered; the bench's own
//! pod watch saw the pod, on the real server; the agent made the pod's directory; its first
//! and last file written and the last `..data` switched, from the writer's times on disk; all
//! seen), with the share of each phase in the pods at or over the p99 and the slowest pods
//! phase by phase; update → new content on disk; pod deleted → removed from the API by
//! the agent; pods created and deleted, updates; the agent's request, retry and first-read
//! counters over the churn; what was left under the agent's root; the heap and RSS series;
//! idle, min / max after warm-up (the first 20 % of the run) and the least-squares slope per
//! minute after it; heap and RSS after the last pod against idle; the requests from the first
//! pod to the last gone (stand-in: the agent's LISTs, watch-lists and watches by resource;
//! real: every request by verb, resource and code, APF and authorization decisions); and a
//! verdict line against the targets ([`FLAT`]: heap and RSS drift after warm-up within ±1 MiB
//! over the run, heap after the last pod within 1 MiB of idle; [`POD_TO_VOLUMES_P99`]: pod →
//! volumes p99 ≤ 200 ms). The load average goes on the config, minute and verdict lines.
//!
//! `cargo bench -p nodelet --bench churn` (about 2.5 minutes). `CHURN_SECS=N`: how long to
//! churn (default 120; the memory run is `CHURN_SECS=1800`). `CHURN_LAG_MS=N`: the stand-in's
//! Node authorizer lag (default the server's). `SCALE_AGENT_BIN=PATH` runs that `nodelet`
//! binary (a `dhat-heap` build writes its profile when the bench stops it with SIGTERM, to
//! `$NODELET_DHAT_FILE`); `SCALE_AGENT_LOG` is its `RUST_LOG`; `SCALE_AGENT_ARGS` adds flags.

/// The churn's server, stand-in or real.
#[path = "churn/cluster.rs"]
mod cluster;
/// The thread that watches the disk.
#[path = "churn/poll.rs"]
mod poll;
mod support;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nodelet_core::{PodDirs, PodUid};

use cluster::{Cluster, PodEvents};
use poll::{PodTimes, PodWatch, Poller};
use support::phases::Phases;
use support::{
    cpu_time, free_port, heap_bytes, percentile, rss_kib, rss_parts, scrape, spawn_agent,
    spawn_agent_with, summary, volume_dir,
};

/// Pods alive at any time.
const PODS: usize = 30;
/// Volumes per pod: objects `10 i .. 10 i + 5`, even ConfigMaps and odd Secrets (3 + 2).
const VOLUMES: usize = 5;
/// Every `REPLACE_EVERY`, the `REPLACED` oldest pods are deleted and as many created.
const REPLACE_EVERY: Duration = Duration::from_secs(5);
const REPLACED: usize = 6;
/// Updates per second to objects of live pods.
const UPDATES_PER_SEC: u32 = 3;
const SAMPLE_EVERY: Duration = Duration::from_secs(15);
/// The first fifth of the run is warm-up: left out of min / max and the slope.
const WARM_UP: f64 = 0.2;
/// Settle before the idle figures and after the last pod is gone.
const SETTLE: Duration = Duration::from_secs(10);
/// How long a pod may take to mount, or to be torn down and removed, before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(120);
/// The memory target: heap and RSS drift after warm-up (least-squares slope times the minutes
/// after warm-up) and the heap after the last pod against idle, each within this, in MiB.
const FLAT: f64 = 1.0;
/// The latency target: pod created → all its files on disk, p99 under churn.
const POD_TO_VOLUMES_P99: Duration = Duration::from_millis(200);
/// The slowest pods of the churn shown with their phases.
const SLOWEST: usize = 8;

fn main() {
    if !support::selected("churn") {
        return;
    }
    let rt = support::runtime();
    rt.block_on(run());
}

/// A pod of the workload: `p-<index>` mounting objects `objs`.
struct Pod {
    index: usize,
    objs: [usize; VOLUMES],
    /// Each volume's file `k`.
    files: [PathBuf; VOLUMES],
    /// `<root>/pods/<uid>/volumes`.
    volumes: PathBuf,
}

/// One heap / RSS sample, `at` from the first pod created.
struct Sample {
    at: Duration,
    heap: Option<f64>,
    rss: f64,
}

/// The server, the agent and where they write.
struct Setup {
    cluster: Cluster,
    agent: support::Agent,
    metrics_port: u16,
    root: PathBuf,
    lag: String,
    _dir: tempfile::TempDir,
}

/// (1): the server (stand-in or real) and the agent, ready for pods.
async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().join("root");
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let real = std::env::var("SCALE_SERVER").is_ok_and(|v| v == "realk8s");
    let (cluster, agent, lag) = if real {
        let (cluster, kubeconfig) = Cluster::real().await;
        // As a kubelet: its Node registered and its Lease renewed.
        let agent = spawn_agent_with(&kubeconfig, &root, "auto", &listen, &["--register-node"]);
        (cluster, agent, "the server's own".to_owned())
    } else {
        let mut config = nodelet_apiserver::Config::default().with_auth().with_tls();
        let lag = match env_num("CHURN_LAG_MS") {
            Some(ms) => {
                config = config.node_authorizer_lag(Duration::from_millis(ms));
                format!("{ms} ms (CHURN_LAG_MS)")
            }
            None => format!("{:?} (the server's default)", config.node_authorizer_lag),
        };
        let kubeconfig = dir.path().join("node.kubeconfig");
        let cluster = Cluster::stand_in(config, &kubeconfig).await;
        let agent = spawn_agent(&kubeconfig, &root, "auto", &listen);
        (cluster, agent, lag)
    };
    let deadline = Instant::now() + PATIENCE;
    while !cluster.agent_ready().await || scrape(metrics_port).await.is_empty() {
        assert!(Instant::now() < deadline, "the agent never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Setup {
        cluster,
        agent,
        metrics_port,
        root,
        lag,
        _dir: dir,
    }
}

/// The counts of the run, printed at the end.
#[derive(Default)]
struct Counts {
    created: usize,
    deleted: usize,
    written: usize,
    /// Pod deleted → removed from the API by the agent.
    removals: Vec<Duration>,
}

async fn run() {
    let secs: u64 = env_num("CHURN_SECS").unwrap_or(120);
    let churn = Duration::from_secs(secs);
    let Setup {
        cluster,
        agent,
        metrics_port,
        root,
        lag,
        _dir,
    } = setup().await;
    let pid = agent.pid();
    let load = load_average();
    println!(
        "churn/config: {PODS} pods alive x {VOLUMES} objects (3 ConfigMaps, 2 Secrets), {REPLACED} replaced every {REPLACE_EVERY:?}, {UPDATES_PER_SEC} updates/s, for {churn:?}; server {}; Node authorizer lag {lag}; load average {load}",
        cluster.name()
    );
    tokio::time::sleep(SETTLE).await;
    let idle = sample(pid, metrics_port, Duration::ZERO).await;
    println!("churn/idle: before the first pod: {}", idle.values());
    let metrics_before = scrape(metrics_port).await;

    // (2)
    let mark = cluster.mark().await;
    let dirs = PodDirs::new(&root);
    let poller = Poller::start();
    let pod_events = cluster.watch_pods().await;
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut seq: u64 = 0;
    let mut next_index = 0;
    let mut live: VecDeque<Pod> = VecDeque::new();
    // Deleted, waiting for the agent to remove them from the API: the pod and when.
    let mut deleting: Vec<(Pod, Instant)> = Vec::new();
    let mut counts = Counts::default();
    let start = Instant::now();
    for _ in 0..PODS {
        let p = create_pod(&cluster, &dirs, &poller, &mut next_index, &mut seq).await;
        live.push_back(p);
        counts.created += 1;
    }
    let cold_pods = PODS;

    // (3)
    let mut samples = vec![sample(pid, metrics_port, start.elapsed()).await];
    println!("churn/sample: {}", samples[0].show());
    let cpu_start = cpu_time(pid);
    let mut minute_cpu = cpu_start;
    let mut minute = 0u64;
    let end = start + churn;
    let mut next_replace = start + REPLACE_EVERY;
    let mut next_update = start;
    let mut next_sample = start + SAMPLE_EVERY;
    let mut next_gone_check = start;
    let update_every = Duration::from_secs(1) / UPDATES_PER_SEC;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if now >= next_sample {
            let s = sample(pid, metrics_port, start.elapsed()).await;
            if s.at.as_secs() / 60 > minute {
                minute = s.at.as_secs() / 60;
                let cpu = cpu_time(pid);
                println!(
                    "churn/minute {minute}: {} ({}), agent CPU {:.1} % of a core; pods created {}; load average {}",
                    s.show(),
                    rss_parts(pid),
                    100.0 * (cpu - minute_cpu).as_secs_f64() / 60.0,
                    counts.created,
                    load_average(),
                );
                minute_cpu = cpu;
            }
            samples.push(s);
            next_sample += SAMPLE_EVERY;
        }
        if now >= next_replace {
            for _ in 0..REPLACED {
                let Some(old) = live.pop_front() else { break };
                cluster.delete_pod(old.index).await;
                poller.forget(old.index);
                deleting.push((old, Instant::now()));
                counts.deleted += 1;
            }
            for _ in 0..REPLACED {
                let p = create_pod(&cluster, &dirs, &poller, &mut next_index, &mut seq).await;
                live.push_back(p);
                counts.created += 1;
            }
            next_replace += REPLACE_EVERY;
        }
        if now >= next_update {
            let ready: Vec<&Pod> = {
                let seen = poller.seen();
                live.iter()
                    .filter(|p| seen.ready.contains(&p.index))
                    .collect()
            };
            if !ready.is_empty() {
                let p = ready[rng.below(ready.len())];
                let v = rng.below(VOLUMES);
                seq += 1;
                let since = Instant::now();
                cluster.update_object(p.objs[v], &seq.to_string()).await;
                poller.update(p.index, p.files[v].clone(), seq, since);
                counts.written += 1;
            }
            next_update += update_every;
        }
        if let Some((index, since)) = poller.seen().oldest_pending {
            assert!(since.elapsed() < PATIENCE, "p-{index} never mounted");
        }
        if now >= next_gone_check {
            remove_gone(&cluster, &mut deleting, &mut counts.removals).await;
            next_gone_check = Instant::now() + Duration::from_millis(50);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let churned = start.elapsed();
    let churn_cpu = cpu_time(pid) - cpu_start;
    let mounts_never = {
        let seen = poller.seen();
        live.iter()
            .filter(|p| !seen.ready.contains(&p.index))
            .count()
    };
    let metrics_churned = scrape(metrics_port).await;

    // (4)
    while let Some(old) = live.pop_front() {
        cluster.delete_pod(old.index).await;
        poller.forget(old.index);
        deleting.push((old, Instant::now()));
        counts.deleted += 1;
    }
    let last_deleted = Instant::now();
    let mut volume_dirs: Vec<PathBuf> = deleting.iter().map(|(p, _)| p.volumes.clone()).collect();
    while !deleting.is_empty() || !volume_dirs.is_empty() {
        assert!(
            last_deleted.elapsed() < PATIENCE,
            "{} pods never removed, {} volume directories left",
            deleting.len(),
            volume_dirs.len()
        );
        remove_gone(&cluster, &mut deleting, &mut counts.removals).await;
        volume_dirs.retain(|d| d.exists());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_gone = last_deleted.elapsed();
    let requests = cluster.requests(&mark).await;
    let leftovers = leftovers(&root);
    tokio::time::sleep(SETTLE).await;
    let after = sample(pid, metrics_port, start.elapsed()).await;

    let (mounted, updates, abandoned) = {
        let seen = poller.seen();
        (seen.mounted.clone(), seen.updates.clone(), seen.abandoned)
    };
    drop(poller);
    let Counts {
        created,
        deleted,
        written,
        removals,
    } = counts;
    println!(
        "churn/pods: {created} created, {deleted} deleted over {churned:.1?} of churn; {written} updates ({abandoned} abandoned: their pod deleted before they were seen); {mounts_never} pods not mounted when the churn ended"
    );
    let (cold, churned_pods): (Vec<PodTimes>, Vec<PodTimes>) =
        mounted.into_iter().partition(|t| t.index < cold_pods);
    println!(
        "churn/cold-start: the first {cold_pods} pods, created at once: created -> all {VOLUMES} files on disk: {}",
        summary(cold.iter().map(|t| t.all).collect())
    );
    let mut mounts: Vec<Duration> = churned_pods.iter().map(|t| t.all).collect();
    mounts.sort();
    let mount_p99 = percentile(&mounts, 0.99);
    println!(
        "churn/pod-to-volumes: pods of the churn, created -> all {VOLUMES} files on disk: {}",
        summary(mounts)
    );
    phases(&churned_pods, pod_events.as_ref());
    println!(
        "churn/update-latency: API write -> new content on disk: {}",
        summary(updates)
    );
    println!(
        "churn/pod-removal: pod deleted -> removed from the API by the agent: {}; the last pods' volume directories gone and the pods removed {all_gone:.2?} after they were deleted",
        summary(removals)
    );
    println!(
        "churn/cpu: the agent used {:.1} % of a core over the churn ({churn_cpu:.1?} in {churned:.0?})",
        100.0 * churn_cpu.as_secs_f64() / churned.as_secs_f64()
    );
    println!(
        "churn/agent-metrics: over the churn: {}",
        agent_deltas(&metrics_before, &metrics_churned)
    );
    println!("churn/leftovers: after the last pod: {leftovers}");
    memory(
        &samples, churn, &idle, &after, created, pid, &requests, &lag, mount_p99,
    );
    drop(agent);
    cluster.finish().await;
}

/// The phases of pod → volumes over the pods of the churn (`support/phases.rs`): POST
/// answered; the bench's own pod watch saw it (real server: the server's fan-out); the agent
/// made its directory; its first and last file written; the last `..data` switched (after the
/// writer's `fsync`s); all seen by the poller. Each phase's p50 / p99, the share of each in
/// the pods at or over the p99, and the slowest pods phase by phase.
fn phases(pods: &[PodTimes], events: Option<&PodEvents>) {
    let mut phases = Phases::new(&[
        "sent",
        "POST answered",
        "pod event",
        "pod directory",
        "first file written",
        "last file written",
        "last ..data swapped",
        "all seen",
    ]);
    let events = events.map(|e| e.lock().clone()).unwrap_or_default();
    for t in pods {
        let event = events
            .get(&t.index)
            .map_or(t.post, |at| at.saturating_duration_since(t.sent));
        let first = t.first_written.unwrap_or(t.first);
        let last = t.last_written.unwrap_or(t.all);
        phases.push(
            format!("p-{}", t.index),
            &[
                t.post,
                event,
                t.dir,
                first,
                last,
                t.last_swapped.unwrap_or(last),
                t.all,
            ],
        );
    }
    println!(
        "churn/pod-to-volumes-phases: {} pods ({} seen by the bench's pod watch); {}",
        phases.len(),
        pods.iter()
            .filter(|t| events.contains_key(&t.index))
            .count(),
        phases.each()
    );
    println!("churn/pod-to-volumes-tail: {}", phases.tail());
    println!(
        "churn/slowest-pods: sent → POST + event + directory + first written + last written + swapped + seen: {}",
        phases.slowest(SLOWEST)
    );
}

/// The memory figures and the verdict line.
#[allow(clippy::too_many_arguments)]
fn memory(
    samples: &[Sample],
    churn: Duration,
    idle: &Sample,
    after: &Sample,
    created: usize,
    pid: u32,
    requests: &str,
    lag: &str,
    mount_p99: Duration,
) {
    println!("churn/memory-idle: before the first pod: {}", idle.values());
    let warm: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at.as_secs_f64() >= WARM_UP * churn.as_secs_f64())
        .collect();
    let heaps: Vec<(f64, f64)> = warm
        .iter()
        .filter_map(|s| Some((s.at.as_secs_f64() / 60.0, s.heap? / MIB)))
        .collect();
    let rsss: Vec<(f64, f64)> = warm
        .iter()
        .map(|s| (s.at.as_secs_f64() / 60.0, s.rss / MIB))
        .collect();
    println!(
        "churn/memory-after-warm-up: {} samples from {:.0?}: heap {}; RSS {}",
        warm.len(),
        Duration::from_secs_f64(WARM_UP * churn.as_secs_f64()),
        trend(&heaps).show(),
        trend(&rsss).show()
    );
    let heap_delta = match (after.heap, idle.heap) {
        (Some(a), Some(i)) => format!(
            "{:+.2} MiB, {:+.0} bytes per pod that came and went",
            (a - i) / MIB,
            (a - i) / created as f64
        ),
        _ => "-".to_owned(),
    };
    println!(
        "churn/memory-after-last-pod: {SETTLE:?} after the last pod was gone: {} (idle {}); heap {heap_delta}; RSS {:+.2} MiB",
        after.show(),
        idle.values(),
        (after.rss - idle.rss) / MIB,
    );
    println!("churn/memory-after-last-pod: {}", rss_parts(pid));
    println!("churn/requests: from the first pod to the last pod gone: {requests}");
    // The targets: drift after warm-up = slope x the minutes after warm-up.
    let minutes = (1.0 - WARM_UP) * churn.as_secs_f64() / 60.0;
    let drift = |points: &[(f64, f64)], what: &str| match trend(points).slope_kib {
        Some(slope) => {
            let mib = slope * minutes / 1024.0;
            let ok = if mib.abs() <= FLAT {
                "flat"
            } else {
                "NOT FLAT"
            };
            format!("{what} {slope:+.1} KiB/min = {mib:+.2} MiB over {minutes:.0} min: {ok}")
        }
        None => format!("{what}: too few samples"),
    };
    let after_heap = match (after.heap, idle.heap) {
        (Some(a), Some(i)) => {
            let mib = (a - i) / MIB;
            let ok = if mib <= FLAT { "within" } else { "OVER" };
            format!("heap after the last pod {mib:+.2} MiB vs idle: {ok} {FLAT} MiB")
        }
        _ => "heap not reported".to_owned(),
    };
    let latency = if mount_p99 <= POD_TO_VOLUMES_P99 {
        "met"
    } else {
        "MISSED"
    };
    println!(
        "churn/verdict: after warm-up {}; {}; {after_heap}; pod -> volumes p99 {mount_p99:.1?}: {latency} (<= {POD_TO_VOLUMES_P99:?}, lag {lag}); load average {}",
        drift(&heaps, "heap"),
        drift(&rsss, "RSS"),
        load_average(),
    );
}

/// `/proc/loadavg`'s three averages (the machine is shared).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the agent left under its root after the last pod: pod directories, and volume
/// directories among them.
fn leftovers(root: &std::path::Path) -> String {
    let pods: Vec<PathBuf> = std::fs::read_dir(root.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    let volumes = pods.iter().filter(|p| p.join("volumes").exists()).count();
    format!(
        "{} pod directories, {volumes} of them with a volumes directory",
        pods.len()
    )
}

/// The agent's counters that moved between two scrapes: requests by verb, retries by
/// reason, first reads, API write failures and dropped events.
fn agent_deltas(before: &str, after: &str) -> String {
    let value = |text: &str, series: &str| {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let series: Vec<&str> = after
        .lines()
        .filter(|l| {
            [
                "nodelet_api_requests",
                "nodelet_first_read",
                "nodelet_api_write_failures",
                "nodelet_events_dropped",
                "nodelet_request_window{figure=\"samples",
                "nodelet_request_window{figure=\"over_target",
                "nodelet_request_window{figure=\"pause",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s))
        .collect();
    let moved: Vec<String> = series
        .iter()
        .filter_map(|s| {
            let d = value(after, s) - value(before, s);
            (d.abs() > 1e-9).then(|| format!("{s} {d:+.3}"))
        })
        .collect();
    if moved.is_empty() {
        "none".to_owned()
    } else {
        moved.join(", ")
    }
}

const MIB: f64 = 1024.0 * 1024.0;

impl Sample {
    /// `heap … MiB, RSS … MiB`.
    fn values(&self) -> String {
        let heap = self.heap.map_or("heap not reported".to_owned(), |b| {
            format!("heap {:.2} MiB", b / MIB)
        });
        format!("{heap}, RSS {:.2} MiB", self.rss / MIB)
    }

    /// `t=…s heap … MiB, RSS … MiB`.
    fn show(&self) -> String {
        format!("t={:.0}s {}", self.at.as_secs_f64(), self.values())
    }
}

/// The agent's live heap and RSS now, `at` into the run.
async fn sample(pid: u32, metrics_port: u16, at: Duration) -> Sample {
    Sample {
        at,
        heap: heap_bytes(&scrape(metrics_port).await),
        rss: rss_kib(pid) as f64 * 1024.0,
    }
}

/// Creates pod `p-<next_index>` after its 5 objects (values `seq`, then incremented), and
/// has the poller watch for its files.
async fn create_pod(
    cluster: &Cluster,
    dirs: &PodDirs,
    poller: &Poller,
    next_index: &mut usize,
    seq: &mut u64,
) -> Pod {
    let index = *next_index;
    *next_index += 1;
    let objs: [usize; VOLUMES] = std::array::from_fn(|v| 10 * index + v);
    for j in objs {
        *seq += 1;
        cluster.create_object(j, &seq.to_string()).await;
    }
    let (sent, sent_wall) = (Instant::now(), std::time::SystemTime::now());
    let (uid, post) = cluster.create_pod(index, &objs).await;
    let uid = PodUid::new(&uid).unwrap_or_else(|e| panic!("the server's pod: {e}"));
    let volumes = dirs.volumes(&uid);
    let files = objs.map(|j| volumes.join(volume_dir(j)).join("k"));
    poller.pod(PodWatch {
        index,
        dir: dirs.pod(&uid),
        files: files.to_vec(),
        sent,
        sent_wall,
        post,
    });
    Pod {
        index,
        objs,
        files,
        volumes,
    }
}

/// For each pod in `deleting` the agent removed from the API: its removal latency into
/// `removals`, its objects deleted, and it is dropped.
async fn remove_gone(
    cluster: &Cluster,
    deleting: &mut Vec<(Pod, Instant)>,
    removals: &mut Vec<Duration>,
) {
    let mut kept = Vec::with_capacity(deleting.len());
    for (p, since) in deleting.drain(..) {
        if !cluster.pod_gone(p.index).await {
            kept.push((p, since));
            continue;
        }
        removals.push(since.elapsed());
        for j in p.objs {
            cluster.delete_object(j).await;
        }
    }
    *deleting = kept;
}

/// Min, max and least-squares slope of `(minutes, MiB)` points.
struct Trend {
    min: f64,
    max: f64,
    /// KiB per minute; `None` with fewer than two points.
    slope_kib: Option<f64>,
}

impl Trend {
    fn show(&self) -> String {
        match self.slope_kib {
            Some(slope) => format!(
                "min {:.2} MiB, max {:.2} MiB, slope {slope:+.1} KiB/min",
                self.min, self.max
            ),
            None => "too few samples".to_owned(),
        }
    }
}

/// The [`Trend`] of `(minutes, MiB)` points.
fn trend(points: &[(f64, f64)]) -> Trend {
    let min = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let max = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    if points.len() < 2 {
        return Trend {
            min,
            max,
            slope_kib: None,
        };
    }
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    Trend {
        min,
        max,
        slope_kib: Some(sxy / sxx * 1024.0),
    }
}

fn env_num(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|e| panic!("{name}={v:?}: not a whole number: {e}")),
    )
}

/// A fixed-seed xorshift generator: the same churn every run, no dependency.
struct XorShift(u64);

impl XorShift {
    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
