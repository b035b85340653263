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

/// A response with `code` and no body (204 No Content).
pub(crate) fn empty(code: u16) -> http::Response<Body> {
    let mut resp = http::Response::new(full(Bytes::new()));
    *resp.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    resp
}

/// A 200 response streaming `body` with this content type.
pub(crate) fn stream(content_type: &'static str, body: Body) -> http::Response<Body> {
    let mut resp = http::Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
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

/// Whether the client's `Accept` asks for protobuf before any type this server answers in
/// JSON (a real server takes the first type it supports, in the client's order). Types with an
/// `as=` parameter (Table, PartialObjectMetadata) are answered in JSON.
pub(crate) fn prefers_protobuf(headers: &http::HeaderMap) -> bool {
    for value in headers.get_all(http::header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if parts.any(|p| p.trim().starts_with("as=")) {
                continue;
            }
            match media.as_str() {
                crate::protobuf::MEDIA_TYPE => return true,
                "application/json" | "application/yaml" | "application/*" | "*/*" => return false,
                _ => {}
            }
        }
    }
    false
}

/// Re-encodes a full JSON response as protobuf for a client that prefers it. An object the
/// descriptors cannot express stays JSON (the client offered JSON too), or is a 406 when the
/// client accepts only protobuf.
pub(crate) async fn to_protobuf(
    resp: http::Response<Body>,
    json_acceptable: bool,
) -> http::Response<Body> {
    let is_json = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return error(&ApiError::new(
            500,
            "InternalError",
            "reading the response body",
        ));
    };
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|v| crate::protobuf::encode(&v).map_err(|e| e.to_string()));
    match encoded {
        Ok(pb) => {
            parts.headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(crate::protobuf::MEDIA_TYPE),
            );
            parts.headers.remove(http::header::CONTENT_LENGTH);
            http::Response::from_parts(parts, full(pb))
        }
        Err(_) if json_acceptable => http::Response::from_parts(parts, full(bytes)),
        Err(reason) => error(&ApiError::new(
            406,
            "NotAcceptable",
            format!(
                "the response cannot be encoded as {}: {reason}",
                crate::protobuf::MEDIA_TYPE
            ),
        )),
    }
}

/// Whether `Accept` lists a type answered in JSON at all.
pub(crate) fn accepts_json(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|e| {
            e.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .any(|m| {
            matches!(
                m.as_str(),
                "application/json" | "application/yaml" | "application/*" | "*/*"
            )
        })
}

/// Applies `f` to a full JSON response's body (other responses pass unchanged).
pub(crate) async fn map_json(
    resp: http::Response<Body>,
    f: impl FnOnce(Value) -> Value,
) -> http::Response<Body> {
    let is_json = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return error(&ApiError::new(
            500,
            "InternalError",
            "reading the response body",
        ));
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) => {
            parts.headers.remove(http::header::CONTENT_LENGTH);
            let body = serde_json::to_vec(&f(v)).unwrap_or_default();
            http::Response::from_parts(parts, full(body))
        }
        Err(_) => http::Response::from_parts(parts, full(bytes)),
    }
}
