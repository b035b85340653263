//! The churn bench's eye on the disk: a thread of its own polls every millisecond for the
//! files of new pods and of updates, so the bench's own requests (tens of milliseconds each on
//! a real server) never delay a measurement. Per pod it records the milestones of pod →
//! volumes: the POST answered, the agent made the pod's directory (it saw the pod and its
//! worker or volume manager acted), the first and the last of its files written and the last
//! `..data` switched (the atomic writer's times on disk, `support/phases.rs`), all seen.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::support::phases as support_phases;

/// A new pod to watch for.
pub(crate) struct PodWatch {
    pub(crate) index: usize,
    /// `<root>/pods/<uid>`.
    pub(crate) dir: PathBuf,
    pub(crate) files: Vec<PathBuf>,
    /// When its POST was sent.
    pub(crate) sent: Instant,
    /// The same moment on the wall clock (the files' times are on it).
    pub(crate) sent_wall: SystemTime,
    /// How long the POST took.
    pub(crate) post: Duration,
}

/// A pod's phases, each from the POST sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PodTimes {
    pub(crate) index: usize,
    /// When its POST was sent.
    pub(crate) sent: Instant,
    /// The POST answered.
    pub(crate) post: Duration,
    /// Its directory on disk.
    pub(crate) dir: Duration,
    /// The first of its files on disk.
    pub(crate) first: Duration,
    /// The first and the last of its files written, and the last of its volumes' `..data`
    /// switched (`None`: not readable).
    pub(crate) first_written: Option<Duration>,
    pub(crate) last_written: Option<Duration>,
    pub(crate) last_swapped: Option<Duration>,
    /// All its files on disk: pod → volumes.
    pub(crate) all: Duration,
}

/// What the poller saw so far.
#[derive(Default)]
pub(crate) struct Seen {
    /// Pods whose files are all on disk, in that order.
    pub(crate) mounted: Vec<PodTimes>,
    /// Their indices (live ones may be updated).
    pub(crate) ready: HashSet<usize>,
    /// Update written → new content on disk.
    pub(crate) updates: Vec<Duration>,
    /// Updates whose pod was deleted before they were seen.
    pub(crate) abandoned: usize,
    /// The oldest pod not mounted yet: its index and since when.
    pub(crate) oldest_pending: Option<(usize, Instant)>,
}

enum Msg {
    Pod(PodWatch),
    /// File `path` of pod `pod` must hold `seq` or later, written at `since`.
    Update {
        pod: usize,
        path: PathBuf,
        seq: u64,
        since: Instant,
    },
    /// Pod `index` was deleted: its pending updates are abandoned.
    Forget(usize),
}

/// The polling thread; stopped on drop.
pub(crate) struct Poller {
    tx: Sender<Msg>,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    pub(crate) fn start() -> Poller {
        let (tx, rx) = channel();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || poll(&rx, &seen, &stop))
        };
        Poller {
            tx,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn pod(&self, watch: PodWatch) {
        let _ = self.tx.send(Msg::Pod(watch));
    }

    pub(crate) fn update(&self, pod: usize, path: PathBuf, seq: u64, since: Instant) {
        let _ = self.tx.send(Msg::Update {
            pod,
            path,
            seq,
            since,
        });
    }

    pub(crate) fn forget(&self, pod: usize) {
        let _ = self.tx.send(Msg::Forget(pod));
    }

    /// What it saw so far.
    pub(crate) fn seen(&self) -> parking_lot::MutexGuard<'_, Seen> {
        self.seen.lock()
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Pending {
    watch: PodWatch,
    dir: Option<Duration>,
    first: Option<Duration>,
}

fn poll(rx: &Receiver<Msg>, seen: &Mutex<Seen>, stop: &AtomicBool) {
    let mut pods: Vec<Pending> = Vec::new();
    let mut updates: Vec<(usize, PathBuf, u64, Instant)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut abandoned = 0;
        while let Ok(msg) = rx.try_recv() {
            match msg {
                Msg::Pod(watch) => pods.push(Pending {
                    watch,
                    dir: None,
                    first: None,
                }),
                Msg::Update {
                    pod,
                    path,
                    seq,
                    since,
                } => updates.push((pod, path, seq, since)),
                Msg::Forget(pod) => {
                    let before = updates.len();
                    updates.retain(|u| u.0 != pod);
                    abandoned += before - updates.len();
                    pods.retain(|p| p.watch.index != pod);
                }
            }
        }
        let mut done = Vec::new();
        pods.retain_mut(|p| {
            let at = p.watch.sent.elapsed();
            if p.dir.is_none() && p.watch.dir.exists() {
                p.dir = Some(at);
            }
            let on_disk = p.watch.files.iter().filter(|f| f.exists()).count();
            if on_disk > 0 && p.first.is_none() {
                p.first = Some(at);
            }
            if on_disk < p.watch.files.len() {
                return true;
            }
            let first = p.first.unwrap_or(at);
            let times: Vec<_> = p
                .watch
                .files
                .iter()
                .map(|f| support_phases::written_swapped(f, p.watch.sent_wall))
                .collect();
            done.push(PodTimes {
                sent: p.watch.sent,
                first_written: times.iter().filter_map(|t| t.0).min(),
                last_written: times.iter().filter_map(|t| t.0).max(),
                last_swapped: times.iter().filter_map(|t| t.1).max(),
                index: p.watch.index,
                post: p.watch.post,
                dir: p.dir.unwrap_or(first).min(first),
                first,
                all: at,
            });
            false
        });
        let mut seen_updates = Vec::new();
        updates.retain(|(_, path, seq, since)| {
            let value = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.parse::<u64>().ok());
            if value.is_some_and(|v| v >= *seq) {
                seen_updates.push(since.elapsed());
                false
            } else {
                true
            }
        });
        {
            let mut s = seen.lock();
            s.abandoned += abandoned;
            for t in done {
                s.ready.insert(t.index);
                s.mounted.push(t);
            }
            s.updates.extend(seen_updates);
            s.oldest_pending = pods.first().map(|p| (p.watch.index, p.watch.sent));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
