//! Configuration that follows a change (nodelet's own, FC-1 … FC-8) under the process runtime,
//! against `nodelet-apiserver`: a subPath file and directory replaced in the running container
//! while a reader loops on them, a reload signal per burst of updates, a reload URL, bad
//! annotations and failed deliveries as Warning events, and a container without annotations
//! left exactly as the kubelet leaves it. Needs root (mount namespaces); CI runs as root.
//!
//! The tests print the latencies they see (patch returned → the container saw the change) for
//! the README's table; they assert content, counts and events, never a duration.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

use crate::process_runtime::{
    BUSYBOX, NS, container_status, create, delete_and_wait, event_is, get_pod, read_log, start,
    wait_for_event, wait_for_pod,
};
use crate::support::{NODE, PATIENCE, World, poll_pause};

/// The content of version `n`: one line, `n:n:…:n`, about 4 KiB, so a torn or partial read
/// shows as a first field unlike the last.
fn content(n: usize) -> String {
    let mut s = format!("{n}:").repeat(999);
    s.push_str(&n.to_string());
    s
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

async fn patch(world: &World, data: Value) {
    let api: Api<ConfigMap> = Api::namespaced(world.admin.clone(), NS);
    api.patch(
        "cfg",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": data })),
    )
    .await
    .unwrap_or_else(|e| panic!("patching the ConfigMap: {e}"));
}

/// Waits until the log of `container` of `pod` contains `needle`; returns the log.
async fn wait_for_log_of(world: &World, pod: &Value, container: &str, needle: &str) -> String {
    let root = world.root_dir();
    let mut last = String::new();
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            last = read_log(&root, pod, container).await;
            if last.contains(needle) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "the log of {container} never showed {needle:?}; it holds:\n{last}"
    );
    last
}

/// Waits until every container of pod `name` runs.
async fn wait_all_running(world: &World, name: &str, containers: &[&str]) -> Value {
    wait_for_pod(world, name, "ran all its containers", |p| {
        containers
            .iter()
            .all(|c| container_status(p, c)["state"]["running"].is_object())
    })
    .await
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

fn report(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "{what}: n={} p50={:.1} ms p99={:.1} ms max={:.1} ms",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms.last().copied().unwrap_or(f64::NAN)
    );
}

/// A reader of `/etc/app.conf` (subPath file) and `/etc/conf/x.ini` (in a subPath
/// directory): reports `BAD` for an empty, missing or torn read of either, `SEEN <n> <ns>` at
/// each new version of the file, `DIRSEEN <n>` of the directory's, and `USR1 <n> <ns>` at
/// each SIGUSR1.
const READER: &str = r#"
last=""
lastdir=""
trap 'echo "USR1 ${fa} $(date +%s%N)"' USR1
echo ready
while true; do
  a="$(cat /etc/app.conf)"
  [ -n "$a" ] || echo "BAD empty app.conf"
  fa="${a%%:*}"; la="${a##*:}"
  [ "$fa" = "$la" ] || echo "BAD torn app.conf"
  if [ "$fa" != "$last" ]; then echo "SEEN $fa $(date +%s%N)"; last="$fa"; fi
  b="$(cat /etc/conf/x.ini 2>/dev/null)"
  if [ -z "$b" ]; then echo "BAD empty x.ini"; else
    fb="${b%%:*}"; lb="${b##*:}"
    [ "$fb" = "$lb" ] || echo "BAD torn x.ini"
    if [ "$fb" != "$lastdir" ]; then echo "DIRSEEN $fb"; lastdir="$fb"; fi
  fi
done
"#;

fn reader(name: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "command": ["sh", "-c", READER],
        "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
            {"name": "cfg", "mountPath": "/etc/conf", "subPath": "conf"},
        ],
    })
}

/// The file half of [`READER`]: `/etc/app.conf` only. (A directory subPath bound as the
/// kubelet binds it is emptied by the swap, which removes the old data directory.)
const FILE_READER: &str = r#"
last=""
echo ready
while true; do
  a="$(cat /etc/app.conf)"
  [ -n "$a" ] || echo "BAD empty app.conf"
  fa="${a%%:*}"; la="${a##*:}"
  [ "$fa" = "$la" ] || echo "BAD torn app.conf"
  if [ "$fa" != "$last" ]; then echo "SEEN $fa $(date +%s%N)"; last="$fa"; fi
  sleep 0.01
done
"#;

fn file_reader(name: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "command": ["sh", "-c", FILE_READER],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"}],
    })
}

