//! Environments that follow a change (nodelet's own, FC-10 … FC-14), against
//! `nodelet-apiserver`: under the process runtime (needs root) a container that asks for it is
//! restarted alone with the new value in its process's environment (`/proc/<pid>/environ`),
//! its restartCount, `lastState` and `Killing` event saying why, never a value; a container
//! without the annotation, an init container and a change that leaves the environment as it
//! is restart nothing; a removed key keeps the old container running with a Warning; a burst
//! of patches gives at most two restarts. Under the env-file runtime the env files follow, and
//! a bad annotation is a Warning as under the process runtime.
//!
//! The tests print the latencies they see (patch returned → the new process runs with the new
//! value) for the README's table; they assert values, counts and events, never a duration.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
use serde_json::{Value, json};

use crate::process_runtime::{
    BUSYBOX, NS, container_status, create, delete_and_wait, event_is, events_for, get_pod,
    read_log, start, summary, wait_for_event, wait_for_pod,
};
use crate::support::{NODE, PATIENCE, World, poll_pause, wait_for_env_var};

async fn patch_configmap(world: &World, name: &str, body: Value) {
    let api: Api<ConfigMap> = Api::namespaced(world.admin.clone(), NS);
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap_or_else(|e| panic!("patching ConfigMap {name}: {e}"));
}

async fn patch_secret(world: &World, name: &str, data: Value) {
    let api: Api<Secret> = Api::namespaced(world.admin.clone(), NS);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "stringData": data })),
    )
    .await
    .unwrap_or_else(|e| panic!("patching Secret {name}: {e}"));
}

