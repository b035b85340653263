//! Scale figures for the README's table of targets: the real `nodelet` binary (a child process,
//! so its connections, RSS and CPU are its own) on a node identity against `nodelet-apiserver`
//! (in this process) over TLS, once with `--api-protocol auto` (HTTP/2) and once with
//! `--api-protocol http1`, same workload:
//!
//! 1. Start the API server (TLS, auth with the Node authorizer's default 50 ms lag, 100
//!    streams per connection); create 1,000 distinct objects (500 ConfigMaps, 500 Secrets);
//!    start the agent.
//! 2. Create 110 pods mounting them all (10 pods × 10 volumes, 100 pods × 9); time from the
//!    first pod created until every volume's file is on disk.
//! 3. Settle 2 s, then: TCP connections the agent holds to the server (its sockets in
//!    `/proc/<pid>/fd` matched against `/proc/net/tcp*`, and the server's own count by protocol),
//!    and the agent's RSS.
//! 4. 50 updates/s for 20 s, each to a different object: API write → new content visible,
//!    p50 / p99 / max; the agent's own part of it (`nodelet_propagation_latency_seconds` over
//!    the window: the change announced to the volume manager → new content on disk); the
//!    agent's CPU time over the window (`/proc/<pid>/stat`).
//! 5. A restart as kube-apiserver restarts (`ServerHandle::restart` with
//!    `Restart::like_kube_apiserver().down(OUTAGE)`, in every run): listener and every
//!    connection closed for 10 s, the watch history forgotten (every resourceVersion the agent
//!    holds answers 410 Expired), `/readyz` 500 for 2 s and the Node authorizer's graph empty
//!    (every node request for a pod's object refused, "no relationship found") for 1 s after it
//!    listens again; then update objects at once (50 at 150 objects, 200 at 990 and more): time from
//!    each write until it is on disk, p50 / p99 / max; the agent's requests for ConfigMaps and
//!    Secrets after the restart (watch-lists, LISTs, watches), its retried requests and failed
//!    writes (its `/metrics`), connections before and after; then every LIST, watch-list and
//!    watch the agent made in the 20 s after the restart, by resource, refused ones counted.
//!
//! Runs (each on a fresh server and agent): HTTP/2 at 150 and 1,000 objects; the same with
//! `--goaway-chance 0.02` and 10 streams per connection (as the real-server run);
//! `goaway-30x5`, the restart measured on a real kube-apiserver (150 objects on 30 pods, 5
//! each, GOAWAY as above); HTTP/1.1 at 1,000 objects.
//! `SCALE_RUNS=h2-150,h2-1000,goaway-150,goaway-1000,goaway-30x5,h1-1000,h2-100,real-991,real-2500`
//! picks some;
//! `SCALE_MOUNT_ONLY=1` stops each run after step 2 (to profile the cold start);
//! `SCALE_CPU_HOG=SECS` adds a CPU competitor during step 4 (see [`cpu_competitor`]).
//!
//! **Like a real server** (`real-991`, `real-2500`): the server as a cluster has it
//! (`Config::like_a_cluster`: ServiceAccount admission gives every pod a `kube-api-access`
//! volume, so the agent also requests a token per pod and watches `kube-root-ca.crt`) with
//! `CostModel::like_kube_apiserver()` (every read's time on one of 74 places, a consistent
//! read's wait for the watch cache to catch up, a commit's before every write's); objects, pods and
//! updates written over HTTP as `kubectl apply` and a controller write them (labels, the
//! last-applied annotation, real payload sizes, `managedFields` added by the server; see
//! `support/applied.rs`), so the update latency includes the write. `real-991` is the issue's
//! real-server run: 110 pods × 9 objects + `kube-root-ca.crt`; `real-2500` a bigger node, 250
//! pods × 10 objects. `SCALE_READ_MS`, `SCALE_WRITE_MS`, `SCALE_CONCURRENCY`, `SCALE_PROGRESS_MS` override the cost
//! model (tuning).
//!
//! **On a real kube-apiserver** (`SCALE_SERVER=realk8s REALK8S_DIR=<the realk8s scripts>`):
//! instead of the runs above, `k8s-991` (the `real-991` workload) measured from the server's
//! side, with no agent and with nodelet starting, in rounds (`SCALE_REPEAT`): pod POST times,
//! the server's requests by verb and code and its CPU during the start, the agent's cold start
//! and update latency (`scale/real.rs`). Fails at once when the scripts or binaries are
//! missing; never part of `cargo test`.
//!
//! `SCALE_DISK=plain|tmpfs|fresh-ext4|aged-ext4` picks the file system of the agent's root
//! directory (`support/disk.rs`: loop devices, root only; the aged image is built once under
//! `target/`). `SCALE_RATE=N` sets the update rate of step 4 (default 50/s);
//! `SCALE_NO_RESTART=1` stops each run after step 4.
//!
//! `cargo bench -p nodelet --bench scale` (about 11 minutes). Prints one line per figure.
//! `h2-100` (HTTP/2, 100 objects on 20 pods) gives, beside h2-1000, the cost of one more
//! watched object. `SCALE_AGENT_BIN=PATH` runs that `nodelet` binary instead of the one built
//! with the bench (another allocator, a `dhat-heap` build: the agent is stopped with SIGTERM at
//! the end of a run, so a heap profile is written).

