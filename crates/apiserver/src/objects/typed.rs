//! Typed decoding of request bodies: every object must decode into its k8s-openapi type, as the
//! real server decodes bodies into Go structs, or the request is a 400 BadRequest.
//!
//! The check only decodes; the stored object stays the JSON that was sent (unknown fields are
//! preserved). Without it, a body such as a pod whose `volumes[].configMap.defaultMode` is the
//! string `"0400"` would be stored and then break every typed client's list and watch.

use k8s_openapi::api::certificates::v1beta1 as certificates;
use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::resources::ResourceId;
use crate::status::ApiError;

/// Checks that `body` decodes as the kind `res` serves.
///
/// # Errors
/// 400 BadRequest `Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal
/// string into Go struct field Pod.spec.volumes[0].configMap.defaultMode: invalid type: ...`
/// (upstream names the Go struct and type; this names the JSON path and the serde reason).
pub(crate) fn check(res: ResourceId, body: &Value) -> Result<(), ApiError> {
    let info = res.info();
    let decoded = match (info.group, info.kind) {
        ("", "Namespace") => decode::<core::Namespace>(body).map(drop),
        ("", "Pod") => decode::<core::Pod>(body).map(drop),
        ("", "ConfigMap") => decode::<core::ConfigMap>(body).map(drop),
        ("", "Secret") => decode::<core::Secret>(body).map(drop),
        ("", "Node") => decode::<core::Node>(body).map(drop),
        ("", "Event") => decode::<core::Event>(body).map(drop),
        ("", "ServiceAccount") => decode::<core::ServiceAccount>(body).map(drop),
        ("", "Service") => decode::<core::Service>(body).map(drop),
        ("events.k8s.io", "Event") => decode::<events::Event>(body).map(drop),
        ("coordination.k8s.io", "Lease") => decode::<coordination::Lease>(body).map(drop),
        ("certificates.k8s.io", "ClusterTrustBundle") => {
            decode::<certificates::ClusterTrustBundle>(body).map(drop)
        }
        ("certificates.k8s.io", "PodCertificateRequest") => {
            decode::<certificates::PodCertificateRequest>(body).map(drop)
        }
        _ => Ok(()),
    };
    decoded.map_err(|e| cannot_handle(info.kind, info.version, &e))
}

/// Decodes `body` as `T`, a `kind` of API `version` that is answered but never stored (the
/// review kinds).
///
/// # Errors
/// 400 BadRequest with the text of [`check`].
pub(crate) fn decode_as<T: DeserializeOwned>(
    kind: &str,
    version: &str,
    body: &Value,
) -> Result<T, ApiError> {
    decode::<T>(body).map_err(|e| cannot_handle(kind, version, &e))
}

/// The 400 for a body that did not decode as `kind`.
fn cannot_handle(kind: &str, version: &str, e: &DecodeFailure) -> ApiError {
    // serde's reason quotes the offending value; a Secret's values never go into an error.
    let why = if kind == "Secret" {
        String::new()
    } else {
        format!(": {}", e.reason)
    };
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: json: cannot unmarshal {found} into Go struct field {kind}.{path}{why}",
        found = e.found,
        path = e.path,
    ))
}

/// Why a body did not decode.
struct DecodeFailure {
    /// JSON path of the offending field, e.g. `spec.volumes[0].configMap.defaultMode`.
    path: String,
    /// JSON type found there (`string`, `number`, ...).
    found: &'static str,
    /// The decoder's reason, e.g. `invalid type: string "0400", expected i32`.
    reason: String,
}

fn decode<T: DeserializeOwned>(body: &Value) -> Result<T, DecodeFailure> {
    match serde_path_to_error::deserialize::<_, T>(body) {
        Ok(t) => Ok(t),
        Err(e) => {
            let found = value_at(body, e.path()).map_or("value", json_type);
            Err(DecodeFailure {
                path: e.path().to_string(),
                found,
                reason: e.into_inner().to_string(),
            })
        }
    }
}

/// The value a decoding error's path points at, if it can be followed.
fn value_at<'a>(body: &'a Value, path: &serde_path_to_error::Path) -> Option<&'a Value> {
    use serde_path_to_error::Segment;
    let mut at = body;
    for seg in path.iter() {
        at = match seg {
            Segment::Seq { index } => at.get(*index)?,
            Segment::Map { key } => at.get(key.as_str())?,
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    Some(at)
}

pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::String(_) => "string",
        Value::Null => "null",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CONFIGMAPS, PODS};
    use serde_json::json;

    #[test]
    fn a_string_where_an_int32_belongs_is_a_bad_request_naming_kind_and_field() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "volumes": [{"name": "v", "configMap": {"name": "cm", "defaultMode": "0400"}}]}});
        let err = check(PODS, &pod).err();
        assert_eq!(err.as_ref().map(ApiError::code), Some(400));
        assert_eq!(err.as_ref().map(ApiError::reason), Some("BadRequest"));
        let msg = err.map(|e| e.message().to_string()).unwrap_or_default();
        assert!(
            msg.starts_with(r#"Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field Pod.spec.volumes[0].configMap.defaultMode"#),
            "{msg}"
        );
    }

    #[test]
    fn a_secret_decode_error_names_the_field_but_never_the_value() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"password": 123_456_789}});
        let msg = check(crate::resources::SECRETS, &secret)
            .err()
            .map(|e| e.message().to_string())
            .unwrap_or_default();
        assert!(msg.contains("Secret.data.password"), "{msg}");
        assert!(!msg.contains("123456789"), "{msg}");
    }

    #[test]
    fn unknown_fields_missing_required_fields_and_numeric_quantities_decode() {
        let pod = json!({"metadata": {"name": "p"}, "future": {"x": 1},
            "spec": {"containers": [{"resources": {"limits": {"cpu": 1}}}]}});
        assert!(check(PODS, &pod).is_ok());
        let cm = json!({"metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v"}});
        assert!(check(CONFIGMAPS, &cm).is_ok());
    }
}
