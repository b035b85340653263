//! The agent's kubelet API end to end: an in-process agent with the process runtime serves it
//! on 127.0.0.1 (port 0) with the API server's cluster CA as its client CA, registers a Node
//! that names it, and the API server's `pods/log` proxy reaches it, for the kube client and
//! for the real `kubectl logs`. Direct TLS requests check who the API lets in. The containers
//! are local processes, so these tests need root (mount namespaces); CI runs as root.

use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::{AsyncBufReadExt as _, SinkExt as _, StreamExt as _, TryStreamExt as _};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, LogParams};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use nodelet_apiserver::User;
use nodelet_core::PodDirs;
use nodelet_testutil::PodBuilder;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest as _};

use crate::support::{NODE, PATIENCE, World, poll_pause};

const NS: &str = "default";
/// Mapped by the default image table to the host's shell.
const BUSYBOX: &str = "busybox:1.36";
/// The user every test container runs as (busybox maps to root, which the agent refuses).
const USER: u32 = 1000;

// ---------------------------------------------------------------------------------------------
// The test bed
// ---------------------------------------------------------------------------------------------

/// Fails, naming the privilege, where the machine cannot run containers.
fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (uid 0): the process runtime makes a mount namespace per \
         container; CI runs as root"
    );
}

/// An agent serving its kubelet API, and what it was started with. Fields drop in order: the
/// reaper first, while the root directory still exists.
struct Bed {
    reaper: Reaper,
    world: World,
    /// The kubelet API's address (`Agent::kubelet_addr`).
    kubelet: SocketAddr,
    /// Holds the client CA file.
    _files: TempDir,
}

impl Bed {
    /// A world (API server over TLS) with the process runtime, Node registration, the kubelet
    /// API on 127.0.0.1:0 with the API server's cluster CA as `--client-ca-file`, node IP
    /// 127.0.0.1 and a short crash back-off.
    async fn start() -> Bed {
        require_root();
        let files = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let client_ca = files.path().join("client-ca.crt");
        let ca_file = client_ca.clone();
        // TLS: kubectl sends no bearer token to an `http://` server.
        let server = nodelet_apiserver::Config::default().with_tls();
        let world = World::start_on(
            server,
            move |server| {
                fs::write(&ca_file, server.kubelet_client_ca_pem())
                    .unwrap_or_else(|e| panic!("writing the client CA: {e}"));
            },
            |c| {
                c.runtime = nodelet_config::RuntimeKind::Process;
                // The test binary is not the agent: the containers' init is the real `nodelet`.
                c.container_init = Some(vec![
                    env!("CARGO_BIN_EXE_nodelet").into(),
                    "container-init".into(),
                ]);
                c.register_node = true;
                c.kubelet_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
                c.node_ip = Some(IpAddr::from([127, 0, 0, 1]));
                c.client_ca_file = Some(client_ca);
                c.crash_backoff = nodelet_core::backoff::Schedule {
                    initial: Duration::from_millis(200),
                    max: Duration::from_secs(1),
                    ..nodelet_core::backoff::Schedule::CRASH_LOOP
                };
            },
        )
        .await;
        let kubelet = world
            .with_agent(nodelet::Agent::kubelet_addr)
            .await
            .unwrap_or_else(|| panic!("the agent serves no kubelet API"));
        Bed {
            reaper: Reaper(world.root_dir()),
            world,
            kubelet,
            _files: files,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.world.admin.clone(), NS)
    }

    fn create(&self, pod: Value) -> Value {
        self.world
            .server
            .handle()
            .create(pod)
            .unwrap_or_else(|e| panic!("creating a pod: {e}"))
    }

    fn get_pod(&self, name: &str) -> Option<Value> {
        self.world.server.handle().get("v1", "Pod", Some(NS), name)
    }

    /// The registered Node, if any.
    fn node(&self) -> Option<Value> {
        self.world.server.handle().get("v1", "Node", None, NODE)
    }

