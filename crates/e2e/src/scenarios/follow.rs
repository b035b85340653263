//! nodelet's own configuration that follows a change (FC-3, FC-5, FC-6, FC-20), with the agent
//! running containers as processes: a subPath file that follows updates in the running
//! container, a reload signal per update and one per burst, and the pod condition
//! `nodelet.io/ConfigCurrent`. What a container saw is read from its log, where it prints it
//! with the time (`date +%s%N`: the agent and the suite share the host's clock). Latencies are
//! from the patch's answer to the container seeing the change.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::ctx::{Ctx, ensure, wait_for};

/// Updates measured per scenario.
const UPDATES: usize = 10;

/// Mapped by the agent's default image table to the host's shell.
const SHELL_IMAGE: &str = "busybox:1.36";

/// The condition of a pod that follows changes.
const CONFIG_CURRENT: &str = "nodelet.io/ConfigCurrent";

/// Prints `SEEN <content> <ns>` each time `/etc/app.conf` reads differently.
const SUBPATH_READER: &str = r#"last=""
while true; do
  c="$(cat /etc/app.conf)"
  if [ "$c" != "$last" ]; then echo "SEEN $c $(date +%s%N)"; last="$c"; fi
  sleep 0.01
done"#;

/// Prints `HUP <n> <content of /cfg/k> <ns>` at each SIGHUP.
const HUP_COUNTER: &str = r#"n=0
trap 'n=$((n+1)); echo "HUP $n $(cat /cfg/k) $(date +%s%N)"' HUP
echo ready
while true; do sleep 1 & wait $!; done"#;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

fn shell(name: &str, script: &str, mounts: Value) -> Value {
    json!({"name": name, "image": SHELL_IMAGE, "command": ["sh", "-c", script],
        "volumeMounts": mounts})
}

/// A non-root pod spec (the process runtime refuses root containers unless allowed).
fn spec(containers: Value, volumes: Value) -> Value {
    json!({"securityContext": {"runAsUser": 1000}, "containers": containers, "volumes": volumes})
}

/// The time printed after `needle` in `log` (`<needle><ns>`), as nanoseconds.
fn stamp(log: &str, needle: &str) -> Option<u128> {
    log.lines()
        .find_map(|l| l.split_once(needle).map(|(_, rest)| rest))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// Records the latency from `patched` (ns) to the time the container printed after `needle`.
fn record(ctx: &Ctx, log: &str, needle: &str, patched: u128) {
    if let Some(seen) = stamp(log, needle) {
        let ns = seen.saturating_sub(patched);
        ctx.record_latency(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)));
    }
}

/// The pod's condition `type_`, as `(status, message)`.
async fn condition(ctx: &Ctx, pod: &str, type_: &str) -> Result<(String, String), String> {
    let p: Pod = ctx.pods().get(pod).await.map_err(|e| e.to_string())?;
    p.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.message.unwrap_or_default()))
        .ok_or_else(|| format!("pod {pod} has no condition {type_}"))
}

