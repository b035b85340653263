//! `ApiError`: a failed request as the real API server reports it (a `metav1.Status`), with the
//! constructors for every reason this server returns and the exact upstream message texts.

use serde_json::{Value, json};

use crate::resources::ResourceInfo;

/// One field-level cause of an `Invalid` error (`details.causes[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable reason, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable message, e.g. `Invalid value: "a b": ...`.
    pub message: String,
    /// Field path, e.g. `data[a b]`.
    pub field: String,
}

/// A request the server refused, carrying everything the `Status` body needs.
///
/// `Display` is the upstream `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    code: u16,
    reason: &'static str,
    message: String,
    details: Option<Value>,
    retry_after: Option<u32>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

/// `StatusDetails`: `name` and `group` are `omitempty` upstream, so an empty one is left out.
fn details(res: &ResourceInfo, name: &str) -> Value {
    let mut d = json!({ "kind": res.plural });
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    if !res.group.is_empty() {
        d["group"] = json!(res.group);
    }
    d
}

impl ApiError {
    /// HTTP status code (`Status.code`).
    pub fn code(&self) -> u16 {
        self.code
    }

    /// `Status.reason`, e.g. `NotFound`.
    pub fn reason(&self) -> &str {
        self.reason
    }

    /// `Status.message`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Seconds a client should wait (429/503), also sent as `Retry-After`.
    pub fn retry_after(&self) -> Option<u32> {
        self.retry_after
    }

    /// `details.causes` of an `Invalid` error.
    pub fn causes(&self) -> Vec<Cause> {
        let list = self
            .details
            .as_ref()
            .and_then(|d| d.get("causes"))
            .and_then(Value::as_array);
        list.into_iter()
            .flatten()
            .map(|c| {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                Cause {
                    reason: s("reason"),
                    message: s("message"),
                    field: s("field"),
                }
            })
            .collect()
    }

    /// The `Status` object sent to clients.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if self.reason.is_empty()
            && let Some(m) = s.as_object_mut()
        {
            m.remove("reason");
        }
        s
    }

    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 404 `configmaps "x" not found`.
    pub(crate) fn not_found(res: &ResourceInfo, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.qualified()),
        );
        e.details = Some(details(res, name));
        e
    }

    /// 404 for a path that names nothing served.
    pub(crate) fn page_not_found() -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        e.details = Some(json!({}));
        e
    }

    /// 409 `configmaps "x" already exists`.
    pub(crate) fn already_exists(res: &ResourceInfo, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", res.qualified()),
        );
        e.details = Some(details(res, name));
        e
    }

    /// 409 Conflict: `Operation cannot be fulfilled on configmaps "x": <why>`.
    pub(crate) fn conflict(res: &ResourceInfo, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified()
            ),
        );
        e.details = Some(details(res, name));
        e
    }

    /// The stale-resourceVersion conflict.
    pub(crate) fn modified(res: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Kind "x" is invalid: <errors>` with `details.causes`.
    pub(crate) fn invalid(res: &ResourceInfo, name: &str, errors: &[FieldError]) -> Self {
        Self::invalid_kind(&res.qualified_kind(), res.kind, res.group, name, errors)
    }

    /// 422 for invalid list/watch options (`ListOptions.meta.k8s.io "" is invalid: ...`).
    pub(crate) fn invalid_list_options(errors: &[FieldError]) -> Self {
        Self::invalid_kind(
            "ListOptions.meta.k8s.io",
            "ListOptions",
            "meta.k8s.io",
            "",
            errors,
        )
    }

    fn invalid_kind(
        qualified_kind: &str,
        kind: &str,
        group: &str,
        name: &str,
        errors: &[FieldError],
    ) -> Self {
        let list = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            format!(
                "[{}]",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {list}"),
        );
        let causes: Vec<Value> = errors
            .iter()
            .map(
                |fe| json!({ "reason": fe.kind.reason(), "message": fe.body(), "field": fe.field }),
            )
            .collect();
        let mut d = json!({ "causes": causes });
        if !kind.is_empty() {
            d["kind"] = json!(kind);
        }
        if !name.is_empty() {
            d["name"] = json!(name);
        }
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        e.details = Some(d);
        e
    }

    /// 422 for invalid options of a core-group request, e.g. `PodLogOptions "p" is invalid:
    /// tailLines: Invalid value: -1: must be greater than or equal to 0`.
    pub(crate) fn invalid_options(kind: &str, name: &str, errors: &[FieldError]) -> Self {
        Self::invalid_kind(kind, kind, "", name, errors)
    }

    /// 422 for an invalid object of `group` whose kind upstream's decoder left empty (the
    /// review kinds): `.authorization.k8s.io "" is invalid: ...`.
    pub(crate) fn invalid_without_kind(group: &str, errors: &[FieldError]) -> Self {
        Self::invalid_kind(&format!(".{group}"), "", group, "", errors)
    }

    /// The same error with `details` set.
    pub(crate) fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400 BadRequest with a free-form message.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 for a verb a path does not accept.
    pub(crate) fn method_not_allowed() -> Self {
        let mut e = Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        e.details = Some(json!({}));
        e
    }

    /// 410 `too old resource version: X (Y)`.
    pub(crate) fn too_old(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// 410 for a continue token whose snapshot has been compacted.
    pub(crate) fn continue_expired() -> Self {
        Self::new(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can \
             start a new list without the continue parameter, or use the continue token in this \
             response to retrieve the remainder of the results. Continuing with the provided token \
             results in an inconsistent list - objects that were created, modified, or deleted \
             between the time the first chunk was returned and now may show up in the list.",
        )
    }

    /// 504 for a list at a resourceVersion the server has not reached.
    pub(crate) fn too_large(requested: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
        );
        e.details = Some(json!({
            "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }],
            "retryAfterSeconds": 1
        }));
        e.retry_after = Some(1);
        e
    }

    /// 403 as the authorizer reports it.
    pub(crate) fn forbidden(res: Option<&ResourceInfo>, name: &str, why: &str) -> Self {
        let message = match res {
            Some(r) if !name.is_empty() => {
                format!("{} \"{name}\" is forbidden: {why}", r.qualified())
            }
            Some(r) => format!("{} is forbidden: {why}", r.qualified()),
            None => format!("forbidden: {why}"),
        };
        let mut e = Self::new(403, "Forbidden", message);
        e.details = Some(match res {
            Some(r) => details(r, name),
            None => json!({}),
        });
        e
    }

    /// 401.
    pub(crate) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 415 for a PATCH content type the server does not know.
    pub(crate) fn unsupported_patch_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, \
                 application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    /// 413 for an over-long body.
    pub(crate) fn too_large_body(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 429 as API Priority and Fairness answers a request it has no seat for (also sent as
    /// `Retry-After: 1`).
    pub(crate) fn too_many_requests() -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        );
        e.retry_after = Some(1);
        e.details = Some(json!({ "retryAfterSeconds": 1 }));
        e
    }

    /// An injected fault (`ServerHandle::fail_next`) with the reason a real server pairs with `code`.
    pub(crate) fn injected(code: u16) -> Self {
        let (reason, message) = match code {
            429 => return Self::too_many_requests(),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request".to_string(),
            ),
            500 => (
                "InternalError",
                "Internal error occurred: injected fault".to_string(),
            ),
            504 => (
                "Timeout",
                "the server was unable to return a response in the time allotted".to_string(),
            ),
            409 => ("Conflict", "injected conflict".to_string()),
            404 => (
                "NotFound",
                "the server could not find the requested resource".to_string(),
            ),
            403 => ("Forbidden", "forbidden: injected fault".to_string()),
            401 => ("Unauthorized", "Unauthorized".to_string()),
            400 => ("BadRequest", "injected fault".to_string()),
            _ => ("InternalError", format!("injected fault (HTTP {code})")),
        };
        let mut e = Self::new(code, reason, message);
        if code == 429 || code == 503 {
            e.retry_after = Some(1);
            e.details = Some(json!({ "retryAfterSeconds": 1 }));
        }
        e
    }
}

