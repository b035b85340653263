//! Resource handlers: maps a classified request to a registry verb, parsing query parameters
//! and bodies, and routes subresources (`status`, `token`, ...).

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::list_options::list_options;
use super::request_info::RequestInfo;
use super::response::{self, Body};
use super::watch;
use crate::registry::{
    DeleteOptions, FieldManager, PatchKind, WriteOptions, manager_or_user_agent, parse_rv,
};
use crate::resources::ResourceId;
use crate::state::Shared;
use crate::status::ApiError;

/// Largest request body accepted (as upstream: 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

pub(crate) async fn resource(
    shared: &Arc<Shared>,
    info: &RequestInfo,
    req: http::Request<Incoming>,
    token: CancellationToken,
) -> Result<http::Response<Body>, ApiError> {
    if let Some(r) =
        crate::access::reviews::find(&info.api_group, &info.api_version, &info.resource)
    {
        return review(shared, info, r, req).await;
    }
    let res = shared
        .registry
        .served
        .by_path(&info.api_group, &info.api_version, &info.resource)
        .ok_or_else(ApiError::page_not_found)?;
    let r = res.info();
    // Scope checks: a namespaced resource needs a namespace except for cross-namespace list/watch.
    let cross_ns = matches!(info.verb.as_str(), "list" | "watch");
    if (r.namespaced && info.namespace.is_none() && !cross_ns)
        || (!r.namespaced && info.namespace.is_some())
    {
        return Err(ApiError::page_not_found());
    }
    if let Some(sub) = info.subresource.as_deref() {
        if !r.has_subresource(sub) {
            return Err(ApiError::page_not_found());
        }
        return subresource(shared, info, res, sub, req, token).await;
    }
    let ns = info.namespace.clone().unwrap_or_default();
    let name = info.name.clone().unwrap_or_default();
    let reg = &shared.registry;
    let partial = response::wants_partial_metadata(req.headers());
    match (
        info.verb.as_str(),
        info.name.is_some() && info.verb != "list" && info.verb != "watch",
    ) {
        ("get", true) => {
            // `resourceVersion=X` means "not older than X": served from the latest state,
            // and a version the server has not reached is 504, as upstream.
            if let Some(rv) = info.query.get("resourceVersion").filter(|r| !r.is_empty()) {
                let wanted = parse_rv(rv)?;
                let current = reg.store.inner.lock().rv;
                if wanted > current {
                    return Err(ApiError::too_large(wanted, current));
                }
            }
            let obj = reg.get(res, &ns, &name)?;
            if partial {
                return Ok(response::json(200, &response::partial_metadata(&obj)));
            }
            Ok(response::json(200, &obj))
        }
        ("list", false) => {
            let opts = list_options(info, res)?;
            let list = reg.list(res, info.namespace.as_deref(), &opts)?;
            if partial {
                return Ok(response::json(200, &response::partial_metadata_list(&list)));
            }
            Ok(response::json(200, &list))
        }
        ("watch", false) => watch::serve(shared, info, res, partial, token),
        ("create", false) => {
            let opts = write_options(info, &req)?;
            let body = read_json(req).await?;
            Ok(response::json(201, &reg.create(res, &ns, body, opts)?))
        }
        ("update", true) => {
            let opts = write_options(info, &req)?;
            let body = read_json(req).await?;
            let (v, created) = reg.update(res, &ns, &name, None, body, opts)?;
            Ok(response::json(if created { 201 } else { 200 }, &v))
        }
        ("patch", true) => patch(shared, info, res, None, req).await,
        ("delete", true) => {
            let opts = delete_options(info, req).await?;
            Ok(response::json(
                200,
                &reg.delete(res, &ns, &name, &opts)?.into_value(),
            ))
        }
        ("deletecollection", false) if r.plural != "namespaces" => {
            let list_opts = list_options(info, res)?;
            let opts = delete_options(info, req).await?;
            Ok(response::json(
                200,
                &reg.delete_collection(res, info.namespace.as_deref(), &list_opts, &opts)?,
            ))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// A review (`reviews.rs`): `create` at the collection path only (in a namespace for a
/// LocalSubjectAccessReview); nothing is stored.
async fn review(
    shared: &Arc<Shared>,
    info: &RequestInfo,
    r: &crate::access::reviews::ReviewResource,
    req: http::Request<Incoming>,
) -> Result<http::Response<Body>, ApiError> {
    if info.name.is_some() || info.namespace.is_some() != r.namespaced {
        return Err(ApiError::page_not_found());
    }
    if info.verb != "create" {
        return Err(ApiError::method_not_allowed());
    }
    let user = req
        .extensions()
        .get::<crate::access::auth::User>()
        .cloned()
        .unwrap_or_else(crate::access::auth::User::admin);
    let body = read_json(req).await?;
    let answer = crate::access::reviews::create(shared, r, info.namespace.as_deref(), &user, body)?;
    Ok(response::json(201, &answer))
}

/// Subresource routing point: `status` and `ephemeralcontainers` (`ephemeral.rs`) are
/// served here, `token` (TokenRequest) by
/// `token_request.rs`, `log` (proxied to the kubelet) by `pod_log.rs`, `exec` and `attach`
/// (upgrades proxied to the kubelet) by `pod_exec.rs`.
async fn subresource(
    shared: &Arc<Shared>,
    info: &RequestInfo,
    res: ResourceId,
    sub: &str,
    req: http::Request<Incoming>,
    token: CancellationToken,
) -> Result<http::Response<Body>, ApiError> {
    let ns = info.namespace.clone().unwrap_or_default();
    let name = info.name.clone().unwrap_or_default();
    let reg = &shared.registry;
    match (sub, info.verb.as_str()) {
        ("status" | "ephemeralcontainers", "get") => {
            Ok(response::json(200, &*reg.get(res, &ns, &name)?))
        }
        ("status" | "finalize" | "ephemeralcontainers", "update") => {
            let opts = write_options(info, &req)?;
            let body = read_json(req).await?;
            Ok(response::json(
                200,
                &reg.update(res, &ns, &name, Some(sub), body, opts)?.0,
            ))
        }
        ("status" | "ephemeralcontainers", "patch") => {
            patch(shared, info, res, Some(sub), req).await
        }
        ("binding", "create") => {
            let opts = write_options(info, &req)?;
            let body = read_json(req).await?;
            let node = body
                .pointer("/target/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            reg.bind(&ns, &name, &node, opts)?;
            Ok(response::json(
                201,
                &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        ("log", "get") => {
            match crate::kubelet::pod_log::get(shared, &ns, &name, &info.query, token).await? {
                crate::kubelet::pod_log::LogAnswer::NoContent => Ok(response::empty(204)),
                crate::kubelet::pod_log::LogAnswer::Stream(body) => {
                    Ok(response::stream("text/plain", body))
                }
            }
        }
        (sub @ ("exec" | "attach"), "get" | "create") => {
            let kind = if sub == "exec" {
                crate::kubelet::pod_exec::StreamKind::Exec
            } else {
                crate::kubelet::pod_exec::StreamKind::Attach
            };
            let pairs = super::request_info::query_pairs(req.uri().query().unwrap_or(""));
            crate::kubelet::pod_exec::connect(shared, kind, &ns, &name, &pairs, req, token).await
        }
        ("token", "create") => {
            let user = req.extensions().get::<crate::access::auth::User>().cloned();
            let body = read_json(req).await?;
            let tr =
                crate::credentials::token_request::create(shared, &ns, &name, user.as_ref(), body)?;
            Ok(response::json(201, &tr))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

async fn patch(
    shared: &Arc<Shared>,
    info: &RequestInfo,
    res: ResourceId,
    sub: Option<&str>,
    req: http::Request<Incoming>,
) -> Result<http::Response<Body>, ApiError> {
    let ct = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let kind = match ct.as_str() {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/json-patch+json" => PatchKind::Json,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => PatchKind::Apply,
        other => return Err(ApiError::unsupported_patch_type(other)),
    };
    if kind == PatchKind::Apply && info.query.get("fieldManager").is_none_or(String::is_empty) {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let mut opts = write_options(info, &req)?;
    let bytes = read_body(req).await?;
    let body: Value = if kind == PatchKind::Apply {
        serde_json::from_slice(&bytes)
            .or_else(|_| crate::objects::yaml::yaml_from_slice(&bytes))
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
    };
    if kind == PatchKind::Apply
        && let Some(m) = &mut opts.manager
    {
        m.applied = Some(body.clone());
    }
    let ns = info.namespace.clone().unwrap_or_default();
    let name = info.name.clone().unwrap_or_default();
    let (v, created) = shared
        .registry
        .patch(res, &ns, &name, sub, kind, &body, opts)?;
    Ok(response::json(if created { 201 } else { 200 }, &v))
}

async fn read_body(req: http::Request<Incoming>) -> Result<Bytes, ApiError> {
    Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ApiError::too_large_body(MAX_BODY)
            } else {
                ApiError::bad_request(format!("reading the request body: {e}"))
            }
        })
}

async fn read_json(req: http::Request<Incoming>) -> Result<Value, ApiError> {
    // JSON (and YAML, its superset) and Kubernetes protobuf bodies are understood; CBOR gets
    // the upstream 415.
    let ct = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if ct == crate::protobuf::MEDIA_TYPE {
        let bytes = read_body(req).await?;
        return Ok(crate::protobuf::decode(&bytes)?);
    }
    if !(ct.is_empty() || ct.ends_with("json") || ct.ends_with("yaml")) {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {ct:?})"
            ),
        ));
    }
    let bytes = read_body(req).await?;
    serde_json::from_slice(&bytes)
        .or_else(|_| crate::objects::yaml::yaml_from_slice(&bytes))
        .map_err(|e| {
            ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
        })
}

fn dry_run(info: &RequestInfo) -> Result<bool, ApiError> {
    match info.query.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dryRun value {other:?}: supported values: \"All\""
        ))),
    }
}

