//! Benchmarks of the volume manager against `nodelet-apiserver` on loopback (targets in
//! DESIGN.md, figures in the crate README):
//!
//! 1. **propagation**: a ConfigMap replaced through the API (kube client, HTTP) → the new
//!    value readable through the volume's user-visible path; median and p99 over 200 updates.
//! 2. **startup**: 110 pods × 3 volumes (configMap, secret, projected with a service account
//!    token, `kube-root-ca.crt` and the namespace) from the pods being added to all mounted.
//! 3. **idle CPU**: CPU time of the whole process (API server included) while 110 pods are
//!    mounted and nothing changes, as a share of one core.
//!
//! `cargo bench -p nodelet-volume-manager` (environment: `UPDATES`, `STARTUP_ROUNDS`,
//! `IDLE_SECS` override the sizes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use nodelet_apiserver::{ApiServer, ServerHandle};
use nodelet_core::EventSink;
use nodelet_core::{AdmittedPod, EventType};
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager};
use nodelet_sources::{KubeTokenSource, Sources, TokenManager};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
use nodelet_volume_manager::{Config, VolumeManager};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PODS: usize = 110;

struct NoEvents;
impl EventSink for NoEvents {
    fn event(&self, _: &AdmittedPod, _: EventType, reason: &str, message: String) {
        eprintln!("event {reason}: {message}");
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Bed {
    server: ApiServer,
    api: ServerHandle,
    vm: VolumeManager,
    configmaps: ConfigMapManager,
    secrets: SecretManager,
    root: tempfile::TempDir,
    shutdown: CancellationToken,
}

async fn bed() -> Bed {
    let server = ApiServer::start(nodelet_apiserver::Config::default())
        .await
        .unwrap();
    let client = server.client();
    let configmaps = ConfigMapManager::new(client.clone(), ManagerConfig::default()).unwrap();
    let secrets = SecretManager::new(client.clone(), ManagerConfig::default()).unwrap();
    let root = tempfile::tempdir().unwrap();
    // Production defaults (fsync on, tmpfs when privileged), except that memory volumes
    // follow whatever the probe decides.
    let config = Config::new(root.path());
    let vm = VolumeManager::new(
        config,
        configmaps.clone(),
        secrets.clone(),
        Sources::new(TokenManager::new(Arc::new(KubeTokenSource::new(client)))),
        Arc::new(NoEvents),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let runner = vm.clone();
    let token = shutdown.clone();
    tokio::spawn(async move { runner.run(token).await });
    Bed {
        api: server.handle(),
        server,
        vm,
        configmaps,
        secrets,
        root,
        shutdown,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn propagation(bed: &Bed, updates: usize) {
    bed.api
        .create(
            ConfigMapBuilder::new("default", "latency")
                .data("key", "0")
                .json(),
        )
        .unwrap();
    let pod: Pod = serde_json::from_value(
        bed.api
            .create(
                PodBuilder::new("default", "latency")
                    .container(json!({"name": "c", "image": "x",
                        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}))
                    .config_map_volume("cfg", "latency")
                    .json(),
            )
            .unwrap(),
    )
    .unwrap();
    let pod = admitted(&pod);
    bed.configmaps.register_pod(&pod);
    bed.vm.add_pod(&pod);
    bed.vm.wait_for_attach_and_mount(&pod).await.unwrap();
    let file = bed
        .vm
        .host()
        .volume_dir(pod.uid(), "kubernetes.io/configmap", "cfg")
        .join("key");
    let api: Api<ConfigMap> = Api::namespaced(bed.server.client(), "default");
    let mut rx = bed.vm.subscribe();
    let mut samples = Vec::with_capacity(updates);
    for i in 1..=updates {
        let value = i.to_string();
        let cm = ConfigMapBuilder::new("default", "latency")
            .data("key", &value)
            .build();
        rx.borrow_and_update();
        let start = Instant::now();
        api.replace("latency", &PostParams::default(), &cm)
            .await
            .unwrap();
        loop {
            if std::fs::read(&file).unwrap_or_default() == value.as_bytes() {
                break;
            }
            rx.changed().await.unwrap();
        }
        samples.push(start.elapsed());
    }
    samples.sort();
    println!(
        "propagation (API write -> visible), {updates} updates: median {}, p99 {}, max {}",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap())
    );
}

fn create_pods(api: &ServerHandle, round: usize) -> Vec<Arc<Pod>> {
    let ns = "default";
    let _ = api.create(
        ConfigMapBuilder::new(ns, "kube-root-ca.crt")
            .data(
                "ca.crt",
                "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n",
            )
            .json(),
    );
    (0..PODS)
        .map(|i| {
            let name = format!("r{round}-p{i}");
            api.create(
                ConfigMapBuilder::new(ns, &format!("{name}-cfg"))
                    .data("app.conf", &format!("pod = {name}\n"))
                    .data("other", "x")
                    .json(),
            )
            .unwrap();
            api.create(
                SecretBuilder::new(ns, &format!("{name}-sec"))
                    .data("password", "hunter2")
                    .json(),
            )
            .unwrap();
            let stored = api
                .create(
                    PodBuilder::new(ns, &name)
                        .container(json!({"name": "c", "image": "x", "volumeMounts": [
                            {"name": "cfg", "mountPath": "/cfg"},
                            {"name": "sec", "mountPath": "/sec"},
                            {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}))
                        .config_map_volume("cfg", &format!("{name}-cfg"))
                        .secret_volume("sec", &format!("{name}-sec"))
                        .volume(json!({"name": "kube-api-access", "projected": {"sources": [
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}))
                        .json(),
                )
                .unwrap();
            Arc::new(serde_json::from_value(stored).unwrap())
        })
        .collect()
}

async fn startup(bed: &Bed, rounds: usize) -> Vec<AdmittedPod> {
    let mut samples = Vec::new();
    let mut last = Vec::new();
    for round in 0..rounds {
        let pods = create_pods(&bed.api, round);
        let start = Instant::now();
        let admitted: Vec<AdmittedPod> = pods.iter().map(|p| admitted(p)).collect();
        for p in &admitted {
            bed.secrets.register_pod(p);
            bed.configmaps.register_pod(p);
            bed.vm.add_pod(p);
        }
        let waits = admitted.iter().map(|p| bed.vm.wait_for_attach_and_mount(p));
        for r in futures::future::join_all(waits).await {
            r.unwrap();
        }
        samples.push(start.elapsed());
        if round + 1 < rounds {
            for p in &admitted {
                bed.vm.remove_pod(p.uid());
            }
            for p in &admitted {
                bed.vm.wait_for_unmount(p.uid()).await.unwrap();
                bed.secrets.unregister_pod(p.uid());
                bed.configmaps.unregister_pod(p.uid());
            }
        } else {
            last = admitted;
        }
    }
    samples.sort();
    println!(
        "startup ({PODS} pods x 3 volumes, added -> all mounted), {rounds} rounds: median {}, max {}",
        ms(percentile(&samples, 0.5)),
        ms(*samples.last().unwrap())
    );
    last
}

/// CPU time (user + system, all threads) of this process from `/proc/self/stat`, in clock
/// ticks of 10 ms (`CLK_TCK` = 100 on Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat(5) are utime and stime; `fields` starts at field 3.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

async fn idle(secs: u64) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu0 = cpu_time();
    let wall0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let cpu = cpu_time() - cpu0;
    let wall = wall0.elapsed();
    println!(
        "idle CPU ({PODS} pods mounted, nothing changing, {secs} s, whole process incl. API server): {:.3} % of one core",
        cpu.as_secs_f64() / wall.as_secs_f64() * 100.0
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bed = bed().await;
        println!(
            "root {} (memory volumes on {})",
            bed.root.path().display(),
            if bed.vm.uses_tmpfs() { "tmpfs" } else { "disk" }
        );
        propagation(&bed, env_usize("UPDATES", 200)).await;
        let pods = startup(&bed, env_usize("STARTUP_ROUNDS", 5)).await;
        idle(env_usize("IDLE_SECS", 10) as u64).await;
        for p in &pods {
            bed.vm.remove_pod(p.uid());
        }
        for p in &pods {
            bed.vm.wait_for_unmount(p.uid()).await.unwrap();
        }
        bed.shutdown.cancel();
        bed.configmaps.shutdown().await;
        bed.secrets.shutdown().await;
        bed.server.shutdown().await;
    });
}

/// `pod` as the agent's pod source admits it (the fixtures always carry a UID).
fn admitted(pod: &Pod) -> AdmittedPod {
    AdmittedPod::new(pod.clone()).unwrap()
}
