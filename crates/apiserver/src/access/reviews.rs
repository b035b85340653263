//! The review APIs, answered and never stored (`pkg/registry/authentication/tokenreview`,
//! `pkg/registry/authorization/*subjectaccessreview`, `selfsubjectreview`):
//! - TokenReview: `spec.token` through the server's token authentication — its own minted
//!   and service-account tokens always, plus whatever a configured authenticator vouches for
//!   ([`Authenticator::authenticate_token`](crate::Authenticator::authenticate_token));
//!   an unknown token is `status.error: invalid bearer token` (upstream's bearer-token text);
//! - SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview: the attributes of
//!   `spec` through the server's own [`Authorizer`](crate::Authorizer): `status.allowed`, and
//!   a denial's reason (the Node authorizer's texts; empty for everyone else, as RBAC gives
//!   none when no rule matches). `status.denied` stays false: neither the Node authorizer nor
//!   RBAC ever denies outright, they only have no opinion;
//! - SelfSubjectReview (`kubectl auth whoami`): the caller's user name and groups.
//!
//! Every answer is 201 with the object as decoded (unknown fields dropped) and its status.

use k8s_openapi::api::authentication::v1 as authn;
use k8s_openapi::api::authorization::v1 as authz;
use serde_json::{Value, json};

use crate::access::auth::{Attributes, Decision, User};
use crate::access::token_auth::TokenInfo;
use crate::config::Authentication;
use crate::objects::typed::decode_as;
use crate::state::Shared;
use crate::status::{ApiError, FieldError};

/// A review resource, for routing and discovery.
#[derive(Debug)]
pub(crate) struct ReviewResource {
    /// API group.
    pub(crate) group: &'static str,
    /// API version.
    pub(crate) version: &'static str,
    /// Plural resource name.
    pub(crate) plural: &'static str,
    /// Singular name (discovery).
    pub(crate) singular: &'static str,
    /// Object kind.
    pub(crate) kind: &'static str,
    /// Whether the path carries a namespace (LocalSubjectAccessReview).
    pub(crate) namespaced: bool,
}

const AUTHN: &str = "authentication.k8s.io";
const AUTHZ: &str = "authorization.k8s.io";

/// The review resources served, in upstream's discovery order within each group.
pub(crate) static REVIEWS: &[ReviewResource] = &[
    review(
        AUTHN,
        "selfsubjectreviews",
        "selfsubjectreview",
        "SelfSubjectReview",
    ),
    review(AUTHN, "tokenreviews", "tokenreview", "TokenReview"),
    ReviewResource {
        namespaced: true,
        ..review(
            AUTHZ,
            "localsubjectaccessreviews",
            "localsubjectaccessreview",
            "LocalSubjectAccessReview",
        )
    },
    review(
        AUTHZ,
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
    ),
    review(
        AUTHZ,
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
    ),
];

/// A cluster-scoped review resource of `group/v1`.
const fn review(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
) -> ReviewResource {
    ReviewResource {
        group,
        version: "v1",
        plural,
        singular,
        kind,
        namespaced: false,
    }
}

/// The review resource at `group/version/plural`, if any.
pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<&'static ReviewResource> {
    REVIEWS
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The groups with review resources, for `/apis`.
pub(crate) fn groups() -> [(&'static str, &'static str); 2] {
    [(AUTHN, "v1"), (AUTHZ, "v1")]
}