/// The kind of a field error, mirroring apimachinery's `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldErrorKind {
    Invalid,
    Required,
    Forbidden,
    TooLong,
    Duplicate,
    NotSupported,
    NotFound,
}

impl FieldErrorKind {
    fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::NotFound => "FieldValueNotFound",
        }
    }
}

/// One validation failure: `<field>: <Type>: <detail>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub(crate) kind: FieldErrorKind,
    pub(crate) field: String,
    /// The offending value, already rendered (`"a b"`), when the message shows one.
    pub(crate) value: Option<String>,
    pub(crate) detail: String,
}

impl FieldError {
    pub(crate) fn invalid(
        field: impl Into<String>,
        value: &str,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind: FieldErrorKind::Invalid,
            field: field.into(),
            value: Some(format!("{value:?}")),
            detail: detail.into(),
        }
    }

    pub(crate) fn invalid_raw(
        field: impl Into<String>,
        rendered: String,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind: FieldErrorKind::Invalid,
            field: field.into(),
            value: Some(rendered),
            detail: detail.into(),
        }
    }

    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            kind: FieldErrorKind::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            kind: FieldErrorKind::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    pub(crate) fn duplicate(field: impl Into<String>, value: &str) -> Self {
        FieldError {
            kind: FieldErrorKind::Duplicate,
            field: field.into(),
            value: Some(format!("{value:?}")),
            detail: String::new(),
        }
    }

    pub(crate) fn not_found(field: impl Into<String>, value: &str) -> Self {
        FieldError {
            kind: FieldErrorKind::NotFound,
            field: field.into(),
            value: Some(format!("{value:?}")),
            detail: String::new(),
        }
    }

    pub(crate) fn too_long(field: impl Into<String>, max: usize) -> Self {
        FieldError {
            kind: FieldErrorKind::TooLong,
            field: field.into(),
            value: None,
            detail: format!("may not be more than {max} bytes"),
        }
    }

    pub(crate) fn not_supported(field: impl Into<String>, value: &str, allowed: &[&str]) -> Self {
        let list = allowed
            .iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        FieldError {
            kind: FieldErrorKind::NotSupported,
            field: field.into(),
            value: Some(format!("{value:?}")),
            detail: format!("supported values: {list}"),
        }
    }

    /// The message without the field path (`details.causes[].message`).
    fn body(&self) -> String {
        let head = match self.kind {
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::NotFound => "Not found",
        };
        let mut s = head.to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CONFIGMAPS;

    #[test]
    fn not_found_names_the_resource_and_object() {
        let e = ApiError::not_found(CONFIGMAPS.info(), "x");
        assert_eq!(e.message(), "configmaps \"x\" not found");
        assert_eq!(
            e.to_status()["details"],
            json!({"name": "x", "kind": "configmaps"})
        );
    }

    #[test]
    fn invalid_lists_several_errors_in_brackets() {
        let errs = [
            FieldError::required("a", ""),
            FieldError::forbidden("b", "no"),
        ];
        let e = ApiError::invalid(CONFIGMAPS.info(), "x", &errs);
        assert_eq!(
            e.message(),
            "ConfigMap \"x\" is invalid: [a: Required value, b: Forbidden: no]"
        );
    }
}