/// The write options of a request: `dryRun`, `fieldValidation`, and the writer's node name
/// (NodeRestriction) from the authenticated user.
fn write_options<B>(info: &RequestInfo, req: &http::Request<B>) -> Result<WriteOptions, ApiError> {
    match info.query.get("fieldValidation").map(String::as_str) {
        None | Some("" | "Ignore" | "Warn" | "Strict") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Warn\", \"Strict\""
            )));
        }
    }
    let node = req
        .extensions()
        .get::<crate::access::auth::User>()
        .and_then(|u| u.node_name())
        .map(String::from);
    let user_agent = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let field_manager = info.query.get("fieldManager").map(String::as_str);
    Ok(WriteOptions {
        dry_run: dry_run(info)?,
        node,
        manager: Some(FieldManager {
            name: manager_or_user_agent(field_manager, user_agent),
            applied: None,
        }),
    })
}

async fn delete_options(
    info: &RequestInfo,
    req: http::Request<Incoming>,
) -> Result<DeleteOptions, ApiError> {
    let q = &info.query;
    let mut opts = DeleteOptions {
        dry_run: dry_run(info)?,
        ..Default::default()
    };
    if let Some(g) = q.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
        opts.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    let bytes = read_body(req).await?;
    if !bytes.iter().all(u8::is_ascii_whitespace) {
        let body: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
        })?;
        if let Some(g) = body.get("gracePeriodSeconds").and_then(Value::as_i64) {
            opts.grace_period_seconds = Some(g);
        }
        if let Some(p) = body.get("preconditions") {
            opts.precondition_uid = p.get("uid").and_then(Value::as_str).map(String::from);
            opts.precondition_rv = p
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(String::from);
        }
        if let Some(d) = body.get("dryRun").and_then(Value::as_array) {
            opts.dry_run |= d.iter().any(|v| v == "All");
        }
        if let Some(p) = body.get("propagationPolicy").and_then(Value::as_str)
            && !matches!(p, "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: {p:?}"
            )));
        }
    }
    Ok(opts)
}
