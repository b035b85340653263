//! Model test (proptest): random pod additions and removals and object writes and deletions
//! against a `HashMap` model; once the manager has settled, the directories on disk are
//! exactly the desired volumes and each shows its object's current content (VM-3 … VM-13,
//! UP-1 … UP-4).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use nodelet_core::events::RecordingSink;
use nodelet_core::{AdmittedPod, PodUid};
use nodelet_object_manager::source::FakeSource;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager};
use nodelet_sources::token::FakeTokenSource;
use nodelet_sources::{Sources, TokenManager};
use nodelet_testutil::{ConfigMapBuilder, PATIENCE, PodBuilder};
use nodelet_volume_manager::{Config, MemoryMedium, VolumeManager};
use proptest::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PODS: usize = 3;
const OBJECTS: usize = 2;

#[derive(Debug, Clone)]
enum Op {
    AddPod(usize),
    RemovePod(usize),
    Write(usize, u8),
    Delete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..PODS).prop_map(Op::AddPod),
        (0..PODS).prop_map(Op::RemovePod),
        (0..OBJECTS, any::<u8>()).prop_map(|(o, v)| Op::Write(o, v)),
        (0..OBJECTS).prop_map(Op::Delete),
    ]
}

/// Pod `ns/p<i>` (UID `uid-<i>`) mounts object `i % OBJECTS` (optional) and object
/// `(i + 1) % OBJECTS` (optional) as volumes `v0` and `v1`, at `/v0` and `/v1`.
fn pod(i: usize) -> Pod {
    let pod = PodBuilder::new("ns", &format!("p{i}"))
        .uid(&format!("uid-{i}"))
        .container(json!({"name": "c", "volumeMounts": [
            {"name": "v0", "mountPath": "/v0"}, {"name": "v1", "mountPath": "/v1"}]}));
    [i % OBJECTS, (i + 1) % OBJECTS]
        .iter()
        .enumerate()
        .fold(pod, |p, (n, o)| {
            p.volume(json!({"name": format!("v{n}"),
                "configMap": {"name": format!("cm{o}"), "optional": true, "defaultMode": 420}}))
        })
        .build()
}

/// Object `cm<o>` with key `value` = `value` (the namespace comes from `FakeSource::apply`).
fn object(o: usize, value: u8) -> ConfigMap {
    ConfigMapBuilder::new("", &format!("cm{o}"))
        .data("value", &value.to_string())
        .build()
}

/// What the model says is on disk: (pod uid, volume) → files.
fn expected(
    desired: &HashMap<usize, ()>,
    objects: &HashMap<usize, u8>,
) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for i in desired.keys() {
        for (n, o) in [i % OBJECTS, (i + 1) % OBJECTS].iter().enumerate() {
            let files = objects
                .get(o)
                .map(|v| BTreeMap::from([("value".to_owned(), v.to_string())]))
                .unwrap_or_default();
            out.insert((format!("uid-{i}"), format!("v{n}")), files);
        }
    }
    out
}

fn on_disk(root: &Path) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let Ok(pods) = std::fs::read_dir(root.join("pods")) else {
        return out;
    };
    for pod in pods.flatten() {
        let dir = pod.path().join("volumes/kubernetes.io~configmap");
        for vol in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let files = nodelet_atomic_writer::read_visible(&vol.path())
                .unwrap_or_default()
                .into_iter()
                .map(|(k, (d, _))| (k, String::from_utf8_lossy(&d).into_owned()))
                .collect();
            out.insert(
                (
                    pod.file_name().to_string_lossy().into_owned(),
                    vol.file_name().to_string_lossy().into_owned(),
                ),
                files,
            );
        }
    }
    out
}

async fn run_case(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let root = tempfile::tempdir().unwrap();
    let source = Arc::new(FakeSource::<ConfigMap>::new());
    let configmaps =
        ConfigMapManager::with_sources(source.clone(), None, ManagerConfig::default()).unwrap();
    let secrets = SecretManager::with_sources(
        Arc::new(FakeSource::<Secret>::new()),
        None,
        ManagerConfig::default(),
    )
    .unwrap();
    let mut config = Config::new(root.path());
    config.memory_medium = MemoryMedium::Disk;
    config.fsync = false;
    config.resync_interval = None;
    config.initial_backoff = Duration::from_millis(10);
    config.max_backoff = Duration::from_millis(50);
    let vm = VolumeManager::new(
        config,
        configmaps.clone(),
        secrets,
        Sources::new(TokenManager::new(Arc::new(FakeTokenSource::new()))),
        Arc::new(RecordingSink::new()),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let runner = vm.clone();
    let token = shutdown.clone();
    let run = tokio::spawn(async move { runner.run(token).await });

    let mut desired: HashMap<usize, ()> = HashMap::new();
    let mut objects: HashMap<usize, u8> = HashMap::new();
    for op in ops {
        match op {
            Op::AddPod(i) => {
                let p = pod(i);
                configmaps.register_pod(&admitted(&p));
                vm.add_pod(&admitted(&p));
                desired.insert(i, ());
            }
            Op::RemovePod(i) => {
                vm.remove_pod(&PodUid::new(format!("uid-{i}")).unwrap());
                desired.remove(&i);
            }
            Op::Write(o, v) => {
                source.apply("ns", object(o, v));
                objects.insert(o, v);
            }
            Op::Delete(o) => {
                source.delete("ns", &format!("cm{o}"));
                objects.remove(&o);
            }
        }
    }
    let want = expected(&desired, &objects);
    let mut rx = vm.subscribe();
    let settled = tokio::time::timeout(PATIENCE, async {
        loop {
            rx.borrow_and_update();
            if on_disk(root.path()) == want {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    let seen = on_disk(root.path());
    shutdown.cancel();
    run.await.unwrap();
    configmaps.shutdown().await;
    prop_assert!(
        settled.is_ok(),
        "never settled: want {want:?}, on disk {seen:?}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn disk_converges_to_the_desired_pods_and_current_objects(ops in prop::collection::vec(op(), 1..12)) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run_case(ops))?;
    }
}

/// `pod` as the agent's pod source admits it (the fixtures always carry a UID).
fn admitted(pod: &Pod) -> AdmittedPod {
    AdmittedPod::new(pod.clone()).unwrap()
}
