//! The process runtime (`--runtime process`) end to end: the agent runs pods' containers as
//! local processes through the real `nodelet container-init`, against `nodelet-apiserver`.
//! The tests check what a container saw (its log file, read as `nodelet logs` reads it), the
//! status and events the agent publishes, termination, restarts and the agent's own restart,
//! and that nothing is left on the host. They need root (mount namespaces); CI runs as root.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use nodelet_apiserver::{ApiServer, User};
use nodelet_core::{PodDirs, PodUid};
use nodelet_runtime::logs::{self, ReadOptions};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
use serde_json::{Value, json};

use crate::support::{NODE, PATIENCE, World, poll_pause};

pub(crate) const NS: &str = "default";
/// Mapped by the default image table to the host's shell (as root, like the image).
pub(crate) const BUSYBOX: &str = "busybox:1.36";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Fails, naming the privilege, where the machine cannot run containers.
pub(crate) fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (uid 0): the process runtime makes a mount namespace per \
         container; CI runs as root"
    );
}

/// Kills, when dropped, every container process a `state.json` under the root directory
/// still names (a test that failed half-way leaves no process behind). Declared after the
/// [`World`] so that it runs first.
pub(crate) struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for (pid, ticks) in state_files(&self.0) {
            if start_ticks(pid) == Some(ticks) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// `(pid, startTicks)` of every `<root>/pods/*/containers/*/state.json`.
fn state_files(root: &Path) -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    let pods = fs::read_dir(PodDirs::new(root).pods())
        .into_iter()
        .flatten();
    for pod in pods.flatten() {
        let containers = fs::read_dir(pod.path().join("containers"))
            .into_iter()
            .flatten();
        for c in containers.flatten() {
            let state: Option<Value> = fs::read(c.path().join("state.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            if let Some(s) = state {
                let pid = s["pid"].as_i64().and_then(|p| i32::try_from(p).ok());
                if let (Some(pid), Some(ticks)) = (pid, s["startTicks"].as_u64()) {
                    out.push((pid, ticks));
                }
            }
        }
    }
    out
}

/// An in-process agent with the process runtime and a short crash back-off.
pub(crate) async fn start(allow_root: bool) -> (World, Reaper) {
    start_on(nodelet_apiserver::Config::default(), allow_root, |_, _| {}).await
}

/// [`start`] on a server with `server` options, the agent's configuration then changed by
/// `tweak` (shown the started server).
pub(crate) async fn start_on(
    server: nodelet_apiserver::Config,
    allow_root: bool,
    tweak: impl FnOnce(&mut nodelet::AgentConfig, &ApiServer),
) -> (World, Reaper) {
    require_root();
    let world = World::start_on_server(
        server,
        |_| {},
        |c, server| {
            c.runtime = nodelet_config::RuntimeKind::Process;
            // The test binary is not the agent: the containers' init is the real `nodelet`.
            c.container_init = Some(vec![
                env!("CARGO_BIN_EXE_nodelet").into(),
                "container-init".into(),
            ]);
            c.crash_backoff = nodelet_core::backoff::Schedule {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(1),
                ..nodelet_core::backoff::Schedule::CRASH_LOOP
            };
            c.allow_root_containers = allow_root;
            tweak(c, server);
        },
    )
    .await;
    let reaper = Reaper(world.root_dir());
    (world, reaper)
}

/// A pod on the test node.
pub(crate) fn pod(name: &str) -> PodBuilder {
    PodBuilder::new(NS, name).node(NODE)
}

/// Container `c` running `sh -c script` in busybox.
pub(crate) fn shell(script: &str) -> Value {
    json!({"name": "c", "image": BUSYBOX, "command": ["sh", "-c", script]})
}

/// `shell(script)` with the extra container fields of `extra` (a JSON object).
pub(crate) fn shell_with(script: &str, extra: Value) -> Value {
    let mut c = shell(script);
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

pub(crate) fn create(world: &World, object: Value) -> Value {
    world
        .server
        .handle()
        .create(object)
        .unwrap_or_else(|e| panic!("creating an object: {e}"))
}

pub(crate) fn get_pod(world: &World, name: &str) -> Option<Value> {
    world.server.handle().get("v1", "Pod", Some(NS), name)
}

pub(crate) fn uid_of(pod: &Value) -> PodUid {
    PodUid::new(pod["metadata"]["uid"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the server's pod: {e}"))
}

/// Waits (bounded by [`PATIENCE`]) until pod `name` exists and `done` holds for it.
pub(crate) async fn wait_for_pod(
    world: &World,
    name: &str,
    what: &str,
    mut done: impl FnMut(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(p) = get_pod(world, name) {
                if done(&p) {
                    return p;
                }
                last = p;
            }
            poll_pause().await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!(
            "pod {name} never {what}; its last status: {}",
            last["status"]
        )
    })
}

pub(crate) async fn wait_for_phase(world: &World, name: &str, phase: &str) -> Value {
    wait_for_pod(world, name, &format!("reached phase {phase}"), |p| {
        p["status"]["phase"] == phase
    })
    .await
}

/// The status of `container` in `pod` (`Null` when absent).
pub(crate) fn container_status<'a>(pod: &'a Value, container: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == container))
        .unwrap_or(&Value::Null)
}

