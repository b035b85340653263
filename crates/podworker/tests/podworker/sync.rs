//! ConfigSyncer (spec PW-4 … PW-7, PW-12 … PW-14) with fake volumes, recorded events and
//! status, the env-file runtime in a temporary root.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerState, Pod, PodStatus};
use nodelet_core::AdmittedPod;
use nodelet_object_manager::Strategy;
use nodelet_podworker::{
    CONFIG_READY_CONDITION, ConfigSyncer, EnvFileRuntime, FakeVolumes, PodSyncer, RecordingEvents,
    RecordingStatus, SyncOutcome, SyncerConfig, SyncerParts, TerminatingPod,
};
use serde_json::json;
use tempfile::TempDir;

use crate::support::{Api, admit, api, pod, pod_with};

struct Fixture {
    root: TempDir,
    api: Api,
    volumes: FakeVolumes,
    events: RecordingEvents,
    status: RecordingStatus,
    syncer: ConfigSyncer,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let api = api(Strategy::Watch).with_fixtures("ns");
    let volumes = FakeVolumes::new();
    let events = RecordingEvents::new();
    let status = RecordingStatus::new();
    let syncer = ConfigSyncer::new(
        SyncerConfig::new(root.path()),
        SyncerParts {
            sources: api.sources.clone(),
            volumes: Arc::new(volumes.clone()),
            runtime: Arc::new(EnvFileRuntime::new(root.path())),
            events: Arc::new(events.clone()),
            status: Arc::new(status.clone()),
            probes: None,
            env_follow: None,
            follow: None,
        },
    );
    Fixture {
        root,
        api,
        volumes,
        events,
        status,
        syncer,
    }
}

fn env_pod() -> Pod {
    pod(json!({"env": [{"name": "CONFIG_DATA_1",
        "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-1"}}}]}))
}

/// What `PodWorkers::update_pod` does for a live pod before any sync (PW-4, PW-13, VM-4):
/// the pod as admitted, after `pod_desired`.
fn desire(f: &Fixture, p: &Pod) -> AdmittedPod {
    let pod = admit(p.clone());
    f.syncer.pod_desired(&pod);
    pod
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).map(|m| m.mode() & 0o777).unwrap_or(0)
}

#[tokio::test]
async fn pw4_pod_desired_registers_and_adds_then_sync_pod_mounts_and_writes_the_env_file() {
    let f = fixture();
    let p = env_pod();
    let p = desire(&f, &p);
    assert_eq!(f.api.sources.configmaps.stats().registered_pods, 1);
    assert_eq!(f.api.sources.secrets.stats().registered_pods, 1);
    assert_eq!(f.volumes.calls(), ["add u1"]);
    let r = f.syncer.sync_pod(&p).await;
    assert_eq!(r.ok(), Some(SyncOutcome::Running));
    let pod_dir = f.root.path().join("pods/u1");
    for d in ["", "volumes", "plugins"] {
        assert_eq!(mode(&pod_dir.join(d)), 0o750, "{d}");
    }
    assert_eq!(
        f.volumes.calls(),
        ["add u1", "mount u1"],
        "SyncPod adds nothing"
    );
    let env = std::fs::read_to_string(pod_dir.join("containers/c/env")).unwrap_or_default();
    assert_eq!(env, "CONFIG_DATA_1=value-1\n");
    let status = f.status.status("u1").unwrap_or_default();
    assert_eq!(
        condition(&status, "PodReadyToStartContainers"),
        ("True", None)
    );
    assert_eq!(condition(&status, CONFIG_READY_CONDITION), ("True", None));
    assert!(state(&status).running.is_some(), "{status:?}");
    assert_eq!(status.phase.as_deref(), Some("Running"));
}

/// Status and message of condition `type_`.
fn condition<'a>(status: &'a PodStatus, type_: &str) -> (&'a str, Option<&'a str>) {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map_or(("", None), |c| (c.status.as_str(), c.message.as_deref()))
}

