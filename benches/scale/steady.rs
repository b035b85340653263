//! The real-server scale run's steady state (`scale/real.rs`): the agent's memory once every
//! volume is on disk, and the update latency at 50 updates/s broken into its phases.
//!
//! Each update is followed through five milestones, each from the moment the bench sent the
//! merge patch:
//!
//! 1. **answered**: the server answered the patch (its admission, etcd's commit);
//! 2. **event**: the bench's own watch of the namespace's ConfigMaps and Secrets received the
//!    change: when the server's watch cache fans the event out (the agent's watch of the object
//!    receives it from the same cache at about the same time);
//! 3. **written**: the agent's atomic writer wrote the new file (its `mtime`): the agent
//!    received the event, its object manager announced it, the volume manager's reconciler
//!    started the remount, the plugin built the payload and the writer, on the blocking pool,
//!    created the new data directory;
//! 4. **swapped**: `..data` switched to it (its `ctime`): the `fsync`s that make the new data
//!    durable first (AW-5), then the `rename(2)`;
//! 5. **seen**: the bench's polling thread read the new content (every 0.5 ms).
//!
//! Printed: each phase's p50 / p99 / max, the share of each in the updates at or over the p99
//! (where the tail is), the slowest updates phase by phase, and the agent's own histogram
//! (`nodelet_propagation_latency_seconds`: the change announced to the volume manager → new
//! content on disk) over the window.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use parking_lot::Mutex;

use crate::support::applied::Writer;
use crate::support::phases::{Phases, written_swapped};
use crate::support::{
    allocator_name, cpu_time, heap_bytes, histogram_delta, rss_kib, rss_parts, scrape, summary,
};

const RATE: u32 = 50;
const UPDATE_WINDOW: Duration = Duration::from_secs(20);
/// The slowest updates printed with their phases.
const SLOWEST: usize = 8;

/// The agent's RSS (anonymous and file-backed), its live heap and allocator, `settle` after
/// every volume was on disk.
pub(crate) async fn memory(label: &str, pid: u32, metrics_port: u16, settle: Duration) {
    tokio::time::sleep(settle).await;
    let metrics = scrape(metrics_port).await;
    let allocator = allocator_name(&metrics);
    let heap = heap_bytes(&metrics).map_or("-".to_owned(), |b| format!("{:.1} MiB", b / 1048576.0));
    println!(
        "{label}/rss: {settle:?} after all on disk: {:.1} MiB ({}); live heap {heap} (allocator {allocator})",
        rss_kib(pid) as f64 / 1024.0,
        rss_parts(pid)
    );
}

