//! Lifecycle hooks, termination messages and the active deadline under the process runtime
//! (PW-20 … PW-26), end to end: `postStart` and `preStop` (exec in the container's
//! namespaces, httpGet against a server of the test's on loopback), their order against the
//! container's start and its SIGTERM, the kubelet's events, `state.terminated.message` from
//! the container's file or its log, and a pod failed at its `activeDeadlineSeconds`. They need
//! root (mount namespaces), as the process runtime's other tests.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::process_runtime::{
    container_status, create, delete_and_wait, delete_pod, event_is, events_for, pod, read_log,
    shell, shell_with, start, wait_for_event, wait_for_log, wait_for_phase, wait_for_running,
    wait_for_state_pid, wait_gone,
};
use crate::support::PATIENCE;

/// One request the [`HookServer`] received: its head (request line and headers) and the way
/// to answer it (`200 OK`, once the test lets it).
struct Received {
    head: String,
    respond: oneshot::Sender<()>,
}

/// An HTTP server on loopback for `httpGet` hooks. A connection that does not start with a
/// request line (a TLS ClientHello) gets a plain `400` at once, as an HTTP server answers it.
struct HookServer {
    port: u16,
    requests: mpsc::UnboundedReceiver<Received>,
}

impl HookServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("binding the hook server: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let (tx, requests) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        head.extend_from_slice(&buf[..n]);
                        if !head.starts_with(b"GET ") {
                            let _ = stream
                                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                                .await;
                            return;
                        }
                        if head.windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    let (respond, answer) = oneshot::channel();
                    let head = String::from_utf8_lossy(&head).into_owned();
                    if tx.send(Received { head, respond }).is_err() {
                        return;
                    }
                    if answer.await.is_ok() {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .await;
                    }
                });
            }
        });
        Self { port, requests }
    }

    /// The next request (bounded by [`PATIENCE`]).
    async fn next(&mut self, what: &str) -> Received {
        tokio::time::timeout(PATIENCE, self.requests.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("the hook server never got {what}"))
    }
}

/// `container` with `lifecycle` set.
fn with_lifecycle(mut container: Value, lifecycle: Value) -> Value {
    container["lifecycle"] = lifecycle;
    container
}

fn messages(events: &[k8s_openapi::api::core::v1::Event]) -> Vec<String> {
    events.iter().filter_map(|e| e.message.clone()).collect()
}

// PW-20: the hook runs in the container's namespaces (its private /tmp), right after it
// started: the program waits for the file the hook writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_start_exec_hook_writes_a_file_the_container_then_sees() {
    let (world, _reaper) = start(true).await;
    let created = create(
        &world,
        pod("post-start-exec")
            .container(with_lifecycle(
                shell("until [ -f /tmp/hook ]; do sleep 0.1; done; cat /tmp/hook; exec sleep 3600"),
                json!({"postStart": {"exec": {"command":
                    ["sh", "-c", "echo from-post-start > /tmp/hook"]}}}),
            ))
            .json(),
    );
    wait_for_running(&world, "post-start-exec").await;
    wait_for_log(&world.root_dir(), &created, &["from-post-start"]).await;
    let events = events_for(&world.admin, &created).await;
    assert!(
        !events
            .iter()
            .any(|e| event_is(e, "Warning", "FailedPostStartHook")),
        "{:?}",
        messages(&events)
    );
    delete_and_wait(&world, "post-start-exec", 1).await;
    world.stop().await;
}

// PW-20: a failed postStart hook: Warning `FailedPostStartHook` without the hook's own text,
// the container killed (`Killing` "FailedPostStartHook"), with `Never` the pod Failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_post_start_hook_kills_the_container_with_the_kubelets_events() {
    let (world, _reaper) = start(true).await;
    let created = create(
        &world,
        pod("post-start-fails")
            .spec(json!({"restartPolicy": "Never"}))
            .container(with_lifecycle(
                shell("exec sleep 3600"),
                json!({"postStart": {"exec": {"command":
                    ["sh", "-c", "echo secret-hook-output; exit 3"]}}}),
            ))
            .json(),
    );
    let failed = wait_for_event(&world.admin, &created, "FailedPostStartHook", |e| {
        event_is(e, "Warning", "FailedPostStartHook")
    })
    .await;
    assert_eq!(failed.message.as_deref(), Some("PostStartHook failed"));
    let killing = wait_for_event(&world.admin, &created, "Killing FailedPostStartHook", |e| {
        event_is(e, "Normal", "Killing")
    })
    .await;
    assert_eq!(killing.message.as_deref(), Some("FailedPostStartHook"));
    let done = wait_for_phase(&world, "post-start-fails", "Failed").await;
    let terminated = &container_status(&done, "c")["state"]["terminated"];
    assert_eq!(
        terminated["exitCode"], 143,
        "SIGTERM ended it: {terminated}"
    );
    let events = events_for(&world.admin, &created).await;
    assert!(
        messages(&events)
            .iter()
            .all(|m| !m.contains("secret-hook-output")),
        "the hook's output stays out of events: {:?}",
        messages(&events)
    );
    delete_and_wait(&world, "post-start-fails", 0).await;
    world.stop().await;
}

