//! `GET /exec/{namespace}/{pod}/{container}?command=…&stdin=1&stdout=1&stderr=1`: a command
//! in a running container over a WebSocket, as the kubelet's streaming server serves it
//! (`getExec`, `remotecommand.ServeExec`, `createWebSocketStreams`).
//!
//! 1. The options: `stdin`, `stdout`, `stderr`, `tty` are true when `1`; `tty` drops `stderr`.
//!    None of the three streams: `400 you must specify at least 1 of stdin, stdout, stderr`.
//!    No `command`: `400 you must specify a command` (nodelet's text; the kubelet passes an
//!    empty command to the runtime, which refuses it).
//! 2. `404 pod does not exist` for a pod the agent does not run; `500 container not found
//!    ("<c>")` for a container without a running instance (the kubelet's texts).
//! 3. Only WebSocket upgrades (`GET`, RFC 6455) are served, with the subprotocols
//!    `v5.channel.k8s.io`, `v4.channel.k8s.io` and `channel.k8s.io`, the first the client
//!    lists winning (as `wsstream`'s handshake picks). Anything else is `400`: SPDY, the other way `kubectl`
//!    reaches a kubelet, is not served.
//! 4. After the upgrade, an empty message on the lowest channel the client reads (stdout,
//!    else stderr, else the error channel) says the stream is open. Every binary message
//!    starts with its channel: 0 stdin, 1 stdout, 2 stderr, 3 error (the final `Status`), 4
//!    terminal resize (ignored); with v5 the client closes stdin with `[255, 0]`.
//! 5. The command runs as `nodelet container-exec PID SPEC -- CMD…` (`nodelet_runtime::sandbox::
//!    exec_main`): in the container's namespaces, as its user, with its environment; its
//!    output is copied to the channels, the client's stdin to it.
//! 6. Once it has exited and its output is sent, channel 3 carries a v1 `Status` (JSON):
//!    `Success`, or `Failure` with reason `NonZeroExitCode` and the exit code as the cause
//!    (128 + the signal for a command ended by one, as container runtimes report it). Under
//!    the old `channel.k8s.io` it carries nothing on success and the failure's message as
//!    text (the kubelet's `v1WriteStatusFunc`). A
//!    command that cannot be found or started exits 127 or 126 (with the reason on stderr).
//!    Then the socket is closed.
//!
//! `tty=1` is not supported (the process runtime makes no terminals): the answer is a
//! `Failure` status saying so, on channel 3, right after the upgrade. The command is killed
//! when the client goes away or the agent stops.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures::{SinkExt as _, StreamExt as _};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::state::{ApiState, text};
use crate::host::ExecTarget;

/// The subprotocols served, by name.
const PROTOCOLS: [(&str, Protocol); 3] = [
    ("v5.channel.k8s.io", Protocol::V5),
    ("v4.channel.k8s.io", Protocol::V4),
    ("channel.k8s.io", Protocol::V1),
];
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
/// v5: the client closes the channel named by the message's second byte.
const CLOSE: u8 = 255;
/// The largest piece of output in one message.
const CHUNK_SIZE: usize = 32 * 1024;
/// Why `tty=1` is refused (module docs).
const NO_TTY: &str = "a terminal (tty) is not supported by nodelet's process runtime; \
                      run the command without -t/--tty";

/// The negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// `channel.k8s.io`: channel 3 carries only a failure, as its message text.
    V1,
    V4,
    V5,
}

/// The streams a request asks for (step 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Streams {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

/// A v1 `Status` as Go's `json.Marshal` writes it (field order and omitted empties).
#[derive(Debug, Serialize)]
struct Status {
    metadata: Empty,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

#[derive(Debug, Serialize)]
struct Empty {}

#[derive(Debug, Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Debug, Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
}

/// The handler.
pub(super) async fn exec(
    State(state): State<Arc<ApiState>>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    // (1)
    let Ok(Query(pairs)) = query else {
        return text(StatusCode::BAD_REQUEST, "unable to decode query");
    };
    let streams = Streams::parse(&pairs);
    if !streams.stdin && !streams.stdout && !streams.stderr {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        );
    }
    let command: Vec<String> = pairs
        .into_iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v)
        .collect();
    if command.is_empty() {
        return text(StatusCode::BAD_REQUEST, "you must specify a command");
    }
    // (2)
    let Some(pod) = state.pods.find(&namespace, &pod_name) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let Some((target, program)) = state.pods.exec_target(pod.uid(), &container) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("container not found ({container:?})"),
        );
    };
    // (3)
    let Ok(upgrade) = upgrade else {
        return text(
            StatusCode::BAD_REQUEST,
            "nodelet serves exec as a WebSocket (GET with Upgrade: websocket) only",
        );
    };
    let Some((name, protocol)) = negotiate(&headers) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "requested protocol(s) are not supported; supports [{}]",
                PROTOCOLS.map(|(n, _)| n).join(" ")
            ),
        );
    };
    let shutdown = state.shutdown.clone();
    upgrade
        .protocols([name])
        .on_upgrade(move |socket| async move {
            let session = Session {
                protocol,
                streams,
                command,
                target,
                program,
            };
            session.run(socket, shutdown).await;
        })
}