/// The environment of process `pid` (`/proc/<pid>/environ`), `NAME=value` each.
fn environ(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// The pid and start count of `container`'s running instance, from its state file.
fn state(world: &World, pod: &Value, container: &str) -> Option<(i32, u32)> {
    let uid =
        nodelet_core::PodUid::new(pod["metadata"]["uid"].as_str().unwrap_or_default()).ok()?;
    let path = nodelet_core::PodDirs::new(world.root_dir())
        .container(&uid, container)
        .join("state.json");
    let state: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let pid = state["pid"].as_i64().and_then(|p| i32::try_from(p).ok())?;
    let starts = state["starts"]
        .as_u64()
        .and_then(|s| u32::try_from(s).ok())?;
    Some((pid, starts))
}

/// Waits until the running instance of `container` has `want` in its environment; returns
/// its pid.
async fn wait_for_environ(world: &World, pod: &Value, container: &str, want: &str) -> i32 {
    let mut last = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some((pid, _)) = state(world, pod, container) {
                last = environ(pid);
                if last.iter().any(|v| v == want) {
                    return pid;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!("{container} never ran with {want}; its last environment: {last:?}")
    })
}

fn restart_count(pod: &Value, container: &str) -> i64 {
    container_status(pod, container)["restartCount"]
        .as_i64()
        .unwrap_or(-1)
}

/// A container that sleeps, its environment read from ConfigMap `cfg` (`MODE` from key
/// `mode`, every key with the prefix `CFG_`) and Secret `creds` (`TOKEN` from `token`).
fn sleeper(name: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "command": ["sh", "-c", "exec sleep 100000"],
        "env": [
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "DERIVED", "value": "mode-$(MODE)"},
        ],
        "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_environment_restarts_that_container_alone_and_says_why_never_a_value() {
    let (world, _reaper) = start(false).await;
    create(
        &world,
        ConfigMapBuilder::new(NS, "cfg")
            .data("mode", "a")
            .data("level", "1")
            .json(),
    );
    create(
        &world,
        SecretBuilder::new(NS, "creds")
            .data("token", b"s3cr3t-one")
            .json(),
    );
    let created = create(
        &world,
        PodBuilder::new(NS, "envpod")
            .node(NODE)
            .annotation("nodelet.io/follow-env.app", "true")
            .spec(
                json!({"terminationGracePeriodSeconds": 0, "securityContext": {"runAsUser": 1000}}),
            )
            .init_container(json!({"name": "setup", "image": BUSYBOX,
                "command": ["sh", "-c", "echo setup ran"]}))
            .container(sleeper("app"))
            .container(sleeper("other"))
            .json(),
    );
    wait_for_pod(&world, "envpod", "ran both containers", |p| {
        ["app", "other"]
            .iter()
            .all(|c| container_status(p, c)["state"]["running"].is_object())
    })
    .await;
    let first = wait_for_environ(&world, &created, "app", "MODE=a").await;
    assert!(environ(first).contains(&"DERIVED=mode-a".to_owned()));
    let other = wait_for_environ(&world, &created, "other", "MODE=a").await;

    // A change of a key the container reads: a new process with the new value.
    let patched = Instant::now();
    patch_configmap(&world, "cfg", json!({"data": {"mode": "b"}})).await;
    let second = wait_for_environ(&world, &created, "app", "MODE=b").await;
    eprintln!(
        "patch returned -> restarted process runs with the new value: {:.1} ms",
        patched.elapsed().as_secs_f64() * 1e3
    );
    assert_ne!(
        second, first,
        "the same process cannot have a new environment"
    );
    let env = environ(second);
    for want in [
        "CFG_mode=b",
        "CFG_level=1",
        "DERIVED=mode-b",
        "TOKEN=s3cr3t-one",
    ] {
        assert!(
            env.contains(&want.to_owned()),
            "{want} missing from {env:?}"
        );
    }
    let pod = wait_for_pod(&world, "envpod", "showed the restart", |p| {
        restart_count(p, "app") == 1 && container_status(p, "app")["state"]["running"].is_object()
    })
    .await;
    let last = &container_status(&pod, "app")["lastState"]["terminated"];
    assert_eq!(last["reason"], "ConfigChanged", "{last}");
    let killing = wait_for_event(&world.admin, &created, "Killing naming the change", |e| {
        event_is(e, "Normal", "Killing")
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains("environment changed"))
    })
    .await;
    assert_eq!(
        killing.message.as_deref(),
        Some("Container app environment changed (ConfigMap default/cfg: mode), will be restarted")
    );

    // A Secret's change: named by key, its value nowhere.
    patch_secret(&world, "creds", json!({"token": "s3cr3t-two"})).await;
    wait_for_environ(&world, &created, "app", "TOKEN=s3cr3t-two").await;
    wait_for_event(&world.admin, &created, "Killing naming the Secret", |e| {
        e.message
            .as_deref()
            .is_some_and(|m| m.contains("(Secret default/creds: token)"))
    })
    .await;

    // A change that leaves the environment as it is (a label; a key's value set again):
    // nothing restarts. Then a real change: exactly one more restart.
    patch_configmap(
        &world,
        "cfg",
        json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    patch_configmap(&world, "cfg", json!({"data": {"mode": "b"}})).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    patch_configmap(&world, "cfg", json!({"data": {"level": "2"}})).await;
    wait_for_environ(&world, &created, "app", "CFG_level=2").await;
    let pod = wait_for_pod(&world, "envpod", "showed the third restart", |p| {
        restart_count(p, "app") >= 3 && container_status(p, "app")["state"]["running"].is_object()
    })
    .await;
    assert_eq!(restart_count(&pod, "app"), 3, "{}", pod["status"]);

    // The container without the annotation kept its process and its first environment, as
    // the kubelet's would; the init container ran once.
    assert_eq!(restart_count(&pod, "other"), 0);
    assert_eq!(state(&world, &created, "other").map(|s| s.0), Some(other));
    assert!(environ(other).contains(&"MODE=a".to_owned()));
    let setup = read_log(&world.root_dir(), &created, "setup").await;
    assert_eq!(setup.matches("setup ran").count(), 1, "{setup}");

    // What `/pods` shows: the objects the environment was made from, current.
    let view = world.with_agent(|a| a.pods_json()).await;
    let containers = view["pods"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "envpod"))
        .map(|p| p["containers"].clone())
        .unwrap_or_default();
    let app = containers
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "app"))
        .cloned()
        .unwrap_or_default();
    let kinds: Vec<(&str, &str, bool)> = app["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default(),
                e["name"].as_str().unwrap_or_default(),
                e["current"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [("ConfigMap", "cfg", true), ("Secret", "creds", true)],
        "{containers}"
    );
    assert!(app["env"][0]["resourceVersion"].is_string(), "{app}");

    // No value in any event.
    let events = events_for(&world.admin, &created).await;
    let leaked: Vec<_> = summary(&events)
        .into_iter()
        .filter(|(_, _, m)| m.contains("s3cr3t") || m.contains("=b"))
        .collect();
    assert!(leaked.is_empty(), "values in events: {leaked:?}");
    delete_and_wait(&world, "envpod", 0).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_keeps_the_old_container_running_with_a_warning() {
    let (world, _reaper) = start(false).await;
    create(
        &world,
        ConfigMapBuilder::new(NS, "cfg").data("mode", "a").json(),
    );
    let created = create(
        &world,
        PodBuilder::new(NS, "keygone")
            .node(NODE)
            .annotation("nodelet.io/follow-env", "true")
            .spec(
                json!({"terminationGracePeriodSeconds": 0, "securityContext": {"runAsUser": 1000}}),
            )
            .container(json!({
                "name": "app",
                "image": BUSYBOX,
                "command": ["sh", "-c", "exec sleep 100000"],
                "env": [{"name": "MODE",
                    "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}],
            }))
            .json(),
    );
    let first = wait_for_environ(&world, &created, "app", "MODE=a").await;
    patch_configmap(&world, "cfg", json!({"data": {"mode": null, "other": "x"}})).await;
    let warning = wait_for_event(&world.admin, &created, "FailedEnvUpdate", |e| {
        event_is(e, "Warning", "FailedEnvUpdate")
    })
    .await;
    assert_eq!(
        warning.message.as_deref(),
        Some(
            "Container app keeps its environment: couldn't find key mode in ConfigMap default/cfg"
        )
    );
    let pod = get_pod(&world, "keygone").unwrap_or_default();
    assert_eq!(restart_count(&pod, "app"), 0, "{}", pod["status"]);
    assert!(container_status(&pod, "app")["state"]["running"].is_object());
    assert_eq!(state(&world, &created, "app").map(|s| s.0), Some(first));
    assert!(environ(first).contains(&"MODE=a".to_owned()));

    // The key back with a new value: the container follows again.
    patch_configmap(&world, "cfg", json!({"data": {"mode": "c"}})).await;
    let second = wait_for_environ(&world, &created, "app", "MODE=c").await;
    assert_ne!(second, first);
    delete_and_wait(&world, "keygone", 0).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_hundred_patches_in_a_second_gives_at_most_two_restarts() {
    let (world, _reaper) = start(false).await;
    create(
        &world,
        ConfigMapBuilder::new(NS, "cfg").data("mode", "0").json(),
    );
    let created = create(
        &world,
        PodBuilder::new(NS, "burst")
            .node(NODE)
            .annotation("nodelet.io/follow-env", "true")
            // A quiet time longer than the default: on a loaded machine back-to-back patches
            // can come more than 200 ms apart, which splits a burst as documented (the
            // `follow_env` bench measures the default quiet time).
            .annotation("nodelet.io/env-debounce", "2s")
            .spec(
                json!({"terminationGracePeriodSeconds": 0, "securityContext": {"runAsUser": 1000}}),
            )
            .container(json!({
                "name": "app",
                "image": BUSYBOX,
                "command": ["sh", "-c", "exec sleep 100000"],
                "env": [{"name": "MODE",
                    "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}],
            }))
            .json(),
    );
    wait_for_environ(&world, &created, "app", "MODE=0").await;
    let began = Instant::now();
    for n in 1..=100 {
        patch_configmap(&world, "cfg", json!({"data": {"mode": n.to_string()}})).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "100 patches sent in {:.0} ms",
        began.elapsed().as_secs_f64() * 1e3
    );
    wait_for_environ(&world, &created, "app", "MODE=100").await;
    // Settle: a restart queued late would show within a few quiet times.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pod = wait_for_pod(&world, "burst", "runs", |p| {
        container_status(p, "app")["state"]["running"].is_object()
    })
    .await;
    let restarts = restart_count(&pod, "app");
    eprintln!("a burst of 100 patches: {restarts} restart(s)");
    assert!(
        (1..=2).contains(&restarts),
        "{restarts} restarts: {}",
        pod["status"]
    );
    assert_eq!(
        state(&world, &created, "app").map(|s| s.1),
        Some(restarts as u32 + 1)
    );
    delete_and_wait(&world, "burst", 0).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_env_file_runtime_keeps_the_env_files_current_for_a_pod_that_asks() {
    let world = World::start().await;
    let h = world.server.handle();
    h.create(
        ConfigMapBuilder::new("default", "cfg")
            .data("mode", "a")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let container = json!({"name": "c", "image": "x", "env": [{"name": "MODE",
        "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}]});
    let follows = h
        .create(
            PodBuilder::new("default", "follows")
                .node(NODE)
                .annotation("nodelet.io/follow-env", "true")
                .container(container.clone())
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let kept = h
        .create(
            PodBuilder::new("default", "kept")
                .node(NODE)
                .container(container)
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let (follows_dir, kept_dir) = (world.pod_dir(&follows), world.pod_dir(&kept));
    assert_eq!(wait_for_env_var(&follows_dir, "c", "MODE").await, "a");
    assert_eq!(wait_for_env_var(&kept_dir, "c", "MODE").await, "a");

    patch_configmap(&world, "cfg", json!({"data": {"mode": "b"}})).await;
    tokio::time::timeout(PATIENCE, async {
        loop {
            let env =
                std::fs::read_to_string(follows_dir.join("containers/c/env")).unwrap_or_default();
            if env.contains("MODE=b\n") {
                return;
            }
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the env file never followed"));
    assert_eq!(wait_for_env_var(&follows_dir, "c", "MODE").await, "b");
    wait_for_event(&world.admin, &follows, "EnvUpdated", |e| {
        event_is(e, "Normal", "EnvUpdated")
            && e.message.as_deref()
                == Some("Environment of container c updated (ConfigMap default/cfg: mode)")
    })
    .await;
    // Without the annotation: the kubelet's behaviour, the environment it was created with.
    assert_eq!(wait_for_env_var(&kept_dir, "c", "MODE").await, "a");
    world.stop().await;
}

// Under the env-file runtime as under the process runtime, a bad follow annotation is a
// Warning naming it and its value; the pod runs with the default (no following).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_follow_annotation_under_the_env_file_runtime_is_a_warning_event() {
    let world = World::start().await;
    let h = world.server.handle();
    h.create(
        ConfigMapBuilder::new("default", "cfg")
            .data("mode", "a")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bad = h
        .create(
            PodBuilder::new("default", "bad")
                .node(NODE)
                .annotation("nodelet.io/follow-env", "maybe")
                .container(json!({"name": "c", "image": "x", "env": [{"name": "MODE",
                    "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}]}))
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let event = wait_for_event(&world.admin, &bad, "InvalidFollowAnnotation", |e| {
        event_is(e, "Warning", "InvalidFollowAnnotation")
    })
    .await;
    assert_eq!(
        event.message.as_deref(),
        Some(
            "Pod default/bad: annotation nodelet.io/follow-env: invalid value \"maybe\": must \
             be true or false"
        )
    );
    assert_eq!(
        wait_for_env_var(&world.pod_dir(&bad), "c", "MODE").await,
        "a"
    );
    world.stop().await;
}
