//! `application/vnd.kubernetes.protobuf`: converts between the Kubernetes protobuf encoding and
//! the JSON objects the server stores, over the `.proto` descriptors in `proto/k8s.fds`
//! (prost-reflect does the wire format; see `proto/README.md` for where they come from).
//!
//! The wire form is the four bytes `k8s\0` followed by a `runtime.Unknown` whose `typeMeta`
//! carries `apiVersion` and `kind` and whose `raw` is the object's message. Where Kubernetes'
//! JSON differs from the plain proto mapping, the converter follows the JSON:
//! - `Time` is RFC 3339 in seconds, `MicroTime` with six fractional digits; a zero time (what Go
//!   sends for an unset non-pointer `Time`) is absent.
//! - `Quantity` is its string, `IntOrString` a number or a string, `RawExtension` and `FieldsV1`
//!   inline JSON, `bytes` base64 (Secret `data`, ConfigMap `binaryData`), a user's
//!   `ExtraValue` (`items` on the wire) a list of strings.
//! - Structs Go embeds with `json:",inline"` (`Volume.volumeSource`, `Probe.handler`, the
//!   `LocalObjectReference` of key selectors, listed in `proto/inline.txt`) are flattened.
//! - Go writes every non-pointer string, even empty: an empty string decodes as absent, as Go's
//!   `omitempty` would print it.

use std::collections::HashSet;
use std::sync::OnceLock;

use base64::Engine as _;
use prost::Message as _;
use prost_reflect::ReflectMessage as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    Value as PValue,
};
use serde_json::{Map, Value};

use crate::status::ApiError;

/// The protobuf media type.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes that open every Kubernetes protobuf body.
const MAGIC: &[u8; 4] = b"k8s\0";

const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";
const DURATION: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Duration";
const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
/// Go's `type ExtraValue []string` (a user's `extra`): a list in JSON, `items` on the wire.
const AUTHN_EXTRA_VALUE: &str = "k8s.io.api.authentication.v1.ExtraValue";
const AUTHZ_EXTRA_VALUE: &str = "k8s.io.api.authorization.v1.ExtraValue";

/// Why a body could not be converted. The text names the field path, never a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ProtoError {
    /// The descriptors shipped with the crate did not load.
    #[error("protobuf descriptors: {0}")]
    Descriptors(String),
    /// The body does not start with `k8s\0`.
    #[error("provided object is not a Kubernetes protobuf message: missing the k8s\\0 prefix")]
    Magic,
    /// The envelope or the object did not decode.
    #[error("decoding {what}: {source}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The wire error.
        #[source]
        source: prost::DecodeError,
    },
    /// No message for the object's `apiVersion` and `kind`.
    #[error("no protobuf message for apiVersion {api_version:?}, kind {kind:?}")]
    NoMessage {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// A field the message does not have, or a value of the wrong type.
    #[error("{path}: {reason}")]
    Field {
        /// JSON path of the field.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl From<ProtoError> for ApiError {
    fn from(e: ProtoError) -> ApiError {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    }
}

struct Descriptors {
    pool: DescriptorPool,
    /// `package.Message.field` of fields Go inlines into the parent's JSON.
    inline: HashSet<String>,
}

fn descriptors() -> Result<&'static Descriptors, ProtoError> {
    static CELL: OnceLock<Result<Descriptors, String>> = OnceLock::new();
    CELL.get_or_init(|| {
        let pool = DescriptorPool::decode(&include_bytes!("../proto/k8s.fds")[..])
            .map_err(|e| e.to_string())?;
        let inline = include_str!("../proto/inline.txt")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect();
        Ok(Descriptors { pool, inline })
    })
    .as_ref()
    .map_err(|e| ProtoError::Descriptors(e.clone()))
}

/// The message for an object of `api_version` and `kind`: the group's package, then meta/v1
/// (`Status`, `DeleteOptions`, ...).
fn message_for(d: &Descriptors, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    };
    d.pool
        .get_message_by_name(&format!("k8s.io.api.{package}.{version}.{kind}"))
        .or_else(|| {
            d.pool
                .get_message_by_name(&format!("k8s.io.apimachinery.pkg.apis.meta.v1.{kind}"))
        })
}

