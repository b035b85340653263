//! Benchmarks: a warm `get`, register/unregister churn of 110 pods, and 1,000 watched objects
//! (memory per object; API write → change notification latency, median and p99).
//!
//! Run: `cargo bench -p nodelet-object-manager -- --warm-up-time 1 --measurement-time 3`.
//! The 1,000-object figures are printed as `watch-1000: ...` lines before criterion's output.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use nodelet_object_manager::source::FakeSource;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, Strategy};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};

/// Secret `name` with `k` = `value` (the namespace comes from `FakeSource::apply`).
fn secret(name: &str, value: &str) -> Secret {
    SecretBuilder::new("", name).data("k", value).build()
}

/// Pod `ns/p<i>` (UID `u<i>`) mounting one secret volume `v-<name>` per name.
fn pod(i: usize, names: &[String]) -> Pod {
    let pod = PodBuilder::new("ns", &format!("p{i}")).uid(&format!("u{i}"));
    names
        .iter()
        .fold(pod, |p, n| p.secret_volume(&format!("v-{n}"), n))
        .build()
}

fn manager(strategy: Strategy, fake: &FakeSource<Secret>) -> SecretManager {
    let config = ManagerConfig::new(strategy);
    SecretManager::with_sources(Arc::new(fake.clone()), None, config)
        .unwrap_or_else(|e| panic!("manager: {e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

fn warm_get(c: &mut Criterion) {
    let rt = runtime();
    for strategy in [Strategy::Watch, Strategy::Cache] {
        let _guard = rt.enter();
        let fake = FakeSource::new();
        fake.apply("ns", secret("s0", "value"));
        let m = manager(strategy, &fake);
        m.register_pod(&nodelet_core::AdmittedPod::new(pod(0, &["s0".to_owned()])).unwrap());
        rt.block_on(async { m.get("ns", "s0").await.map(drop) })
            .unwrap_or_else(|e| panic!("{e}"));
        c.bench_function(&format!("get warm cache ({strategy})"), |b| {
            b.iter(|| rt.block_on(m.get(black_box("ns"), black_box("s0"))))
        });
        rt.block_on(m.shutdown());
    }
}

/// 110 pods, pod `i` referencing 3 + i % 8 (3–10) of 300 objects.
fn pods_110() -> Vec<Pod> {
    (0..110)
        .map(|i| {
            let names: Vec<String> = (0..3 + i % 8)
                .map(|j| format!("s{}", (i * 7 + j * 13) % 300))
                .collect();
            pod(i, &names)
        })
        .collect()
}

fn register_churn(c: &mut Criterion) {
    let rt = runtime();
    let pods = pods_110();
    for strategy in [Strategy::Watch, Strategy::Cache] {
        let _guard = rt.enter();
        let fake = FakeSource::new();
        let m = manager(strategy, &fake);
        c.bench_function(
            &format!("register+unregister 110 pods x 3-10 objects ({strategy})"),
            |b| {
                b.iter(|| {
                    for p in &pods {
                        m.register_pod(&nodelet_core::AdmittedPod::new(p.clone()).unwrap());
                    }
                    for p in &pods {
                        m.unregister_pod(nodelet_core::AdmittedPod::new(p.clone()).unwrap().uid());
                    }
                    // Let the cancelled reflector tasks (Watch) end inside the measurement.
                    rt.block_on(async {
                        for _ in 0..4 {
                            tokio::task::yield_now().await;
                        }
                    });
                })
            },
        );
        rt.block_on(m.shutdown());
    }
}

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// 1,000 watched objects over the in-memory source: RSS per object and write → notification.
fn watch_1000() {
    let rt = runtime();
    rt.block_on(async {
        let fake = FakeSource::new();
        let value = "x".repeat(256);
        for i in 0..1000 {
            fake.apply("ns", secret(&format!("s{i}"), &value));
        }
        let before = rss_bytes();
        let m = manager(Strategy::Watch, &fake);
        for i in 0..100 {
            let names: Vec<String> = (0..10).map(|j| format!("s{}", i * 10 + j)).collect();
            m.register_pod(&nodelet_core::AdmittedPod::new(pod(i, &names)).unwrap());
        }
        for i in 0..1000 {
            m.get("ns", &format!("s{i}")).await.unwrap_or_else(|e| panic!("{e}"));
        }
        let after = rss_bytes();
        println!(
            "watch-1000 (fake source): RSS +{} KiB for 1000 objects = {} bytes/object (256-byte payload each)",
            after.saturating_sub(before) / 1024,
            after.saturating_sub(before) / 1000
        );

        let mut changes = m.subscribe();
        let mut samples = Vec::with_capacity(1000);
        for round in 0..1000 {
            let name = format!("s{}", (round * 37) % 1000);
            let start = Instant::now();
            fake.apply("ns", secret(&name, &format!("v{round}")));
            loop {
                match changes.recv().await {
                    Ok(key) if key.name == name => break,
                    Ok(_) => continue,
                    Err(e) => panic!("notification: {e}"),
                }
            }
            samples.push(start.elapsed());
        }
        samples.sort();
        println!(
            "watch-1000 (fake source): write -> notification median {:?}, p99 {:?}",
            percentile(&samples, 0.5),
            percentile(&samples, 0.99)
        );
        m.shutdown().await;
    });
}

/// ConfigMap `ns/<name>` with `k` = `value`.
fn config_map(name: &str, value: &str) -> ConfigMapBuilder {
    ConfigMapBuilder::new("ns", name).data("k", value)
}

/// Pod `ns/p<i>` (UID `u<i>`) mounting one configMap volume `v-<name>` per name.
fn cm_pod(i: usize, names: &[String]) -> Pod {
    let pod = PodBuilder::new("ns", &format!("p{i}")).uid(&format!("u{i}"));
    names
        .iter()
        .fold(pod, |p, n| p.config_map_volume(&format!("v-{n}"), n))
        .build()
}

/// Child-process mode: an API server with namespace `ns` and 1,000 configmaps; prints its URL
/// and serves until stdin closes. Keeps the server's memory out of the client's RSS.
fn serve_for_parent() {
    let rt = runtime();
    rt.block_on(async {
        let server = nodelet_apiserver::ApiServer::start(nodelet_apiserver::Config::default())
            .await
            .unwrap_or_else(|e| panic!("apiserver: {e}"));
        let handle = server.handle();
        let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        handle.create(ns).unwrap_or_else(|e| panic!("namespace: {e}"));
        let value = "x".repeat(256);
        for i in 0..1000 {
            handle.create(config_map(&format!("c{i}"), &value).json()).unwrap_or_else(|e| panic!("{e}"));
        }
        println!("{}", server.url());
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {}
        })
        .await;
    });
}

/// 1,000 watched objects over HTTP against nodelet-apiserver on loopback, in a child process:
/// the manager's RSS per object (kube client and connections included) and the time from an
/// API write (a PUT over HTTP) to the change notification.
fn watch_1000_http() {
    use std::io::BufRead;
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("exe: {e}"));
    let mut child = std::process::Command::new(exe)
        .env("OM_BENCH_SERVER", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn server: {e}"));
    let mut url = String::new();
    if let Some(out) = child.stdout.take() {
        std::io::BufReader::new(out)
            .read_line(&mut url)
            .unwrap_or_else(|e| panic!("url: {e}"));
    }
    let url = url.trim().to_owned();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async {
        let uri = url.parse().unwrap_or_else(|e| panic!("url {url}: {e}"));
        let client = kube::Client::try_from(kube::Config::new(uri))
            .unwrap_or_else(|e| panic!("client: {e}"));
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "ns");
        let _ = api.get("c0").await.unwrap_or_else(|e| panic!("warm-up: {e}"));
        let before = rss_bytes();
        let m = ConfigMapManager::new(client, ManagerConfig::new(Strategy::Watch))
            .unwrap_or_else(|e| panic!("manager: {e}"));
        for i in 0..100 {
            let names: Vec<String> = (0..10).map(|j| format!("c{}", i * 10 + j)).collect();
            m.register_pod(&nodelet_core::AdmittedPod::new(cm_pod(i, &names)).unwrap());
        }
        let start = Instant::now();
        for i in 0..1000 {
            // 1,000 first LISTs race for connections: a get may hit the 1 s sync bound.
            loop {
                match m.get("ns", &format!("c{i}")).await {
                    Ok(_) => break,
                    Err(nodelet_object_manager::Error::SyncTimeout { .. }) => continue,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let synced = start.elapsed();
        let mut changes = m.subscribe();
        // One write seen through c999's watch: every watch request has been made.
        let put = |name: String, value: String| {
            let api = api.clone();
            async move {
                let cm = config_map(&name, &value).build();
                api.replace(&name, &Default::default(), &cm)
                    .await
                    .unwrap_or_else(|e| panic!("PUT {name}: {e}"));
            }
        };
        put("c999".into(), "probe".into()).await;
        while changes.recv().await.map(|k| k.name != "c999").unwrap_or(false) {}
        let after = rss_bytes();
        println!(
            "watch-1000 (HTTP, server in a child process): 1000 objects synced in {synced:?}; client RSS +{} KiB = {} bytes/object (256-byte payload each)",
            after.saturating_sub(before) / 1024,
            after.saturating_sub(before) / 1000
        );

        let mut samples = Vec::with_capacity(1000);
        for round in 0..1000 {
            let name = format!("c{}", (round * 37) % 1000);
            let start = Instant::now();
            put(name.clone(), format!("v{round}")).await;
            loop {
                match changes.recv().await {
                    Ok(key) if key.name == name => break,
                    Ok(_) => continue,
                    Err(e) => panic!("notification: {e}"),
                }
            }
            samples.push(start.elapsed());
        }
        samples.sort();
        println!(
            "watch-1000 (HTTP, server in a child process): PUT sent -> notification median {:?}, p99 {:?}",
            percentile(&samples, 0.5),
            percentile(&samples, 0.99)
        );
        m.shutdown().await;
    });
    drop(child.stdin.take());
    let _ = child.wait();
}

fn main() {
    if std::env::var_os("OM_BENCH_SERVER").is_some() {
        return serve_for_parent();
    }
    watch_1000();
    watch_1000_http();
    let mut c = Criterion::default().configure_from_args();
    warm_get(&mut c);
    register_churn(&mut c);
    c.final_summary();
}
