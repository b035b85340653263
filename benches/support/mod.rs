//! What the benchmarks that run the real `nodelet` binary share: starting and stopping it on the
//! bench node, reading its RSS, CPU and connections from `/proc` and its `/metrics`, the objects
//! and pods of the workloads (bare ones, and ones as `kubectl apply` makes them: [`applied`]),
//! latency summaries, the agent's LISTs and watches as the server recorded them, and the file
//! system its root directory is on ([`disk`]).

// Each benchmark is its own crate and uses a part of this module.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) mod applied;
pub(crate) mod disk;
pub(crate) mod phases;
pub(crate) mod realk8s;

use nodelet_apiserver::RequestRecord;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
use serde_json::json;

/// The node the agent runs as (`system:node:bench-node`).
pub(crate) const NODE: &str = "bench-node";

/// The agent process, stopped when the run ends or panics: SIGTERM (a `dhat-heap` build
/// writes its profile), killed if still running after [`STOP_PATIENCE`].
pub(crate) struct Agent(pub(crate) Child);

/// How long a stopped agent may take to exit: a `dhat-heap` build resolves every allocation
/// site's symbols first.
pub(crate) const STOP_PATIENCE: Duration = Duration::from_secs(120);

impl Agent {
    /// The agent's process ID.
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).unwrap_or(i32::MAX));
        if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_ok() {
            let deadline = Instant::now() + STOP_PATIENCE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.0.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the agent on [`NODE`] with `kubeconfig`, its state under `root`, `--api-protocol
/// protocol` and its HTTP endpoint (`/metrics`) on `listen`. `SCALE_AGENT_BIN` runs that binary
/// instead of the one built with the bench; `SCALE_AGENT_LOG` is its `RUST_LOG` (default
/// `warn`; its logs go to the bench's stderr); `SCALE_AGENT_ARGS` adds flags (split at
/// whitespace, e.g. `--kube-api-qps 200`).
pub(crate) fn spawn_agent(kubeconfig: &Path, root: &Path, protocol: &str, listen: &str) -> Agent {
    spawn_agent_with(kubeconfig, root, protocol, listen, &[])
}

/// [`spawn_agent`] with `extra` flags.
pub(crate) fn spawn_agent_with(
    kubeconfig: &Path,
    root: &Path,
    protocol: &str,
    listen: &str,
    extra: &[&str],
) -> Agent {
    let mut command = agent_command(kubeconfig, root, protocol, listen, extra);
    // The agent logs to its standard output: to the bench's stderr, off the results.
    let log = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_or_else(|_| Stdio::null(), Stdio::from);
    let child = command
        .stdout(log)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning nodelet: {e}"));
    Agent(child)
}

/// The command [`spawn_agent_with`] runs, for a bench that keeps the agent's log (it goes to
/// stdout).
pub(crate) fn agent_command(
    kubeconfig: &Path,
    root: &Path,
    protocol: &str,
    listen: &str,
    extra: &[&str],
) -> Command {
    let bin =
        std::env::var_os("SCALE_AGENT_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nodelet").into());
    let mut command = Command::new(bin);
    command
        .args(["--kubeconfig", kubeconfig.to_str().unwrap_or_default()])
        .args(["--node-name", NODE, "--listen", listen])
        .args(["--root-dir", root.to_str().unwrap_or_default()])
        .args(["--api-protocol", protocol])
        // No kubelet API: a node's own kubelet (or another bench) may hold 10250.
        .args(["--kubelet-port", "0"])
        .args(extra)
        .args(
            std::env::var("SCALE_AGENT_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env(
            "RUST_LOG",
            std::env::var("SCALE_AGENT_LOG").unwrap_or_else(|_| "warn".into()),
        );
    command
}

/// Whether `cargo bench`'s arguments select the bench `name`: it always passes `--bench`; a
/// filter argument that `name` does not contain skips the run.
pub(crate) fn selected(name: &str) -> bool {
    !std::env::args()
        .skip(1)
        .any(|a| !a.starts_with("--") && !name.contains(&a))
}

/// The runtime a bench drives its API server and measurements on: two workers, as the 2-core
/// machines the figures come from.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// `VmRSS` of `pid` in KiB (0 when it cannot be read).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// `RssAnon` (heap, stacks) and `RssFile` (the mapped binary and libraries) of `pid`, from
/// `/proc/<pid>/status`.
pub(crate) fn rss_parts(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    format!(
        "anonymous {:.1} MiB, file-backed {:.1} MiB, threads {}",
        field("RssAnon:"),
        field("RssFile:"),
        field("Threads:") * 1024.0
    )
}

/// CPU time `pid` used so far (user + system), from `/proc/<pid>/stat` (in USER_HZ = 100
/// ticks per second, fixed by the kernel's ABI).
pub(crate) fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at its closing parenthesis:
    // state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// User and system CPU time `pid` used so far (see [`cpu_time`]).
pub(crate) fn cpu_split(pid: u32) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = |i: usize| Duration::from_millis(fields.get(i).copied().unwrap_or(0) * 10);
    (ticks(11), ticks(12))
}