/// `SCALE_SERVER=realk8s`: the server's side on a real kube-apiserver.
#[path = "scale/real.rs"]
mod real;
/// The real-server run's memory and update phases.
#[path = "scale/steady.rs"]
mod steady;
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use nodelet_apiserver::{ApiServer, CostModel, RequestRecord, Restart, ServerHandle, User};
use nodelet_core::{PodDirs, PodUid};

use support::applied::{self, Writer};
use support::disk::{Disk, DiskKind};
use support::{
    NODE, allocator_name, check, cpu_split, cpu_time, free_port, heap_bytes, list_watch_counts,
    metric_sum, object, percentile, pod, rss_kib, rss_parts, scrape, spawn_agent, summary,
    tcp_connections, volume_dir, wait_all,
};

const PODS: usize = 110;
/// Updates per second in step 4 (`SCALE_RATE`).
const RATE: u32 = 50;
const UPDATE_WINDOW: Duration = Duration::from_secs(20);
/// Without an API server: the trace had 13 s (killed, started 10 s later, listening
/// ≈ 0.2 s after that, plus its start-up).
const OUTAGE: Duration = Duration::from_secs(10);
/// After a restart, the agent's LISTs and watches are counted over this long from the moment
/// the server listens again (every loop's retries after the graph rebuild included).
const REQUEST_WINDOW: Duration = Duration::from_secs(20);

/// One run's workload.
#[derive(Debug, Clone, Copy)]
struct Run {
    name: &'static str,
    protocol: &'static str,
    objects: usize,
    /// Pods the objects are spread over (at most one per object).
    pods: usize,
    /// `--goaway-chance` and `--http2-max-streams-per-connection` of the server.
    goaway: Option<(f64, u32)>,
    /// Like a real server: a cluster's admission, the cost model, objects as kubectl applies
    /// them, written over HTTP (see the module docs).
    real: bool,
}

const RUNS: [Run; 9] = [
    Run {
        name: "h2-150",
        protocol: "auto",
        objects: 150,
        pods: PODS,
        goaway: None,
        real: false,
    },
    Run {
        name: "h2-1000",
        protocol: "auto",
        objects: 1000,
        pods: PODS,
        goaway: None,
        real: false,
    },
    Run {
        name: "goaway-150",
        protocol: "auto",
        objects: 150,
        pods: PODS,
        goaway: Some((0.02, 10)),
        real: false,
    },
    Run {
        name: "goaway-1000",
        protocol: "auto",
        objects: 1000,
        pods: PODS,
        goaway: Some((0.02, 10)),
        real: false,
    },
    Run {
        name: "h1-1000",
        protocol: "http1",
        objects: 1000,
        pods: PODS,
        goaway: None,
        real: false,
    },
    // The restart measured on a real kube-apiserver: 30 pods x 5 objects, GOAWAY 0.02 with 10
    // streams.
    Run {
        name: "goaway-30x5",
        protocol: "auto",
        objects: 150,
        pods: 30,
        goaway: Some((0.02, 10)),
        real: false,
    },
    // The marginal cost per watched object, beside h2-1000 (a heap profile's slope).
    Run {
        name: "h2-100",
        protocol: "auto",
        objects: 100,
        pods: 20,
        goaway: None,
        real: false,
    },
    // The real-server run: 110 pods x 9 objects (+ kube-root-ca.crt).
    Run {
        name: "real-991",
        protocol: "auto",
        objects: 990,
        pods: PODS,
        goaway: None,
        real: true,
    },
    // A bigger node: 250 pods x 10 objects (+ kube-root-ca.crt).
    Run {
        name: "real-2500",
        protocol: "auto",
        objects: 2500,
        pods: 250,
        goaway: None,
        real: true,
    },
];

