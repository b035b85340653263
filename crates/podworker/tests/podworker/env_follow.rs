//! Environments that follow a change (FC-10 … FC-13) over in-memory object sources, under
//! paused time: a burst of changes closer than the quiet time queues one restart after it, a
//! change that leaves the environment as it is queues none, a container that does not ask is
//! only shown stale, a key removed keeps the instance with one Warning.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use nodelet_core::runtime::{ContainerLaunch, ContainerState, ContainerStatus, PodSandbox};
use nodelet_core::{AdmittedPod, ObjectRef, PodUid};
use nodelet_object_manager::Strategy;
use nodelet_podworker::follow::{EnvFollow, EnvFollowParts, EnvRestart, FollowDefaults};
use nodelet_podworker::{
    ContainerEnv, EnvOptions, RecordingEvents, RuntimeError, RuntimeHook, SyncerConfig,
    TerminatingPod, resolve_env,
};
use serde_json::json;

use crate::support::{Api, admit, api, first_container, pod_with};

/// A runtime whose container `c` runs as instance `id-1`; it cannot replace an environment
/// in place (so a change is a restart).
struct Running;

#[async_trait]
impl RuntimeHook for Running {
    async fn run_pod_sandbox(&self, _: &AdmittedPod) -> Result<Option<PodSandbox>, RuntimeError> {
        Ok(None)
    }
    async fn create_container(
        &self,
        _: &AdmittedPod,
        _: &Container,
        _: &ContainerEnv,
        _: &ContainerLaunch,
        _: &[Arc<Secret>],
    ) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn statuses(&self, _: &PodUid) -> Vec<ContainerStatus> {
        vec![running()]
    }
    async fn kill_pod(&self, _: &PodUid, _: Duration) -> Result<Vec<String>, RuntimeError> {
        Ok(Vec::new())
    }
    async fn remove_pod(&self, _: TerminatingPod<'_>) -> Result<(), RuntimeError> {
        Ok(())
    }
}

fn running() -> ContainerStatus {
    ContainerStatus {
        name: "c".to_owned(),
        state: ContainerState::Running {
            started_at: SystemTime::UNIX_EPOCH,
        },
        last_state: None,
        restart_count: 0,
        container_id: "id-1".to_owned(),
    }
}

const QUIET: Duration = Duration::from_millis(200);

struct Fixture {
    api: Api,
    events: RecordingEvents,
    follow: EnvFollow,
    pod: AdmittedPod,
    cfg: ObjectRef,
}

/// Container `c` reads `MODE` from ConfigMap `ns/cfg` key `mode`; with `follows`, the pod
/// asks `nodelet.io/follow-env`.
async fn fixture(follows: bool) -> Fixture {
    let api = api(Strategy::Watch);
    api.configmap("ns", "cfg", json!({"mode": "a", "other": "1"}));
    let mut p: Pod = pod_with(
        json!({}),
        json!({"env": [{"name": "MODE",
            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}]}),
    );
    if follows {
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("nodelet.io/follow-env".to_owned(), "true".to_owned());
    }
    api.register(&p);
    let events = RecordingEvents::new();
    let root = std::env::temp_dir();
    let follow = EnvFollow::new(EnvFollowParts {
        defaults: FollowDefaults::default(),
        sources: api.sources.clone(),
        context: SyncerConfig::new(&root).env_context(),
        sandbox: false,
        runtime: Arc::new(Running),
        events: Arc::new(events.clone()),
    });
    let container = first_container(&p);
    let env = resolve_env(&p, &container, &api.sources, &EnvOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = admit(p);
    follow.started(&pod, &container, "id-1", &env);
    Fixture {
        api,
        events,
        follow,
        pod,
        cfg: ObjectRef::config_map("ns", "cfg"),
    }
}

impl Fixture {
    fn change(&self, data: serde_json::Value) {
        self.api.configmap("ns", "cfg", data);
        self.follow.object_changed(&self.pod, &self.cfg);
    }

    fn restarts(&self) -> Vec<EnvRestart> {
        self.follow.take_restarts(&self.pod, &[running()])
    }

    fn current(&self) -> bool {
        let fresh = self.follow.freshness(self.pod.uid(), "c");
        assert_eq!(fresh.len(), 1, "{fresh:?}");
        fresh[0].current
    }
}

#[tokio::test(start_paused = true)]
async fn fc11_a_burst_closer_than_the_quiet_time_queues_one_restart_after_it() {
    let f = fixture(true).await;
    let mut syncs = f.follow.syncs();
    assert!(f.current());
    for n in 0..5 {
        f.change(json!({"mode": format!("v{n}"), "other": "1"}));
        tokio::time::sleep(QUIET / 2).await;
    }
    assert!(f.restarts().is_empty(), "the burst is still open");
    assert!(!f.current(), "a change was seen and not yet applied");
    tokio::time::sleep(QUIET * 2).await;
    assert_eq!(syncs.try_recv().ok().as_ref(), Some(f.pod.uid()));
    assert!(syncs.try_recv().is_err(), "one sync for the burst");
    assert_eq!(
        f.restarts(),
        [EnvRestart {
            container: "c".to_owned(),
            container_id: "id-1".to_owned(),
            message: "Container c environment changed (ConfigMap ns/cfg: mode), will be restarted"
                .to_owned(),
        }]
    );
    assert!(f.restarts().is_empty(), "handed out once");
    assert!(!f.current(), "the restart has not happened yet");
}

#[tokio::test(start_paused = true)]
async fn fc10_a_change_that_leaves_the_environment_as_it_is_restarts_nothing() {
    let f = fixture(true).await;
    let mut syncs = f.follow.syncs();
    f.change(json!({"mode": "a", "other": "2"}));
    assert!(!f.current());
    tokio::time::sleep(QUIET * 3).await;
    assert!(syncs.try_recv().is_err());
    assert!(f.restarts().is_empty());
    assert!(f.current(), "the new version gives the same environment");
    assert!(f.events.events().is_empty(), "{:?}", f.events.events());
}

#[tokio::test(start_paused = true)]
async fn fc10_a_container_that_does_not_ask_is_shown_stale_and_never_restarted() {
    let f = fixture(false).await;
    let mut syncs = f.follow.syncs();
    f.change(json!({"mode": "b", "other": "1"}));
    tokio::time::sleep(QUIET * 3).await;
    assert!(syncs.try_recv().is_err());
    assert!(f.restarts().is_empty());
    assert!(!f.current(), "it runs with what it started with");
}

#[tokio::test(start_paused = true)]
async fn fc13_a_removed_key_keeps_the_instance_with_one_warning_naming_object_and_key() {
    let f = fixture(true).await;
    let mut syncs = f.follow.syncs();
    f.change(json!({"other": "2"}));
    tokio::time::sleep(QUIET * 3).await;
    f.change(json!({"other": "3"}));
    tokio::time::sleep(QUIET * 3).await;
    assert!(syncs.try_recv().is_err());
    assert!(f.restarts().is_empty());
    assert_eq!(
        f.events.reasons_and_messages(),
        [(
            "FailedEnvUpdate".to_owned(),
            "Container c keeps its environment: couldn't find key mode in ConfigMap ns/cfg"
                .to_owned()
        )],
        "one Warning for the same error"
    );
    // The key back with a new value: the restart follows.
    f.change(json!({"mode": "z", "other": "3"}));
    tokio::time::sleep(QUIET * 3).await;
    assert_eq!(f.restarts().len(), 1);
}