/// The state of the pod's first regular container.
fn state(status: &PodStatus) -> ContainerState {
    status
        .container_statuses
        .iter()
        .flatten()
        .next()
        .and_then(|c| c.state.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn pw4_a_mount_failure_emits_failed_mount_and_creates_no_container() {
    let f = fixture();
    f.volumes
        .fail_next_mount(nodelet_volume_manager::Error::VolumesNotMounted {
            unmounted: vec!["cfg".into()],
            unattached: Vec::new(),
            failed_to_process: Vec::new(),
            cause: nodelet_volume_manager::WaitCause::Timeout,
        });
    let p = env_pod();
    let p = desire(&f, &p);
    let err = f.syncer.sync_pod(&p).await.err().map(|e| e.to_string());
    let text = "Unable to attach or mount volumes: unmounted volumes=[cfg], unattached volumes=[], \
                failed to process volumes=[]: timed out waiting for the condition";
    assert_eq!(err.as_deref(), Some(text));
    assert_eq!(
        f.events.reasons_and_messages(),
        [("FailedMount".to_owned(), text.to_owned())]
    );
    assert!(!f.root.path().join("pods/u1/containers").exists());
    let status = f.status.status("u1").unwrap_or_default();
    assert_eq!(
        condition(&status, "PodReadyToStartContainers"),
        ("False", Some(text))
    );
    let waiting = state(&status).waiting.unwrap_or_default();
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
}

#[tokio::test]
async fn pw7_missing_image_pull_secrets_give_one_event_and_do_not_stop_the_pod() {
    let f = fixture();
    let p = pod_with(
        json!({"imagePullSecrets": [{"name": "sec"}, {"name": ""}, {"name": "gone-1"}, {"name": "gone-2"}]}),
        json!({}),
    );
    let p = desire(&f, &p);
    let r = f.syncer.sync_pod(&p).await;
    assert_eq!(r.ok(), Some(SyncOutcome::Running));
    let events: Vec<_> = f
        .events
        .reasons_and_messages()
        .into_iter()
        .filter(|(r, _)| r != "Created")
        .collect();
    assert_eq!(
        events,
        [(
            "FailedToRetrieveImagePullSecret".to_owned(),
            "Unable to retrieve some image pull secrets (gone-1, gone-2); attempting to pull the image may not succeed.".to_owned()
        )]
    );
}

#[tokio::test]
async fn pw12_an_env_error_leaves_the_container_waiting_with_create_container_config_error() {
    let f = fixture();
    let p = pod(json!({"env": [{"name": "X",
        "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-4"}}}]}));
    let p = desire(&f, &p);
    let err = f.syncer.sync_pod(&p).await.err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            r#"failed to "StartContainer" for "c" with CreateContainerConfigError: "couldn't find key data-4 in ConfigMap ns/cm""#
        )
    );
    assert_eq!(
        f.events.reasons_and_messages(),
        [(
            "Failed".to_owned(),
            "Error: couldn't find key data-4 in ConfigMap ns/cm".to_owned()
        )]
    );
    let status = f.status.status("u1").unwrap_or_default();
    assert_eq!(condition(&status, "PodReadyToStartContainers").0, "True");
    assert_eq!(condition(&status, CONFIG_READY_CONDITION).0, "False");
    let waiting = state(&status).waiting.unwrap_or_default();
    assert_eq!(
        (waiting.reason.as_deref(), waiting.message.as_deref()),
        (
            Some("CreateContainerConfigError"),
            Some("couldn't find key data-4 in ConfigMap ns/cm")
        )
    );
    assert!(!f.root.path().join("pods/u1/containers/c/env").exists());

    // PW-12: the next sync retries; once the key exists the container is created.
    f.api.configmap(
        "ns",
        "cm",
        json!({"data-1": "value-1", "data-4": "value-4"}),
    );
    let mut created = false;
    for _ in 0..100 {
        if f.syncer.sync_pod(&p).await.is_ok() {
            created = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(created, "the watch delivers the new key");
    let env = std::fs::read_to_string(f.root.path().join("pods/u1/containers/c/env"));
    assert_eq!(env.ok().as_deref(), Some("X=value-4\n"));
}

#[tokio::test]
async fn up3_a_created_container_keeps_its_environment_on_later_syncs() {
    let f = fixture();
    let p = env_pod();
    let p = desire(&f, &p);
    assert!(f.syncer.sync_pod(&p).await.is_ok());
    f.api.configmap("ns", "cm", json!({"data-1": "changed"}));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(f.syncer.sync_pod(&p).await.is_ok());
    let env = std::fs::read_to_string(f.root.path().join("pods/u1/containers/c/env"));
    assert_eq!(env.ok().as_deref(), Some("CONFIG_DATA_1=value-1\n"));
    let created = f
        .events
        .reasons_and_messages()
        .into_iter()
        .filter(|(r, _)| r == "Created")
        .count();
    assert_eq!(created, 1);
}

#[tokio::test]
async fn pw4_a_terminal_pod_is_neither_registered_nor_mounted() {
    let f = fixture();
    let mut p = env_pod();
    if let Some(s) = p.status.as_mut() {
        s.phase = Some("Succeeded".into());
    }
    let p = admit(p);
    assert_eq!(
        f.syncer.sync_pod(&p).await.ok(),
        Some(SyncOutcome::Terminal)
    );
    assert_eq!(f.api.sources.configmaps.stats().registered_pods, 0);
    assert!(f.volumes.calls().is_empty());
}

#[tokio::test]
async fn pw6_pw14_termination_unmounts_then_unregisters_and_removes_the_pod_directory() {
    let f = fixture();
    let p = env_pod();
    let p = desire(&f, &p);
    assert!(f.syncer.sync_pod(&p).await.is_ok());
    assert!(
        f.syncer
            .sync_terminating_pod((&p).into(), Duration::from_secs(30))
            .await
            .is_ok()
    );
    assert_eq!(
        f.api.sources.configmaps.stats().registered_pods,
        1,
        "still registered while terminating (PW-5)"
    );
    assert!(f.syncer.sync_terminated_pod((&p).into()).await.is_ok());
    assert_eq!(f.api.sources.configmaps.stats().registered_pods, 0);
    assert_eq!(f.api.sources.secrets.stats().registered_pods, 0);
    let calls = f.volumes.calls();
    assert_eq!(calls[calls.len() - 2..], ["remove u1", "unmount u1"]);
    assert!(!f.root.path().join("pods/u1").exists());
    assert_eq!(f.status.terminated_pods(), ["u1"]);
}

// A pod whose directory a previous run left, its object gone: terminated by its UID alone,
// as the kubelet kills a running pod that has no API object.
#[tokio::test]
async fn pw6_a_pod_known_only_on_disk_is_torn_down_by_its_uid_and_nothing_is_reported() {
    let f = fixture();
    let p = env_pod();
    let p = desire(&f, &p);
    assert!(f.syncer.sync_pod(&p).await.is_ok());
    let events_before = f.events.events().len();
    let status_before = f.status.status("u1");
    let uid = p.uid().clone();
    drop(p);
    let on_disk = TerminatingPod::on_disk(&uid);
    assert!(
        f.syncer
            .sync_terminating_pod(on_disk, Duration::from_secs(30))
            .await
            .is_ok()
    );
    assert!(f.syncer.sync_terminated_pod(on_disk).await.is_ok());
    let calls = f.volumes.calls();
    assert_eq!(
        calls[calls.len() - 3..],
        ["remove u1", "remove u1", "unmount u1"]
    );
    assert_eq!(f.api.sources.configmaps.stats().registered_pods, 0);
    assert!(!f.root.path().join("pods/u1").exists());
    assert_eq!(f.events.events().len(), events_before, "no events");
    assert_eq!(f.status.status("u1"), status_before, "no status");
    assert!(f.status.terminated_pods().is_empty(), "nothing to delete");
}

#[tokio::test]
async fn pw6_a_pod_directory_with_leftover_files_is_kept() {
    let f = fixture();
    let p = env_pod();
    let p = desire(&f, &p);
    assert!(f.syncer.sync_pod(&p).await.is_ok());
    let stray = f.root.path().join("pods/u1/volumes/stray");
    assert!(std::fs::write(&stray, b"x").is_ok());
    assert!(f.syncer.sync_terminated_pod((&p).into()).await.is_ok());
    assert!(stray.exists(), "never delete what is not known to be empty");
    assert!(!f.root.path().join("pods/u1/containers").exists());
}

// One owner of "desired", so a sync cannot re-desire a terminating pod: SyncPod neither registers
// nor adds a pod; that is
// `pod_desired`'s job, done by `update_pod` before any sync. A pod that was never desired
// registers nothing, is not added, and its wait fails at once (the volume manager's
// `PodNotDesired`), with the usual FailedMount event.
#[tokio::test]
async fn pw13_sync_pod_of_a_pod_never_desired_registers_nothing_and_adds_nothing() {
    let f = fixture();
    let p = env_pod();
    let p = admit(p);
    let err = f.syncer.sync_pod(&p).await.err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "Unable to attach or mount volumes: pod ns/web (UID u1) is not desired: it must be \
             added before waiting for its volumes"
        )
    );
    assert_eq!(f.api.sources.configmaps.stats().registered_pods, 0);
    assert_eq!(f.api.sources.secrets.stats().registered_pods, 0);
    assert_eq!(f.volumes.calls(), ["mount u1"]);
    assert!(!f.root.path().join("pods/u1/containers").exists());
}

// PW-14: each update registers again, so a reference added by an update (here an env var
// reading a Secret) is registered before the next SyncPod reads it.
#[tokio::test]
async fn pw14_each_update_registers_the_pods_new_references() {
    let f = fixture();
    desire(&f, &env_pod());
    assert_eq!(f.api.sources.secrets.stats().referenced_objects, 0);
    let updated = pod(json!({"env": [{"name": "S",
        "valueFrom": {"secretKeyRef": {"name": "sec", "key": "data-1"}}}]}));
    let updated = desire(&f, &updated);
    assert_eq!(f.api.sources.secrets.stats().referenced_objects, 1);
    assert_eq!(
        f.volumes.count("add"),
        2,
        "the newest object is desired (VM-5)"
    );
    let r = f.syncer.sync_pod(&updated).await;
    assert_eq!(r.ok(), Some(SyncOutcome::Running));
    let env = std::fs::read_to_string(f.root.path().join("pods/u1/containers/c/env"));
    assert_eq!(env.ok().as_deref(), Some("S=value-1\\n\n"));
}