// PW-21, PW-23: the preStop hook runs to its end before the container gets SIGTERM: while the
// hook's request waits for its answer, the container still runs and has not seen the
// signal. The request goes to the pod's IP (the node's) at the port named in the container,
// with its headers and the kubelet's User-Agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_stop_http_hook_runs_before_the_container_gets_sigterm() {
    let (world, _reaper) = start(true).await;
    let root = world.root_dir();
    let mut server = HookServer::start().await;
    let created = create(
        &world,
        pod("pre-stop-http")
            .container(with_lifecycle(
                shell_with(
                    "trap 'echo got-term; exit 0' TERM; echo ready; \
                     while true; do sleep 0.1; done",
                    json!({"ports": [{"name": "hooks", "containerPort": server.port}]}),
                ),
                json!({"preStop": {"httpGet": {"path": "/prestop?x=1", "port": "hooks",
                    "httpHeaders": [{"name": "x-hook", "value": "pre-stop"}]}}}),
            ))
            .json(),
    );
    wait_for_log(&root, &created, &["ready"]).await;
    let pid = wait_for_state_pid(&root, &created, "c").await;
    delete_pod(&world, "pre-stop-http", 30).await;
    let request = server.next("the preStop request").await;
    assert!(
        request.head.starts_with("GET /prestop?x=1 HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    for header in [
        "X-Hook: pre-stop\r\n",
        "User-Agent: kube-lifecycle/1.36\r\n",
        &format!("Host: 127.0.0.1:{}\r\n", server.port),
    ] {
        assert!(
            request.head.contains(header),
            "{header:?} in {}",
            request.head
        );
    }
    // The hook has not returned: no SIGTERM yet.
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok(),
        "the container's process is alive while its preStop hook runs"
    );
    let log = read_log(&root, &created, "c").await;
    assert!(
        !log.contains("got-term"),
        "no SIGTERM before the hook ended:\n{log}"
    );
    let _ = request.respond.send(());
    wait_gone(&world, "pre-stop-http").await;
    let events = events_for(&world.admin, &created).await;
    assert!(
        events.iter().any(|e| event_is(e, "Normal", "Killing")
            && e.message.as_deref() == Some("Stopping container c")),
        "{:?}",
        messages(&events)
    );
    assert!(
        !events
            .iter()
            .any(|e| event_is(e, "Warning", "FailedPreStopHook")),
        "{:?}",
        messages(&events)
    );
    world.stop().await;
}

