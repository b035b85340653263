//! Validation rules with the upstream message texts: object names, ConfigMap/Secret keys and
//! sizes, labels, immutability. Each function returns `FieldError`s; the caller turns them into a
//! 422 `Invalid` status.

use serde_json::{Map, Value};

use crate::status::FieldError;

/// Largest ConfigMap (sum of value sizes) and Secret (sum of decoded data) payload: 1 MiB.
pub(crate) const MAX_PAYLOAD: usize = 1024 * 1024;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn is_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// `IsDNS1123Label` messages (empty when valid).
pub(crate) fn dns1123_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !is_label_shape(s) {
        out.push(DNS1123_LABEL_MSG.to_string());
    }
    out
}

/// `IsDNS1123Subdomain` messages (empty when valid).
pub(crate) fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if s.is_empty() || !s.split('.').all(is_label_shape) {
        out.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    out
}

/// `IsConfigMapKey` messages (also used for Secret keys).
pub(crate) fn config_map_key(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if key.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        out.push(CONFIG_KEY_MSG.to_string());
    }
    if key == "." {
        out.push("must not be '.'".to_string());
    } else if key == ".." {
        out.push("must not be '..'".to_string());
    } else if key.starts_with("..") {
        out.push("must not start with '..'".to_string());
    }
    out
}

/// How a resource's names are checked.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NameRule {
    Label,
    Subdomain,
}

/// Validates `metadata.name`, `metadata.labels` and the namespace field.
pub(crate) fn object_meta(obj: &Value, rule: NameRule) -> Vec<FieldError> {
    object_meta_with(obj, |name| match rule {
        NameRule::Label => dns1123_label(name),
        NameRule::Subdomain => dns1123_subdomain(name),
    })
}

/// [`object_meta`] with the resource's own name check (`name_rule` returns its messages).
pub(crate) fn object_meta_with(
    obj: &Value,
    name_rule: impl Fn(&str) -> Vec<String>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = obj.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        let msgs = name_rule(name);
        errs.extend(
            msgs.into_iter()
                .map(|m| FieldError::invalid("metadata.name", name, m)),
        );
    }
    if let Some(labels) = meta
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    {
        for (k, v) in labels {
            for msg in qualified_name(k) {
                errs.push(FieldError::invalid("metadata.labels", k, msg));
            }
            let v = v.as_str().unwrap_or("");
            for msg in label_value(v) {
                errs.push(FieldError::invalid("metadata.labels", v, msg));
            }
        }
    }
    errs
}

/// `IsQualifiedName` (prefix/name) messages.
pub(crate) fn qualified_name(key: &str) -> Vec<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut out = Vec::new();
    if let Some(p) = prefix {
        if p.is_empty() {
            out.push("prefix part must be non-empty".to_string());
        } else {
            out.extend(
                dns1123_subdomain(p)
                    .into_iter()
                    .map(|m| format!("prefix part {m}")),
            );
        }
    }
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else {
        if name.len() > 63 {
            out.push("name part must be no more than 63 characters".to_string());
        }
        if !is_label_value_shape(name) {
            out.push(QUALIFIED_NAME_MSG.to_string());
        }
    }
    out
}

fn is_label_value_shape(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// `IsValidLabelValue` messages.
pub(crate) fn label_value(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    if v.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !v.is_empty() && !is_label_value_shape(v) {
        out.push(LABEL_VALUE_MSG.to_string());
    }
    out
}

fn string_map<'a>(obj: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    obj.get(field).and_then(Value::as_object)
}

