//! Conformance tests: nodelet-apiserver driven by the real kube client over real HTTP.
//! One harness; modules by topic.

// Create, get, list, update, patch, delete and the exact error texts.
mod crud;
// The cost model: read and write latencies, server-wide concurrency.
mod costs;
// Discovery, /version, namespace lifecycle, leases, patch flavours, event recorders, history window.
mod discovery;
// Fault injection, latency, listener stop/restart, request counts, direct store access.
mod faults;
// metadata.managedFields: managers from the User-Agent or fieldManager, fieldsV1.
mod managed_fields;
// limit/continue pagination and list resourceVersion semantics.
mod pagination;
// Authenticator/Authorizer seams: 401, 403 texts, recorded users.
mod pipeline;
// Failures on demand: restart (refused, not ready, history forgotten), GOAWAY, 429, no watch-list.
mod restart;
// Pod defaulting, status subresource, generation and graceful deletion.
mod pods;
// Default ServiceAccounts, kube-root-ca.crt and ServiceAccount admission (kube-api-access).
mod service_accounts;
// Label and field selectors on list and watch.
mod selectors;
// Validation and defaulting with upstream messages; immutability; dryRun.
mod validation;
// Watch replay, resume, 410 and relist, bookmarks, streaming lists, reflectors, timeouts.
mod watch;

// The fixtures shared with tests/capabilities: PATIENCE, pod and ConfigMap builders.
#[path = "../common/mod.rs"]
mod common;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use nodelet_apiserver::{ApiServer, Config};

pub(crate) use common::{PATIENCE, cm, cm_json, pod};

/// A started server and an admin client for it.
pub(crate) async fn start() -> (ApiServer, kube::Client) {
    start_with(Config::default()).await
}

/// A started server with `config` and an admin client for it.
pub(crate) async fn start_with(config: Config) -> (ApiServer, kube::Client) {
    let server = ApiServer::start(config).await.expect("server starts");
    let uri: http::Uri = server.url().parse().expect("valid url");
    let client = kube::Client::try_from(kube::Config::new(uri)).expect("client");
    (server, client)
}

/// ConfigMaps in `default`.
pub(crate) fn cms(client: &kube::Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), "default")
}

/// The API status behind a kube error.
pub(crate) fn status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A raw GET (for responses kube would not surface): status code and JSON body.
pub(crate) async fn raw_get(url: &str) -> (u16, serde_json::Value) {
    let uri: http::Uri = url.parse().expect("url");
    let host = uri.authority().expect("authority").to_string();
    let path = uri
        .path_and_query()
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut stream = tokio::net::TcpStream::connect(&host)
        .await
        .expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let json = body.find('{').map(|i| &body[i..]).unwrap_or("");
    let json = json.rfind('}').map(|j| &json[..=j]).unwrap_or("");
    (
        code,
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}