// PW-23: an HTTPS hook answered in plain HTTP is tried again over HTTP, and the kubelet's
// Warning says so; the container runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_post_start_hook_answered_in_http_is_retried_over_http() {
    let (world, _reaper) = start(true).await;
    let mut server = HookServer::start().await;
    let created = create(
        &world,
        pod("post-start-https")
            .container(with_lifecycle(
                shell("exec sleep 3600"),
                json!({"postStart": {"httpGet": {"path": "/poststart", "port": server.port,
                    "host": "127.0.0.1", "scheme": "HTTPS"}}}),
            ))
            .json(),
    );
    let request = server.next("the postStart request over http").await;
    assert!(
        request.head.starts_with("GET /poststart HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    let _ = request.respond.send(());
    let fallback = wait_for_event(&world.admin, &created, "LifecycleHTTPFallback", |e| {
        event_is(e, "Warning", "LifecycleHTTPFallback")
    })
    .await;
    assert_eq!(
        fallback.message,
        Some(format!(
            "request to HTTPS lifecycle hook 127.0.0.1:{} got HTTP response, retry with HTTP \
             succeeded",
            server.port
        ))
    );
    wait_for_running(&world, "post-start-https").await;
    delete_and_wait(&world, "post-start-https", 0).await;
    world.stop().await;
}

// PW-21: a preStop hook that fails: Warning `FailedPreStopHook` "PreStopHook failed", and the
// container is stopped all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_pre_stop_hook_is_reported_and_the_container_stopped_anyway() {
    let (world, _reaper) = start(true).await;
    let created = create(
        &world,
        pod("pre-stop-fails")
            .container(with_lifecycle(
                shell("exec sleep 3600"),
                json!({"preStop": {"exec": {"command": ["sh", "-c", "exit 1"]}}}),
            ))
            .json(),
    );
    wait_for_running(&world, "pre-stop-fails").await;
    delete_and_wait(&world, "pre-stop-fails", 5).await;
    let failed = wait_for_event(&world.admin, &created, "FailedPreStopHook", |e| {
        event_is(e, "Warning", "FailedPreStopHook")
    })
    .await;
    assert_eq!(failed.message.as_deref(), Some("PreStopHook failed"));
    world.stop().await;
}

// PW-24, PW-25: `state.terminated.message` from the file at `terminationMessagePath` (a
// non-default path, a non-root user), from the log tail of a failed container with
// `FallbackToLogsOnError`, and none for one that succeeded with that policy and wrote nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_messages_come_from_the_file_or_the_log_of_a_failed_container() {
    let (world, _reaper) = start(false).await;
    let fallback = json!({"terminationMessagePolicy": "FallbackToLogsOnError"});
    let named = |name: &str, mut c: Value| {
        c["name"] = json!(name);
        c
    };
    create(
        &world,
        pod("messages")
            .spec(json!({"restartPolicy": "Never", "securityContext": {"runAsUser": 1000}}))
            .container(named(
                "file",
                shell_with(
                    "echo not-this; printf 'bye from the file' > /dev/custom-message",
                    json!({"terminationMessagePath": "/dev/custom-message"}),
                ),
            ))
            .container(named(
                "logs",
                shell_with("echo one; echo two; exit 1", fallback.clone()),
            ))
            .container(named("quiet", shell_with("echo fine", fallback)))
            .json(),
    );
    let done = wait_for_phase(&world, "messages", "Failed").await;
    let message = |name: &str| container_status(&done, name)["state"]["terminated"].clone();
    assert_eq!(
        message("file")["message"],
        "bye from the file",
        "{}",
        message("file")
    );
    assert_eq!(message("logs")["exitCode"], 1);
    assert_eq!(
        message("logs")["message"],
        "one\ntwo\n",
        "{}",
        message("logs")
    );
    assert_eq!(message("quiet")["exitCode"], 0);
    assert!(
        message("quiet").get("message").is_none(),
        "{}",
        message("quiet")
    );
    delete_and_wait(&world, "messages", 0).await;
    world.stop().await;
}

// PW-26: a pod active longer than its `activeDeadlineSeconds` (counted from its `startTime`)
// is Failed with reason `DeadlineExceeded`, its containers killed, a Normal event saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_past_its_active_deadline_fails_and_its_containers_are_killed() {
    let (world, _reaper) = start(true).await;
    let created = create(
        &world,
        pod("deadline")
            .spec(json!({"activeDeadlineSeconds": 1}))
            .container(shell("exec sleep 3600"))
            .json(),
    );
    let failed = wait_for_phase(&world, "deadline", "Failed").await;
    assert_eq!(failed["status"]["reason"], "DeadlineExceeded");
    assert_eq!(
        failed["status"]["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    let event = wait_for_event(&world.admin, &created, "DeadlineExceeded", |e| {
        event_is(e, "Normal", "DeadlineExceeded")
    })
    .await;
    assert_eq!(
        event.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    let stopped = crate::process_runtime::wait_for_pod(&world, "deadline", "had c killed", |p| {
        container_status(p, "c")["state"]["terminated"].is_object()
    })
    .await;
    assert_eq!(
        stopped["status"]["phase"], "Failed",
        "the phase stays Failed"
    );
    assert_eq!(stopped["status"]["reason"], "DeadlineExceeded");
    delete_and_wait(&world, "deadline", 0).await;
    world.stop().await;
}
