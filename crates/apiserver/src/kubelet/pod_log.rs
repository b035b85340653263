//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`, proxied to the kubelet of the pod's node as
//! kube-apiserver does (`pkg/registry/core/pod/rest/log.go`, `pod.LogLocation`,
//! `NodeConnectionInfoGetter`, `LocationStreamer`):
//! 1. decode and validate the options (`log_options.rs`): 400 / 422;
//! 2. read the pod (404 `pods "p" not found`);
//! 3. pick the container: the one named (400 `container c is not valid for pod p`), else the
//!    only one, else 400 `a container name must be specified for pod p, choose one of: [a b]`
//!    (init, regular and ephemeral containers, in that order). The
//!    `kubectl.kubernetes.io/default-container` annotation is kubectl's, not the server's;
//! 4. a pod without `spec.nodeName`: 204 No Content, no body;
//! 5. read the Node (404 `nodes "n" not found`); its address is the first of
//!    `status.addresses` by type in kube-apiserver's default `--kubelet-preferred-address-types`
//!    order `Hostname, InternalDNS, InternalIP, ExternalDNS, ExternalIP` (none: 500
//!    `no preferred addresses found; known addresses: [{InternalIP 10.0.0.1}]`), its port
//!    `status.daemonEndpoints.kubeletEndpoint.Port`, or `--kubelet-port`'s default 10250 when
//!    that is 0 or absent;
//! 6. `GET https://addr:port/containerLogs/{ns}/{pod}/{container}?{options}` with the kubelet
//!    client (`kubelet_client.rs`): a failure is a 500 without reason,
//!    `Get "https://...": dial tcp ...: connect: connection refused`; an answer outside
//!    200..=206 becomes upstream's error for it (`GenericHttpResponseChecker`);
//! 7. answer 200 `text/plain` and stream the kubelet's body as it arrives: the answer ends
//!    when the kubelet's does, and the kubelet's connection closes when the client goes away
//!    or the server stops.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::kubelet::kubelet_client::join_host_port;
use crate::kubelet::log_options::LogOptions;
use crate::registry::Registry;
use crate::resources::{NODES, PODS};
use crate::state::Shared;
use crate::status::ApiError;

/// kube-apiserver's default `--kubelet-preferred-address-types`.
pub(crate) const PREFERRED_ADDRESS_TYPES: &[&str] = &[
    "Hostname",
    "InternalDNS",
    "InternalIP",
    "ExternalDNS",
    "ExternalIP",
];

/// kube-apiserver's default `--kubelet-port`, used when a Node reports none.
pub(crate) const DEFAULT_KUBELET_PORT: u16 = 10250;

/// How much of a kubelet's error answer becomes the message (upstream's `maxReadLength`).
pub(crate) const MAX_ERROR_BODY: usize = 50_000;

/// The answer to `pods/{name}/log`: 204 for an unscheduled pod, else the kubelet's stream.
pub(crate) enum LogAnswer {
    /// The pod has no node: 204 No Content.
    NoContent,
    /// 200 `text/plain` with this body.
    Stream(LogBody),
}