/// FC-3, FC-20: `app` asks for `nodelet.io/follow-subpath`; each update of the ConfigMap
/// reaches its subPath file while it runs (no restart), and the pod condition is True. `plain`
/// asks nothing and keeps the file it started with, as under the kubelet; so the condition
/// then says False, naming the ConfigMap `plain` sees an old version of.
pub(crate) async fn follow_subpath(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", json!({ "app.conf": "v0" }))
        .await?;
    let mount = json!([{"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"}]);
    let pod = ctx
        .create_pod_annotated(
            "p",
            json!({"nodelet.io/follow-subpath.app": "true"}),
            spec(
                json!([
                    shell("app", SUBPATH_READER, mount.clone()),
                    shell("plain", SUBPATH_READER, mount)
                ]),
                json!([{"name": "cfg", "configMap": {"name": "cm"}}]),
            ),
        )
        .await?;
    ctx.wait_for_log(&pod, "app", "SEEN v0 ").await?;
    ctx.wait_for_log(&pod, "plain", "SEEN v0 ").await?;
    ctx.wait_for_condition("p", CONFIG_CURRENT, "True").await?;
    for i in 1..=UPDATES {
        ctx.set_config_map_data("cm", json!({ "app.conf": format!("v{i}") }))
            .await?;
        let patched = now_ns();
        let needle = format!("SEEN v{i} ");
        let log = ctx.wait_for_log(&pod, "app", &needle).await?;
        record(ctx, &log, &needle, patched);
    }
    let log = ctx
        .wait_for_log(&pod, "app", &format!("SEEN v{UPDATES} "))
        .await?;
    let seen = log.lines().filter(|l| l.contains("SEEN ")).count();
    ensure(seen == UPDATES + 1, || {
        format!("app saw {seen} versions, not {}:\n{log}", UPDATES + 1)
    })?;
    let plain = std::fs::read_to_string(ctx.log_path(&pod, "plain")?).map_err(|e| e.to_string())?;
    ensure(
        plain.lines().filter(|l| l.contains("SEEN ")).count() == 1,
        || format!("plain (no annotation) saw an update:\n{plain}"),
    )?;
    let expected = format!("container plain sees an old ConfigMap {}/cm", ctx.namespace);
    wait_for(&format!("{CONFIG_CURRENT} False naming plain"), || async {
        let (status, message) = condition(ctx, "p", CONFIG_CURRENT).await?;
        if status == "False" && message == expected {
            Ok(())
        } else {
            Err(format!("{status}: {message}"))
        }
    })
    .await?;
    let restarts = ctx
        .pods()
        .get("p")
        .await
        .map_err(|e| e.to_string())?
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .map(|c| c.restart_count)
        .sum::<i32>();
    ensure(restarts == 0, || format!("{restarts} container restarts"))
}

/// FC-5, FC-6, FC-20: `app` asks for SIGHUP after each update of a volume it mounts: it gets
/// one per update, after the new content is on disk (it prints what it reads then), and the
/// pod condition is True; a burst of updates to pod `burst` (quiet time 2 s, far above the
/// gaps between back-to-back patches even on a loaded machine) gives one.
pub(crate) async fn follow_reload_signal(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", json!({ "k": "v0" })).await?;
    ctx.create_config_map("cm-burst", json!({ "k": "v0" }))
        .await?;
    let mount = json!([{"name": "cfg", "mountPath": "/cfg"}]);
    let pod = ctx
        .create_pod_annotated(
            "p",
            json!({"nodelet.io/reload-signal.app": "SIGHUP"}),
            spec(
                json!([shell("app", HUP_COUNTER, mount.clone())]),
                json!([{"name": "cfg", "configMap": {"name": "cm"}}]),
            ),
        )
        .await?;
    let burst = ctx
        .create_pod_annotated(
            "burst",
            json!({"nodelet.io/reload-signal": "SIGHUP", "nodelet.io/reload-debounce": "2s"}),
            spec(
                json!([shell("app", HUP_COUNTER, mount)]),
                json!([{"name": "cfg", "configMap": {"name": "cm-burst"}}]),
            ),
        )
        .await?;
    ctx.wait_for_log(&pod, "app", "ready").await?;
    ctx.wait_for_log(&burst, "app", "ready").await?;
    ctx.wait_for_condition("p", CONFIG_CURRENT, "True").await?;
    for i in 1..=UPDATES {
        ctx.set_config_map_data("cm", json!({ "k": format!("v{i}") }))
            .await?;
        let patched = now_ns();
        let needle = format!("HUP {i} v{i} ");
        let log = ctx.wait_for_log(&pod, "app", &needle).await?;
        record(ctx, &log, &needle, patched);
    }
    ctx.wait_for_condition("p", CONFIG_CURRENT, "True").await?;

    for i in 1..=5 {
        ctx.set_config_map_data("cm-burst", json!({ "k": format!("v{i}") }))
            .await?;
    }
    ctx.wait_for_log(&burst, "app", "HUP 1 v5 ").await?;
    // Longer than the quiet time: a second signal for the same burst would be here by now.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let log = std::fs::read_to_string(ctx.log_path(&burst, "app")?).map_err(|e| e.to_string())?;
    ensure(!log.contains("HUP 2 "), || {
        format!("a burst of 5 updates gave more than one signal:\n{log}")
    })
}