/// Established TCP connections of `pid` whose remote port is `port`.
pub(crate) fn tcp_connections(pid: u32, port: u16) -> usize {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_owned)
        })
        .collect();
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) = (f.get(2), f.get(3), f.get(9)) else {
                continue;
            };
            let rport = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == "01" && rport == Some(port) && inodes.contains(*inode) {
                n += 1;
            }
        }
    }
    n
}

/// The `p` quantile (0..=1) of `sorted` (nearest rank); zero when empty.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `n=…, p50 …, p99 …, max …` of `v`.
pub(crate) fn summary(mut v: Vec<Duration>) -> String {
    v.sort();
    format!(
        "n={}, p50 {:.1?}, p99 {:.1?}, max {:.1?}",
        v.len(),
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        v.last().copied().unwrap_or_default()
    )
}

/// A loopback port free right now, for the agent's HTTP endpoint.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("free port: {e}"))
}

/// The agent's `/metrics` text (empty when it does not answer).
pub(crate) async fn scrape(port: u16) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return String::new();
    };
    let req =
        format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

/// The sum of the samples whose line starts with `prefix`.
pub(crate) fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// A Prometheus histogram's samples between two scrapes.
pub(crate) struct HistogramDelta {
    /// `(le, count)` per bucket, cumulative, in order; `+Inf` last.
    pub(crate) buckets: Vec<(f64, f64)>,
    pub(crate) count: f64,
    pub(crate) sum: f64,
}

impl HistogramDelta {
    /// The upper bound of the bucket holding quantile `q` (`"5 ms"`, `"+Inf"`; `"-"` when
    /// empty): a histogram knows no finer.
    pub(crate) fn quantile(&self, q: f64) -> String {
        let rank = q * self.count;
        match self.buckets.iter().find(|(_, n)| *n >= rank && *n > 0.0) {
            Some((le, _)) if le.is_finite() => format!("{} ms", le * 1e3),
            Some(_) => "+Inf".to_owned(),
            None => "-".to_owned(),
        }
    }

    /// Mean in seconds (zero when empty).
    pub(crate) fn mean(&self) -> f64 {
        if self.count > 0.0 {
            self.sum / self.count
        } else {
            0.0
        }
    }
}

/// Histogram `name` of `after` minus that of `before` (two `/metrics` texts).
pub(crate) fn histogram_delta(before: &str, after: &str, name: &str) -> HistogramDelta {
    let read = |text: &str| {
        let mut buckets = Vec::new();
        let (mut count, mut sum) = (0.0, 0.0);
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if let Some(rest) = series.strip_prefix(&format!("{name}_bucket{{le=\"")) {
                let le = rest.trim_end_matches("\"}");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                buckets.push((le, value));
            } else if series == format!("{name}_count") {
                count = value;
            } else if series == format!("{name}_sum") {
                sum = value;
            }
        }
        (buckets, count, sum)
    };
    let (b0, c0, s0) = read(before);
    let (b1, c1, s1) = read(after);
    let buckets = b1
        .iter()
        .map(|(le, n)| {
            let then = b0.iter().find(|(l, _)| l == le).map_or(0.0, |(_, n)| *n);
            (*le, n - then)
        })
        .collect();
    HistogramDelta {
        buckets,
        count: c1 - c0,
        sum: s1 - s0,
    }
}

/// The agent's live heap in bytes (`nodelet_heap_allocated_bytes` in `metrics`), if reported.
pub(crate) fn heap_bytes(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .any(|l| l.starts_with("nodelet_heap_allocated_bytes "))
        .then(|| metric_sum(metrics, "nodelet_heap_allocated_bytes "))
}

/// The allocator the agent was built with (`nodelet_build_info{allocator=…}` in `metrics`).
pub(crate) fn allocator_name(metrics: &str) -> &str {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("nodelet_build_info{allocator=\"")?
                .split_once('"')
        })
        .map_or("unknown", |(name, _)| name)
}

