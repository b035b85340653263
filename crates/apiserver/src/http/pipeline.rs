//! The request pipeline: (1) classify, (2) injected latency, (3) authenticate, (4) injected
//! fault, (5) authorize, (6) dispatch (a `get` or `list` answer becomes a `Table` when the
//! client's `Accept` asks for one; a full JSON answer is re-encoded as protobuf when it
//! prefers that), (7) record.
//!
//! Admin endpoints under `/nodelet/` skip steps 2–5 and are not recorded.

use std::sync::Arc;

use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::request_info::RequestInfo;
use super::response::{self, Body};
use super::{discovery, handlers};
use crate::auth::{Attributes, Decision};
use crate::control::RequestRecord;
use crate::resources;
use crate::state::Shared;
use crate::status::ApiError;

/// Handles one request end to end; never fails (errors become `Status` responses).
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: http::Request<Incoming>,
    token: CancellationToken,
) -> http::Response<Body> {
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/nodelet/") {
        return admin(&shared, req.method(), rest).await;
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
    let latency = shared.controls.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    // (3)
    let user = shared.authenticator.authenticate(req.headers()).ok();
    let resp = match &user {
        None => response::error(&ApiError::unauthorized()),
        Some(user) => {
            if let Some(code) = shared.controls.take_fault(&info.verb, &info.resource) {
                // (4)
                response::error(&ApiError::injected(code))
            } else {
                // (5)
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
                match shared.authorizer.authorize(&attrs) {
                    Decision::Deny(reason) => response::error(&forbidden(&info, &attrs, &reason)),
                    // (6)
                    Decision::Allow => {
                        let req = crate::token_request::with_user(req, user);
                        match dispatch(&shared, &info, req, token).instrument(span).await {
                            Ok(r) => r,
                            Err(e) => response::error(&e),
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
    // (7)
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
    });
    resp
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
    let res =
        resources::by_path(&info.api_group, &info.api_version, &info.resource).map(|r| r.info());
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
        p if p.starts_with("/openapi/v3") => Some(crate::openapi::v3(p)),
        _ => None,
    }
}

/// `/nodelet/...` admin endpoints for tools without a `ServerHandle` (curl, other processes).
async fn admin(shared: &Arc<Shared>, method: &http::Method, rest: &str) -> http::Response<Body> {
    let ok = || response::json(200, &json!({"status": "ok"}));
    match (method.as_str(), rest.trim_end_matches('/')) {
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