/// Answers a `create` of review `r` (the path's namespace `ns`, the caller `user`, the decoded
/// `body`): the object with its status.
///
/// # Errors
/// 400 for a body that does not decode or a missing token, 422 for an invalid access review,
/// 400 for a LocalSubjectAccessReview whose namespace differs from the path's.
pub(crate) fn create(
    shared: &Shared,
    r: &ReviewResource,
    ns: Option<&str>,
    user: &User,
    body: Value,
) -> Result<Value, ApiError> {
    match r.kind {
        "TokenReview" => token_review(shared, &body),
        "SelfSubjectReview" => Ok(json!({
            "kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {},
            "status": {"userInfo": {"username": user.name, "groups": user.groups}},
        })),
        "SubjectAccessReview" => {
            let mut sar: authz::SubjectAccessReview = decode_as(r.kind, r.version, &body)?;
            // Cluster-scoped: the handler clears a namespace the object names.
            sar.metadata.namespace = None;
            let mut errs = subject_errors(&sar.spec);
            errs.extend(empty_metadata(&sar.metadata, false));
            check(&errs)?;
            let status = decide(
                shared,
                &subject(&sar.spec),
                &sar.spec.resource_attributes,
                &sar.spec.non_resource_attributes,
            );
            Ok(answer(r, json!({}), to_value(&sar.spec), status))
        }
        "LocalSubjectAccessReview" => {
            let mut sar: authz::LocalSubjectAccessReview = decode_as(r.kind, r.version, &body)?;
            let ns = ns.unwrap_or("");
            // The handler's namespace check: the path's namespace is the object's.
            match sar.metadata.namespace.as_deref() {
                None | Some("") => sar.metadata.namespace = Some(ns.to_string()),
                Some(n) if n == ns => {}
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
            let mut errs = subject_errors(&sar.spec);
            errs.extend(empty_metadata(&sar.metadata, true));
            if let Some(ra) = &sar.spec.resource_attributes {
                let n = ra.namespace.as_deref().unwrap_or("");
                if n != ns {
                    errs.push(FieldError::invalid(
                        "spec.resourceAttributes.namespace",
                        n,
                        "must match metadata.namespace",
                    ));
                }
            }
            if let Some(nra) = &sar.spec.non_resource_attributes {
                errs.push(FieldError::invalid_raw(
                    "spec.nonResourceAttributes",
                    go_json(nra),
                    "disallowed on this kind of request",
                ));
            }
            check(&errs)?;
            let status = decide(
                shared,
                &subject(&sar.spec),
                &sar.spec.resource_attributes,
                &sar.spec.non_resource_attributes,
            );
            Ok(answer(
                r,
                json!({"namespace": ns}),
                to_value(&sar.spec),
                status,
            ))
        }
        "SelfSubjectAccessReview" => {
            let mut sar: authz::SelfSubjectAccessReview = decode_as(r.kind, r.version, &body)?;
            sar.metadata.namespace = None;
            let spec = &sar.spec;
            let mut errs =
                attribute_errors(&spec.resource_attributes, &spec.non_resource_attributes);
            errs.extend(empty_metadata(&sar.metadata, false));
            check(&errs)?;
            let status = decide(
                shared,
                user,
                &spec.resource_attributes,
                &spec.non_resource_attributes,
            );
            Ok(answer(r, json!({}), to_value(spec), status))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// TokenReview: 400 without a token, else the review of it.
fn token_review(shared: &Shared, body: &Value) -> Result<Value, ApiError> {
    let tr: authn::TokenReview = decode_as("TokenReview", "v1", body)?;
    let token = tr.spec.token.as_str();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences = tr.spec.audiences.clone().unwrap_or_default();
    let reviewed: Option<TokenInfo> = shared.tokens.review(token, &audiences).ok().or_else(|| {
        match &shared.config.authenticator {
            Authentication::Given(a) => a
                .authenticate_token(token)
                .ok()
                .and_then(|u| shared.tokens.audience_agnostic(u, &audiences).ok()),
            _ => None,
        }
    });
    let status = match reviewed {
        Some(info) => {
            let mut user = json!({"username": info.user.name});
            if let Some(uid) = info.uid.filter(|u| !u.is_empty()) {
                user["uid"] = json!(uid);
            }
            if !info.user.groups.is_empty() {
                user["groups"] = json!(info.user.groups);
            }
            if !info.extra.is_empty() {
                user["extra"] = json!(info.extra);
            }
            let mut status = json!({"authenticated": true, "user": user});
            if !info.audiences.is_empty() {
                status["audiences"] = json!(info.audiences);
            }
            status
        }
        // Go's `omitempty` leaves `authenticated: false` out but never an empty struct.
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    Ok(json!({
        "kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "spec": to_value(&tr.spec),
        "status": status,
    }))
}

/// The object answered: kind, metadata, spec as decoded, and status.
fn answer(r: &ReviewResource, metadata: Value, spec: Value, status: Value) -> Value {
    json!({
        "kind": r.kind, "apiVersion": format!("{}/{}", r.group, r.version),
        "metadata": metadata, "spec": spec, "status": status,
    })
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_else(|_| json!({}))
}

/// 422 `.authorization.k8s.io "" is invalid: ...` when there are errors.
fn check(errs: &[FieldError]) -> Result<(), ApiError> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_without_kind(AUTHZ, errs))
    }
}

/// `ValidateSubjectAccessReviewSpec`.
fn subject_errors(spec: &authz::SubjectAccessReviewSpec) -> Vec<FieldError> {
    let mut errs = attribute_errors(&spec.resource_attributes, &spec.non_resource_attributes);
    let user = spec.user.as_deref().unwrap_or("");
    if user.is_empty() && spec.groups.as_ref().is_none_or(Vec::is_empty) {
        errs.push(FieldError::invalid(
            "spec.user",
            user,
            "at least one of user or group must be specified",
        ));
    }
    errs
}

/// Exactly one of `resourceAttributes` and `nonResourceAttributes`.
fn attribute_errors(
    ra: &Option<authz::ResourceAttributes>,
    nra: &Option<authz::NonResourceAttributes>,
) -> Vec<FieldError> {
    match (ra, nra) {
        (Some(_), Some(n)) => vec![FieldError::invalid_raw(
            "spec.nonResourceAttributes",
            go_json(n),
            "cannot be specified in combination with resourceAttributes",
        )],
        (None, None) => vec![FieldError::invalid_raw(
            "spec.resourceAttributes",
            "null".into(),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
        _ => Vec::new(),
    }
}

/// `metadata: Invalid value: {...}: must be empty` (`except for namespace` for a local review)
/// for metadata with anything in it but managed fields.
fn empty_metadata(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    local: bool,
) -> Option<FieldError> {
    let mut rest = meta.clone();
    rest.managed_fields = None;
    // Go's protobuf always carries the (non-pointer) generation: 0 is unset.
    rest.generation = rest.generation.filter(|g| *g != 0);
    let shown = to_value(&rest);
    if local {
        rest.namespace = None;
    }
    if rest == Default::default() {
        return None;
    }
    let detail = if local {
        "must be empty except for namespace"
    } else {
        "must be empty"
    };
    Some(FieldError::invalid_raw(
        "metadata",
        shown.to_string(),
        detail,
    ))
}

/// An internal Go struct as `json.Marshal` prints it (no JSON tags: Go field names).
fn go_json(n: &authz::NonResourceAttributes) -> String {
    json!({"Path": n.path.as_deref().unwrap_or(""), "Verb": n.verb.as_deref().unwrap_or("")})
        .to_string()
}

/// The user a SubjectAccessReview asks about.
fn subject(spec: &authz::SubjectAccessReviewSpec) -> User {
    User {
        name: spec.user.clone().unwrap_or_default(),
        groups: spec.groups.clone().unwrap_or_default(),
    }
}

/// Runs the server's authorizer on the attributes (`AuthorizationAttributesFrom`): the status.
fn decide(
    shared: &Shared,
    user: &User,
    ra: &Option<authz::ResourceAttributes>,
    nra: &Option<authz::NonResourceAttributes>,
) -> Value {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let attrs = match (ra, nra) {
        (Some(ra), _) => Attributes {
            user: user.clone(),
            verb: s(&ra.verb),
            resource_request: true,
            api_group: s(&ra.group),
            api_version: ra
                .version
                .clone()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "*".into()),
            resource: s(&ra.resource),
            subresource: ra.subresource.clone().filter(|v| !v.is_empty()),
            namespace: ra.namespace.clone().filter(|v| !v.is_empty()),
            name: ra.name.clone().filter(|v| !v.is_empty()),
            field_selector: ra.field_selector.as_ref().and_then(field_selector),
            path: String::new(),
        },
        (None, nra) => Attributes {
            user: user.clone(),
            verb: nra.as_ref().map(|n| s(&n.verb)).unwrap_or_default(),
            resource_request: false,
            api_group: String::new(),
            api_version: String::new(),
            resource: String::new(),
            subresource: None,
            namespace: None,
            name: None,
            field_selector: None,
            path: nra.as_ref().map(|n| s(&n.path)).unwrap_or_default(),
        },
    };
    match shared.authorizer.authorize(&attrs) {
        Decision::Allow => json!({"allowed": true}),
        Decision::Deny(reason) if reason.is_empty() => json!({"allowed": false}),
        Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
    }
}

/// A field selector as the raw text the authorizers read: `rawSelector`, or the
/// `In`/`NotIn` requirements of one value as `key=value` / `key!=value`.
fn field_selector(fs: &authz::FieldSelectorAttributes) -> Option<String> {
    if let Some(raw) = fs.raw_selector.as_ref().filter(|r| !r.is_empty()) {
        return Some(raw.clone());
    }
    let terms: Vec<String> = fs
        .requirements
        .iter()
        .flatten()
        .filter_map(|r| {
            let [value] = r.values.as_deref()? else {
                return None;
            };
            match r.operator.as_str() {
                "In" => Some(format!("{}={value}", r.key)),
                "NotIn" => Some(format!("{}!={value}", r.key)),
                _ => None,
            }
        })
        .collect();
    (!terms.is_empty()).then(|| terms.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singular_names_drop_the_final_s() {
        let r = find(AUTHZ, "v1", "subjectaccessreviews").unwrap();
        assert_eq!(r.singular, "subjectaccessreview");
        assert!(find(AUTHZ, "v1", "tokenreviews").is_none());
    }

    #[test]
    fn an_access_review_needs_exactly_one_kind_of_attributes_and_a_subject() {
        let spec = authz::SubjectAccessReviewSpec::default();
        let e = ApiError::invalid_without_kind(AUTHZ, &subject_errors(&spec));
        assert_eq!(e.code(), 422);
        assert_eq!(
            e.message(),
            ".authorization.k8s.io \"\" is invalid: [spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: \"\": at least one of user or group must be specified]"
        );
    }

    #[test]
    fn requirements_become_the_raw_selector_the_node_authorizer_reads() {
        let fs: authz::FieldSelectorAttributes = serde_json::from_value(json!({
            "requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["n1"]}]
        }))
        .unwrap();
        assert_eq!(field_selector(&fs).as_deref(), Some("spec.nodeName=n1"));
    }
}