/// Times at which the bench's own watch saw each `(object name, value of k)`.
type EventTimes = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// Watches the ConfigMaps and Secrets of `default` from now on, recording when each new value
/// of key `k` arrived; returns once both watches are open. A watch the server ends (a slow
/// reader is cut off) is resumed from the last version seen.
async fn watch_values(client: &kube::Client) -> (EventTimes, Vec<tokio::task::JoinHandle<()>>) {
    let times: EventTimes = Arc::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap_or_else(|e| panic!("list: {e}"))
        .metadata
        .resource_version
        .unwrap_or_default();
    let cm_task = follow(cms, rv.clone(), times.clone(), |cm: ConfigMap| {
        cm.data.and_then(|mut d| d.remove("k")).unwrap_or_default()
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let secret_task = follow(secrets, rv, times.clone(), |s: Secret| {
        s.data
            .and_then(|mut d| d.remove("k"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    })
    .await;
    (times, vec![cm_task, secret_task])
}

/// Opens a watch of `api` from `rv` and follows it in a task, recording `(name, value(obj))`
/// of each modified object in `times`.
async fn follow<K>(
    api: Api<K>,
    rv: String,
    times: EventTimes,
    value: fn(K) -> String,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let params = WatchParams::default().timeout(290);
    let mut events = api
        .watch(&params, &rv)
        .await
        .unwrap_or_else(|e| panic!("watch: {e}"))
        .boxed();
    tokio::spawn(async move {
        let mut rv = rv;
        loop {
            while let Some(Ok(e)) = events.next().await {
                match e {
                    WatchEvent::Modified(obj) => {
                        let at = Instant::now();
                        rv = obj.meta().resource_version.clone().unwrap_or(rv);
                        let name = obj.meta().name.clone().unwrap_or_default();
                        times.lock().entry((name, value(obj))).or_insert(at);
                    }
                    WatchEvent::Added(obj) | WatchEvent::Deleted(obj) => {
                        rv = obj.meta().resource_version.clone().unwrap_or(rv);
                    }
                    WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                    WatchEvent::Error(_) => break,
                }
            }
            match api.watch(&params, &rv).await {
                Ok(stream) => events = stream.boxed(),
                Err(_) => return,
            }
        }
    })
}

/// One update as the polling thread sees it.
struct Pending {
    n: usize,
    path: PathBuf,
    value: String,
    sent: Instant,
    sent_wall: SystemTime,
}

/// What the polling thread measured of an update: seen, written, swapped (from its send).
struct Seen {
    n: usize,
    seen: Duration,
    written: Option<Duration>,
    swapped: Option<Duration>,
}

/// Polls every pending update's file every 0.5 ms on a thread of its own, so the bench's
/// requests never delay a measurement; ends when `rx` closes and nothing is pending.
fn poll(rx: mpsc::Receiver<Pending>) -> Vec<Seen> {
    let mut pending: Vec<Pending> = Vec::new();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut open = true;
    while open || !pending.is_empty() {
        assert!(Instant::now() < deadline, "{} never updated", pending.len());
        loop {
            match rx.try_recv() {
                Ok(p) => pending.push(p),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        pending.retain(|p| {
            if std::fs::read(&p.path).ok().as_deref() != Some(p.value.as_bytes()) {
                return true;
            }
            let at = p.sent.elapsed();
            let (written, swapped) = written_swapped(&p.path, p.sent_wall);
            seen.push(Seen {
                n: p.n,
                seen: at,
                written,
                swapped,
            });
            false
        });
        std::thread::sleep(Duration::from_micros(500));
    }
    seen
}

/// 50 updates/s for 20 s to distinct objects in turn, phase by phase (see the module docs).
pub(crate) async fn updates(
    writer: &Writer,
    files: &[PathBuf],
    label: &str,
    pid: u32,
    metrics_port: u16,
) {
    let objects = files.len();
    let (events, watches) = watch_values(writer.client()).await;
    let metrics_before = scrape(metrics_port).await;
    let total = (RATE as f64 * UPDATE_WINDOW.as_secs_f64()) as usize;
    let every = Duration::from_secs(1) / RATE;
    let (tx, rx) = mpsc::channel();
    let poller = std::thread::spawn(move || poll(rx));
    let mut sent_at = Vec::with_capacity(total);
    let mut answered = Vec::with_capacity(total);
    let cpu_before = cpu_time(pid);
    let t0 = Instant::now();
    for n in 0..total {
        tokio::time::sleep_until((t0 + every * n as u32).into()).await;
        let j = (n * 7) % objects;
        let value = format!("u{n}");
        let (sent, sent_wall) = (Instant::now(), SystemTime::now());
        let w = writer.clone();
        let v = value.clone();
        answered.push(tokio::spawn(async move {
            w.set_key(j, &v).await;
            sent.elapsed()
        }));
        sent_at.push((j, value.clone(), sent));
        let _ = tx.send(Pending {
            n,
            path: files[j].clone(),
            value,
            sent,
            sent_wall,
        });
    }
    drop(tx);
    let seen = tokio::task::spawn_blocking(move || poller.join())
        .await
        .unwrap_or_else(|e| panic!("poller: {e}"))
        .unwrap_or_else(|_| panic!("the polling thread panicked"));
    let mut answered_in = Vec::with_capacity(answered.len());
    for a in answered {
        answered_in.push(a.await.unwrap_or_else(|e| panic!("write: {e}")));
    }
    let (cpu, window) = (cpu_time(pid) - cpu_before, t0.elapsed());
    for w in watches {
        w.abort();
    }
    let events = events.lock().clone();
    let mut phases = Phases::new(&["sent", "answered", "event", "written", "swapped", "seen"]);
    let mut no_event = 0;
    for s in &seen {
        let (j, value, sent) = &sent_at[s.n];
        let name = if j.is_multiple_of(2) {
            format!("cm-{j}")
        } else {
            format!("s-{j}")
        };
        let event = events
            .get(&(name, value.clone()))
            .map(|t| t.duration_since(*sent));
        no_event += usize::from(event.is_none());
        let answered = answered_in[s.n];
        // A milestone not measured counts as reached with the one before it.
        let event = event.unwrap_or(answered);
        let written = s.written.unwrap_or(event);
        let swapped = s.swapped.unwrap_or(written);
        phases.push(
            format!("u{}", s.n),
            &[answered, event, written, swapped, s.seen],
        );
    }
    println!(
        "{label}/update-latency: {RATE} updates/s for {UPDATE_WINDOW:?}, API write -> file visible: {}; the write answered: {}; agent CPU {:.1} % of one core",
        summary(seen.iter().map(|s| s.seen).collect()),
        summary(answered_in),
        100.0 * cpu.as_secs_f64() / window.as_secs_f64()
    );
    println!(
        "{label}/update-phases: {} updates ({no_event} not seen by the bench's watch); {}",
        phases.len(),
        phases.each()
    );
    println!("{label}/update-tail: {}", phases.tail());
    println!(
        "{label}/update-slowest: sent → answered + event + written + swapped + seen: {}",
        phases.slowest(SLOWEST)
    );
    let metrics_after = scrape(metrics_port).await;
    let ours = histogram_delta(
        &metrics_before,
        &metrics_after,
        "nodelet_propagation_latency_seconds",
    );
    println!(
        "{label}/update-latency-ours: the agent's part (change announced to the volume manager -> new content on disk, its histogram over the window): n={:.0}, p50 <= {}, p99 <= {}, mean {:.2} ms",
        ours.count,
        ours.quantile(0.5),
        ours.quantile(0.99),
        ours.mean() * 1e3
    );
}