fn main() {
    if !support::selected("scale") {
        return;
    }
    let rt = support::runtime();
    let chosen = std::env::var("SCALE_RUNS").ok();
    let kind = DiskKind::from_env();
    match std::env::var("SCALE_SERVER").as_deref() {
        Ok("realk8s") => {
            let disk = Disk::prepare(kind);
            rt.block_on(real::run(&disk));
            return;
        }
        Ok("stand-in") | Err(_) => {}
        Ok(other) => panic!("SCALE_SERVER={other}: realk8s or stand-in"),
    }
    for r in RUNS {
        if chosen
            .as_deref()
            .is_none_or(|c| c.split(',').any(|n| n == r.name))
        {
            // Mounted for this run only; unmounted when it ends or panics.
            let disk = Disk::prepare(kind);
            rt.block_on(run(r, &disk));
        }
    }
}

/// [`CostModel::like_kube_apiserver`] with `SCALE_READ_MS`, `SCALE_WRITE_MS`,
/// `SCALE_CONCURRENCY` and `SCALE_PROGRESS_MS` over it.
fn cost_model() -> CostModel {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
    let mut model = CostModel::like_kube_apiserver();
    if let Some(ms) = env("SCALE_READ_MS") {
        model = model.read_latency(Duration::from_secs_f64(ms / 1e3));
    }
    if let Some(ms) = env("SCALE_WRITE_MS") {
        model = model.write_latency(Duration::from_secs_f64(ms / 1e3));
    }
    if let Some(n) = env("SCALE_CONCURRENCY") {
        model = model.concurrency(n as usize);
    }
    if let Some(ms) = env("SCALE_PROGRESS_MS") {
        model = model.progress_period(Duration::from_secs_f64(ms / 1e3));
    }
    model
}

/// How the run writes objects: through the handle (bare objects) or over HTTP as kubectl and a
/// controller do (`real` runs).
enum Writes {
    Handle(ServerHandle),
    Http(Writer),
}

impl Writes {
    /// Sets key `k` of object `j` to `value`.
    async fn set(&self, j: usize, value: &str) {
        match self {
            Writes::Handle(h) => {
                h.update(object(j, value)).unwrap_or_else(|e| panic!("{e}"));
            }
            Writes::Http(w) => w.set_key(j, value).await,
        }
    }

    /// Starts setting key `k` of object `j` to `value`: a task whose result is how long after
    /// `since` the write was answered (through the handle: done before this returns).
    fn start(&self, j: usize, value: &str, since: Instant) -> tokio::task::JoinHandle<Duration> {
        match self {
            Writes::Handle(h) => {
                h.update(object(j, value)).unwrap_or_else(|e| panic!("{e}"));
                let answered = since.elapsed();
                tokio::spawn(async move { answered })
            }
            Writes::Http(w) => {
                let (w, value) = (w.clone(), value.to_owned());
                tokio::spawn(async move {
                    w.set_key(j, &value).await;
                    since.elapsed()
                })
            }
        }
    }
}