    /// Waits (bounded by [`PATIENCE`]) until pod `name` exists and `done` holds for it.
    async fn wait_for_pod(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let found = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Some(p) = self.get_pod(name) {
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

    async fn wait_for_phase(&self, name: &str, phase: &str) -> Value {
        self.wait_for_pod(name, &format!("reached phase {phase}"), |p| {
            p["status"]["phase"] == phase
        })
        .await
    }

    /// Waits until the Node's status names the kubelet API's port; returns the Node.
    async fn wait_for_registration(&self) -> Value {
        let mut last = Value::Null;
        let found = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Some(node) = self.node() {
                    if node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].is_u64() {
                        return node;
                    }
                    last = node;
                }
                poll_pause().await;
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            panic!("the Node never published its kubelet port; its last status: {last}")
        })
    }

    /// `pods/log` of `name` through the API server, with the Node's addresses in the panic
    /// message when it fails (the proxy dials the first of them).
    async fn logs(&self, name: &str, params: &LogParams) -> String {
        match self.pods().logs(name, params).await {
            Ok(text) => text,
            Err(e) => panic!(
                "pods/log of {name} ({params:?}): {e}; the Node's addresses: {}",
                self.node().unwrap_or_default()["status"]["addresses"]
            ),
        }
    }

    /// Deletes every pod and waits until the agent has removed them (their processes stopped),
    /// then stops the world.
    async fn stop(self) {
        let names: Vec<String> = self
            .pods()
            .list(&Default::default())
            .await
            .unwrap_or_else(|e| panic!("listing pods: {e}"))
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        let params = DeleteParams {
            grace_period_seconds: Some(1),
            ..DeleteParams::default()
        };
        for name in &names {
            self.pods()
                .delete(name, &params)
                .await
                .unwrap_or_else(|e| panic!("deleting pod {name}: {e}"));
        }
        for name in &names {
            let gone = tokio::time::timeout(PATIENCE, async {
                while self.get_pod(name).is_some() {
                    poll_pause().await;
                }
            })
            .await;
            assert!(gone.is_ok(), "pod {name} was never deleted by the agent");
        }
        let Bed { reaper, world, .. } = self;
        world.stop().await;
        drop(reaper);
    }
}

/// Kills, when dropped, every container process a `state.json` under the root directory still
/// names, so a test that failed half-way leaves no process behind (as in `process_runtime.rs`).
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        let pods = fs::read_dir(PodDirs::new(&self.0).pods())
            .into_iter()
            .flatten()
            .flatten();
        for pod in pods {
            let containers = fs::read_dir(pod.path().join("containers"))
                .into_iter()
                .flatten()
                .flatten();
            for c in containers {
                let state: Option<Value> = fs::read(c.path().join("state.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok());
                let Some(state) = state else { continue };
                let pid = state["pid"].as_i64().and_then(|p| i32::try_from(p).ok());
                if let (Some(pid), Some(ticks)) = (pid, state["startTicks"].as_u64())
                    && start_ticks(pid) == Some(ticks)
                {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
        }
    }
}

/// Field 22 of `/proc/<pid>/stat` (the start time: a pid reused later has another).
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// A pod on the test node, its containers running as [`USER`].
fn pod(name: &str, restart_policy: &str) -> PodBuilder {
    PodBuilder::new(NS, name).node(NODE).spec(json!({
        "restartPolicy": restart_policy,
        "securityContext": {"runAsUser": USER},
    }))
}

/// Container `name` running `sh -c script` in busybox.
fn shell(name: &str, script: &str) -> Value {
    json!({"name": name, "image": BUSYBOX, "command": ["sh", "-c", script]})
}

/// The status of container `c` in `pod` (`Null` when absent).
fn status_of<'a>(pod: &'a Value, c: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == c))
        .unwrap_or(&Value::Null)
}