/// The streamed body (the same type as every response body of the HTTP layer).
pub(crate) type LogBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// The pod log request, steps 1–7 (see the module docs). `stop` ends the stream.
///
/// # Errors
/// The upstream `Status` of steps 1–6.
pub(crate) async fn get(
    shared: &Arc<Shared>,
    ns: &str,
    name: &str,
    query: &std::collections::HashMap<String, String>,
    stop: CancellationToken,
) -> Result<LogAnswer, ApiError> {
    // (1)
    let opts = LogOptions::decode(query)?;
    opts.validate(name)?;
    // (2)
    let pod = shared.registry.get(PODS, ns, name)?;
    // (3)
    let container = container(&pod, name, opts.container.as_deref())?;
    // (4)
    let Some(node) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return Ok(LogAnswer::NoContent);
    };
    // (5)
    let (host, port) = kubelet_address(&shared.registry, node)?;
    // (6)
    let query = opts.kubelet_query();
    let mut path = format!("/containerLogs/{ns}/{name}/{container}");
    if !query.is_empty() {
        path = format!("{path}?{query}");
    }
    let url = format!("https://{}{path}", join_host_port(&host, port));
    let (resp, guard) = shared
        .extras
        .kubelet
        .get(&host, port, &path, stop)
        .await
        .map_err(|e| unknown(format!("Get {url:?}: {e}")))?;
    let status = resp.status().as_u16();
    if (300..400).contains(&status)
        && let Some(location) = resp.headers().get(http::header::LOCATION)
    {
        let location = location.to_str().unwrap_or_default();
        let target = if location.starts_with('/') {
            format!("https://{}{location}", join_host_port(&host, port))
        } else {
            location.to_string()
        };
        return Err(unknown(format!("Get {target:?}: redirects forbidden")));
    }
    if !(200..=206).contains(&status) {
        let text = error_body(resp.into_body()).await?;
        return Err(match status {
            500 => internal(&text),
            400 => ApiError::bad_request(text),
            _ => generic_server_response(status, "pods/log", name, &text),
        });
    }
    // (7) The guard travels with the body: dropping it closes the kubelet's connection.
    let body = resp
        .into_body()
        .map_frame(move |frame| {
            let _connection = &guard;
            frame
        })
        .map_err(std::io::Error::other)
        .boxed_unsync();
    Ok(LogAnswer::Stream(body))
}

/// Step 3, upstream's `validateContainer`.
pub(crate) fn container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let names = |key: &str| -> Vec<&str> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("name").and_then(Value::as_str))
            .collect()
    };
    let regular = names("containers");
    let all: Vec<&str> = names("initContainers")
        .into_iter()
        .chain(regular.iter().copied())
        .chain(names("ephemeralContainers"))
        .collect();
    match asked {
        Some(c) if all.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match regular.as_slice() {
            [only] => Ok((*only).to_string()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all.join(" ")
            ))),
        },
    }
}

/// Step 5: the Node's preferred address and kubelet port.
pub(crate) fn kubelet_address(registry: &Registry, node: &str) -> Result<(String, u16), ApiError> {
    let node = registry.get(NODES, "", node)?;
    let addresses: Vec<(&str, &str)> = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| {
            let s = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("");
            (s("type"), s("address"))
        })
        .collect();
    let host = PREFERRED_ADDRESS_TYPES
        .iter()
        .find_map(|t| addresses.iter().find(|(ty, _)| ty == t))
        .map(|(_, addr)| (*addr).to_string())
        .ok_or_else(|| {
            let known: Vec<String> = addresses
                .iter()
                .map(|(t, a)| format!("{{{t} {a}}}"))
                .collect();
            unknown(format!(
                "no preferred addresses found; known addresses: [{}]",
                known.join(" ")
            ))
        })?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_i64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    Ok((host, port))
}

/// At most [`MAX_ERROR_BODY`] bytes of a kubelet's error answer, as text.
pub(crate) async fn error_body(mut body: hyper::body::Incoming) -> Result<String, ApiError> {
    let mut buf: Vec<u8> = Vec::new();
    while buf.len() < MAX_ERROR_BODY {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Err(internal(&e.to_string())),
        }
    }
    buf.truncate(MAX_ERROR_BODY);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// An error that is no `Status` upstream (a Go `error` the handler returned): code 500, no
/// reason, the error's text.
pub(crate) fn unknown(message: String) -> ApiError {
    ApiError::new(500, "", message)
}

/// 500 `InternalError`: `Internal error occurred: <why>`, `why` in `details.causes`.
fn internal(why: &str) -> ApiError {
    ApiError::new(
        500,
        "InternalError",
        format!("Internal error occurred: {why}"),
    )
    .with_details(json!({ "causes": [{ "message": why }] }))
}