async fn run(r: Run, disk: &Disk) {
    let label = &*format!("{}@{}", r.name, disk.kind().name());
    let protocol = r.protocol;
    let objects = r.objects;
    let rate = std::env::var("SCALE_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RATE);
    // (1)
    let mut config = nodelet_apiserver::Config::default().with_auth().with_tls();
    if let Some((_, streams)) = r.goaway {
        config = config.http2_max_streams_per_connection(streams);
    }
    if r.real {
        config = config.like_a_cluster().cost_model(cost_model());
    }
    let server = ApiServer::start(config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let h = server.handle();
    let port = server.addr().port();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = dir.path().join("node.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, &User::node(NODE))
        .unwrap_or_else(|e| panic!("{e}"));
    let writes = if r.real {
        let writer = Writer::new(&server);
        // As fast as the server takes them (its cost model's places), before the agent starts.
        futures::stream::iter(0..objects)
            .map(|j| {
                let w = writer.clone();
                async move { w.create(applied::object(j, "v0")).await }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        let size = |v: Option<serde_json::Value>| v.map_or(0, |v| v.to_string().len());
        println!(
            "scale/{label}/objects: {objects} as the server returns them: ConfigMap {} B, Secret {} B of JSON (cost model {:?})",
            size(h.get("v1", "ConfigMap", Some("default"), "cm-0")),
            size(h.get("v1", "Secret", Some("default"), "s-1")),
            cost_model(),
        );
        Writes::Http(writer)
    } else {
        for j in 0..objects {
            h.create(object(j, "v0")).unwrap_or_else(|e| panic!("{e}"));
        }
        Writes::Handle(h.clone())
    };
    // The objects every pod reads besides the bench's: kube-root-ca.crt (real runs).
    let watched = objects + usize::from(r.real);
    if let Some((chance, _)) = r.goaway {
        h.set_goaway_chance(chance);
    }
    let root = disk.dir().join("root");
    let metrics_port = free_port();
    let child = spawn_agent(
        &kubeconfig,
        &root,
        protocol,
        &format!("127.0.0.1:{metrics_port}"),
    );
    let pid = child.pid();

    // (2)
    h.reset_requests();
    let (agent_cpu0, server_cpu0) = (cpu_split(pid), cpu_time(std::process::id()));
    let started = Instant::now();
    let started_wall = std::time::SystemTime::now();
    let mut files: Vec<PathBuf> = vec![PathBuf::new(); objects];
    let mut next = 0;
    let pods = r.pods.min(objects);
    for i in 0..pods {
        // Objects spread over the pods as evenly as they go (1,000: 10 pods x 10, 100 x 9).
        let n = objects / pods + usize::from(i < objects % pods);
        let objs: Vec<usize> = (next..next + n).collect();
        next += n;
        let pod = match &writes {
            Writes::Http(w) => w.create(applied::pod(i, &objs)).await,
            Writes::Handle(h) => h.create(pod(i, &objs)).unwrap_or_else(|e| panic!("{e}")),
        };
        let uid = PodUid::new(pod["metadata"]["uid"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("the server's pod: {e}"));
        let vols = PodDirs::new(&root).volumes(&uid);
        for j in objs {
            files[j] = vols.join(volume_dir(j)).join("k");
        }
    }
    let created = started.elapsed();
    let mounted = wait_all(
        files
            .iter()
            .map(|f| (f.clone(), "v0".to_owned(), started))
            .collect(),
    )
    .await;
    let mount_all = mounted.iter().max().copied().unwrap_or_default();
    println!(
        "scale/{label}/mount: {pods} pods x {:.1} volumes ({objects} objects) all on disk {mount_all:.2?} after the first pod was created",
        objects as f64 / pods as f64
    );
    let agent_cpu = cpu_split(pid);
    println!(
        "scale/{label}/cold-start: {}; CPU until then: agent {:.2?} (user {:.2?}, system {:.2?}), API server and this bench {:.2?}",
        cold_start(&h.requests(), started, started_wall, &files, created),
        (agent_cpu.0 + agent_cpu.1) - (agent_cpu0.0 + agent_cpu0.1),
        agent_cpu.0 - agent_cpu0.0,
        agent_cpu.1 - agent_cpu0.1,
        cpu_time(std::process::id()) - server_cpu0,
    );

    if std::env::var_os("SCALE_MOUNT_ONLY").is_some() {
        // Only the cold start (e.g. under `perf record`).
        drop(child);
        server.shutdown().await;
        return;
    }

    // (3)
    wait_watches(&h, watched).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open = h.open_connections();
    println!(
        "scale/{label}/connections: agent holds {} TCP connections to the API server (server sees HTTP/2 {}, HTTP/1.1 {}); {} watches open",
        tcp_connections(pid, port),
        open.http2,
        open.http1,
        h.open_watches("configmaps", None, None) + h.open_watches("secrets", None, None)
    );
    println!(
        "scale/{label}/rss: {:.1} MiB ({})",
        rss_kib(pid) as f64 / 1024.0,
        rss_parts(pid)
    );
    let metrics = scrape(metrics_port).await;
    let allocator = allocator_name(&metrics);
    let heap = heap_bytes(&metrics).map_or("live heap not reported".to_owned(), |bytes| {
        format!(
            "live heap {:.1} MiB, {:.1} KiB per watched object",
            bytes / 1048576.0,
            bytes / 1024.0 / watched as f64
        )
    });
    println!("scale/{label}/heap: allocator {allocator}, {heap}");

    // (4)
    let total = (rate as f64 * UPDATE_WINDOW.as_secs_f64()) as usize;
    let every = Duration::from_secs(1) / rate;
    let mut pending = Vec::new();
    let mut latencies = Vec::with_capacity(total);
    let mut answered = Vec::with_capacity(total);
    h.reset_requests();
    let metrics_before = scrape(metrics_port).await;
    let cpu_before = cpu_time(pid);
    let t0 = Instant::now();
    let hog = cpu_competitor();
    for n in 0..total {
        let due = t0 + every * n as u32;
        while Instant::now() < due {
            check(&mut pending, &mut latencies);
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let j = (n * 7) % objects;
        let value = format!("u{n}");
        let since = Instant::now();
        // Sent on schedule, as a real client's updates are: the files are checked meanwhile.
        answered.push(writes.start(j, &value, since));
        pending.push((files[j].clone(), value, since));
    }
    latencies.extend(wait_all(pending).await);
    let mut answered_in = Vec::with_capacity(answered.len());
    for a in answered {
        answered_in.push(a.await.unwrap_or_else(|e| panic!("write: {e}")));
    }
    let hogged = hog.map(|h| h.join().unwrap_or_default());
    let (cpu, window) = (cpu_time(pid) - cpu_before, t0.elapsed());
    if let Some(hogged) = hogged {
        println!(
            "scale/{label}/cpu-competitor: 2 busy threads for {hogged:.1?}, 5 s into the updates"
        );
    }
    println!(
        "scale/{label}/update-latency: {rate} updates/s for {UPDATE_WINDOW:?}, API write -> file visible: {}; the write answered: {}",
        summary(latencies),
        summary(answered_in)
    );
    let ours = support::histogram_delta(
        &metrics_before,
        &scrape(metrics_port).await,
        "nodelet_propagation_latency_seconds",
    );
    println!(
        "scale/{label}/update-latency-ours: the agent's part (change announced to the volume manager -> new content on disk, its histogram over the window): n={:.0}, p50 <= {}, p99 <= {}, mean {:.2} ms",
        ours.count,
        ours.quantile(0.5),
        ours.quantile(0.99),
        ours.mean() * 1e3
    );
    println!(
        "scale/{label}/update-cpu: the agent used {cpu:.2?} of CPU in {window:.1?} of updates: {:.1} % of one core",
        100.0 * cpu.as_secs_f64() / window.as_secs_f64()
    );
    let node_requests = h
        .requests()
        .iter()
        .filter(|r| r.user.as_deref() == Some(User::node(NODE).name.as_str()))
        .count();
    println!(
        "scale/{label}/update-requests: the agent made {node_requests} requests during the updates: {}",
        list_watch_counts(&h.requests(), &User::node(NODE).name)
    );
    println!(
        "scale/{label}/rss-after-updates: {:.1} MiB",
        rss_kib(pid) as f64 / 1024.0
    );

    if std::env::var_os("SCALE_NO_RESTART").is_some() {
        drop(child);
        server.shutdown().await;
        return;
    }

    // (5)
    let connections_before = tcp_connections(pid, port);
    let metrics_before = scrape(metrics_port).await;
    let after_restart = if objects >= 990 { 200 } else { 50 };
    h.reset_requests();
    let restart = Restart::like_kube_apiserver().down(OUTAGE);
    h.restart(restart)
        .await
        .unwrap_or_else(|e| panic!("restart: {e}"));
    let back = Instant::now();
    let mut pending = Vec::new();
    for k in 0..after_restart {
        // Distinct objects (3k + 1 < objects for every run here).
        let j = (k * 3 + 1) % objects;
        let value = format!("r{k}");
        let since = Instant::now();
        writes.set(j, &value).await;
        pending.push((files[j].clone(), value, since));
    }
    let recovered = wait_all(pending).await;
    let all = back.elapsed();
    println!(
        "scale/{label}/recovery: down {:?}, watch history forgotten, /readyz 500 for {:?}, Node authorizer graph empty for {:?}; {after_restart} updates right after it listens again: all on disk {all:.2?} after the restart; per update {}",
        restart.down,
        restart.not_ready,
        restart.graph_rebuild,
        summary(recovered)
    );
    wait_watches(&h, watched).await;
    let after = h.requests();
    let config_objects =
        |r: &&RequestRecord| matches!(r.resource.as_str(), "configmaps" | "secrets");
    let watch_lists = after
        .iter()
        .filter(config_objects)
        .filter(|r| r.verb == "watch" && r.send_initial_events)
        .count();
    let lists = after
        .iter()
        .filter(config_objects)
        .filter(|r| r.verb == "list")
        .count();
    let watches = after
        .iter()
        .filter(config_objects)
        .filter(|r| r.verb == "watch" && !r.send_initial_events)
        .count();
    let metrics_after = scrape(metrics_port).await;
    let delta = |name: &str| metric_sum(&metrics_after, name) - metric_sum(&metrics_before, name);
    println!(
        "scale/{label}/recovery-requests: {objects} watched objects; after the restart {watch_lists} watch-lists, {lists} LISTs, {watches} other watches (resumes answered 410 included); retried by the transport: {:.0} refused (GOAWAY), {:.0} throttled (Retry-After); writes failed: {:.0} (whole run: {:.0}); goaways sent (whole run): {}",
        delta("nodelet_api_requests_retried{reason=\"refused\"}"),
        delta("nodelet_api_requests_retried{reason=\"throttled\"}"),
        delta("nodelet_api_write_failures_total"),
        metric_sum(&metrics_after, "nodelet_api_write_failures_total"),
        h.goaways_sent(),
    );
    let open = h.open_connections();
    println!(
        "scale/{label}/connections-after-recovery: {} TCP (before the restart {connections_before}; server sees HTTP/2 {}, HTTP/1.1 {})",
        tcp_connections(pid, port),
        open.http2,
        open.http1
    );
    tokio::time::sleep_until((back + REQUEST_WINDOW).into()).await;
    println!(
        "scale/{label}/recovery-requests-by-resource: the agent's requests in the {REQUEST_WINDOW:?} after the restart: {}",
        list_watch_counts(&h.requests(), &User::node(NODE).name)
    );
    drop(child);
    server.shutdown().await;
}

/// Waits until `n` ConfigMap + Secret watches are open (after a restart: all resumed).
async fn wait_watches(h: &ServerHandle, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while h.open_watches("configmaps", None, None) + h.open_watches("secrets", None, None) < n {
        assert!(Instant::now() < deadline, "watches never all open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Where the cold start went, from the first pod created: the last pod created; the agent's
/// first and last request for a ConfigMap or Secret as the server received them, and when the
/// last of those was answered (a watch once set up); the files' modification times (when the
/// agent wrote them): first, median, last.
fn cold_start(
    requests: &[RequestRecord],
    started: Instant,
    started_wall: std::time::SystemTime,
    files: &[PathBuf],
    created: Duration,
) -> String {
    let since = |t: Instant| t.saturating_duration_since(started);
    let objects: Vec<&RequestRecord> = requests
        .iter()
        .filter(|r| matches!(r.resource.as_str(), "configmaps" | "secrets"))
        .collect();
    let first_request = objects.iter().map(|r| since(r.received)).min();
    let last_request = objects.iter().map(|r| since(r.received)).max();
    let last_answer = objects.iter().map(|r| since(r.answered)).max();
    let refused = objects.iter().filter(|r| r.status == 403).count();
    let events = requests
        .iter()
        .filter(|r| r.resource == "events" && matches!(r.verb.as_str(), "create" | "patch"))
        .count();
    let mut written: Vec<Duration> = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .map(|t| t.duration_since(started_wall).unwrap_or_default())
        .collect();
    written.sort();
    let ms = |d: Option<Duration>| {
        d.map_or("-".to_owned(), |d| {
            format!("{:.0} ms", d.as_secs_f64() * 1e3)
        })
    };
    format!(
        "pods created by {}; agent's object requests: {} ({} refused by the Node authorizer's lag; first received {}, last received {}, last answered {}); events written {}; files written: first {}, median {}, last {}",
        ms(Some(created)),
        objects.len(),
        refused,
        ms(first_request),
        ms(last_request),
        ms(last_answer),
        events,
        ms(written.first().copied()),
        ms(Some(percentile(&written, 0.5))),
        ms(written.last().copied()),
    )
}

/// `SCALE_CPU_HOG=SECS`: 5 s into the update window, two threads (one per core of the build
/// machine) spin for SECS seconds, as another process on a small node briefly taking the CPU.
/// The thread's result is how long they spun.
fn cpu_competitor() -> Option<std::thread::JoinHandle<Duration>> {
    let secs: f64 = std::env::var("SCALE_CPU_HOG").ok()?.parse().ok()?;
    Some(std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(5));
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let spin = move || {
            let mut x = 0u64;
            while Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        };
        let other = std::thread::spawn(spin);
        let started = Instant::now();
        spin();
        let _ = other.join();
        started.elapsed()
    }))
}
