//! One owner of "this pod is desired", so nothing re-desires a terminating pod:
//! `PodWorkers::update_pod` with the real
//! `ConfigSyncer` registers a live pod with both managers and adds it to the volumes before it
//! returns; syncs and resyncs register and add nothing; termination unregisters after the
//! volumes are gone and nothing registers the pod again (PW-4, PW-13, PW-14, VM-4).

use std::sync::Arc;
use std::time::Duration;

use nodelet_core::PodUid;
use nodelet_object_manager::Strategy;
use nodelet_podworker::{
    ConfigSyncer, EnvFileRuntime, FakeVolumes, PodUpdate, PodWorkers, RecordingEvents,
    RecordingStatus, SyncerConfig, SyncerParts, UpdateType, WorkerConfig, WorkerPhase,
};
use serde_json::json;

use crate::support::{Api, admit, api, pod};

struct Bed {
    _root: tempfile::TempDir,
    api: Api,
    volumes: FakeVolumes,
    workers: PodWorkers<ConfigSyncer>,
}

fn bed() -> Bed {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let api = api(Strategy::Watch).with_fixtures("ns");
    let volumes = FakeVolumes::new();
    let syncer = ConfigSyncer::new(
        SyncerConfig::new(root.path()),
        SyncerParts {
            sources: api.sources.clone(),
            volumes: Arc::new(volumes.clone()),
            runtime: Arc::new(EnvFileRuntime::new(root.path())),
            events: Arc::new(RecordingEvents::new()),
            status: Arc::new(RecordingStatus::new()),
            probes: None,
            env_follow: None,
            follow: None,
        },
    );
    // A short resync so that several periodic SyncPods run (nothing asserts a duration).
    let config = WorkerConfig::default().with_resync_interval(Duration::from_millis(5));
    Bed {
        _root: root,
        api,
        volumes,
        workers: PodWorkers::new(Arc::new(syncer), config),
    }
}

fn registered(api: &Api) -> (usize, usize) {
    (
        api.sources.secrets.stats().registered_pods,
        api.sources.configmaps.stats().registered_pods,
    )
}

async fn wait_syncs(w: &PodWorkers<ConfigSyncer>, n: u64) {
    w.wait_for(|s| s.iter().any(|x| x.syncs >= n)).await;
}

#[tokio::test]
async fn update_pod_registers_and_adds_a_live_pod_once_before_it_returns_and_syncs_never_do() {
    let b = bed();
    let p = pod(json!({"env": [{"name": "K",
        "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-1"}}}]}));
    b.workers
        .update_pod(PodUpdate::new(UpdateType::Create, admit(p.clone())));
    // Before update_pod returned, with no await in between: no sync can have run.
    assert_eq!(registered(&b.api), (1, 1));
    assert_eq!(b.volumes.calls(), ["add u1"]);
    // The first SyncPod and several periodic resyncs.
    wait_syncs(&b.workers, 4).await;
    assert_eq!(b.volumes.count("add"), 1, "{:?}", b.volumes.calls());
    assert!(b.volumes.count("mount") >= 4, "{:?}", b.volumes.calls());
    assert_eq!(registered(&b.api), (1, 1));

    // PW-6 / PW-14: termination unmounts, then unregisters; a late update does not register
    // the pod again.
    b.workers
        .update_pod(PodUpdate::new(UpdateType::Kill, admit(p.clone())));
    b.workers
        .update_pod(PodUpdate::new(UpdateType::Update, admit(p.clone())));
    let uid = PodUid::from_pod(&p).unwrap_or_else(|e| panic!("{e}"));
    b.workers
        .wait_for(|_| b.workers.phase(&uid) == Some(WorkerPhase::Finished))
        .await;
    b.workers
        .update_pod(PodUpdate::new(UpdateType::Update, admit(p)));
    assert_eq!(registered(&b.api), (0, 0));
    assert_eq!(b.volumes.count("add"), 1, "{:?}", b.volumes.calls());
    let calls = b.volumes.calls();
    assert_eq!(calls[calls.len() - 2..], ["remove u1", "unmount u1"]);
    b.workers.shutdown().await;
}