/// Waits until `container` of pod `name` is running.
pub(crate) async fn wait_for_running(world: &World, name: &str) -> Value {
    wait_for_pod(world, name, "had a running container c", |p| {
        container_status(p, "c")["state"]["running"].is_object()
    })
    .await
}

/// `<root>/logs/pods/<ns>_<name>_<uid>`.
pub(crate) fn pod_log_dir(root: &Path, pod: &Value) -> PathBuf {
    PodDirs::new(root).pod_logs(
        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        pod["metadata"]["name"].as_str().unwrap_or_default(),
        &uid_of(pod),
    )
}

/// The newest instance's log of `container`, read by the code `nodelet logs` uses (empty when
/// there is none yet).
pub(crate) async fn read_log(root: &Path, pod: &Value, container: &str) -> String {
    let dir = pod_log_dir(root, pod);
    let Some(latest) = logs::instances(&dir.join(container))
        .ok()
        .and_then(|i| i.last().copied())
    else {
        return String::new();
    };
    let path = logs::container_log_path(&dir, container, latest);
    let mut out: Vec<u8> = Vec::new();
    match logs::read_logs(
        &path,
        &ReadOptions::default(),
        std::future::pending::<()>(),
        &mut out,
    )
    .await
    {
        Ok(_) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => String::new(),
    }
}

/// Waits until the log of container `c` of `pod` contains every one of `needles`; returns it.
pub(crate) async fn wait_for_log(root: &Path, pod: &Value, needles: &[&str]) -> String {
    let mut last = String::new();
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            last = read_log(root, pod, "c").await;
            if needles.iter().all(|n| last.contains(n)) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    if found.is_err() {
        panic!(
            "the log of pod {} never showed {needles:?}; it holds:\n{last}",
            pod["metadata"]["name"]
        );
    }
    last
}

/// The messages of a raw CRI log file (`<time> <stream> <tag> <content>` lines).
fn cri_messages(raw: &[u8]) -> String {
    let mut out = String::new();
    for line in raw.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if let Ok(record) = logs::parse_line(line) {
            out.push_str(&String::from_utf8_lossy(record.content));
            if !record.partial {
                out.push('\n');
            }
        }
    }
    out
}

/// The core/v1 Events about `pod` (by UID), read through the admin client.
pub(crate) async fn events_for(admin: &kube::Client, pod: &Value) -> Vec<Event> {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(admin.clone(), NS);
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.involved_object.uid.as_deref() == Some(uid))
        .collect()
}

