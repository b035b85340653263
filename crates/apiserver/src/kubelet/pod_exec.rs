//! `GET`/`POST /api/v1/namespaces/{ns}/pods/{name}/exec` (and `attach`), proxied to the
//! kubelet of the pod's node as an HTTP/1.1 upgrade, as kube-apiserver's upgrade-aware proxy
//! does (`pkg/registry/core/pod/rest/subresources.go` `ExecREST`/`AttachREST`,
//! `pkg/registry/core/pod/strategy.go` `streamLocation`):
//! 1. decode the options from the query: `command` (repeated, in order), `container`,
//!    `stdin`, `stdout`, `stderr`, `tty`. Like kube-apiserver, this server does not check
//!    that there is a command or a stream: the kubelet does, and its refusal is relayed (5);
//! 2. read the pod (404 `pods "p" not found`) and pick the container as `pods/log` does
//!    (400 `container c is not valid for pod p`, 400 `a container name must be specified for
//!    pod p, choose one of: [a b]`);
//! 3. a pod without `spec.nodeName`: 400 `pod p does not have a host assigned`; else the
//!    Node's preferred address and kubelet port as for `pods/log`;
//! 4. a request that is no upgrade (`Connection: Upgrade` and an `Upgrade` header): 400
//!    `Upgrade request required`;
//! 5. `{method} https://addr:port/{exec|attach}/{ns}/{pod}/{container}?{query}` with the
//!    client's `Upgrade`, `Connection` and `Sec-WebSocket-*` headers, the query as upstream's
//!    `streamParams` encodes it (`command=..` repeated, `error=1`, `input=1`, `output=1`,
//!    `tty=1`, sorted by key). A failure to connect is a 500 without reason, `error dialing
//!    backend: dial tcp ...`; an answer other than 101 is relayed as it came (status,
//!    `Content-Type`, at most 50,000 bytes of body), as the upgrade-aware proxy copies it;
//! 6. on 101, answer the client 101 with the kubelet's `Upgrade`, `Connection`,
//!    `Sec-WebSocket-Accept` and `Sec-WebSocket-Protocol`, then copy bytes both ways between
//!    the two upgraded connections until either side closes or the server stops.
//!
//! Authorization happens before this (`http/pipeline.rs`): verb `create` for `POST`; `get`
//! and then also `create` for `GET`, as kube-apiserver 1.35+ does for WebSocket upgrades
//! (`AuthorizePodWebsocketUpgradeCreatePermission`).
//!
//! Upstream difference: kube-apiserver terminates a `v5.channel.k8s.io` WebSocket itself and
//! speaks SPDY to the kubelet (`TranslateStreamCloseWebsocketRequests`); this server passes
//! the WebSocket upgrade through to the kubelet unchanged.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::kubelet::log_options::query_escape;
use crate::kubelet::pod_log::{
    LogBody, MAX_ERROR_BODY, container, error_body, kubelet_address, unknown,
};
use crate::resources::PODS;
use crate::state::Shared;
use crate::status::ApiError;

/// Which streaming subresource is asked for; its name is the kubelet's path prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// `pods/exec`: runs `command` in the container.
    Exec,
    /// `pods/attach`: attaches to the container's main process (no command).
    Attach,
}

/// The request headers that travel to the kubelet.
const FORWARDED: &[&str] = &[
    "upgrade",
    "connection",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
];

/// The kubelet's 101 headers that travel back to the client.
const RETURNED: &[&str] = &[
    "upgrade",
    "connection",
    "sec-websocket-accept",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
];

/// The decoded `PodExecOptions` / `PodAttachOptions` (step 1).
#[derive(Debug, Default, PartialEq, Eq)]
struct StreamOptions {
    container: Option<String>,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

impl StreamKind {
    /// The subresource's name (and the kubelet's path segment).
    pub(crate) fn name(self) -> &'static str {
        match self {
            StreamKind::Exec => "exec",
            StreamKind::Attach => "attach",
        }
    }
}

