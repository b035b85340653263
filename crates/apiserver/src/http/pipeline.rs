//! The request pipeline: (1) classify, (2) authenticate, (3) take a seat under the in-flight
//! limit (429 `TooManyRequests` at once without one; health probes need none), (4) injected
//! latency, (5) 401 for an unknown user, else an injected fault, (6) authorize, (7) pay the
//! cost model's read or write (`cost.rs`; off by default), then dispatch (a
//! `get` or `list` answer becomes a `Table` when the client's `Accept` asks for one; a full
//! JSON answer is re-encoded as protobuf when it prefers that), the seat is given back, (8)
//! record.
//!
//! The seat is held until the response is ready: for a watch, while it is set up (upstream's
//! priority and fairness also admits a watch's initialization, not its whole life). Upstream
//! exempts `system:masters` from the limit; here every user is subject to it, since by default
//! every request is `system:admin`.
//!
//! Admin endpoints under `/nodelet/` skip steps 2–6 and are not recorded.

use std::sync::Arc;

use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::request_info::{RequestInfo, parse_query};
use super::response::{self, Body};
use super::{discovery, handlers};
use crate::access::auth::{Attributes, Decision, User};
use crate::control::{RequestRecord, Restart};
use crate::cost::Cost;
use crate::state::Shared;
use crate::status::ApiError;

/// How long `POST /nodelet/restart` waits before closing the listener and every connection,
/// so that its own answer is written first.
const RESTART_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// Handles one request end to end; never fails (errors become `Status` responses).
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: http::Request<Incoming>,
    token: CancellationToken,
) -> http::Response<Body> {
    let received = std::time::Instant::now();
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/nodelet/") {
        return admin(&shared, req.method(), rest, req.uri().query()).await;
    }
    // (1)
    let info = RequestInfo::parse(req.method(), &path, req.uri().query());
    let protobuf = info.verb != "watch" && response::prefers_protobuf(req.headers());
    let json_acceptable = response::accepts_json(req.headers());
    let table = matches!(info.verb.as_str(), "get" | "list")
        && info.resource_request
        && super::table::wants_table(req.headers());
    let span = tracing::debug_span!("request", verb = %info.verb, resource = %info.resource, namespace = info.namespace.as_deref(), name = info.name.as_deref());
    // (2)
    let user = shared.authenticator.authenticate(req.headers()).ok();
    // (3)
    let seat = (user.is_some() && !is_probe(&info.path)).then(|| shared.controls.take_seat());
    let resp = if matches!(seat, Some(None)) {
        response::error(&ApiError::too_many_requests())
    } else {
        // (4)
        let latency = shared.controls.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        match &user {
            // (5)
            None => response::error(&ApiError::unauthorized()),
            Some(user) => {
                if let Some(code) = shared.controls.take_fault(&info.verb, &info.resource) {
                    response::error(&ApiError::injected(code))
                } else {
                    // (6)
                    let decision = authorize(&shared, &info, user);
                    match decision {
                        Err(denied) => response::error(&forbidden(&info, &denied.0, &denied.1)),
                        // (7)
                        Ok(()) => {
                            if info.resource_request {
                                let watch_list = info
                                    .query
                                    .get("sendInitialEvents")
                                    .is_some_and(|v| v == "true");
                                let cost = Cost::of(
                                    &info.verb,
                                    info.subresource.as_deref(),
                                    watch_list,
                                    info.query.get("resourceVersion").map(String::as_str),
                                );
                                shared.controls.costs.pay(cost, &info.resource).await;
                            }
                            let req = crate::credentials::token_request::with_user(req, user);
                            match dispatch(&shared, &info, req, token).instrument(span).await {
                                Ok(r) => r,
                                Err(e) => response::error(&e),
                            }
                        }
                    }
                }
            }
        }
    };
    let resp = if table && resp.status() == http::StatusCode::OK {
        let include = info
            .query
            .get("includeObject")
            .map_or("Metadata", String::as_str);
        response::map_json(resp, |v| {
            super::table::to_table(&v, include, chrono::Utc::now())
        })
        .await
    } else {
        resp
    };
    let resp = if protobuf {
        response::to_protobuf(resp, json_acceptable).await
    } else {
        resp
    };
    drop(seat);
    // (8)
    shared.controls.record(RequestRecord {
        verb: info.verb.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        user: user.map(|u| u.name),
        status: resp.status().as_u16(),
        api_group: info.api_group.clone(),
        path: info.path.clone(),
        send_initial_events: info
            .query
            .get("sendInitialEvents")
            .is_some_and(|v| v == "true"),
        resource_version: info.query.get("resourceVersion").cloned(),
        received,
        answered: std::time::Instant::now(),
    });
    resp
}