/// `(type, reason, message)` of events, for messages.
pub(crate) fn summary(events: &[Event]) -> Vec<(String, String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until an event about `pod` satisfies `matches`; returns it.
pub(crate) async fn wait_for_event(
    admin: &kube::Client,
    pod: &Value,
    what: &str,
    matches: impl Fn(&Event) -> bool,
) -> Event {
    let mut last = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            last = events_for(admin, pod).await;
            if let Some(e) = last.iter().find(|e| matches(e)) {
                return e.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no event {what}; the pod's events: {:?}", summary(&last)))
}

pub(crate) fn event_is(e: &Event, type_: &str, reason: &str) -> bool {
    e.type_.as_deref() == Some(type_) && e.reason.as_deref() == Some(reason)
}

/// Deletes pod `name` as a user does (`gracePeriodSeconds`).
pub(crate) async fn delete_pod(world: &World, name: &str, grace_seconds: u32) {
    let api: Api<Pod> = Api::namespaced(world.admin.clone(), NS);
    let params = DeleteParams {
        grace_period_seconds: Some(grace_seconds),
        ..DeleteParams::default()
    };
    api.delete(name, &params)
        .await
        .unwrap_or_else(|e| panic!("deleting pod {name}: {e}"));
}

/// Waits until pod `name` is gone from the API (the agent deletes it once its containers
/// stopped and its volumes are torn down).
pub(crate) async fn wait_gone(world: &World, name: &str) {
    let mut last = Value::Null;
    let gone = tokio::time::timeout(PATIENCE, async {
        loop {
            match get_pod(world, name) {
                None => return,
                Some(p) => last = p,
            }
            poll_pause().await;
        }
    })
    .await;
    if gone.is_err() {
        panic!(
            "pod {name} was never deleted; its last metadata and status: {} {}",
            last["metadata"], last["status"]
        );
    }
}

/// Deletes pod `name` and waits until it is gone.
pub(crate) async fn delete_and_wait(world: &World, name: &str, grace_seconds: u32) {
    delete_pod(world, name, grace_seconds).await;
    wait_gone(world, name).await;
}

/// The `pid` of `container`'s running instance, from its `state.json`.
fn state_pid(root: &Path, pod: &Value, container: &str) -> Option<i32> {
    let path = PodDirs::new(root)
        .container(&uid_of(pod), container)
        .join("state.json");
    let state: Value = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    state["pid"].as_i64().and_then(|p| i32::try_from(p).ok())
}

pub(crate) async fn wait_for_state_pid(root: &Path, pod: &Value, container: &str) -> i32 {
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(pid) = state_pid(root, pod, container) {
                return pid;
            }
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("container {container} never had a state.json with its pid"))
}

/// Fields after the command name of `/proc/<pid>/stat` (index 0 is the state).
fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    Some(after_name.split_whitespace().map(str::to_owned).collect())
}

/// Field 22 of `/proc/<pid>/stat` of a live (not zombie) process.
fn start_ticks(pid: i32) -> Option<u64> {
    let fields = proc_stat(pid)?;
    if fields.first().map(String::as_str) == Some("Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The live (not zombie) processes of process group `pgid` (a container's processes: its
/// init process is the group leader), as `pid (state)`.
fn live_group_members(pgid: i32) -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(fields) = proc_stat(pid) else {
            continue;
        };
        let state = fields.first().cloned().unwrap_or_default();
        if state != "Z" && fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) {
            out.push(format!("{pid} ({state})"));
        }
    }
    out
}

/// Waits until no live process of group `pgid` is left.
async fn wait_group_gone(pgid: i32, what: &str) {
    let gone = tokio::time::timeout(PATIENCE, async {
        while !live_group_members(pgid).is_empty() {
            poll_pause().await;
        }
    })
    .await;
    if gone.is_err() {
        panic!(
            "{what}: processes of the container (group {pgid}) are still running: {:?}",
            live_group_members(pgid)
        );
    }
}

/// The agent's worker phase of `uid` in its `/pods` document.
async fn worker_phase(world: &World, uid: &PodUid) -> Option<String> {
    let doc = world.with_agent(|a| a.pods_json()).await;
    doc["pods"]
        .as_array()?
        .iter()
        .find(|p| p["uid"] == uid.as_str())
        .and_then(|p| p["phase"].as_str().map(str::to_owned))
}

