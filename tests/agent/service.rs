//! The agent as a systemd service: the real binary sends `READY=1` to `NOTIFY_SOCKET` only
//! after its first pod list is synced and `STOPPING=1` at SIGTERM, logs for the journal when
//! `JOURNAL_STREAM` names its stdout, and
//! `contrib/systemd/nodelet.service` starts it with flags it accepts.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Parser as _;
use nodelet_apiserver::{ApiServer, User};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::Value;
use tokio::net::UnixDatagram;

use crate::endpoints::get;
use crate::support::PATIENCE;

const NODE: &str = "service-node";

/// The next datagram on `socket`, as text.
async fn next_notification(socket: &UnixDatagram) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(PATIENCE, socket.recv(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("no notification from the agent"))
        .unwrap_or_else(|e| panic!("receiving: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_sent_only_after_the_first_pod_sync_and_stopping_at_sigterm() {
    let server = ApiServer::start(nodelet_apiserver::Config::default().with_auth())
        .await
        .unwrap_or_else(|e| panic!("api server: {e}"));
    let h = server.handle();
    h.create(
        ConfigMapBuilder::new("default", "cfg")
            .data("k", "v")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    h.create(
        PodBuilder::new("default", "web")
            .node(NODE)
            .container(serde_json::json!({"name": "c", "image": "x",
                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}))
            .config_map_volume("cfg", "cfg")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Every request answers late: a READY=1 sent before the pod list arrived could not go
    // unnoticed below.
    h.set_latency(Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = dir.path().join("node.kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, &User::node(NODE))
        .unwrap_or_else(|e| panic!("{e}"));
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap_or_else(|e| panic!("{e}"));
    let log_path = dir.path().join("stdout.log");
    let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("{e}"));
    // As systemd does for a service whose output is the journal: JOURNAL_STREAM names the very
    // stream that is the agent's stdout, so `--log-format auto` (the default) picks journal.
    let st = nix::sys::stat::fstat(&log).unwrap_or_else(|e| panic!("{e}"));
    let journal_stream = format!("{}:{}", st.st_dev, st.st_ino);
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodelet"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--node-name",
            NODE,
            "--listen",
            "127.0.0.1:0",
            "--kubelet-port",
            "0",
        ])
        .arg("--root-dir")
        .arg(dir.path().join("root"))
        .env("NOTIFY_SOCKET", &socket_path)
        .env("JOURNAL_STREAM", &journal_stream)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting nodelet: {e}"));

    let ready = next_notification(&socket).await;
    let lines: Vec<&str> = ready.lines().collect();
    assert!(lines.contains(&"READY=1"), "{ready:?}");
    let addr: SocketAddr = lines
        .iter()
        .find_map(|l| l.strip_prefix("STATUS=ready; endpoints on http://"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no endpoint address in {ready:?}"));
    // At READY=1 the first sync is done: the pre-existing pod is the agent's, /readyz is 200.
    let (code, body) = get(addr, "/pods").await;
    assert_eq!(code, 200, "{body}");
    let pods: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let names: Vec<&str> = pods["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["web"], "{body}");
    assert_eq!(get(addr, "/readyz").await.0, 200);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or_default()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let stopping = next_notification(&socket).await;
    assert_eq!(stopping.lines().collect::<Vec<_>>(), ["STOPPING=1"]);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "{status}");

    let log = std::fs::read_to_string(&log_path).unwrap_or_else(|e| panic!("{e}"));
    assert!(log.contains("<6> INFO"), "{log}");
    assert!(
        log.lines().all(|l| l.starts_with('<')),
        "every line carries a priority: {log}"
    );
    assert!(!log.contains('\u{1b}'), "no ANSI escapes: {log:?}");
    server.shutdown().await;
}

/// `ExecStart=` of the unit, continuation lines joined, split into arguments.
fn exec_start(unit: &str) -> Vec<String> {
    let joined = unit.replace("\\\n", " ");
    let line = joined
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("no ExecStart= in the unit"));
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_systemd_unit_is_type_notify_and_starts_the_agent_with_flags_it_accepts() {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd/nodelet.service"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for setting in ["Type=notify", "Restart=on-failure", "KillSignal=SIGTERM"] {
        assert!(unit.lines().any(|l| l == setting), "{setting} missing");
    }
    let args: Vec<String> = exec_start(&unit)
        .into_iter()
        .map(|a| a.replace("%H", "dev-1"))
        .collect();
    assert_eq!(
        args.first().map(String::as_str),
        Some("/usr/local/bin/nodelet")
    );
    let cli = nodelet::RunArgs::try_parse_from(&args).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cli.config.as_deref(),
        Some(std::path::Path::new("/etc/nodelet/config.yaml"))
    );
    assert_eq!(
        cli.root_dir, None,
        "the service uses the default root directory"
    );
    // The config file it names, as shipped, is valid.
    let config =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd/config.yaml");
    let mut shipped = args.clone();
    let at = shipped
        .iter()
        .position(|a| a == "/etc/nodelet/config.yaml")
        .unwrap_or_else(|| panic!("no config path"));
    shipped[at] = config.display().to_string();
    let settings = nodelet::RunArgs::try_parse_from(&shipped)
        .unwrap_or_else(|e| panic!("{e}"))
        .settings()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        settings.agent.root_dir,
        std::path::PathBuf::from(nodelet_config::DEFAULT_ROOT_DIR)
    );
    assert!(settings.agent.register_node);
    assert_eq!(
        settings.agent.listen.map(|a| a.to_string()).as_deref(),
        Some(nodelet_config::DEFAULT_LISTEN)
    );
}