/// (6) Whether `user` may make the request `info`; else the attributes refused and why.
fn authorize(
    shared: &Shared,
    info: &RequestInfo,
    user: &User,
) -> Result<(), Box<(Attributes, String)>> {
    let attrs = Attributes {
        user: user.clone(),
        verb: info.verb.clone(),
        resource_request: info.resource_request,
        api_group: info.api_group.clone(),
        api_version: info.api_version.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        field_selector: info.query.get("fieldSelector").cloned(),
        path: info.path.clone(),
    };
    // A `GET` upgrade of a pod's exec/attach/portforward also needs `create`,
    // as kube-apiserver 1.35+ checks (`AuthorizePodWebsocketUpgradeCreatePermission`).
    match shared.authorizer.authorize(&attrs) {
        Decision::Allow if needs_create_too(info) => {
            let create = Attributes {
                verb: "create".into(),
                ..attrs.clone()
            };
            match shared.authorizer.authorize(&create) {
                Decision::Allow => Ok(()),
                Decision::Deny(reason) => Err(Box::new((create, reason))),
            }
        }
        Decision::Allow => Ok(()),
        Decision::Deny(reason) => Err(Box::new((attrs, reason))),
    }
}

/// A `get` of `pods/exec`, `pods/attach` or `pods/portforward` (a WebSocket upgrade).
fn needs_create_too(info: &RequestInfo) -> bool {
    info.verb == "get"
        && info.api_group.is_empty()
        && info.resource == "pods"
        && matches!(
            info.subresource.as_deref(),
            Some("exec" | "attach" | "portforward")
        )
}

/// Health probes: exempt from the in-flight limit, as upstream's `probes` flow schema makes them.
fn is_probe(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"].iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|r| r.is_empty() || r.starts_with('/'))
    })
}

fn forbidden(info: &RequestInfo, attrs: &Attributes, reason: &str) -> ApiError {
    let why = if reason.is_empty() {
        attrs.to_string()
    } else {
        format!("{attrs}: {reason}")
    };
    if !info.resource_request {
        return ApiError::forbidden(None, "", &why);
    }
    let res = crate::resources::by_path_any(&info.api_group, &info.api_version, &info.resource)
        .map(|r| r.info());
    if res.is_none()
        && let Some(r) =
            crate::access::reviews::find(&info.api_group, &info.api_version, &info.resource)
    {
        // `tokenreviews.authentication.k8s.io is forbidden: ...`
        return ApiError::new(
            403,
            "Forbidden",
            format!("{}.{} is forbidden: {why}", r.plural, r.group),
        )
        .with_details(serde_json::json!({"group": r.group, "kind": r.plural}));
    }
    ApiError::forbidden(res, info.name.as_deref().unwrap_or(""), &why)
}

async fn dispatch(
    shared: &Arc<Shared>,
    info: &RequestInfo,
    req: http::Request<Incoming>,
    token: CancellationToken,
) -> Result<http::Response<Body>, ApiError> {
    if info.resource_request {
        return handlers::resource(shared, info, req, token).await;
    }
    if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
        return Err(ApiError::method_not_allowed());
    }
    if let Some(v) = non_resource(shared, &info.path) {
        return v.map(|v| response::json(200, &v));
    }
    discovery::non_resource(shared, &info.path)
}