impl StreamOptions {
    /// Step 1 from the query's pairs, in order (a repeated key keeps every value).
    fn decode(kind: StreamKind, pairs: &[(String, String)]) -> StreamOptions {
        let last = |k: &str| {
            pairs
                .iter()
                .rev()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        let flag = |k: &str| last(k).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
        let command = match kind {
            StreamKind::Exec => pairs
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect(),
            StreamKind::Attach => Vec::new(),
        };
        StreamOptions {
            container: last("container")
                .filter(|c| !c.is_empty())
                .map(String::from),
            command,
            stdin: flag("stdin"),
            stdout: flag("stdout"),
            stderr: flag("stderr"),
            tty: flag("tty"),
        }
    }

    /// Upstream's `streamParams` encoded as Go's `url.Values.Encode` does (keys sorted).
    fn kubelet_query(&self) -> String {
        let mut parts: Vec<String> = self
            .command
            .iter()
            .map(|c| format!("command={}", query_escape(c)))
            .collect();
        for (on, key) in [
            (self.stderr, "error"),
            (self.stdin, "input"),
            (self.stdout, "output"),
            (self.tty, "tty"),
        ] {
            if on {
                parts.push(format!("{key}=1"));
            }
        }
        parts.join("&")
    }
}

/// Steps 1–6 (see the module docs) for `req`, whose query's pairs are `pairs`. `stop` ends
/// the spliced connection when the server stops.
///
/// # Errors
/// The upstream `Status` of steps 2–5.
pub(crate) async fn connect(
    shared: &Arc<Shared>,
    kind: StreamKind,
    ns: &str,
    name: &str,
    pairs: &[(String, String)],
    req: http::Request<hyper::body::Incoming>,
    stop: CancellationToken,
) -> Result<http::Response<LogBody>, ApiError> {
    // (1)
    let opts = StreamOptions::decode(kind, pairs);
    // (2)
    let pod = shared.registry.get(PODS, ns, name)?;
    let container = container(&pod, name, opts.container.as_deref())?;
    // (3)
    let Some(node) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    };
    let (host, port) = kubelet_address(&shared.registry, node)?;
    // (4)
    if !is_upgrade(req.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    // (5)
    let query = opts.kubelet_query();
    let mut path = format!("/{}/{ns}/{name}/{container}", kind.name());
    if !query.is_empty() {
        path = format!("{path}?{query}");
    }
    let mut headers = http::HeaderMap::new();
    for key in FORWARDED {
        for value in req.headers().get_all(*key) {
            headers.append(*key, value.clone());
        }
    }
    let (resp, guard) = shared
        .extras
        .kubelet
        .upgrade(&host, port, req.method(), &path, &headers, stop.clone())
        .await
        .map_err(|e| unknown(format!("error dialing backend: {e}")))?;
    if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        return relay(resp).await;
    }
    // (6)
    let mut answer = http::Response::builder().status(http::StatusCode::SWITCHING_PROTOCOLS);
    for key in RETURNED {
        for value in resp.headers().get_all(*key) {
            answer = answer.header(*key, value.clone());
        }
    }
    let answer = answer.body(empty()).map_err(|e| unknown(e.to_string()))?;
    let span = tracing::debug_span!("stream", subresource = kind.name(), pod.namespace = %ns, pod.name = %name);
    tokio::spawn(tracing::Instrument::instrument(
        splice(req, resp, guard, stop),
        span,
    ));
    Ok(answer)
}

/// `Connection` names `upgrade` and an `Upgrade` header is present (Go's
/// `httpstream.IsUpgradeRequest`).
fn is_upgrade(headers: &http::HeaderMap) -> bool {
    let connection_upgrade = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && headers.contains_key(http::header::UPGRADE)
}

/// Step 5's refusal: the kubelet's status, content type and (capped) body, as they came.
async fn relay(
    resp: http::Response<hyper::body::Incoming>,
) -> Result<http::Response<LogBody>, ApiError> {
    let status = resp.status();
    let content_type = resp.headers().get(http::header::CONTENT_TYPE).cloned();
    let text = error_body(resp.into_body()).await?;
    let mut answer = http::Response::builder().status(status);
    if let Some(ct) = content_type {
        answer = answer.header(http::header::CONTENT_TYPE, ct);
    }
    let mut body = text.into_bytes();
    body.truncate(MAX_ERROR_BODY);
    answer
        .body(
            http_body_util::Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .map_err(|e| unknown(e.to_string()))
}

/// Step 6: waits for both upgrades, then copies both ways until either side closes or `stop`
/// is cancelled. Failures end the session (the client sees its connection close).
async fn splice(
    client: http::Request<hyper::body::Incoming>,
    kubelet: http::Response<hyper::body::Incoming>,
    guard: tokio_util::sync::DropGuard,
    stop: CancellationToken,
) {
    let upgrades = async {
        let kubelet = hyper::upgrade::on(kubelet).await?;
        let client = hyper::upgrade::on(client).await?;
        Ok::<_, hyper::Error>((client, kubelet))
    };
    let upgraded = tokio::select! {
        u = upgrades => u,
        () = stop.cancelled() => return,
    };
    // The kubelet's connection now lives in its upgraded half.
    drop(guard);
    let (client, kubelet) = match upgraded {
        Ok(pair) => pair,
        Err(error) => {
            tracing::debug!(%error, "upgrade failed");
            return;
        }
    };
    let mut client = hyper_util::rt::TokioIo::new(client);
    let mut kubelet = hyper_util::rt::TokioIo::new(kubelet);
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut client, &mut kubelet) => match r {
            Ok((up, down)) => tracing::debug!(bytes.to_kubelet = up, bytes.to_client = down, "stream closed"),
            Err(error) => tracing::debug!(%error, "stream failed"),
        },
        () = stop.cancelled() => {}
    }
}

/// An empty body of the HTTP layer's type.
fn empty() -> LogBody {
    http_body_util::Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn the_kubelet_query_repeats_command_in_order_and_renames_the_streams_as_upstream() {
        let o = StreamOptions::decode(
            StreamKind::Exec,
            &pairs(&[
                ("command", "sh"),
                ("stdout", "true"),
                ("command", "-c"),
                ("stdin", "1"),
                ("command", "echo a/b"),
                ("stderr", "false"),
                ("container", "app"),
            ]),
        );
        assert_eq!(o.container.as_deref(), Some("app"));
        assert_eq!(
            o.kubelet_query(),
            "command=sh&command=-c&command=echo+a%2Fb&input=1&output=1"
        );
    }

    #[test]
    fn attach_forwards_no_command() {
        let o = StreamOptions::decode(
            StreamKind::Attach,
            &pairs(&[("command", "sh"), ("stdout", "1"), ("tty", "true")]),
        );
        assert_eq!(o.kubelet_query(), "output=1&tty=1");
    }

    #[test]
    fn an_upgrade_needs_connection_upgrade_and_an_upgrade_header() {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("websocket"),
        );
        assert!(!is_upgrade(&h));
        h.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(is_upgrade(&h));
        h.remove(http::header::UPGRADE);
        assert!(!is_upgrade(&h));
    }
}
