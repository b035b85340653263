//! TokenRequest (`POST .../serviceaccounts/{sa}/token`): service-account JWTs signed with an
//! ES256 key generated at start, their verification, and the OIDC discovery documents
//! (`/.well-known/openid-configuration`, `/openid/v1/jwks`).
//!
//! # Token format
//! Header `{"alg":"ES256","kid":<kid>}`; claims `iss`, `sub`
//! (`system:serviceaccount:<ns>:<sa>`), `aud` (the requested audiences, default the issuer),
//! `exp`, `iat`, `nbf`, `jti`, and `kubernetes.io` with `namespace`, `serviceaccount {name, uid}`
//! and, for a token bound to a pod, `pod {name, uid}` (plus `node {name, uid}` when the pod is
//! bound to an existing Node). The `kid` is the base64url SHA-256 of the public key point.
//! Upstream signs with the key given on its command line (usually RS256); the format is the same.

use serde_json::{Value, json};

use crate::access::auth::User;
use crate::config::Authorization;
use crate::registry::{Registry, now};
use crate::resources::{NODES, PODS, ResourceInfo, SECRETS, SERVICEACCOUNTS};
use crate::state::Shared;
use crate::status::{ApiError, FieldError};

/// Default `spec.expirationSeconds`, as upstream.
const DEFAULT_EXPIRATION: i64 = 3600;
/// Shortest lifetime a TokenRequest may ask for (10 minutes).
const MIN_EXPIRATION: i64 = 600;

/// TokenRequest's type facts, for the upstream `Invalid` message shape.
static TOKEN_REQUEST: ResourceInfo = ResourceInfo {
    group: "authentication.k8s.io",
    version: "v1",
    plural: "tokenrequests",
    singular: "tokenrequest",
    kind: "TokenRequest",
    namespaced: true,
    short_names: &[],
    subresources: &[],
    create_on_update: false,
    return_deleted_object: false,
    feature_gate: None,
};

/// Makes the authenticated user visible to the token handler (NodeRestriction needs it).
pub(crate) fn with_user<B>(mut req: http::Request<B>, user: &User) -> http::Request<B> {
    req.extensions_mut().insert(user.clone());
    req
}

/// Serves `POST /api/v1/namespaces/{ns}/serviceaccounts/{sa}/token` for `user` (the
/// NodeRestriction checks apply when it is a node).
pub(crate) fn create(
    shared: &Shared,
    ns: &str,
    sa: &str,
    user: Option<&User>,
    body: Value,
) -> Result<Value, ApiError> {
    // (1) the body is a TokenRequest
    if let Some(k) = body.get("kind").and_then(Value::as_str)
        && k != "TokenRequest"
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind (TokenRequest)"
        )));
    }
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    // (2) validation
    let expiration = expiration_of(&spec)?;
    // (3) the service account, and the bound object, exist
    let reg = &shared.registry;
    let account = reg.get(SERVICEACCOUNTS, ns, sa)?;
    let uid = |v: &Value| v.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let mut k8s = json!({
        "namespace": ns,
        "serviceaccount": {"name": sa, "uid": uid(&account)},
    });
    let bound = spec.get("boundObjectRef").filter(|b| !b.is_null());
    if let Some(node) = user
        .and_then(User::node_name)
        .filter(|_| matches!(shared.config.authorizer, Authorization::Node))
    {
        node_restriction(shared, ns, sa, node, bound)?;
    }
    if let Some(b) = bound {
        bind(reg, ns, sa, b, &mut k8s)?;
    }
    // (4) sign
    let issuer = &shared.config.service_account_issuer;
    let audiences = match spec.get("audiences").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!([issuer]),
    };
    let iat = chrono::Utc::now().timestamp();
    let exp = iat + expiration;
    let claims = json!({
        "iss": issuer,
        "sub": format!("system:serviceaccount:{ns}:{sa}"),
        "aud": audiences,
        "iat": iat, "nbf": iat, "exp": exp,
        "jti": uuid::Uuid::new_v4().to_string(),
        "kubernetes.io": k8s,
    });
    let token = shared.extras.signer.sign(&claims)?;
    let expires = chrono::DateTime::from_timestamp(exp, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    let mut out_spec = json!({"audiences": audiences, "expirationSeconds": expiration});
    if let Some(b) = bound {
        out_spec["boundObjectRef"] = b.clone();
    }
    Ok(json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": sa, "namespace": ns, "creationTimestamp": now()},
        "spec": out_spec,
        "status": {"token": token, "expirationTimestamp": expires},
    }))
}

