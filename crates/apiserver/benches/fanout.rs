//! Watch fan-out benchmark (custom harness): 10,000 stored objects, 1,000 concurrent watches
//! over loopback HTTP/1.1, and the time from a write to every watcher having received it.
//!
//! Steps: (1) start a server and record RSS; (2) seed 10,000 ConfigMaps (RSS delta = store);
//! (3) open 1,000 watches of one object (`fieldSelector=metadata.name=hot`, as the kubelet's
//! per-object Watch strategy asks) on 1,000 connections and wait for every response header
//! (RSS delta = watches: server side plus this harness's ~2 KiB read buffer per connection); (4) update the object
//! `WRITES` times, one at a time, and for each write measure the latency until all 1,000
//! watchers have decoded the event carrying its resourceVersion, plus every single delivery.
//!
//! Run: `cargo bench -p nodelet-apiserver --bench fanout` (env `FANOUT_WATCHES`,
//! `FANOUT_OBJECTS`, `FANOUT_WRITES` override the sizes).

use std::time::{Duration, Instant};

use nodelet_apiserver::{ApiServer, Config};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident set size of this process, in KiB (Linux; 0 elsewhere).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// One watch on its own connection: reports each resourceVersion it decodes, with the time.
async fn watcher(
    addr: std::net::SocketAddr,
    rv: u64,
    ready: mpsc::Sender<()>,
    seen: mpsc::UnboundedSender<(u64, Instant)>,
) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return;
    };
    let _ = s.set_nodelay(true);
    let req = format!(
        "GET /api/v1/namespaces/bench/configmaps?watch=true&fieldSelector=metadata.name%3Dhot&resourceVersion={rv} HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return;
    }
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 2048];
    let mut headers_done = false;
    // Scanning position in `buf` for the next event.
    let needle = b"\"resourceVersion\":\"";
    loop {
        let Ok(n) = s.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        let now = Instant::now();
        buf.extend_from_slice(&chunk[..n]);
        if !headers_done {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            buf.drain(..end + 4);
            headers_done = true;
            let _ = ready.send(()).await;
        }
        // Every event ends with '\n' inside its chunk; take complete events and find the
        // object's resourceVersion in each (the last occurrence on the line is the object's).
        while let Some(nl) = buf.windows(2).position(|w| w == b"}\n") {
            let line: Vec<u8> = buf.drain(..nl + 2).collect();
            if let Some(pos) = line.windows(needle.len()).rposition(|w| w == needle) {
                let digits: String = line[pos + needle.len()..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .map(|b| *b as char)
                    .collect();
                if let Ok(v) = digits.parse() {
                    let _ = seen.send((v, now));
                }
            }
        }
    }
}

fn main() {
    let watches = env_or("FANOUT_WATCHES", 1000);
    let objects = env_or("FANOUT_OBJECTS", 10_000);
    let writes = env_or("FANOUT_WRITES", 200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        // (1)
        let base = rss_kib();
        let server = ApiServer::start(Config::default()).await.expect("server");
        let h = server.handle();
        h.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}))
            .expect("ns");
        let started = rss_kib();
        // (2)
        let payload = "x".repeat(256);
        for i in 0..objects {
            h.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i:05}"), "namespace": "bench"},
                "data": {"k": payload}}))
                .expect("seed");
        }
        h.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hot", "namespace": "bench"}, "data": {"n": "0"}}))
            .expect("hot");
        let seeded = rss_kib();
        // (3)
        let rv = h.resource_version();
        let (ready_tx, mut ready_rx) = mpsc::channel(watches);
        let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
        for _ in 0..watches {
            tokio::spawn(watcher(server.addr(), rv, ready_tx.clone(), seen_tx.clone()));
        }
        drop(seen_tx);
        for _ in 0..watches {
            ready_rx.recv().await.expect("watch established");
        }
        let watching = rss_kib();
        // (4)
        let mut all = Vec::with_capacity(writes);
        let mut each = Vec::with_capacity(writes * watches);
        for i in 0..=writes {
            let t0 = Instant::now();
            let obj = h
                .update(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "hot", "namespace": "bench"}, "data": {"n": (i + 1).to_string()}}))
                .expect("write");
            let want: u64 = obj["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .expect("rv");
            let mut got = 0;
            let mut last = t0;
            while got < watches {
                let (v, at) = seen_rx.recv().await.expect("watchers alive");
                if v == want {
                    got += 1;
                    last = last.max(at);
                    if i > 0 {
                        each.push(at.saturating_duration_since(t0));
                    }
                }
            }
            // Write 0 warms every connection up and is not counted.
            if i > 0 {
                all.push(last.saturating_duration_since(t0));
            }
        }
        all.sort();
        each.sort();
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "fanout: {objects} objects, {watches} watches, {writes} writes (loopback HTTP/1.1); load average {}",
            load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        );
        println!(
            "  write -> all {watches} watchers received: median {}  p99 {}  max {}",
            ms(percentile(&all, 0.5)),
            ms(percentile(&all, 0.99)),
            ms(percentile(&all, 1.0))
        );
        println!(
            "  write -> one watcher received:          median {}  p99 {}",
            ms(percentile(&each, 0.5)),
            ms(percentile(&each, 0.99))
        );
        println!(
            "  RSS: base {:.1} MiB; server start +{:.1} MiB; {objects} objects +{:.1} MiB; {watches} watches +{:.1} MiB (both ends)",
            base as f64 / 1024.0,
            started.saturating_sub(base) as f64 / 1024.0,
            seeded.saturating_sub(started) as f64 / 1024.0,
            watching.saturating_sub(seeded) as f64 / 1024.0
        );
        server.shutdown().await;
    });
}