fn cfg_volume() -> Value {
    json!({"name": "cfg", "configMap": {"name": "cfg", "items": [
        {"key": "app.conf", "path": "app.conf"},
        {"key": "x.ini", "path": "conf/x.ini"},
    ]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_path_reader_sees_every_update_whole_and_a_container_without_annotation_keeps_the_old()
 {
    const UPDATES: usize = 200;
    let (world, _reaper) = start(false).await;
    create(
        &world,
        ConfigMapBuilder::new(NS, "cfg")
            .data("app.conf", &content(0))
            .data("x.ini", &content(0))
            .json(),
    );
    let created = create(
        &world,
        PodBuilder::new(NS, "subpath")
            .node(NODE)
            .annotation("nodelet.io/follow-subpath.app", "true")
            .annotation("nodelet.io/reload-signal.app", "SIGUSR1")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(reader("app"))
            .container(file_reader("other"))
            .volume(cfg_volume())
            .json(),
    );
    let uid = created["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    wait_all_running(&world, "subpath", &["app", "other"]).await;
    wait_for_log_of(&world, &created, "app", "SEEN 0 ").await;
    wait_for_log_of(&world, &created, "other", "SEEN 0 ").await;

    let mut patched = Vec::with_capacity(UPDATES);
    for n in 1..=UPDATES {
        patch(&world, json!({"app.conf": content(n), "x.ini": content(n)})).await;
        patched.push(now_ns());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for_log_of(&world, &created, "app", &format!("SEEN {UPDATES} ")).await;
    let log = wait_for_log_of(&world, &created, "app", &format!("DIRSEEN {UPDATES}\n")).await;
    let dir_seen = log.lines().filter(|l| l.starts_with("DIRSEEN")).count();
    eprintln!("subPath directory: {dir_seen} versions seen");
    assert!(dir_seen > 1, "the directory never followed:\n{log}");
    let bad: Vec<&str> = log.lines().filter(|l| l.contains("BAD")).collect();
    assert!(bad.is_empty(), "the reader saw bad reads: {bad:?}");
    let seen: Vec<(usize, u128)> = log
        .lines()
        .filter_map(|l| l.strip_prefix("SEEN "))
        .filter_map(|l| {
            let (n, t) = l.split_once(' ')?;
            Some((n.parse().ok()?, t.trim().parse().ok()?))
        })
        .collect();
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "versions went back: {seen:?}"
    );
    let latencies: Vec<f64> = seen
        .iter()
        .filter(|(n, _)| *n > 0)
        .filter_map(|(n, t)| Some((t.checked_sub(patched[n - 1])?) as f64 / 1e6))
        .collect();
    report(
        "patch returned -> subPath reader saw the new version",
        latencies,
    );
    let signals: Vec<f64> = log
        .lines()
        .filter_map(|l| l.strip_prefix("USR1 "))
        .filter_map(|l| {
            let (n, t) = l.split_once(' ')?;
            let n: usize = n.parse().ok()?;
            let t: u128 = t.trim().parse().ok()?;
            // The newest patch before the signal.
            let before = patched.iter().rev().find(|p| **p <= t)?;
            (n > 0).then(|| (t - before) as f64 / 1e6)
        })
        .collect();
    assert!(!signals.is_empty(), "the reader got no SIGUSR1:\n{log}");
    report(
        "patch returned -> SIGUSR1 handled (20ms quiet time)",
        signals,
    );

    // No annotation: the kubelet's behaviour, the content the container started with.
    let other = read_log(&world.root_dir(), &created, "other").await;
    let other_seen: Vec<&str> = other.lines().filter(|l| l.starts_with("SEEN")).collect();
    assert_eq!(other_seen.len(), 1, "other saw updates: {other_seen:?}");
    assert!(other_seen[0].starts_with("SEEN 0 "));
    assert!(!other.contains("BAD") && !other.contains("USR1"), "{other}");
    let running = get_pod(&world, "subpath").unwrap_or_default();
    for c in ["app", "other"] {
        assert_eq!(
            container_status(&running, c)["restartCount"],
            0,
            "{c} restarted"
        );
    }
    // Nothing was mounted on the host.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(
        !mountinfo.contains(&uid),
        "a mount of the pod is on the host:\n{mountinfo}"
    );

    delete_and_wait(&world, "subpath", 1).await;
    world.stop().await;
}

/// Counts POSTs to `/-/reload` on a loopback port.
async fn reload_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("binding: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let c = c.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(tcp);
                let mut first = String::new();
                let _ = reader.read_line(&mut first).await;
                loop {
                    let mut line = String::new();
                    match reader.read_line(&mut line).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) if line == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                if first.starts_with("POST /-/reload ") {
                    c.fetch_add(1, Ordering::SeqCst);
                }
                let answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                let _ = reader.get_mut().write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, count)
}

/// Counts SIGHUPs; each prints the content it sees then.
const HUP_COUNTER: &str = r#"
n=0
trap 'n=$((n+1)); echo "HUP $n $(cat /cfg/k)"' HUP
echo ready
while true; do sleep 1 & wait $!; done
"#;

fn counter(name: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "command": ["sh", "-c", HUP_COUNTER],
        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
    })
}

/// The burst test's quiet time (`reload-debounce`): far above the gaps between back-to-back
/// patches' volume updates even on a loaded machine (up to 0.5 s seen at load 18), so the
/// patches make one burst on any machine the suite runs on.
const BURST_QUIET: Duration = Duration::from_secs(2);

/// Patches `k` to `v<from>` … `v<to>`, back to back (a burst).
async fn burst(world: &World, from: usize, to: usize) {
    for n in from..=to {
        patch(world, json!({"k": format!("v{n}")})).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_updates_gives_one_reload_signal_and_one_post_and_failures_are_events() {
    let (world, _reaper) = start(false).await;
    let (port, posts) = reload_server().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        l.local_addr().map(|a| a.port()).unwrap_or_default()
    };
    create(
        &world,
        ConfigMapBuilder::new(NS, "cfg").data("k", "v0").json(),
    );
    let created = create(
        &world,
        PodBuilder::new(NS, "reload")
            .node(NODE)
            .annotation("nodelet.io/reload-signal.app", "SIGHUP")
            .annotation(
                "nodelet.io/reload-debounce",
                &format!("{}s", BURST_QUIET.as_secs()),
            )
            .annotation(
                "nodelet.io/reload-url.web",
                &format!("http://127.0.0.1:{port}/-/reload"),
            )
            .annotation(
                "nodelet.io/reload-url.gone",
                &format!("http://127.0.0.1:{closed}/-/reload"),
            )
            .annotation("nodelet.io/reload-signal.nosuch", "HUP")
            .annotation("nodelet.io/follow-subpath", "maybe")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(counter("app"))
            .container(counter("other"))
            .container(counter("web"))
            .container(counter("gone"))
            .json_with_volume(),
    );
    let containers = ["app", "other", "web", "gone"];
    wait_all_running(&world, "reload", &containers).await;
    for c in containers {
        wait_for_log_of(&world, &created, c, "ready").await;
    }
    // Bad annotations: one Warning each, naming the annotation and the value.
    let bad = wait_for_event(&world.admin, &created, "InvalidFollowAnnotation", |e| {
        event_is(e, "Warning", "InvalidFollowAnnotation")
            && e.message
                .as_deref()
                .unwrap_or_default()
                .contains("reload-signal.nosuch")
    })
    .await;
    assert_eq!(
        bad.message.as_deref(),
        Some(
            "Pod default/reload: annotation nodelet.io/reload-signal.nosuch: invalid value \
             \"HUP\": the pod has no container or init container \"nosuch\""
        )
    );
    wait_for_event(&world.admin, &created, "for follow-subpath", |e| {
        event_is(e, "Warning", "InvalidFollowAnnotation")
            && e.message.as_deref().unwrap_or_default().contains(
                "annotation nodelet.io/follow-subpath: invalid value \"maybe\": must be true or false",
            )
    })
    .await;

    // Burst 1: one signal, after the last update; one POST; the closed URL is an event.
    let started = std::time::Instant::now();
    burst(&world, 1, 10).await;
    let burst_took = started.elapsed();
    wait_for_log_of(&world, &created, "app", "HUP 1 v10\n").await;
    wait_for_event(&world.admin, &created, "FailedReload", |e| {
        event_is(e, "Warning", "FailedReload")
            && e.message
                .as_deref()
                .unwrap_or_default()
                .contains("\"gone\"")
    })
    .await;
    tokio::time::timeout(PATIENCE, async {
        while posts.load(Ordering::SeqCst) < 1 {
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the reload URL got no POST"));
    // Longer than the quiet time: a second delivery for the same burst would be here by now.
    tokio::time::sleep(BURST_QUIET + Duration::from_millis(1500)).await;
    let app = read_log(&world.root_dir(), &created, "app").await;
    assert!(
        !app.contains("HUP 2"),
        "a burst of 10 patches in {burst_took:?} gave more than one signal:\n{app}"
    );
    assert_eq!(posts.load(Ordering::SeqCst), 1);

    // Burst 2: exactly one more of each.
    burst(&world, 11, 15).await;
    wait_for_log_of(&world, &created, "app", "HUP 2 v15\n").await;
    tokio::time::timeout(PATIENCE, async {
        while posts.load(Ordering::SeqCst) < 2 {
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the reload URL got no second POST"));
    tokio::time::sleep(BURST_QUIET + Duration::from_millis(1500)).await;
    let app = read_log(&world.root_dir(), &created, "app").await;
    assert!(!app.contains("HUP 3"), "{app}");
    assert_eq!(posts.load(Ordering::SeqCst), 2);

    // No annotation, no signal (as the kubelet); nothing restarted.
    for c in ["other", "web", "gone"] {
        let log = read_log(&world.root_dir(), &created, c).await;
        assert!(!log.contains("HUP"), "{c} got a signal:\n{log}");
    }
    let running = get_pod(&world, "reload").unwrap_or_default();
    for c in containers {
        assert_eq!(
            container_status(&running, c)["restartCount"],
            0,
            "{c} restarted"
        );
    }

    delete_and_wait(&world, "reload", 1).await;
    world.stop().await;
}

/// The reload pod's ConfigMap volume.
trait WithVolume {
    fn json_with_volume(self) -> Value;
}

impl WithVolume for PodBuilder {
    fn json_with_volume(self) -> Value {
        self.volume(json!({"name": "cfg", "configMap": {"name": "cfg"}}))
            .json()
    }
}

/// The version each running container shows through `mount_path`, and whether it is current.
async fn seen(
    world: &World,
    name: &str,
    container: &str,
    mount_path: &str,
) -> (Option<String>, bool) {
    let view = world.with_agent(|a| a.pods_view()).await;
    let pod = view.pods.iter().find(|p| p.name == name);
    let c = pod.and_then(|p| p.containers.iter().find(|c| c.name == container));
    let m = c.and_then(|c| c.mounts.iter().find(|m| m.mount_path == mount_path));
    let m = m.unwrap_or_else(|| panic!("no mount {mount_path} of {container} in /pods: {view:?}"));
    let rv = m.objects.first().and_then(|o| o.resource_version.clone());
    (rv, m.current)
}

/// Waits until `container` of pod `fresh` shows version `rv` through `mount_path`, current.
async fn wait_seen(world: &World, container: &str, mount_path: &str, rv: &str) {
    let mut last = (None, false);
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            last = seen(world, "fresh", container, mount_path).await;
            if last.0.as_deref() == Some(rv) && last.1 {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "{container} never showed {rv} current at {mount_path}: {last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_shows_which_version_each_container_sees_and_whether_it_is_current() {
    let (world, _reaper) = start(false).await;
    let cm = create(
        &world,
        ConfigMapBuilder::new(NS, "cfg").data("k", "v0").json(),
    );
    let first = cm["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mounts = json!([
        {"name": "cfg", "mountPath": "/cfg"},
        {"name": "cfg", "mountPath": "/etc/k", "subPath": "k"},
    ]);
    let script = "echo ready; while true; do sleep 1 & wait $!; done";
    create(
        &world,
        PodBuilder::new(NS, "fresh")
            .node(NODE)
            .annotation("nodelet.io/follow-subpath.app", "true")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(
                json!({"name": "app", "image": BUSYBOX, "command": ["sh", "-c", script],
                "volumeMounts": mounts}),
            )
            .container(
                json!({"name": "other", "image": BUSYBOX, "command": ["sh", "-c", script],
                "volumeMounts": mounts}),
            )
            .volume(json!({"name": "cfg", "configMap": {"name": "cfg"}}))
            .json(),
    );
    wait_all_running(&world, "fresh", &["app", "other"]).await;
    for c in ["app", "other"] {
        for path in ["/cfg", "/etc/k"] {
            wait_seen(&world, c, path, &first).await;
        }
    }

    patch(&world, json!({"k": "v1"})).await;
    let api: Api<ConfigMap> = Api::namespaced(world.admin.clone(), NS);
    let second = api
        .get("cfg")
        .await
        .ok()
        .and_then(|c| c.metadata.resource_version)
        .unwrap_or_default();
    wait_seen(&world, "app", "/etc/k", &second).await;
    assert_eq!(
        seen(&world, "fresh", "app", "/cfg").await,
        (Some(second.clone()), true)
    );
    assert_eq!(
        seen(&world, "fresh", "other", "/cfg").await,
        (Some(second.clone()), true)
    );
    // Without the annotation, the kubelet's behaviour: the subPath shows what it started with.
    assert_eq!(
        seen(&world, "fresh", "other", "/etc/k").await,
        (Some(first), false)
    );

    delete_and_wait(&world, "fresh", 1).await;
    world.stop().await;
}