/// Non-resource endpoints served beyond the core set: OIDC discovery for service-account
/// tokens and the OpenAPI v3 stubs kubectl needs. `None`: not one of ours.
fn non_resource(shared: &Arc<Shared>, path: &str) -> Option<Result<Value, ApiError>> {
    match path.trim_end_matches('/') {
        "/.well-known/openid-configuration" => {
            Some(Ok(shared.extras.signer.openid_configuration()))
        }
        "/openid/v1/jwks" => Some(Ok(shared.extras.signer.jwks())),
        p if p.starts_with("/openapi/v3") => Some(crate::openapi::v3(&shared.registry.served, p)),
        _ => None,
    }
}

/// `/nodelet/...` admin endpoints for tools without a `ServerHandle` (curl, other processes).
async fn admin(
    shared: &Arc<Shared>,
    method: &http::Method,
    rest: &str,
    query: Option<&str>,
) -> http::Response<Body> {
    let ok = || response::json(200, &json!({"status": "ok"}));
    match (method.as_str(), rest.trim_end_matches('/')) {
        ("POST", "restart") => match restart_options(query) {
            // The restart closes the connection carrying this request: it starts after
            // `RESTART_GRACE`, so that this answer is written first.
            Some(r) => {
                let shared = Arc::downgrade(shared);
                tokio::spawn(async move {
                    tokio::time::sleep(RESTART_GRACE).await;
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    shared.request_restart(r);
                });
                ok()
            }
            None => response::error(&ApiError::bad_request(
                "use POST /nodelet/restart?down={milliseconds}&notReady={milliseconds}&graphRebuild={milliseconds}",
            )),
        },
        ("POST", "close-watches") => {
            shared.close_watches();
            ok()
        }
        ("POST", "compact") => {
            shared.compact();
            ok()
        }
        (_, r) if r.starts_with("latency/") => {
            // /nodelet/latency/{milliseconds}
            match r.trim_start_matches("latency/").parse::<u64>() {
                Ok(ms) if method == http::Method::POST => {
                    shared
                        .controls
                        .set_latency(std::time::Duration::from_millis(ms));
                    ok()
                }
                _ => response::error(&ApiError::bad_request(
                    "use POST /nodelet/latency/{milliseconds}",
                )),
            }
        }
        ("POST", "bookmark") => {
            shared.bookmark_now();
            ok()
        }
        ("GET", "requests") => {
            let list: Vec<_> = shared
                .controls
                .requests()
                .into_iter()
                .map(|r| json!({"verb": r.verb, "resource": r.resource, "subresource": r.subresource, "namespace": r.namespace, "name": r.name, "user": r.user, "status": r.status}))
                .collect();
            response::json(200, &json!({"requests": list}))
        }
        ("DELETE", "requests") => {
            shared.controls.reset_requests();
            ok()
        }
        (_, r) if r.starts_with("fail/") => {
            // /nodelet/fail/{n}/{status}
            let mut parts = r.trim_start_matches("fail/").split('/');
            match (
                parts.next().and_then(|n| n.parse().ok()),
                parts.next().and_then(|s| s.parse().ok()),
            ) {
                (Some(n), Some(code)) if method == http::Method::POST => {
                    shared.controls.fail_next(n, code);
                    ok()
                }
                _ => response::error(&ApiError::bad_request(
                    "use POST /nodelet/fail/{n}/{status}",
                )),
            }
        }
        _ => response::error(&ApiError::page_not_found()),
    }
}

/// `down`, `notReady` and `graphRebuild` (milliseconds, each default 0) of
/// `POST /nodelet/restart`; `None` when one is not a number.
fn restart_options(query: Option<&str>) -> Option<Restart> {
    let q = query.map(parse_query).unwrap_or_default();
    let ms = |key: &str| match q.get(key).filter(|v| !v.is_empty()) {
        None => Some(std::time::Duration::ZERO),
        Some(v) => v.parse().ok().map(std::time::Duration::from_millis),
    };
    Some(Restart::new(ms("down")?, ms("notReady")?).graph_rebuild(ms("graphRebuild")?))
}