// ---------------------------------------------------------------------------------------------
// 1. A pod that runs to completion
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_runs_to_completion_succeeds_keeps_its_log_and_events_and_is_not_deleted() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    create(
        &world,
        ConfigMapBuilder::new(NS, "cm")
            .data("key", "value-from-configmap")
            .json(),
    );
    let created = create(
        &world,
        pod("done")
            .spec(json!({"restartPolicy": "Never", "securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                "cat /etc/config/key; echo; env",
                json!({
                    "env": [{"name": "FROM_CM",
                        "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "key"}}}],
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
                }),
            ))
            .config_map_volume("config", "cm")
            .json(),
    );
    let uid = uid_of(&created);

    let done = wait_for_phase(&world, "done", "Succeeded").await;
    let c = container_status(&done, "c");
    assert_eq!(c["state"]["terminated"]["exitCode"], 0, "{c}");
    assert_eq!(c["state"]["terminated"]["reason"], "Completed", "{c}");
    assert_eq!(c["restartCount"], 0, "{c}");

    let log = wait_for_log(&root, &created, &["value-from-configmap"]).await;
    assert!(
        log.lines().any(|l| l == "value-from-configmap"),
        "the ConfigMap file's value on a line of its own:\n{log}"
    );
    assert!(
        log.lines().any(|l| l == "FROM_CM=value-from-configmap"),
        "the env var from the ConfigMap:\n{log}"
    );

    for (reason, message) in [
        (
            "Pulled",
            "Container image \"busybox:1.36\" already present on machine and can be accessed by the pod",
        ),
        ("Created", "Created container: c"),
        ("Started", "Started container c"),
    ] {
        let e = wait_for_event(&world.admin, &created, reason, |e| {
            event_is(e, "Normal", reason)
        })
        .await;
        assert_eq!(e.message.as_deref(), Some(message));
    }

    // The agent is done with the pod (its worker finished: volumes torn down, runtime files
    // removed)…
    tokio::time::timeout(PATIENCE, async {
        while worker_phase(&world, &uid).await.as_deref() != Some("Finished") {
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the agent never finished the pod"));
    // …and it finished on its own: the pod stays, with its status, for a few status-writer
    // rounds at least (a deletion would be enqueued when the worker finished).
    for _ in 0..20 {
        let p = get_pod(&world, "done")
            .unwrap_or_else(|| panic!("the agent deleted a pod that finished on its own"));
        assert_eq!(p["status"]["phase"], "Succeeded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The log stays with the pod; `nodelet logs` (the binary) prints it.
    let out = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(["logs", "done", "-n", NS, "--root-dir"])
        .arg(&root)
        .output()
        .unwrap_or_else(|e| panic!("running nodelet logs: {e}"));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nodelet logs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        printed, log,
        "nodelet logs prints what the log reader reads"
    );
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 2. ConfigMap updates reach a running container
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_container_sees_a_config_map_update_in_its_mounted_file() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    create(
        &world,
        ConfigMapBuilder::new(NS, "cm").data("key", "first").json(),
    );
    let created = create(
        &world,
        pod("watcher")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                "while true; do cat /etc/config/key; echo; sleep 0.2; done",
                json!({"volumeMounts": [{"name": "config", "mountPath": "/etc/config"}]}),
            ))
            .config_map_volume("config", "cm")
            .json(),
    );
    wait_for_log(&root, &created, &["first\n"]).await;

    let api: Api<ConfigMap> = Api::namespaced(world.admin.clone(), NS);
    api.patch(
        "cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"key": "second"}})),
    )
    .await
    .unwrap_or_else(|e| panic!("patching the ConfigMap: {e}"));
    let log = wait_for_log(&root, &created, &["second\n"]).await;
    let running = get_pod(&world, "watcher").unwrap_or_default();
    assert_eq!(
        container_status(&running, "c")["restartCount"],
        0,
        "the same instance saw the update:\n{log}"
    );

    delete_and_wait(&world, "watcher", 1).await;
    world.stop().await;
}

/// `--root-dir data` as a newcomer types it (the offline default, `./nodelet-data`, is relative
/// too): the configuration resolves it against the directory the agent starts in, so a
/// container's configMap volume is mounted from an absolute source. A relative source would
/// not be found from inside the container's mount namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_root_dir_from_the_command_line_still_mounts_a_config_map_into_a_container() {
    use clap::Parser as _;
    require_root();
    let mut data = PathBuf::new();
    let world = World::start_with(|c| {
        // The world's temporary directory stands for the directory the agent is started in.
        let base = c.root_dir.clone();
        let cli = nodelet::RunArgs::try_parse_from([
            "nodelet",
            "--node-name",
            NODE,
            "--root-dir",
            "data",
            "--runtime",
            "process",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let settings = cli.settings_in(&base).unwrap_or_else(|e| panic!("{e}"));
        c.root_dir = settings.agent.root_dir;
        c.runtime = settings.agent.runtime;
        c.container_init = Some(vec![
            env!("CARGO_BIN_EXE_nodelet").into(),
            "container-init".into(),
        ]);
        data = c.root_dir.clone();
    })
    .await;
    let _reaper = Reaper(data.clone());
    assert_eq!(data, world.root_dir().join("data"));
    create(
        &world,
        ConfigMapBuilder::new(NS, "cm")
            .data("key", "mounted")
            .json(),
    );
    let created = create(
        &world,
        pod("relative")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                "while true; do cat /etc/config/key; echo; sleep 0.2; done",
                json!({"volumeMounts": [{"name": "config", "mountPath": "/etc/config"}]}),
            ))
            .config_map_volume("config", "cm")
            .json(),
    );
    wait_for_log(&data, &created, &["mounted\n"]).await;
    delete_and_wait(&world, "relative", 1).await;
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 3. Restart policies
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_failing_under_on_failure_restarts_with_back_off_and_the_pod_never_fails() {
    let (world, _reaper) = start(false).await;
    let created = create(
        &world,
        pod("crasher")
            .spec(json!({"restartPolicy": "OnFailure", "securityContext": {"runAsUser": 1000}}))
            .container(shell("exit 3"))
            .json(),
    );
    let mut crash_loop_seen = false;
    let mut phases = Vec::<String>::new();
    let restarted = wait_for_pod(
        &world,
        "crasher",
        "restarted twice after exit code 3",
        |p| {
            let phase = p["status"]["phase"].as_str().unwrap_or("").to_owned();
            if phases.last() != Some(&phase) {
                phases.push(phase);
            }
            let c = container_status(p, "c");
            crash_loop_seen |= c["state"]["waiting"]["reason"] == "CrashLoopBackOff";
            c["restartCount"].as_u64().unwrap_or(0) >= 2
                && c["lastState"]["terminated"]["exitCode"] == 3
        },
    )
    .await;
    let c = container_status(&restarted, "c");
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error", "{c}");
    assert!(
        phases
            .iter()
            .all(|p| ["", "Pending", "Running"].contains(&p.as_str())),
        "a pod whose container restarts under OnFailure is never finished: {phases:?}"
    );

    // The restarts were backed off: a BackOff event, or the status showed CrashLoopBackOff.
    if !crash_loop_seen {
        let e = wait_for_event(&world.admin, &created, "BackOff", |e| {
            event_is(e, "Warning", "BackOff")
        })
        .await;
        let message = e.message.unwrap_or_default();
        assert!(
            message.starts_with("Back-off restarting failed container c in pod crasher_default("),
            "{message}"
        );
    }

    delete_and_wait(&world, "crasher", 1).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_failing_under_restart_policy_never_fails_the_pod_with_reason_error() {
    let (world, _reaper) = start(false).await;
    create(
        &world,
        pod("once")
            .spec(json!({"restartPolicy": "Never", "securityContext": {"runAsUser": 1000}}))
            .container(shell("exit 3"))
            .json(),
    );
    let failed = wait_for_phase(&world, "once", "Failed").await;
    let c = container_status(&failed, "c");
    assert_eq!(c["state"]["terminated"]["exitCode"], 3, "{c}");
    assert_eq!(c["state"]["terminated"]["reason"], "Error", "{c}");
    assert_eq!(c["restartCount"], 0, "{c}");
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 4. Deletion: SIGTERM, the grace period, SIGKILL
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_sends_term_to_its_container_which_handles_it_and_the_pod_goes() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    let created = create(
        &world,
        pod("graceful")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(shell(
                "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.1; done",
            ))
            .json(),
    );
    wait_for_running(&world, "graceful").await;
    wait_for_log(&root, &created, &["ready"]).await;
    let pid = wait_for_state_pid(&root, &created, "c").await;
    // The log file is removed with the deleted pod: keep it open to read it afterwards.
    let mut log_file = fs::File::open(logs::container_log_path(
        &pod_log_dir(&root, &created),
        "c",
        0,
    ))
    .unwrap_or_else(|e| panic!("opening the container's log: {e}"));

    delete_and_wait(&world, "graceful", 5).await;
    let mut raw = Vec::new();
    log_file
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("reading the container's log: {e}"));
    let log = cri_messages(&raw);
    assert!(
        log.lines().any(|l| l == "got TERM"),
        "the container's TERM handler ran:\n{log}"
    );
    wait_group_gone(pid, "after the pod was deleted").await;
    let killing = wait_for_event(&world.admin, &created, "Killing", |e| {
        event_is(e, "Normal", "Killing")
    })
    .await;
    assert_eq!(killing.message.as_deref(), Some("Stopping container c"));
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_ignores_term_is_killed_after_the_grace_period_and_leaves_no_process() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    let created = create(
        &world,
        pod("stubborn")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(shell(
                "trap '' TERM; echo ready; while true; do sleep 0.1; done",
            ))
            .json(),
    );
    wait_for_running(&world, "stubborn").await;
    wait_for_log(&root, &created, &["ready"]).await;
    let pid = wait_for_state_pid(&root, &created, "c").await;
    assert!(
        !live_group_members(pid).is_empty(),
        "the container's processes are found by their group"
    );

    delete_and_wait(&world, "stubborn", 1).await;
    // Gone from the API means the agent saw the container end: nothing of it runs.
    let left = live_group_members(pid);
    assert!(
        left.is_empty(),
        "processes of the container are left: {left:?}"
    );
    assert_eq!(start_ticks(pid), None, "the container's pid {pid} is gone");
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 5. Users, fsGroup and secret file modes
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_group_is_a_supplementary_group_and_makes_a_0400_secret_file_group_readable() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    create(
        &world,
        SecretBuilder::new(NS, "s").data("key", "s3cret").json(),
    );
    // Errors go to stdout: across the two streams the log keeps the order the agent read
    // them in, not the order they were written.
    let script = "id -u; id -G; stat -L -c 'mode=%a group=%g' /etc/secret/key; \
                  if cat /etc/secret/key 2>&1; then echo; echo read=ok; else echo read=failed; fi";
    let with_secret = |name: &str, security: Value| {
        pod(name)
            .spec(json!({"restartPolicy": "Never", "securityContext": security}))
            .container(shell_with(
                script,
                json!({"volumeMounts": [{"name": "secret", "mountPath": "/etc/secret"}]}),
            ))
            .volume(json!({"name": "secret", "secret": {"secretName": "s", "defaultMode": 256}}))
            .json()
    };
    let grouped = create(
        &world,
        with_secret("grouped", json!({"runAsUser": 1000, "fsGroup": 2000})),
    );
    let plain = create(&world, with_secret("plain", json!({"runAsUser": 1000})));
    wait_for_phase(&world, "grouped", "Succeeded").await;
    wait_for_phase(&world, "plain", "Succeeded").await;

    let log = wait_for_log(&root, &grouped, &["read="]).await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.first(), Some(&"1000"), "id -u:\n{log}");
    let groups: Vec<&str> = lines.get(1).copied().unwrap_or("").split(' ').collect();
    assert!(groups.contains(&"2000"), "id -G has the fsGroup:\n{log}");
    // The kubelet's SetVolumeOwnership: the file's group becomes the fsGroup and group read
    // is added to the secret's defaultMode 0400.
    assert!(lines.contains(&"mode=440 group=2000"), "{log}");
    assert!(
        lines.contains(&"s3cret") && lines.contains(&"read=ok"),
        "{log}"
    );

    // Without fsGroup the file keeps 0400, owned by root: user 1000 cannot read it.
    let log = wait_for_log(&root, &plain, &["read="]).await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.first(), Some(&"1000"), "{log}");
    assert!(lines.contains(&"mode=400 group=0"), "{log}");
    assert!(
        lines.contains(&"read=failed") && log.contains("Permission denied"),
        "{log}"
    );
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 6. subPath, readOnly, emptyDir
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_path_file_is_readable_a_read_only_mount_refuses_writes_and_an_empty_dir_is_shared_with_the_host()
 {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    create(
        &world,
        ConfigMapBuilder::new(NS, "app")
            .data("app.conf", "setting=1")
            .json(),
    );
    let created = create(
        &world,
        pod("mounts")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                // (`2>&1`: one stream, one order.)
                "cat /etc/app.conf; echo; \
                 if touch /ro/x 2>&1; then echo ro=writable; else echo ro=refused; fi; \
                 echo hello > /rw/out && echo rw=ok; \
                 while true; do sleep 0.1; done",
                json!({"volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
                    {"name": "ro", "mountPath": "/ro", "readOnly": true},
                    {"name": "rw", "mountPath": "/rw"},
                ]}),
            ))
            .config_map_volume("cfg", "app")
            .volume(json!({"name": "ro", "emptyDir": {}}))
            .volume(json!({"name": "rw", "emptyDir": {}}))
            .json(),
    );
    let log = wait_for_log(&root, &created, &["ro=", "rw="]).await;
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.contains(&"setting=1"), "the subPath file:\n{log}");
    assert!(
        lines.contains(&"ro=refused") && log.contains("Read-only file system"),
        "{log}"
    );
    assert!(lines.contains(&"rw=ok"), "{log}");

    let empty_dirs = world
        .pod_dir(&created)
        .join("volumes/kubernetes.io~empty-dir");
    assert_eq!(
        fs::read_to_string(empty_dirs.join("rw/out"))
            .ok()
            .as_deref(),
        Some("hello\n"),
        "the container's write is in the emptyDir on the host"
    );
    assert!(!empty_dirs.join("ro/x").exists());

    delete_and_wait(&world, "mounts", 1).await;
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 7. Images the agent cannot run
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmapped_image_waits_with_err_image_never_pull_naming_the_image_and_the_config_key() {
    let (world, _reaper) = start(false).await;
    let created = create(
        &world,
        pod("unmapped")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(json!({"name": "c", "image": "example.com/not-mapped:1"}))
            .json(),
    );
    let waiting = wait_for_pod(&world, "unmapped", "waited with ErrImageNeverPull", |p| {
        container_status(p, "c")["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    })
    .await;
    assert_eq!(waiting["status"]["phase"], "Pending");
    let message = container_status(&waiting, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("\"example.com/not-mapped:1\"") && message.contains("\"images\""),
        "{message}"
    );
    let e = wait_for_event(&world.admin, &created, "ErrImageNeverPull", |e| {
        event_is(e, "Warning", "ErrImageNeverPull")
    })
    .await;
    assert_eq!(e.message.as_deref(), Some(message.as_str()));

    delete_and_wait(&world, "unmapped", 1).await;
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 8. Root only with the agent's permission
// ---------------------------------------------------------------------------------------------

/// busybox maps to root and the pod sets no user.
fn root_pod() -> Value {
    pod("as-root")
        .spec(json!({"restartPolicy": "Never"}))
        .container(shell("id -u"))
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_would_run_as_root_waits_with_create_container_config_error() {
    let (world, _reaper) = start(false).await;
    let created = create(&world, root_pod());
    let waiting = wait_for_pod(
        &world,
        "as-root",
        "waited with CreateContainerConfigError",
        |p| container_status(p, "c")["state"]["waiting"]["reason"] == "CreateContainerConfigError",
    )
    .await;
    assert_eq!(waiting["status"]["phase"], "Pending");
    let message = container_status(&waiting, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for needle in ["default/as-root", "container c ", "--allow-root-containers"] {
        assert!(message.contains(needle), "{needle:?} in {message}");
    }
    let e = wait_for_event(&world.admin, &created, "Failed", |e| {
        event_is(e, "Warning", "Failed")
    })
    .await;
    assert_eq!(e.message, Some(format!("Error: {message}")));
    assert!(
        read_log(&world.root_dir(), &created, "c").await.is_empty(),
        "nothing ran"
    );
    delete_and_wait(&world, "as-root", 1).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allow_root_containers_a_container_without_run_as_user_runs_as_root() {
    let (world, _reaper) = start(true).await;
    let created = create(&world, root_pod());
    wait_for_phase(&world, "as-root", "Succeeded").await;
    let log = wait_for_log(&world.root_dir(), &created, &["0"]).await;
    assert_eq!(log, "0\n");
    world.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 9. Nothing left on the host
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_leaves_no_mount_and_no_directory_on_the_host() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    create(
        &world,
        ConfigMapBuilder::new(NS, "cm").data("key", "v").json(),
    );
    let created = create(
        &world,
        pod("tidy")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                "cat /etc/config/key; echo; echo x > /scratch/f; echo written; \
                 while true; do sleep 0.1; done",
                json!({"volumeMounts": [
                    {"name": "config", "mountPath": "/etc/config"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ]}),
            ))
            .config_map_volume("config", "cm")
            .volume(json!({"name": "scratch", "emptyDir": {}}))
            .json(),
    );
    let uid = uid_of(&created);
    let pod_dir = world.pod_dir(&created);
    let scratch = PodDirs::new(&root).container(&uid, "c").join("scratch");
    wait_for_log(&root, &created, &["written"]).await;
    let mentions = |needle: &str| -> Vec<String> {
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    };
    let scratch_text = scratch.display().to_string();
    assert!(
        mentions(&scratch_text).is_empty(),
        "the container's root is built in its own namespace, invisible on the host: {:?}",
        mentions(&scratch_text)
    );

    delete_and_wait(&world, "tidy", 1).await;
    let by_uid = mentions(uid.as_str());
    assert!(by_uid.is_empty(), "mounts naming the pod's UID: {by_uid:?}");
    assert!(mentions(&scratch_text).is_empty());
    assert!(
        !pod_dir.exists(),
        "{} is left with: {:?}",
        pod_dir.display(),
        walk(&pod_dir)
    );
    world.stop().await;
}

/// Every path under `dir` (for messages).
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap_or(&p).display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// 10. The agent killed hard and started again (the real binary)
// ---------------------------------------------------------------------------------------------

/// The `nodelet` binary running as this test's node; killed (SIGKILL) when dropped.
struct AgentProcess {
    child: Child,
    log: PathBuf,
}

impl AgentProcess {
    fn start(kubeconfig: &Path, root: &Path, log: PathBuf) -> Self {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("{e}"));
        let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(env!("CARGO_BIN_EXE_nodelet"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--node-name", NODE, "--root-dir"])
            .arg(root)
            .args([
                "--runtime",
                "process",
                "--allow-root-containers",
                "--listen",
                "none",
                "--kubelet-port",
                "0",
                "--log-format",
                "text",
            ])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting nodelet: {e}"));
        Self { child, log }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(0))
    }

    /// The agent's output so far (for messages).
    fn output(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the agent's output if it exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the agent exited ({status}):\n{}", self.output());
        }
    }

    /// Sends `signal` and waits (bounded) for the agent to exit.
    async fn stop_with(&mut self, signal: Signal) -> std::process::ExitStatus {
        let _ = kill(self.pid(), signal);
        let exited = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(Some(status)) = self.child.try_wait() {
                    return status;
                }
                poll_pause().await;
            }
        })
        .await;
        exited.unwrap_or_else(|_| panic!("the agent did not exit on {signal}:\n{}", self.output()))
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls pod `name` through `handle` until `done` holds, while `agent` keeps running.
async fn wait_for_pod_while(
    server: &ApiServer,
    agent: &mut AgentProcess,
    name: &str,
    what: &str,
    mut done: impl FnMut(&Value) -> bool,
) -> Value {
    let handle = server.handle();
    let mut last = Value::Null;
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            agent.assert_running();
            if let Some(p) = handle.get("v1", "Pod", Some(NS), name) {
                if done(&p) {
                    return p;
                }
                last = p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!(
            "pod {name} never {what}; its last status: {}\nthe agent's output:\n{}",
            last["status"],
            agent.output()
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_hard_leaves_no_orphan_and_its_successor_restarts_the_container() {
    require_root();
    let server = ApiServer::start(nodelet_apiserver::Config::default().with_auth())
        .await
        .unwrap_or_else(|e| panic!("api server: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().join("root");
    let kubeconfig = dir.path().join("node.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, &User::node(NODE))
        .unwrap_or_else(|e| panic!("{e}"));
    let _reaper = Reaper(root.clone());
    let created = server
        .handle()
        .create(
            pod("long")
                .spec(json!({"restartPolicy": "Always"}))
                // `$$$$`: Kubernetes expands `$$` in a command to `$`.
                .container(shell("echo started pid=$$$$; sleep 1000"))
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));

    let mut agent = AgentProcess::start(&kubeconfig, &root, dir.path().join("agent-1.log"));
    wait_for_pod_while(&server, &mut agent, "long", "ran", |p| {
        container_status(p, "c")["state"]["running"].is_object()
    })
    .await;
    let first = wait_for_state_pid(&root, &created, "c").await;
    wait_for_log(&root, &created, &[&format!("started pid={first}")]).await;

    // SIGKILL: the agent cannot stop its containers; they are re-parented and keep running.
    let status = agent.stop_with(Signal::SIGKILL).await;
    assert!(!status.success(), "{status}");
    assert!(
        !live_group_members(first).is_empty(),
        "the container outlived the killed agent, as any child would"
    );

    let mut agent = AgentProcess::start(&kubeconfig, &root, dir.path().join("agent-2.log"));
    let restarted = wait_for_pod_while(
        &server,
        &mut agent,
        "long",
        "ran again after the agent's restart",
        |p| {
            let c = container_status(p, "c");
            c["state"]["running"].is_object()
                && c["restartCount"].as_u64().unwrap_or(0) >= 1
                && c["lastState"]["terminated"]["exitCode"] == 137
        },
    )
    .await;
    // The successor killed what its predecessor left (no orphan).
    wait_group_gone(first, "after the agent's restart").await;
    assert_eq!(
        start_ticks(first),
        None,
        "the old container's pid {first} is gone"
    );
    let c = container_status(&restarted, "c");
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error", "{c}");
    let second = wait_for_state_pid(&root, &created, "c").await;
    assert_ne!(second, first);
    wait_for_log(&root, &created, &[&format!("started pid={second}")]).await;

    // A stopping agent stops its containers.
    let status = agent.stop_with(Signal::SIGTERM).await;
    assert!(status.success(), "{status}:\n{}", agent.output());
    let left = live_group_members(second);
    assert!(
        left.is_empty(),
        "the stopped agent left its container running: {left:?}"
    );
    assert_eq!(start_ticks(second), None);

    // The killed instance's log stays for `nodelet logs --previous` (the kubelet keeps the
    // previous instance's log of a restarted container).
    let out = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .args(["logs", "long", "--previous", "--root-dir"])
        .arg(&root)
        .output()
        .unwrap_or_else(|e| panic!("running nodelet logs: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("started pid={first}\n"),
        "nodelet logs --previous: {}; log files: {:?}",
        String::from_utf8_lossy(&out.stderr),
        walk(&root.join("logs"))
    );

    server.shutdown().await;
}