/// `ValidateConfigMap` without the metadata part.
pub(crate) fn config_map(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0usize;
    let bin = string_map(obj, "binaryData");
    if let Some(data) = string_map(obj, "data") {
        for (k, v) in data {
            errs.extend(
                config_map_key(k)
                    .into_iter()
                    .map(|m| FieldError::invalid(format!("data[{k}]"), k, m)),
            );
            // Upstream checks `data` against `binaryData`, so the duplicate is named under data.
            if bin.is_some_and(|b| b.contains_key(k)) {
                errs.push(FieldError::invalid(
                    format!("data[{k}]"),
                    k,
                    "duplicate of key present in binaryData",
                ));
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    if let Some(bin) = bin {
        for (k, v) in bin {
            errs.extend(
                config_map_key(k)
                    .into_iter()
                    .map(|m| FieldError::invalid(format!("binaryData[{k}]"), k, m)),
            );
            total += v.as_str().map_or(0, decoded_len);
        }
    }
    if total > MAX_PAYLOAD {
        errs.push(FieldError::too_long("[]", MAX_PAYLOAD));
    }
    errs
}

fn decoded_len(b64: &str) -> usize {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_or(b64.len(), |v| v.len())
}

/// Keys a Secret of a given type must carry.
fn required_secret_keys(ty: &str) -> &'static [&'static str] {
    match ty {
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
        _ => &[],
    }
}

/// `ValidateSecret` without the metadata part; `data` must already hold base64 strings.
pub(crate) fn secret(obj: &Value) -> Vec<FieldError> {
    use base64::Engine as _;
    let mut errs = Vec::new();
    let mut total = 0usize;
    let data = string_map(obj, "data");
    if let Some(data) = data {
        for (k, v) in data {
            errs.extend(
                config_map_key(k)
                    .into_iter()
                    .map(|m| FieldError::invalid(format!("data[{k}]"), k, m)),
            );
            total += v.as_str().map_or(0, decoded_len);
        }
    }
    if total > MAX_PAYLOAD {
        errs.push(FieldError::too_long("data", MAX_PAYLOAD));
    }
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("Opaque");
    for key in required_secret_keys(ty) {
        match data.and_then(|d| d.get(*key)).and_then(Value::as_str) {
            None => errs.push(FieldError::required(format!("data[{key}]"), "")),
            Some(v) if key.starts_with(".docker") => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v)
                    .unwrap_or_default();
                if let Err(e) = serde_json::from_slice::<Value>(&bytes) {
                    errs.push(FieldError::invalid_raw(
                        format!("data[{key}]"),
                        "\"<secret contents redacted>\"".to_string(),
                        e.to_string(),
                    ));
                }
            }
            Some(_) => {}
        }
    }
    if ty == "kubernetes.io/basic-auth"
        && !data.is_some_and(|d| d.contains_key("username") || d.contains_key("password"))
    {
        errs.push(FieldError::required("data[username]", ""));
    }
    errs
}

/// `immutable: true` rules shared by ConfigMaps and Secrets on update.
pub(crate) fn immutable_update(new: &Value, old: &Value, fields: &[&str]) -> Vec<FieldError> {
    const MSG: &str = "field is immutable when `immutable` is set";
    let mut errs = Vec::new();
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return errs;
    }
    if new.get("immutable") != old.get("immutable") {
        errs.push(FieldError::forbidden("immutable", MSG));
    }
    for f in fields {
        let empty = |v: Option<&Value>| {
            v.is_none_or(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty))
        };
        let (n, o) = (new.get(*f), old.get(*f));
        if n != o && !(empty(n) && empty(o)) {
            errs.push(FieldError::forbidden(*f, MSG));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn config_keys_follow_is_config_map_key() {
        assert!(config_map_key("a.b-C_1").is_empty());
        assert_eq!(config_map_key("."), vec!["must not be '.'".to_string()]);
        assert_eq!(config_map_key(".."), vec!["must not be '..'".to_string()]);
        assert_eq!(
            config_map_key("..x"),
            vec!["must not start with '..'".to_string()]
        );
        assert_eq!(config_map_key("a b").len(), 1);
        assert_eq!(config_map_key(&"a".repeat(254)).len(), 1);
    }

    #[test]
    fn names_follow_rfc_1123() {
        assert!(dns1123_subdomain("a.b-c").is_empty());
        assert!(!dns1123_subdomain("A").is_empty());
        assert!(!dns1123_subdomain("a..b").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn a_key_in_both_data_and_binary_data_is_a_duplicate() {
        let errs = config_map(&json!({"data": {"k": "v"}, "binaryData": {"k": "dg=="}}));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "data[k]: Invalid value: \"k\": duplicate of key present in binaryData"
        );
    }

    #[test]
    fn immutable_objects_refuse_data_changes() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let new = json!({"immutable": true, "data": {"a": "2"}});
        let errs = immutable_update(&new, &old, &["data", "binaryData"]);
        assert_eq!(
            errs[0].to_string(),
            "data: Forbidden: field is immutable when `immutable` is set"
        );
    }
}