/// Decodes a protobuf request body into the JSON object, `apiVersion` and `kind` included.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let d = descriptors()?;
    let rest = body.strip_prefix(MAGIC).ok_or(ProtoError::Magic)?;
    let unknown_desc = d
        .pool
        .get_message_by_name(UNKNOWN)
        .ok_or_else(|| ProtoError::Descriptors(format!("{UNKNOWN} missing")))?;
    let unknown =
        DynamicMessage::decode(unknown_desc, rest).map_err(|source| ProtoError::Decode {
            what: "the runtime.Unknown envelope".into(),
            source,
        })?;
    let type_meta = unknown
        .get_field_by_name("typeMeta")
        .and_then(|v| v.as_message().cloned());
    let text = |name: &str| {
        type_meta
            .as_ref()
            .and_then(|m| m.get_field_by_name(name))
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let raw = unknown
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let desc = message_for(d, &api_version, &kind).ok_or_else(|| ProtoError::NoMessage {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let msg = DynamicMessage::decode(desc, raw).map_err(|source| ProtoError::Decode {
        what: format!("a {kind}"),
        source,
    })?;
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    if let Value::Object(fields) = message_to_json(d, &msg) {
        obj.extend(fields);
    }
    Ok(Value::Object(obj))
}

/// Encodes a JSON object (with `apiVersion` and `kind`) as a protobuf body.
pub(crate) fn encode(obj: &Value) -> Result<Vec<u8>, ProtoError> {
    let d = descriptors()?;
    let text = |name: &str| obj.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let desc = message_for(d, api_version, kind).ok_or_else(|| ProtoError::NoMessage {
        api_version: api_version.into(),
        kind: kind.into(),
    })?;
    let msg = json_to_message(d, &desc, obj, "", true)?;
    let unknown_desc = d
        .pool
        .get_message_by_name(UNKNOWN)
        .ok_or_else(|| ProtoError::Descriptors(format!("{UNKNOWN} missing")))?;
    let type_meta_field = unknown_desc
        .get_field_by_name("typeMeta")
        .ok_or_else(|| ProtoError::Descriptors("Unknown.typeMeta missing".into()))?;
    let Kind::Message(type_meta_desc) = type_meta_field.kind() else {
        return Err(ProtoError::Descriptors("Unknown.typeMeta".into()));
    };
    let mut type_meta = DynamicMessage::new(type_meta_desc);
    type_meta.set_field_by_name("apiVersion", PValue::String(api_version.into()));
    type_meta.set_field_by_name("kind", PValue::String(kind.into()));
    let mut unknown = DynamicMessage::new(unknown_desc);
    unknown.set_field(&type_meta_field, PValue::Message(type_meta));
    unknown.set_field_by_name("raw", PValue::Bytes(msg.encode_to_vec().into()));
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    Ok(out)
}

fn is_inline(d: &Descriptors, field: &FieldDescriptor) -> bool {
    d.inline.contains(field.full_name())
}

// ---- protobuf -> JSON ----

fn message_to_json(d: &Descriptors, msg: &DynamicMessage) -> Value {
    let desc = msg.descriptor();
    match desc.full_name() {
        TIME => return time_to_json(msg, false),
        MICRO_TIME => return time_to_json(msg, true),
        QUANTITY => return str_field(msg, "string").map_or(Value::Null, Value::String),
        AUTHN_EXTRA_VALUE | AUTHZ_EXTRA_VALUE => {
            return match msg.get_field_by_name("items").as_deref() {
                Some(PValue::List(items)) => Value::Array(
                    items
                        .iter()
                        .filter_map(|v| v.as_str().map(|s| Value::String(s.into())))
                        .collect(),
                ),
                _ => Value::Array(Vec::new()),
            };
        }
        INT_OR_STRING => {
            let is_string = msg
                .get_field_by_name("type")
                .and_then(|v| v.as_i64())
                .unwrap_or(0)
                == 1;
            return if is_string {
                Value::String(str_field(msg, "strVal").unwrap_or_default())
            } else {
                let n = msg
                    .get_field_by_name("intVal")
                    .and_then(|v| v.as_i32())
                    .unwrap_or(0);
                Value::from(n)
            };
        }
        RAW_EXTENSION | FIELDS_V1 => {
            let raw = msg
                .get_field_by_name("raw")
                .and_then(|v| v.as_bytes().cloned())
                .unwrap_or_default();
            if let Ok(v) = serde_json::from_slice::<Value>(&raw) {
                return v;
            }
            return decode(&raw).unwrap_or(Value::Null);
        }
        DURATION => {
            let nanos = msg
                .get_field_by_name("duration")
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            return Value::String(nodelet_core::go::format_duration(nanos));
        }
        _ => {}
    }
    let mut out = Map::new();
    for (field, value) in msg.fields() {
        let json = field_to_json(d, &field, value);
        if json.is_null() {
            continue;
        }
        if is_inline(d, &field) {
            if let Value::Object(inner) = json {
                out.extend(inner);
            }
            continue;
        }
        out.insert(field.name().to_string(), json);
    }
    Value::Object(out)
}

fn str_field(msg: &DynamicMessage, name: &str) -> Option<String> {
    msg.get_field_by_name(name)
        .and_then(|v| v.as_str().map(String::from))
}

fn field_to_json(d: &Descriptors, field: &FieldDescriptor, value: &PValue) -> Value {
    match value {
        PValue::List(items) => Value::Array(
            items
                .iter()
                .map(|v| scalar_to_json(d, &field.kind(), v))
                .collect(),
        ),
        PValue::Map(entries) => {
            let value_kind = match field.kind() {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other,
            };
            let mut m = Map::new();
            for (k, v) in entries {
                let key = match k {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                m.insert(key, scalar_to_json(d, &value_kind, v));
            }
            Value::Object(m)
        }
        // Go writes unset non-pointer strings as "": absent, as `omitempty` prints them.
        PValue::String(s) if s.is_empty() => Value::Null,
        v => scalar_to_json(d, &field.kind(), v),
    }
}

fn scalar_to_json(d: &Descriptors, _kind: &Kind, value: &PValue) -> Value {
    match value {
        PValue::Bool(b) => Value::Bool(*b),
        PValue::I32(n) => Value::from(*n),
        PValue::I64(n) => Value::from(*n),
        PValue::U32(n) => Value::from(*n),
        PValue::U64(n) => Value::from(*n),
        PValue::F32(n) => Value::from(f64::from(*n)),
        PValue::F64(n) => Value::from(*n),
        PValue::String(s) => Value::String(s.clone()),
        PValue::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        PValue::EnumNumber(n) => Value::from(*n),
        PValue::Message(m) => message_to_json(d, m),
        PValue::List(_) | PValue::Map(_) => Value::Null,
    }
}

fn time_to_json(msg: &DynamicMessage, micro: bool) -> Value {
    let seconds = msg
        .get_field_by_name("seconds")
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let nanos = msg
        .get_field_by_name("nanos")
        .and_then(|v| v.as_i32())
        .unwrap_or(0);
    if seconds == 0 && nanos == 0 {
        return Value::Null;
    }
    let Some(t) = chrono::DateTime::from_timestamp(seconds, u32::try_from(nanos).unwrap_or(0))
    else {
        return Value::Null;
    };
    let format = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Value::String(t.format(format).to_string())
}

// ---- JSON -> protobuf ----

fn field_err(path: &str, reason: impl Into<String>) -> ProtoError {
    ProtoError::Field {
        path: path.to_string(),
        reason: reason.into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn json_to_message(
    d: &Descriptors,
    desc: &MessageDescriptor,
    value: &Value,
    path: &str,
    top: bool,
) -> Result<DynamicMessage, ProtoError> {
    let mut msg = DynamicMessage::new(desc.clone());
    match desc.full_name() {
        AUTHN_EXTRA_VALUE | AUTHZ_EXTRA_VALUE => {
            let Value::Array(items) = value else {
                return Err(field_err(path, "expected an array"));
            };
            let list = items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(|s| PValue::String(s.into()))
                        .ok_or_else(|| field_err(path, "expected a string"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            msg.set_field_by_name("items", PValue::List(list));
            return Ok(msg);
        }
        TIME | MICRO_TIME => {
            let s = value
                .as_str()
                .ok_or_else(|| field_err(path, "expected an RFC 3339 time string"))?;
            let t = chrono::DateTime::parse_from_rfc3339(s)
                .map_err(|e| field_err(path, format!("not an RFC 3339 time: {e}")))?;
            msg.set_field_by_name("seconds", PValue::I64(t.timestamp()));
            let nanos = i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0);
            msg.set_field_by_name("nanos", PValue::I32(nanos));
            return Ok(msg);
        }
        QUANTITY => {
            let s = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(field_err(path, "expected a quantity")),
            };
            msg.set_field_by_name("string", PValue::String(s));
            return Ok(msg);
        }
        INT_OR_STRING => {
            match value {
                Value::String(s) => {
                    msg.set_field_by_name("type", PValue::I64(1));
                    msg.set_field_by_name("strVal", PValue::String(s.clone()));
                }
                Value::Number(n) => {
                    let n = n
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| field_err(path, "integer out of range"))?;
                    msg.set_field_by_name("type", PValue::I64(0));
                    msg.set_field_by_name("intVal", PValue::I32(n));
                }
                _ => return Err(field_err(path, "expected an integer or a string")),
            }
            return Ok(msg);
        }
        RAW_EXTENSION | FIELDS_V1 => {
            let raw = serde_json::to_vec(value).map_err(|e| field_err(path, e.to_string()))?;
            msg.set_field_by_name("raw", PValue::Bytes(raw.into()));
            return Ok(msg);
        }
        DURATION => {
            let n = value
                .as_str()
                .and_then(nodelet_core::go::parse_duration_nanos)
                .ok_or_else(|| field_err(path, "expected a duration such as \"1m30s\""))?;
            msg.set_field_by_name("duration", PValue::I64(n));
            return Ok(msg);
        }
        _ => {}
    }
    let Value::Object(obj) = value else {
        return Err(field_err(path, "expected an object"));
    };
    for (key, v) in obj {
        if v.is_null() {
            continue;
        }
        let here = join(path, key);
        if let Some(field) = desc.get_field_by_name(key) {
            let pv = json_to_field(d, &field, v, &here)?;
            msg.set_field(&field, pv);
            continue;
        }
        if top && (key == "apiVersion" || key == "kind") {
            continue;
        }
        if !set_inline(d, &mut msg, key, v, &here)? {
            return Err(field_err(
                &here,
                format!("{} has no such field", desc.name()),
            ));
        }
    }
    Ok(msg)
}

/// Sets `key` in the embedded (inline) message that has it; false when none does.
fn set_inline(
    d: &Descriptors,
    msg: &mut DynamicMessage,
    key: &str,
    v: &Value,
    path: &str,
) -> Result<bool, ProtoError> {
    let desc = msg.descriptor();
    for field in desc.fields().filter(|f| is_inline(d, f)) {
        let Kind::Message(inner_desc) = field.kind() else {
            continue;
        };
        let mut inner = match msg.get_field(&field).as_message() {
            Some(m) if msg.has_field(&field) => m.clone(),
            _ => DynamicMessage::new(inner_desc.clone()),
        };
        let done = if let Some(f) = inner_desc.get_field_by_name(key) {
            let pv = json_to_field(d, &f, v, path)?;
            inner.set_field(&f, pv);
            true
        } else {
            set_inline(d, &mut inner, key, v, path)?
        };
        if done {
            msg.set_field(&field, PValue::Message(inner));
            return Ok(true);
        }
    }
    Ok(false)
}

fn json_to_field(
    d: &Descriptors,
    field: &FieldDescriptor,
    v: &Value,
    path: &str,
) -> Result<PValue, ProtoError> {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return Err(field_err(path, "map without an entry message"));
        };
        let value_kind = entry.map_entry_value_field().kind();
        let Value::Object(obj) = v else {
            return Err(field_err(path, "expected an object"));
        };
        let mut map = std::collections::HashMap::new();
        for (k, item) in obj {
            let here = join(path, k);
            map.insert(
                MapKey::String(k.clone()),
                json_to_scalar(d, &value_kind, item, &here)?,
            );
        }
        return Ok(PValue::Map(map));
    }
    if field.is_list() {
        let Value::Array(items) = v else {
            return Err(field_err(path, "expected an array"));
        };
        let kind = field.kind();
        let list = items
            .iter()
            .enumerate()
            .map(|(i, item)| json_to_scalar(d, &kind, item, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(PValue::List(list));
    }
    json_to_scalar(d, &field.kind(), v, path)
}

fn json_to_scalar(
    d: &Descriptors,
    kind: &Kind,
    v: &Value,
    path: &str,
) -> Result<PValue, ProtoError> {
    let int = |v: &Value| {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| field_err(path, "expected an integer"))
    };
    Ok(match kind {
        Kind::Bool => PValue::Bool(
            v.as_bool()
                .ok_or_else(|| field_err(path, "expected a boolean"))?,
        ),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => PValue::I32(
            i32::try_from(int(v)?).map_err(|_| field_err(path, "integer out of range"))?,
        ),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => PValue::I64(int(v)?),
        Kind::Double => PValue::F64(
            v.as_f64()
                .ok_or_else(|| field_err(path, "expected a number"))?,
        ),
        Kind::String => PValue::String(
            v.as_str()
                .ok_or_else(|| field_err(path, "expected a string"))?
                .to_string(),
        ),
        Kind::Bytes => {
            let s = v
                .as_str()
                .ok_or_else(|| field_err(path, "expected base64 data"))?;
            PValue::Bytes(
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|_| field_err(path, "illegal base64 data"))?
                    .into(),
            )
        }
        Kind::Message(desc) => PValue::Message(json_to_message(d, desc, v, path, false)?),
        other => return Err(field_err(path, format!("unsupported field type {other:?}"))),
    })
}

#[cfg(test)]
mod tests;