// ---------------------------------------------------------------------------------------------
// 1. The Node names the kubelet API
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registered_node_names_the_kubelet_api_port_the_node_ip_and_the_versions() {
    let bed = Bed::start().await;
    let node = bed.wait_for_registration().await;
    let status = &node["status"];
    assert_eq!(
        status["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64(),
        Some(u64::from(bed.kubelet.port())),
        "{status}"
    );
    assert_ne!(bed.kubelet.port(), 0);
    let addresses = status["addresses"].as_array().cloned().unwrap_or_default();
    assert!(
        addresses.contains(&json!({"type": "InternalIP", "address": "127.0.0.1"})),
        "{addresses:?}"
    );
    assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.36.2");
    let runtime = status["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap_or_default();
    assert!(runtime.starts_with("nodelet-process://"), "{runtime}");
    // A v1.36 API server proxies exec WebSockets straight to a kubelet that declares this.
    assert_eq!(
        status["declaredFeatures"],
        json!(["ExtendWebSocketsToKubelet"])
    );
    bed.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 2. pods/log through the API server
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_log_reads_a_succeeded_containers_log_with_tail_and_timestamps() {
    let bed = Bed::start().await;
    bed.wait_for_registration().await;
    bed.create(
        pod("three", "Never")
            .container(shell("c", "echo alpha; echo beta; echo gamma"))
            .json(),
    );
    bed.wait_for_phase("three", "Succeeded").await;

    assert_eq!(
        bed.logs("three", &LogParams::default()).await,
        "alpha\nbeta\ngamma\n"
    );
    let tail = LogParams {
        tail_lines: Some(1),
        ..LogParams::default()
    };
    assert_eq!(bed.logs("three", &tail).await, "gamma\n");

    let stamped = LogParams {
        timestamps: true,
        ..LogParams::default()
    };
    let text = bed.logs("three", &stamped).await;
    let mut words = Vec::new();
    for line in text.lines() {
        let (stamp, word) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("no timestamp in {line:?}"));
        chrono::DateTime::parse_from_rfc3339(stamp)
            .unwrap_or_else(|e| panic!("{stamp:?} in {line:?} is not RFC 3339: {e}"));
        words.push(word);
    }
    assert_eq!(words, ["alpha", "beta", "gamma"], "{text}");
    bed.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 3. follow
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_brings_lines_as_they_come_and_ends_when_the_container_exits() {
    let bed = Bed::start().await;
    bed.wait_for_registration().await;
    // The first line, then nothing until the test opens the gate (a file in the pod's
    // emptyDir): then a line every 100 ms for about a second, and exit 0.
    let created = bed.create(
        pod("ticker", "Never")
            .container(json!({
                "name": "c",
                "image": BUSYBOX,
                "command": ["sh", "-c",
                    "echo tick-1; while [ ! -e /gate/open ]; do sleep 0.1; done; \
                     for i in 2 3 4 5 6 7 8 9 10; do echo tick-$i; sleep 0.1; done"],
                "volumeMounts": [{"name": "gate", "mountPath": "/gate"}],
            }))
            .volume(json!({"name": "gate", "emptyDir": {}}))
            .json(),
    );
    bed.wait_for_pod("ticker", "ran", |p| {
        status_of(p, "c")["state"]["running"].is_object()
    })
    .await;

    let follow = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let stream = bed
        .pods()
        .log_stream("ticker", &follow)
        .await
        .unwrap_or_else(|e| panic!("pods/log?follow=true: {e}"));
    let mut lines = stream.lines();
    let first = tokio::time::timeout(PATIENCE, lines.try_next())
        .await
        .unwrap_or_else(|_| panic!("the followed log never brought its first line"))
        .unwrap_or_else(|e| panic!("reading the followed log: {e}"));
    assert_eq!(first.as_deref(), Some("tick-1"));
    // The line came while the container still ran (it waits for the gate).
    let pod = bed.get_pod("ticker").unwrap_or_default();
    assert!(
        status_of(&pod, "c")["state"]["running"].is_object(),
        "{}",
        pod["status"]
    );

    let gate = bed
        .world
        .pod_dir(&created)
        .join("volumes/kubernetes.io~empty-dir/gate/open");
    fs::write(&gate, "").unwrap_or_else(|e| panic!("opening the gate {}: {e}", gate.display()));
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines
            .try_next()
            .await
            .unwrap_or_else(|e| panic!("reading the followed log: {e}"))
        {
            rest.push(line);
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the followed log did not end after the container exited; it brought {rest:?}; the \
         pod's status: {}",
        bed.get_pod("ticker").unwrap_or_default()["status"]
    );
    let expected: Vec<String> = (2..=10).map(|i| format!("tick-{i}")).collect();
    assert_eq!(rest, expected);
    let done = bed.wait_for_phase("ticker", "Succeeded").await;
    assert_eq!(
        status_of(&done, "c")["state"]["terminated"]["exitCode"],
        0,
        "{}",
        done["status"]
    );
    bed.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 4. previous
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_reads_the_instance_before_the_restart_and_not_the_current_one() {
    let bed = Bed::start().await;
    bed.wait_for_registration().await;
    // Each instance prints a line of its own. The first fails; the next, finding the mark
    // the first left in the emptyDir, keeps running, so "current" is a running instance (in
    // back-off, the kubelet reads the last terminated instance for both).
    bed.create(
        pod("crasher", "OnFailure")
            .container(json!({
                "name": "c",
                "image": BUSYBOX,
                "command": ["sh", "-c",
                    "echo run-$(cat /proc/sys/kernel/random/uuid | cut -c1-8); \
                     if [ -e /state/ran ]; then while true; do sleep 0.1; done; fi; \
                     touch /state/ran; exit 1"],
                "volumeMounts": [{"name": "state", "mountPath": "/state"}],
            }))
            .volume(json!({"name": "state", "emptyDir": {}}))
            .json(),
    );
    let restarted = bed
        .wait_for_pod("crasher", "ran again after failing", |p| {
            let c = status_of(p, "c");
            c["restartCount"].as_u64().unwrap_or(0) >= 1 && c["state"]["running"].is_object()
        })
        .await;
    let c = status_of(&restarted, "c");
    assert_eq!(c["restartCount"], 1, "{c}");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1, "{c}");

    let is_run_line = |log: &str| {
        log.strip_prefix("run-")
            .and_then(|rest| rest.strip_suffix('\n'))
            .is_some_and(|id| id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let previous = LogParams {
        previous: true,
        ..LogParams::default()
    };
    let before = bed.logs("crasher", &previous).await;
    assert!(is_run_line(&before), "{before:?}");
    // The running instance prints its line as it starts; wait for it.
    let mut current = String::new();
    let printed = tokio::time::timeout(PATIENCE, async {
        loop {
            current = bed.logs("crasher", &LogParams::default()).await;
            if !current.is_empty() {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(printed.is_ok(), "the restarted instance never printed");
    assert!(is_run_line(&current), "{current:?}");
    assert_ne!(
        before, current,
        "previous and current read the same instance"
    );
    bed.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 5. kubectl logs
// ---------------------------------------------------------------------------------------------

/// Fails the test, saying what to install, when kubectl cannot run.
fn require_kubectl() {
    let ran = Command::new("kubectl")
        .args(["version", "--client"])
        .output();
    assert!(
        ran.is_ok_and(|o| o.status.success()),
        "this test drives the real kubectl, and `kubectl version --client` did not run: \
         install kubectl (`.ci/install-kubectl`)"
    );
}

/// Runs kubectl with `kubeconfig` (off the async workers); returns (success, stdout, stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let mut command = Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_file_name("cache"))
        .args(args);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("running kubectl: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_prints_the_log_and_the_server_asks_for_a_container_of_two() {
    require_kubectl();
    let bed = Bed::start().await;
    bed.wait_for_registration().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = dir.path().join("kubeconfig");
    fs::write(
        &kubeconfig,
        bed.world.server.kubeconfig_yaml(&User::admin()),
    )
    .unwrap_or_else(|e| panic!("{e}"));

    bed.create(
        pod("single", "Never")
            .container(shell("c", "echo hello from kubectl; echo bye"))
            .json(),
    );
    bed.create(
        pod("pair", "Never")
            .container(shell("a", "echo from-a"))
            .container(shell("b", "echo from-b"))
            .json(),
    );
    bed.wait_for_phase("single", "Succeeded").await;
    bed.wait_for_phase("pair", "Succeeded").await;

    let (ok, out, err) = kubectl(&kubeconfig, &["logs", "single"]).await;
    assert!(ok, "kubectl logs single: {err}");
    assert_eq!(out, "hello from kubectl\nbye\n", "{err}");
    let (ok, out, err) = kubectl(&kubeconfig, &["logs", "pair", "-c", "b"]).await;
    assert!(ok, "kubectl logs pair -c b: {err}");
    assert_eq!(out, "from-b\n");
    // Without `-c`, kubectl itself picks the first container (since v1.21), so the server's
    // refusal below is met only by clients that name none.
    let (ok, out, err) = kubectl(&kubeconfig, &["logs", "pair"]).await;
    assert!(ok, "kubectl logs pair: {err}");
    assert_eq!(out, "from-a\n");
    assert!(
        err.contains(r#"Defaulted container "a" out of: a, b"#),
        "{err}"
    );

    // The server's answer to a request that names no container of a two-container pod.
    let (ok, out, err) = kubectl(
        &kubeconfig,
        &["get", "--raw", "/api/v1/namespaces/default/pods/pair/log"],
    )
    .await;
    assert!(!ok, "{out}");
    assert_eq!(
        err.trim_end(),
        "Error from server (BadRequest): a container name must be specified for pod pair, \
         choose one of: [a b]"
    );
    bed.stop().await;
}

/// `kubectl exec` through the stand-in (WebSocket, v5) to the agent: output, stdin, exit codes.
/// Regression: the API server names the streams `input`/`output`/`error` towards a kubelet, and
/// client-go takes a close without a status code for a broken stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_runs_in_the_container_with_its_output_stdin_and_exit_code() {
    require_kubectl();
    let bed = Bed::start().await;
    bed.wait_for_registration().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = dir.path().join("kubeconfig");
    fs::write(
        &kubeconfig,
        bed.world.server.kubeconfig_yaml(&User::admin()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    bed.create(
        pod("sleeper", "Never")
            .container(shell("c", "echo up; sleep 1000"))
            .json(),
    );
    bed.wait_for_phase("sleeper", "Running").await;

    let (ok, out, err) =
        kubectl(&kubeconfig, &["exec", "sleeper", "--", "sh", "-c", "id -u"]).await;
    assert!(ok, "kubectl exec: {err}");
    assert_eq!(out, "1000\n", "{err}");
    let (ok, _, err) = kubectl(
        &kubeconfig,
        &["exec", "sleeper", "--", "sh", "-c", "exit 3"],
    )
    .await;
    assert!(!ok);
    assert!(err.contains("command terminated with exit code 3"), "{err}");
    assert!(!err.contains("close 1005"), "{err}");
    let mut command = Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["exec", "-i", "sleeper", "--", "cat"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().unwrap_or_else(|e| panic!("kubectl: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            stdin
                .write_all(b"through stdin\n")
                .unwrap_or_else(|e| panic!("{e}"));
        }
        child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through stdin\n");
    bed.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 6. Direct TLS requests: who gets in
// ---------------------------------------------------------------------------------------------

/// A client certificate chain and its key.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    fn from_pem(cert: &str, key: &str) -> Self {
        Self {
            chain: vec![
                CertificateDer::from_pem_slice(cert.as_bytes())
                    .unwrap_or_else(|e| panic!("the certificate: {e}")),
            ],
            key: PrivateKeyDer::from_pem_slice(key.as_bytes())
                .unwrap_or_else(|e| panic!("the key: {e}")),
        }
    }

    /// A certificate of the API server's cluster CA (the agent's client CA).
    fn of_cluster(bed: &Bed, user: &str, groups: &[&str]) -> Self {
        let (cert, key) = bed
            .world
            .server
            .issue_client_certificate(user, groups)
            .unwrap_or_else(|e| panic!("issuing a client certificate: {e}"));
        Self::from_pem(&cert, &key)
    }

    /// A client certificate for `user` in `groups` from a CA of the test's own.
    fn of_another_ca(user: &str, groups: &[&str]) -> Self {
        let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "other-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = CertificateParams::default();
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.distinguished_name.push(DnType::CommonName, user);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &issuer)
            .unwrap_or_else(|e| panic!("{e}"));
        Self::from_pem(&cert.pem(), &key.serialize_pem())
    }
}

/// Takes the agent's serving certificate (made at start by a CA no one else knows) as
/// kube-apiserver does without `--kubelet-certificate-authority`; handshake signatures are
/// still checked.
#[derive(Debug)]
struct AnyServerCertificate;

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS connection to the kubelet API at `addr`, presenting `identity`.
async fn kubelet_tls(
    addr: SocketAddr,
    identity: Option<&Identity>,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("{e}"))
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCertificate));
    let config = match identity {
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .unwrap_or_else(|e| panic!("the client certificate: {e}")),
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connecting to the kubelet API at {addr}: {e}"));
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .unwrap_or_else(|e| panic!("the TLS handshake with {addr}: {e}"))
}

/// `GET path` on the kubelet API at `addr` over TLS (HTTP/1.1), presenting `identity`; the
/// status, the content type and the body as text.
async fn kubelet_get(
    addr: SocketAddr,
    path: &str,
    identity: Option<&Identity>,
) -> (StatusCode, String, String) {
    let tls = kubelet_tls(addr, identity).await;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(connection);
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(Body::empty())
        .unwrap_or_else(|e| panic!("{e}"));
    let response = sender
        .send_request(request)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = axum::body::to_bytes(Body::new(response.into_body()), 1 << 24)
        .await
        .unwrap_or_else(|e| panic!("the body of GET {path}: {e}"));
    (
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_api_lets_in_the_cluster_cas_admins_and_no_one_else() {
    let bed = Bed::start().await;
    let created = bed.create(
        pod("runner", "Always")
            .container(shell("c", "echo up; while true; do sleep 0.1; done"))
            .json(),
    );
    bed.wait_for_pod("runner", "ran", |p| {
        status_of(p, "c")["state"]["running"].is_object()
    })
    .await;
    let addr = bed.kubelet;
    let logs_path = "/containerLogs/default/runner/c";

    // No certificate and no token.
    for path in ["/healthz", "/pods", logs_path] {
        let (status, _, body) = kubelet_get(addr, path, None).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::UNAUTHORIZED, "Unauthorized"),
            "{path}"
        );
    }

    // The API server's own identity for kubelets.
    let apiserver =
        Identity::of_cluster(&bed, "kube-apiserver-kubelet-client", &["system:masters"]);
    let (status, _, body) = kubelet_get(addr, "/healthz", Some(&apiserver)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    let (status, content_type, body) = kubelet_get(addr, "/pods", Some(&apiserver)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(content_type, "application/json");
    let list: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(
        (&list["apiVersion"], &list["kind"]),
        (&json!("v1"), &json!("PodList"))
    );
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let uids: Vec<&Value> = items.iter().map(|p| &p["metadata"]["uid"]).collect();
    assert_eq!(uids, [&created["metadata"]["uid"]], "{body}");
    assert_eq!(items[0]["metadata"]["name"], "runner");
    // The container prints its line as it starts: ask until it has.
    let mut last = (StatusCode::OK, String::new());
    let printed = tokio::time::timeout(PATIENCE, async {
        loop {
            let (status, _, body) = kubelet_get(addr, logs_path, Some(&apiserver)).await;
            last = (status, body);
            if last.0 != StatusCode::OK || !last.1.is_empty() {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    assert!(printed.is_ok(), "the container's log stayed empty");
    assert_eq!(last, (StatusCode::OK, "up\n".to_owned()));

    // The same names from a CA the agent does not trust.
    let stranger = Identity::of_another_ca("kube-apiserver-kubelet-client", &["system:masters"]);
    for path in ["/healthz", "/pods"] {
        let (status, _, body) = kubelet_get(addr, path, Some(&stranger)).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::UNAUTHORIZED, "Unauthorized"),
            "{path}"
        );
    }

    // A user of the cluster who may not read the node.
    let alice = Identity::of_cluster(&bed, "alice", &[]);
    let (status, _, body) = kubelet_get(addr, logs_path, Some(&alice)).await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::FORBIDDEN,
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[proxy])\n"
        )
    );
    let (status, _, body) = kubelet_get(addr, "/pods", Some(&alice)).await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::FORBIDDEN,
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        )
    );
    bed.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 7. exec over a WebSocket (v5.channel.k8s.io)
// ---------------------------------------------------------------------------------------------

/// What an exec brought back: stdout and stderr as text, the status on channel 3 as JSON, and
/// the subprotocol the server chose.
#[derive(Debug)]
struct ExecOutcome {
    stdout: String,
    stderr: String,
    status: Value,
    /// Channel 3 as text (under `channel.k8s.io` a failure's message, not JSON).
    error: String,
    protocol: String,
}

/// `s` with every byte but ASCII letters and digits percent-encoded.
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `command` in `container` of pod `pod` over the kubelet API's `/exec` as `identity`,
/// offering `v5.channel.k8s.io` then `v4.channel.k8s.io`; `stdin` (when given) is sent, then
/// closed with v5's `[255, 0]`. The handshake's error when the server refuses the upgrade.
async fn kubelet_exec(
    addr: SocketAddr,
    identity: Option<&Identity>,
    pod: &str,
    container: &str,
    command: &[&str],
    stdin: Option<&str>,
) -> Result<ExecOutcome, tungstenite::Error> {
    let offered = "v5.channel.k8s.io, v4.channel.k8s.io";
    kubelet_exec_offering(offered, addr, identity, pod, container, command, stdin).await
}

/// [`kubelet_exec`] offering the subprotocols `offered`; channel 3 is parsed as a JSON
/// `Status` unless the server chose the old `channel.k8s.io`.
async fn kubelet_exec_offering(
    offered: &str,
    addr: SocketAddr,
    identity: Option<&Identity>,
    pod: &str,
    container: &str,
    command: &[&str],
    stdin: Option<&str>,
) -> Result<ExecOutcome, tungstenite::Error> {
    let mut query: Vec<String> = command
        .iter()
        .map(|c| format!("command={}", query_escape(c)))
        .collect();
    query.push("stdout=1&stderr=1".to_owned());
    if stdin.is_some() {
        query.push("stdin=1".to_owned());
    }
    let url = format!(
        "wss://{addr}/exec/{NS}/{pod}/{container}?{}",
        query.join("&")
    );
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        offered.parse().unwrap_or_else(|e| panic!("{e}")),
    );
    let tls = kubelet_tls(addr, identity).await;
    let (mut socket, response) = tokio_tungstenite::client_async(request, tls).await?;
    let protocol = response
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if let Some(input) = stdin {
        let mut data = vec![0u8];
        data.extend_from_slice(input.as_bytes());
        socket.send(Message::binary(data)).await?;
        socket.send(Message::binary(vec![255u8, 0])).await?;
    }
    let json_status = protocol != "channel.k8s.io";
    let mut outcome = ExecOutcome {
        stdout: String::new(),
        stderr: String::new(),
        status: Value::Null,
        error: String::new(),
        protocol,
    };
    let read = async {
        while let Some(message) = socket.next().await {
            let data = match message? {
                Message::Binary(data) => data,
                // The server closes the connection (without TLS close_notify) after its
                // close frame.
                Message::Close(_) => break,
                _ => continue,
            };
            let text = String::from_utf8_lossy(&data[1..]).into_owned();
            match data.first() {
                Some(1) => outcome.stdout.push_str(&text),
                Some(2) => outcome.stderr.push_str(&text),
                Some(3) if !text.is_empty() => {
                    if json_status {
                        outcome.status = serde_json::from_str(&text)
                            .unwrap_or_else(|e| panic!("the status {text:?}: {e}"));
                    }
                    outcome.error.push_str(&text);
                }
                _ => {}
            }
        }
        Ok::<_, tungstenite::Error>(())
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .unwrap_or_else(|_| panic!("the exec of {command:?} did not end"))?;
    Ok(outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_a_command_in_the_container_as_its_user_with_its_env_and_reports_the_exit_code() {
    let bed = Bed::start().await;
    bed.world
        .server
        .handle()
        .create(
            nodelet_testutil::ConfigMapBuilder::new(NS, "cm")
                .data("key", "value-from-configmap")
                .json(),
        )
        .unwrap_or_else(|e| panic!("creating the ConfigMap: {e}"));
    bed.create(
        pod("target", "Always")
            .container(json!({
                "name": "c",
                "image": BUSYBOX,
                "command": ["sh", "-c", "while true; do sleep 0.1; done"],
                "env": [{"name": "GREETING", "value": "hello from the pod"}],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
            }))
            .config_map_volume("config", "cm")
            .json(),
    );
    bed.wait_for_pod("target", "running", |p| {
        status_of(p, "c")["state"]["running"].is_object()
    })
    .await;
    let addr = bed.kubelet;
    let admin = Identity::of_cluster(&bed, "kube-apiserver-kubelet-client", &["system:masters"]);
    let exec = |command: &'static [&'static str], stdin: Option<&'static str>| {
        kubelet_exec(addr, Some(&admin), "target", "c", command, stdin)
    };

    let cat = exec(&["cat", "/etc/config/key"], None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cat.protocol, "v5.channel.k8s.io");
    assert_eq!(
        (cat.stdout.as_str(), cat.stderr.as_str()),
        ("value-from-configmap", "")
    );
    assert_eq!(cat.status, json!({"metadata": {}, "status": "Success"}));

    let failed = exec(&["sh", "-c", "exit 3"], None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        failed.status,
        json!({
            "metadata": {},
            "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command \
                        [sh -c exit 3], exit code 3",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
        })
    );

    let who = exec(&["sh", "-c", "echo \"$GREETING\"; id -u; pwd"], None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        who.stdout,
        format!("hello from the pod\n{USER}\n/\n"),
        "{who:?}"
    );

    let echoed = exec(&["cat"], Some("ping"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(echoed.stdout, "ping", "{echoed:?}");
    assert_eq!(echoed.status["status"], "Success", "{echoed:?}");

    let missing = exec(&["no-such-program"], None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        missing.stderr,
        "exec: \"no-such-program\": executable file not found in $PATH\n"
    );
    assert_eq!(missing.status["details"]["causes"][0]["message"], "127");

    // The old `channel.k8s.io` (upstream's websocket exec spec offers only it): channel 3
    // says nothing on success and a failure's message as text.
    let old = |command: &'static [&'static str]| {
        kubelet_exec_offering(
            "channel.k8s.io",
            addr,
            Some(&admin),
            "target",
            "c",
            command,
            None,
        )
    };
    let said = old(&["echo", "remote execution test"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(said.protocol, "channel.k8s.io");
    assert_eq!(said.stdout, "remote execution test\n", "{said:?}");
    assert_eq!(said.error, "", "{said:?}");
    let failed = old(&["sh", "-c", "exit 3"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        failed.error,
        "command terminated with non-zero exit code: error executing command [sh -c exit 3], \
         exit code 3"
    );

    match kubelet_exec(addr, None, "target", "c", &["true"], None).await {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        }
        other => panic!("an exec without credentials: {other:?}"),
    }
    bed.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 8. Ephemeral containers (PW-57)
// ---------------------------------------------------------------------------------------------

/// As upstream's "will start an ephemeral container in an existing pod": one added through the
/// `ephemeralcontainers` subresource runs (its status under `ephemeralContainerStatuses`), a
/// command runs in it and its log is read, the pod's readiness and phase ignore it, and once it
/// ended it is not started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_added_to_a_running_pod_runs_once_with_exec_and_logs() {
    let bed = Bed::start().await;
    bed.create(
        pod("target", "Always")
            .container(shell("app", "while true; do sleep 0.1; done"))
            .json(),
    );
    bed.wait_for_pod("target", "running", |p| {
        status_of(p, "app")["state"]["running"].is_object()
    })
    .await;
    let ephemeral = |p: &Value, name: &str| -> Value {
        p["status"]["ephemeralContainerStatuses"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let add = |name: &str, script: &str| {
        kube::api::Patch::Strategic(json!({"spec": {"ephemeralContainers": [{
            "name": name, "image": BUSYBOX, "command": ["sh", "-c", script],
            "stdin": true, "tty": true,
        }]}}))
    };
    let patched = bed
        .pods()
        .patch_subresource(
            "ephemeralcontainers",
            "target",
            &kube::api::PatchParams::default(),
            &add("debugger", "while true; do echo polo; sleep 0.2; done"),
        )
        .await
        .unwrap_or_else(|e| panic!("adding the ephemeral container: {e}"));
    assert_eq!(patched.metadata.generation, Some(2));
    let p = bed
        .wait_for_pod("target", "ran its ephemeral container", |p| {
            ephemeral(p, "debugger")["state"]["running"].is_object()
        })
        .await;
    assert_eq!(ephemeral(&p, "debugger")["ready"], false);
    assert_eq!(p["status"]["phase"], "Running");
    let ready = p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"].clone());
    assert_eq!(ready, Some(json!("True")));

    let admin = Identity::of_cluster(&bed, "kube-apiserver-kubelet-client", &["system:masters"]);
    let marco = kubelet_exec(
        bed.kubelet,
        Some(&admin),
        "target",
        "debugger",
        &["/bin/echo", "marco"],
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(marco.stdout, "marco\n", "{marco:?}");
    let params = LogParams {
        container: Some("debugger".into()),
        ..LogParams::default()
    };
    let polo = tokio::time::timeout(PATIENCE, async {
        loop {
            let text = bed.logs("target", &params).await;
            if text.contains("polo") {
                return text;
            }
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the ephemeral container's log never said polo"));
    assert!(polo.starts_with("polo\n"), "{polo:?}");

    // One that ends stays ended: never restarted, whatever the pod's restart policy.
    bed.pods()
        .patch_subresource(
            "ephemeralcontainers",
            "target",
            &kube::api::PatchParams::default(),
            &add("once", "exit 3"),
        )
        .await
        .unwrap_or_else(|e| panic!("adding a second ephemeral container: {e}"));
    let p = bed
        .wait_for_pod("target", "saw its second ephemeral container end", |p| {
            ephemeral(p, "once")["state"]["terminated"]["exitCode"] == 3
        })
        .await;
    assert_eq!(p["metadata"]["generation"], 3);
    // Later syncs (the one that starts a third) leave it ended.
    bed.pods()
        .patch_subresource(
            "ephemeralcontainers",
            "target",
            &kube::api::PatchParams::default(),
            &add("third", "sleep 30"),
        )
        .await
        .unwrap_or_else(|e| panic!("adding a third ephemeral container: {e}"));
    let p = bed
        .wait_for_pod("target", "ran its third ephemeral container", |p| {
            ephemeral(p, "third")["state"]["running"].is_object()
        })
        .await;
    assert_eq!(ephemeral(&p, "once")["restartCount"], 0, "{}", p["status"]);
    assert_eq!(ephemeral(&p, "once")["state"]["terminated"]["exitCode"], 3);
    assert!(ephemeral(&p, "debugger")["state"]["running"].is_object());
    bed.stop().await;
}
