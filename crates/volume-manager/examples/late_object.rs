//! Measures how long a volume waiting for a late object takes to mount once the object exists
//! (a change of the object ends the volume's backoff): pods reference ConfigMaps (or a key) that do
//! not exist yet; each object
//! is created some seconds after its pod, and the delay from the creation to the volume being
//! mounted is printed. Runs against `nodelet-apiserver` on loopback with the real kube client,
//! Watch managers and the default backoff (500 ms doubling to 2 min 2 s).
//!
//! `cargo run -p nodelet-volume-manager --example late_object [-- SCALE]` — SCALE
//! (default 1.0) multiplies the creation times (5 s, 20 s, 45 s, 75 s after the pods), so a run
//! takes about 75 s × SCALE.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodelet_apiserver::ApiServer;
use nodelet_core::AdmittedPod;

use nodelet_core::events::RecordingSink;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, Strategy};
use nodelet_sources::{KubeTokenSource, Sources, TokenManager};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use nodelet_volume_manager::{Config, MemoryMedium, VolumeManager};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One case: the pod, the ConfigMap it reads, when it appears, and whether the ConfigMap
/// exists from the start without the key (the key is added at `at`).
struct Case {
    label: &'static str,
    name: &'static str,
    at: f64,
    missing_key: bool,
}

const CASES: [Case; 5] = [
    Case {
        label: "object created 5 s after the pod",
        name: "at5",
        at: 5.0,
        missing_key: false,
    },
    Case {
        label: "object created 20 s after the pod",
        name: "at20",
        at: 20.0,
        missing_key: false,
    },
    Case {
        label: "missing key added 20 s after the pod",
        name: "key20",
        at: 20.0,
        missing_key: true,
    },
    Case {
        label: "object created 45 s after the pod",
        name: "at45",
        at: 45.0,
        missing_key: false,
    },
    Case {
        label: "object created 75 s after the pod",
        name: "at75",
        at: 75.0,
        missing_key: false,
    },
];

/// ConfigMap `default/<name>` with `other` (and `k` if `with_key`).
fn config_map(name: &str, with_key: bool) -> Value {
    let cm = ConfigMapBuilder::new("default", name).data("other", "o");
    if with_key { cm.data("k", "v") } else { cm }.json()
}

/// The case's pod: ConfigMap `case.name` as volume `cfg` (only key `k` if `missing_key`).
fn pod(case: &Case) -> Value {
    let volume = if case.missing_key {
        json!({"name": "cfg", "configMap": {"name": case.name, "items": [{"key": "k", "path": "k"}]}})
    } else {
        json!({"name": "cfg", "configMap": {"name": case.name}})
    };
    PodBuilder::new("default", case.name)
        .container(json!({"name": "c", "image": "busybox",
            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}))
        .volume(volume)
        .json()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scale: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1.0);
    let server = ApiServer::start(nodelet_apiserver::Config::default()).await?;
    let api = server.handle();
    let root = tempfile::tempdir()?;
    let client = server.client();
    let mut mc = ManagerConfig::default();
    mc.strategy = Strategy::Watch;
    let configmaps = ConfigMapManager::new(client.clone(), mc.clone())?;
    let secrets = SecretManager::new(client.clone(), mc)?;
    let mut config = Config::new(root.path());
    config.memory_medium = MemoryMedium::Disk;
    let vm = VolumeManager::new(
        config,
        configmaps.clone(),
        secrets.clone(),
        Sources::new(TokenManager::new(Arc::new(KubeTokenSource::new(client)))),
        Arc::new(RecordingSink::new()),
    )?;
    let shutdown = CancellationToken::new();
    let run = {
        let (vm, token) = (vm.clone(), shutdown.clone());
        tokio::spawn(async move { vm.run(token).await })
    };

    let start = Instant::now();
    let mut waits = Vec::new();
    for case in &CASES {
        if case.missing_key {
            api.create(config_map(case.name, false))?;
        }
        let pod: Pod = serde_json::from_value(api.create(pod(case))?)?;
        let pod = AdmittedPod::new(pod)?; // where the pod enters the node, once
        configmaps.register_pod(&pod);
        secrets.register_pod(&pod);
        vm.add_pod(&pod);
        let (vm, api) = (vm.clone(), api.clone());
        let at = start + Duration::from_secs_f64(case.at * scale);
        waits.push(tokio::spawn(async move {
            let uid = pod.uid();
            tokio::time::sleep_until(at).await;
            let object = config_map(case.name, true);
            if case.missing_key {
                api.update(object)?;
            } else {
                api.create(object)?;
            }
            let created = Instant::now();
            let mut changed = vm.subscribe();
            while vm.mounted_volumes(uid).is_empty() {
                changed.changed().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((case.label, created.elapsed()))
        }));
    }
    println!("{:<40} creation → mounted", "case");
    for wait in waits {
        let (label, delay) = wait.await?.map_err(|e| e.to_string())?;
        println!("{label:<40} {:>10.1} ms", delay.as_secs_f64() * 1e3);
    }
    shutdown.cancel();
    run.await?;
    configmaps.shutdown().await;
    secrets.shutdown().await;
    server.shutdown().await;
    Ok(())
}