/// Object `j`: even → ConfigMap `cm-j`, odd → Secret `s-j`; one key `k`.
pub(crate) fn object(j: usize, value: &str) -> serde_json::Value {
    if j.is_multiple_of(2) {
        ConfigMapBuilder::new("default", &format!("cm-{j}"))
            .data("k", value)
            .json()
    } else {
        SecretBuilder::new("default", &format!("s-{j}"))
            .data("k", value)
            .json()
    }
}

/// Deletes object `j` (see [`object`]).
pub(crate) fn delete_object(
    h: &nodelet_apiserver::ServerHandle,
    j: usize,
) -> Result<(), nodelet_apiserver::Error> {
    if j.is_multiple_of(2) {
        h.delete("v1", "ConfigMap", Some("default"), &format!("cm-{j}"))
    } else {
        h.delete("v1", "Secret", Some("default"), &format!("s-{j}"))
    }
}

/// Pod `p-i` on the bench node mounting object `j` as volume `v<j>` at `/v<j>`, for each `j`.
pub(crate) fn pod(i: usize, objs: &[usize]) -> serde_json::Value {
    let mounts: Vec<_> = objs
        .iter()
        .map(|j| json!({"name": format!("v{j}"), "mountPath": format!("/v{j}")}))
        .collect();
    objs.iter()
        .fold(
            PodBuilder::new("default", &format!("p-{i}"))
                .node(NODE)
                .container(json!({"name": "c", "image": "x", "volumeMounts": mounts})),
            |p, j| {
                let volume = format!("v{j}");
                if j.is_multiple_of(2) {
                    p.config_map_volume(&volume, &format!("cm-{j}"))
                } else {
                    p.secret_volume(&volume, &format!("s-{j}"))
                }
            },
        )
        .json()
}

/// Volume `v<j>`'s directory under the pod's `volumes/` (see [`pod`]).
pub(crate) fn volume_dir(j: usize) -> String {
    if j.is_multiple_of(2) {
        format!("kubernetes.io~configmap/v{j}")
    } else {
        format!("kubernetes.io~secret/v{j}")
    }
}

/// Removes from `pending` each `(path, expected, since)` whose file holds `expected`, adding
/// its latency to `done`.
pub(crate) fn check(pending: &mut Vec<(PathBuf, String, Instant)>, done: &mut Vec<Duration>) {
    pending.retain(|(path, expected, since)| {
        if std::fs::read(path).ok().as_deref() == Some(expected.as_bytes()) {
            done.push(since.elapsed());
            false
        } else {
            true
        }
    });
}

/// Waits until each `(path, expected, since)` is visible: the latency of each.
pub(crate) async fn wait_all(mut pending: Vec<(PathBuf, String, Instant)>) -> Vec<Duration> {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut done = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "{} never updated", pending.len());
        check(&mut pending, &mut done);
        // Polling many files costs the agent CPU: back off with the number pending.
        let pause = Duration::from_micros(500).max(Duration::from_micros(5) * pending.len() as u32);
        tokio::time::sleep(pause).await;
    }
    done
}

/// Requests, and how many of them were refused, by resource.
type ByResource = BTreeMap<String, (usize, usize)>;

/// The LISTs, watch-lists (`sendInitialEvents=true`) and other watches `user` made among
/// `records`, by resource (`group/resource` outside the core group), with how many of each
/// were refused (status ≥ 400): `LISTs 3 (pods 1, secrets 2 [1 refused]); watch-lists 0 ();
/// watches 2 (…)`.
pub(crate) fn list_watch_counts(records: &[RequestRecord], user: &str) -> String {
    let mut kinds: [(&str, ByResource); 3] = [
        ("LISTs", BTreeMap::new()),
        ("watch-lists", BTreeMap::new()),
        ("watches", BTreeMap::new()),
    ];
    for r in records.iter().filter(|r| r.user.as_deref() == Some(user)) {
        let kind = match (r.verb.as_str(), r.send_initial_events) {
            ("list", _) => 0,
            ("watch", true) => 1,
            ("watch", false) => 2,
            _ => continue,
        };
        let resource = if r.api_group.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.api_group, r.resource)
        };
        let n = kinds[kind].1.entry(resource).or_default();
        n.0 += 1;
        n.1 += usize::from(r.status >= 400);
    }
    kinds
        .iter()
        .map(|(kind, by)| {
            let each: Vec<String> = by
                .iter()
                .map(|(res, (n, refused))| match refused {
                    0 => format!("{res} {n}"),
                    r => format!("{res} {n} [{r} refused]"),
                })
                .collect();
            format!(
                "{kind} {} ({})",
                by.values().map(|(n, _)| n).sum::<usize>(),
                each.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