/// apimachinery's `NewGenericServerResponse` for a backend's answer with HTTP `code` (no
/// verb) about `resource` object `name`: the reason and message upstream pairs with the code,
/// then ` ( pods/log name)`.
fn generic_server_response(code: u16, resource: &str, name: &str, server: &str) -> ApiError {
    let fixed = |reason: &'static str, m: &str| (reason, m.to_string());
    let (reason, message) = match code {
        409 => fixed("Conflict", "the server reported a conflict"),
        404 => fixed(
            "NotFound",
            "the server could not find the requested resource",
        ),
        401 => fixed(
            "Unauthorized",
            "the server has asked for the client to provide credentials",
        ),
        403 => fixed("Forbidden", server),
        406 if server.is_empty() || server == "unknown" => fixed(
            "NotAcceptable",
            "the server was unable to respond with a content type that the client supports",
        ),
        406 => fixed("NotAcceptable", server),
        415 => fixed("UnsupportedMediaType", server),
        405 => fixed(
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        422 => fixed(
            "Invalid",
            "the server rejected our request due to an error in our request",
        ),
        503 => fixed(
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => fixed(
            "Timeout",
            "the server was unable to return a response in the time allotted, but may still be processing the request",
        ),
        429 => fixed(
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        ),
        c if c >= 500 => (
            "InternalError",
            format!(
                "an error on the server ({server:?}) has prevented the request from succeeding"
            ),
        ),
        c => (
            "",
            format!(
                "the server responded with the status code {c} but did not return more information"
            ),
        ),
    };
    let mut details = json!({ "kind": resource });
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    ApiError::new(code, reason, format!("{message} ( {resource} {name})")).with_details(details)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn the_only_container_is_chosen_and_several_must_be_named_from_the_full_list() {
        let one = pod(json!({"containers": [{"name": "app"}]}));
        assert_eq!(container(&one, "p", None).unwrap(), "app");
        let many = pod(json!({
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b"}],
            "ephemeralContainers": [{"name": "debug"}],
        }));
        let e = container(&many, "p", None).unwrap_err();
        assert_eq!((e.code(), e.reason()), (400, "BadRequest"));
        assert_eq!(
            e.message(),
            "a container name must be specified for pod p, choose one of: [init a b debug]"
        );
        assert_eq!(container(&many, "p", Some("init")).unwrap(), "init");
        assert_eq!(
            container(&many, "p", Some("nope")).unwrap_err().message(),
            "container nope is not valid for pod p"
        );
        let none = pod(json!({"containers": []}));
        assert_eq!(
            container(&none, "p", None).unwrap_err().message(),
            "a container name must be specified for pod p"
        );
    }

    #[test]
    fn a_node_without_a_kubelet_port_is_dialled_on_kube_apiservers_default_10250() {
        use crate::registry::WriteOptions;
        use crate::store::Store;
        let reg = Registry::new(Store::new(100, 16));
        let node = |name: &str, status: Value| {
            reg.create(
                NODES,
                "",
                json!({"metadata": {"name": name}, "status": status}),
                WriteOptions::default(),
            )
            .unwrap();
        };
        let addresses = json!([{"type": "InternalIP", "address": "10.0.0.1"}]);
        node("absent", json!({"addresses": addresses}));
        node(
            "zero",
            json!({"addresses": addresses, "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}),
        );
        node(
            "set",
            json!({"addresses": addresses, "daemonEndpoints": {"kubeletEndpoint": {"Port": 10255}}}),
        );
        let port = |n: &str| kubelet_address(&reg, n).unwrap().1;
        assert_eq!(
            (port("absent"), port("zero"), port("set")),
            (10250, 10250, 10255)
        );
        node("bare", json!({}));
        assert_eq!(
            kubelet_address(&reg, "bare").unwrap_err().message(),
            "no preferred addresses found; known addresses: []"
        );
    }

    #[test]
    fn a_kubelet_answer_becomes_upstreams_generic_error_naming_pods_log() {
        let e = generic_server_response(404, "pods/log", "p", "404 page not found");
        assert_eq!(
            (e.code(), e.reason(), e.message()),
            (
                404,
                "NotFound",
                "the server could not find the requested resource ( pods/log p)"
            )
        );
        let e = generic_server_response(403, "pods/log", "p", "Forbidden (user=x)");
        assert_eq!(e.message(), "Forbidden (user=x) ( pods/log p)");
        let e = generic_server_response(502, "pods/log", "p", "bad gateway");
        assert_eq!(
            (e.reason(), e.message()),
            (
                "InternalError",
                "an error on the server (\"bad gateway\") has prevented the request from succeeding ( pods/log p)"
            )
        );
        assert_eq!(
            e.to_status()["details"],
            json!({"kind": "pods/log", "name": "p"})
        );
    }
}
