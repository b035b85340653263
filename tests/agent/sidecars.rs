//! Sidecar containers (restartable init containers) under the process runtime, end to end
//! (PW-60 … PW-65; needs root): started in order with the init containers, the next one only
//! once the sidecar's startup probe passed; restarted when it exits although the pod's
//! `restartPolicy` is `Never`; stopped once the app container succeeded, after it and in
//! reverse order; the pod then `Succeeded`. Every container appends to a file of the test's
//! (a hostPath volume), so the order is read after the pod is done.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::process_runtime::{
    BUSYBOX, create, delete_and_wait, event_is, events_for, pod, start, wait_for_phase,
    wait_for_pod,
};
use crate::support::PATIENCE;

/// A container `name` running `script` in busybox with the shared directory at `/shared`.
fn container(name: &str, script: &str, extra: Value) -> Value {
    let mut c = json!({
        "name": name,
        "image": BUSYBOX,
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
    });
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

/// A sidecar that notes its start, crashes (exit 3) when the test asks it to, and notes its
/// SIGTERM before it exits 0.
fn sidecar(name: &str, extra: Value) -> Value {
    let script = format!(
        "echo {name}-start >> /shared/order; \
         trap 'echo {name}-stop >> /shared/order; exit 0' TERM; \
         while true; do \
           if [ -f /shared/crash-{name} ]; then rm /shared/crash-{name}; \
             echo {name}-crash >> /shared/order; exit 3; fi; \
           sleep 0.1; \
         done"
    );
    let mut c = container(name, &script, extra);
    c["restartPolicy"] = json!("Always");
    c
}

/// The status of init container `name` in `pod` (`Null` when absent).
fn init_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["initContainerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn condition<'a>(pod: &'a Value, type_: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == type_))
        .map_or(&Value::Null, |c| &c["status"])
}

/// Waits (bounded by [`PATIENCE`]) until the file at `path` has `n` lines.
async fn wait_for_lines(path: &Path, n: usize) {
    let waited = tokio::time::timeout(PATIENCE, async {
        while lines(path).len() < n {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never {n} lines: {:?}", lines(path));
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_start_in_order_restart_under_never_and_stop_after_the_app_in_reverse_order() {
    let (world, _reaper) = start(true).await;
    let shared = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let order = shared.path().join("order");
    // Each sidecar has started once its line is in the file: the next container starts after.
    let startup = |name: &str| {
        json!({"startupProbe": {
            "exec": {"command": ["grep", "-q", format!("{name}-start"), "/shared/order"]},
            "periodSeconds": 1,
        }})
    };
    let created = create(
        &world,
        pod("sidecars")
            .spec(json!({
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 10,
                "securityContext": {"runAsUser": 0},
            }))
            .init_container(container("setup", "echo setup >> /shared/order", json!({})))
            .init_container(sidecar("proxy", startup("proxy")))
            .init_container(sidecar("logs", startup("logs")))
            .container(container(
                "c",
                "echo app >> /shared/order; \
                 until [ -f /shared/done ]; do sleep 0.1; done; echo app-end >> /shared/order",
                json!({}),
            ))
            .volume(
                json!({"name": "shared", "hostPath": {"path": shared.path(), "type": "Directory"}}),
            )
            .json(),
    );
    // PW-60, PW-64, PW-65: the app runs beside both sidecars, started and ready.
    let running = wait_for_pod(&world, "sidecars", "ran its app beside its sidecars", |p| {
        p["status"]["phase"] == "Running"
            && ["proxy", "logs"].iter().all(|n| {
                let s = init_status(p, n);
                s["state"]["running"].is_object() && s["started"] == true && s["ready"] == true
            })
            && condition(p, "Initialized") == "True"
            && condition(p, "Ready") == "True"
            && lines(&order).len() == 4
    })
    .await;
    assert_eq!(
        init_status(&running, "setup")["state"]["terminated"]["exitCode"],
        0
    );
    assert_eq!(lines(&order), ["setup", "proxy-start", "logs-start", "app"]);

    // PW-61: a sidecar that exits is started again although the pod's policy is Never.
    fs::write(shared.path().join("crash-logs"), "").unwrap_or_else(|e| panic!("{e}"));
    wait_for_pod(&world, "sidecars", "restarted its logs sidecar", |p| {
        let s = init_status(p, "logs");
        s["restartCount"] == 1
            && s["state"]["running"].is_object()
            && s["lastState"]["terminated"]["exitCode"] == 3
    })
    .await;
    wait_for_lines(&order, 6).await;

    // PW-62, PW-63: the app succeeds; the sidecars then get SIGTERM, the last declared first,
    // and the pod succeeds whatever they exit with.
    fs::write(shared.path().join("done"), "").unwrap_or_else(|e| panic!("{e}"));
    let done = wait_for_phase(&world, "sidecars", "Succeeded").await;
    assert_eq!(
        lines(&order),
        [
            "setup",
            "proxy-start",
            "logs-start",
            "app",
            "logs-crash",
            "logs-start",
            "app-end",
            "logs-stop",
            "proxy-stop",
        ]
    );
    for name in ["proxy", "logs"] {
        let s = init_status(&done, name);
        assert!(s["state"]["terminated"].is_object(), "{name}: {s}");
    }
    let events = events_for(&world.admin, &created).await;
    let killing: Vec<String> = events
        .iter()
        .filter(|e| event_is(e, "Normal", "Killing"))
        .filter_map(|e| e.message.clone())
        .collect();
    for name in ["proxy", "logs"] {
        assert!(
            killing.contains(&format!("Stopping container {name}")),
            "{killing:?}"
        );
    }
    delete_and_wait(&world, "sidecars", 1).await;
    world.stop().await;
}