impl Streams {
    /// Step 1: `1` is true, anything else false (`req.FormValue(..) == "1"`).
    fn parse(pairs: &[(String, String)]) -> Self {
        let flag = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .is_some_and(|(_, v)| v == "1")
        };
        let tty = flag("tty");
        // The kubelet's names are `input`, `output`, `error` (what kube-apiserver sends); the
        // API's `stdin`, `stdout`, `stderr` are taken too, for clients that call it directly.
        Self {
            stdin: flag("input") || flag("stdin"),
            stdout: flag("output") || flag("stdout"),
            stderr: (flag("error") || flag("stderr")) && !tty,
            tty,
        }
    }
}

/// The first of the client's subprotocols that is served (step 3).
fn negotiate(headers: &HeaderMap) -> Option<(&'static str, Protocol)> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find_map(|offered| PROTOCOLS.into_iter().find(|(name, _)| *name == offered))
}

/// One exec over an upgraded socket (steps 4 to 6).
struct Session {
    protocol: Protocol,
    streams: Streams,
    command: Vec<String>,
    target: ExecTarget,
    program: Arc<[OsString]>,
}

impl Session {
    async fn run(self, socket: WebSocket, shutdown: CancellationToken) {
        let (mut sink, mut incoming) = socket.split();
        // (4)
        let first = match self.streams {
            Streams { stdout: true, .. } => STDOUT,
            Streams { stderr: true, .. } => STDERR,
            _ => ERROR,
        };
        if sink.send(frame(first, &[])).await.is_err() {
            return;
        }
        if self.streams.tty {
            let status = internal_error(NO_TTY);
            if let Some(body) = status_body(self.protocol, &status) {
                let _ = sink.send(frame(ERROR, &body)).await;
            }
            close_normally(&mut sink).await;
            return;
        }
        // (5)
        let piped = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
        let mut child = match tokio::process::Command::new(&self.program[0])
            .args(&self.program[1..])
            .arg(self.target.pid.to_string())
            .arg(&self.target.spec)
            .arg("--")
            .args(&self.command)
            .env_clear()
            .stdin(piped(self.streams.stdin))
            .stdout(piped(self.streams.stdout))
            .stderr(piped(self.streams.stderr))
            .kill_on_drop(true)
            .spawn()
        {
            Ok(child) => child,
            Err(error) => {
                tracing::warn!(%error, "container-exec not started");
                let status = internal_error(&format!("cannot start container-exec: {error}"));
                if let Some(body) = status_body(self.protocol, &status) {
                    let _ = sink.send(frame(ERROR, &body)).await;
                }
                close_normally(&mut sink).await;
                return;
            }
        };
        let (tx, mut rx) = mpsc::channel::<Message>(16);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let mut stdin = child.stdin.take();
        let command = &self.command;
        let work = async {
            let (_, _, exit) = tokio::join!(
                pump(stdout, STDOUT, tx.clone()),
                pump(stderr, STDERR, tx.clone()),
                child.wait()
            );
            // (6)
            let status = match exit {
                Ok(exit) => exit_status(command, exit),
                Err(error) => internal_error(&format!("waiting for the command: {error}")),
            };
            if let Some(body) = status_body(self.protocol, &status) {
                let _ = tx.send(frame(ERROR, &body)).await;
            }
            drop(tx);
        };
        let writer = async {
            while let Some(message) = rx.recv().await {
                if sink.send(message).await.is_err() {
                    return;
                }
            }
            close_normally(&mut sink).await;
        };
        let protocol = self.protocol;
        let reader = async {
            while let Some(Ok(message)) = incoming.next().await {
                let Message::Binary(data) = message else {
                    if matches!(message, Message::Close(_)) {
                        break;
                    }
                    continue;
                };
                match (data.first(), data.get(1)) {
                    (Some(&STDIN), _) => {
                        if let Some(pipe) = stdin.as_mut()
                            && pipe.write_all(&data[1..]).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    (Some(&CLOSE), Some(&STDIN)) if protocol == Protocol::V5 => stdin = None,
                    _ => {}
                }
            }
        };
        tokio::select! {
            ((), ()) = async { tokio::join!(work, writer) } => {}
            // The client went away: the command is killed (`kill_on_drop`).
            () = reader => {}
            () = shutdown.cancelled() => {}
        }
    }
}

/// Copies `pipe` to channel `channel` until its end (or the socket's).
async fn pump(pipe: Option<impl AsyncRead + Unpin>, channel: u8, tx: mpsc::Sender<Message>) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let mut buf = vec![0; CHUNK_SIZE];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(frame(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A binary message on `channel`.
fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(Bytes::from(bytes))
}

fn status_json(status: &Status) -> Vec<u8> {
    serde_json::to_vec(status).unwrap_or_default()
}

/// What channel 3 carries for `status` under `protocol` (step 6): the JSON `Status`, or under
/// `channel.k8s.io` nothing on success and the message of a failure.
fn status_body(protocol: Protocol, status: &Status) -> Option<Vec<u8>> {
    match protocol {
        Protocol::V4 | Protocol::V5 => Some(status_json(status)),
        Protocol::V1 if status.status == "Success" => None,
        Protocol::V1 => Some(status.message.clone().unwrap_or_default().into_bytes()),
    }
}

/// The status of a command that exited (step 6). The message is the one `kubectl` prints,
/// with the container runtimes' `error executing command [..], exit code N`.
fn exit_status(command: &[String], exit: ExitStatus) -> Status {
    let code = exit
        .code()
        .or_else(|| exit.signal().map(|signal| 128 + signal))
        .unwrap_or(-1);
    if code == 0 {
        return Status {
            metadata: Empty {},
            status: "Success",
            message: None,
            reason: None,
            details: None,
            code: None,
        };
    }
    Status {
        metadata: Empty {},
        status: "Failure",
        message: Some(format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            command.join(" ")
        )),
        reason: Some("NonZeroExitCode"),
        details: Some(Details {
            causes: vec![Cause {
                reason: Some("ExitCode"),
                message: code.to_string(),
            }],
        }),
        code: None,
    }
}

/// `apierrors.NewInternalError(fmt.Errorf("error executing command in container: %v", ..))`.
fn internal_error(error: &str) -> Status {
    let error = format!("error executing command in container: {error}");
    Status {
        metadata: Empty {},
        status: "Failure",
        message: Some(format!("Internal error occurred: {error}")),
        reason: Some("InternalError"),
        details: Some(Details {
            causes: vec![Cause {
                reason: None,
                message: error,
            }],
        }),
        code: Some(500),
    }
}

/// Closes the socket with status 1000 (normal closure): client-go's WebSocket executor takes a
/// close without a status code (1005) for an error of the stream it was reading.
async fn close_normally(sink: &mut futures::stream::SplitSink<WebSocket, Message>) {
    let close = Message::Close(Some(CloseFrame {
        code: close_code::NORMAL,
        reason: "".into(),
    }));
    let _ = sink.send(close).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_1_turns_a_stream_on_and_a_tty_drops_stderr() {
        let streams = Streams::parse(&pairs(&[
            ("stdin", "true"),
            ("stdout", "1"),
            ("stderr", "1"),
        ]));
        assert_eq!(
            streams,
            Streams {
                stdin: false,
                stdout: true,
                stderr: true,
                tty: false
            }
        );
        let kubelet_names =
            Streams::parse(&pairs(&[("input", "1"), ("output", "1"), ("error", "1")]));
        assert!(kubelet_names.stdin && kubelet_names.stdout && kubelet_names.stderr);
        let tty = Streams::parse(&pairs(&[("stderr", "1"), ("tty", "1")]));
        assert!(tty.tty && !tty.stderr);
    }

    #[test]
    fn the_clients_first_served_subprotocol_wins() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "base64.channel.k8s.io, v4.channel.k8s.io, v5.channel.k8s.io"
                .parse()
                .unwrap(),
        );
        assert_eq!(
            negotiate(&headers),
            Some(("v4.channel.k8s.io", Protocol::V4))
        );
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "channel.k8s.io".parse().unwrap(),
        );
        assert_eq!(negotiate(&headers), Some(("channel.k8s.io", Protocol::V1)));
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "base64.channel.k8s.io".parse().unwrap(),
        );
        assert_eq!(negotiate(&headers), None);
    }

    #[test]
    fn the_old_channel_protocol_carries_only_a_failures_message() {
        let ok = exit_status(&[], ExitStatus::from_raw(0));
        assert_eq!(status_body(Protocol::V1, &ok), None);
        assert!(status_body(Protocol::V5, &ok).is_some());
        let command = ["false".to_owned()];
        let failed = exit_status(&command, ExitStatus::from_raw(1 << 8));
        assert_eq!(
            status_body(Protocol::V1, &failed).map(|b| String::from_utf8(b).unwrap()),
            Some(
                "command terminated with non-zero exit code: error executing command [false], \
                 exit code 1"
                    .to_owned()
            )
        );
    }

    #[test]
    fn statuses_are_the_kubelets_json() {
        let ok = exit_status(&[], ExitStatus::from_raw(0));
        assert_eq!(
            String::from_utf8(status_json(&ok)).unwrap(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        let command = ["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        let failed = exit_status(&command, ExitStatus::from_raw(3 << 8));
        assert_eq!(
            String::from_utf8(status_json(&failed)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
        let killed = exit_status(&command, ExitStatus::from_raw(9));
        assert_eq!(killed.details.unwrap().causes[0].message, "137");
        let internal = internal_error("boom");
        assert_eq!(
            String::from_utf8(status_json(&internal)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: boom","reason":"InternalError","details":{"causes":[{"message":"error executing command in container: boom"}]},"code":500}"#
        );
    }
}