/// (2) `spec.expirationSeconds`, 1 h by default, validated as upstream does.
fn expiration_of(spec: &Value) -> Result<i64, ApiError> {
    let expiration = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION);
    let mut errs = Vec::new();
    if expiration < MIN_EXPIRATION {
        errs.push(FieldError::invalid_raw(
            "spec.expirationSeconds",
            expiration.to_string(),
            "may not specify a duration less than 10 minutes",
        ));
    } else if expiration > 1 << 32 {
        errs.push(FieldError::invalid_raw(
            "spec.expirationSeconds",
            expiration.to_string(),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid(&TOKEN_REQUEST, "", &errs));
    }
    Ok(expiration)
}

/// (3) The object the token is bound to (`boundObjectRef` `b`) exists, with the UID asked
/// for; its claims go into `k8s` (a pod's also name its node).
fn bind(reg: &Registry, ns: &str, sa: &str, b: &Value, k8s: &mut Value) -> Result<(), ApiError> {
    let uid = |v: &Value| v.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let kind = b.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = b.get("name").and_then(Value::as_str).unwrap_or("");
    let res = match kind {
        "Pod" => PODS,
        "Secret" => SECRETS,
        "Node" => NODES,
        other => {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for serviceaccount {sa:?} to object of kind {other:?}"
            )));
        }
    };
    let obj = reg.get(res, if kind == "Node" { "" } else { ns }, name)?;
    if let Some(want) = b
        .get("uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        && Some(want) != obj.pointer("/metadata/uid").and_then(Value::as_str)
    {
        return Err(ApiError::new(
            409,
            "Conflict",
            format!(
                "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ));
    }
    let claim = json!({"name": name, "uid": uid(&obj)});
    match kind {
        "Pod" => {
            let pod_sa = obj
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("default");
            if pod_sa != sa {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {sa:?} to pod running with different serviceaccount name."
                )));
            }
            k8s["pod"] = claim;
            if let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str)
                && let Ok(n) = reg.get(NODES, "", node)
            {
                k8s["node"] = json!({"name": node, "uid": uid(&n)});
            }
        }
        "Secret" => k8s["secret"] = claim,
        _ => k8s["node"] = claim,
    }
    Ok(())
}

/// NodeRestriction on a node's TokenRequest: it must be bound (by name and uid) to a pod that
/// is scheduled on the node. Upstream's audience restriction (the audiences a pod's projected
/// token volumes name) is not applied.
fn node_restriction(
    shared: &Shared,
    ns: &str,
    sa: &str,
    node: &str,
    bound: Option<&Value>,
) -> Result<(), ApiError> {
    let forbid = |why: &str| ApiError::forbidden(Some(SERVICEACCOUNTS.info()), sa, why);
    let s = |k: &str| {
        bound
            .and_then(|b| b.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    if bound.is_none() || s("apiVersion") != "v1" || s("kind") != "Pod" || s("name").is_empty() {
        return Err(forbid("node requested token not bound to a pod"));
    }
    if s("uid").is_empty() {
        return Err(forbid(
            "node requested token with a pod binding without a uid",
        ));
    }
    let pod = shared.registry.get(PODS, ns, s("name"))?;
    if pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(s("uid")) {
        return Err(forbid(&format!(
            "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
            s("uid")
        )));
    }
    if pod.pointer("/spec/nodeName").and_then(Value::as_str) != Some(node) {
        return Err(forbid(
            "node requested token bound to a pod scheduled on a different node",
        ));
    }
    Ok(())
}
