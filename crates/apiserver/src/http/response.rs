//! Response construction: JSON bodies, `Status` errors and the streaming body type.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use serde_json::Value;

use crate::status::ApiError;

/// The body type of every response (full or streamed).
pub(crate) type Body = UnsyncBoxBody<Bytes, std::io::Error>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A JSON response with `code`.
pub(crate) fn json(code: u16, v: &Value) -> http::Response<Body> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut resp = http::Response::new(full(body));
    *resp.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A plain-text response.
pub(crate) fn text(code: u16, s: &'static str) -> http::Response<Body> {
    let mut resp = http::Response::new(full(s));
    *resp.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// A `Status` error response, with `Retry-After` when the error carries one.
pub(crate) fn error(e: &ApiError) -> http::Response<Body> {
    let mut resp = json(e.code(), &e.to_status());
    if let Some(secs) = e.retry_after() {
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    resp
}

/// Whether the client asked for `PartialObjectMetadata` (kube's `*_metadata` calls).
pub(crate) fn wants_partial_metadata(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=PartialObjectMetadata"))
}

/// An object reduced to `PartialObjectMetadata`.
pub(crate) fn partial_metadata(obj: &Value) -> Value {
    serde_json::json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(Value::Null),
    })
}

/// A list reduced to `PartialObjectMetadataList`.
pub(crate) fn partial_metadata_list(list: &Value) -> Value {
    let items: Vec<Value> = list["items"]
        .as_array()
        .map(|a| a.iter().map(partial_metadata).collect())
        .unwrap_or_default();
    serde_json::json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list.get("metadata").cloned().unwrap_or(Value::Null),
        "items": items,
    })
}
