//! The downwardAPI volume plugin, `kubernetes.io/downward-api`, and the field rendering rules
//! shared with projected volumes (PL-13).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, Pod, Volume};
use nodelet_atomic_writer::{FileProjection, Payload, WriteOutcome, clean_path};

use super::resources::resource_value;
use super::{Medium, NodeAllocatable, SetUpContext, SetUpOutcome, VolumePlugin, mode_bits};
use crate::SetUpError;

/// `kubernetes.io/downward-api`: pod fields and container resources as files (tmpfs).
#[derive(Debug, Clone, Copy, Default)]
pub struct DownwardApiPlugin;

#[async_trait]
impl VolumePlugin for DownwardApiPlugin {
    fn name(&self) -> &str {
        "kubernetes.io/downward-api"
    }

    fn can_support(&self, volume: &Volume) -> bool {
        volume.downward_api.is_some()
    }

    /// PL-13 with the latest pod object: label and annotation changes reach the files on the
    /// next remount (every pod update).
    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError> {
        let Some(source) = ctx.volume.downward_api.as_ref() else {
            return Err(SetUpError::Unsupported {
                what: "a volume without a downwardAPI source".into(),
            });
        };
        let payload = collect_downward_api_data(
            source.items.as_deref().unwrap_or_default(),
            ctx.pod,
            ctx.host.node_allocatable(),
            source.default_mode,
        )?;
        let outcome = ctx.host.project(ctx, Medium::Memory, payload).await?;
        Ok(SetUpOutcome {
            written: outcome == WriteOutcome::Written,
            ..SetUpOutcome::default()
        })
    }
}

/// PL-13 `CollectData`: one file per item at its cleaned path, mode = item mode or
/// `default_mode`; `fieldRef` renders a pod field, `resourceFieldRef` a container resource.
///
/// # Errors
/// [`SetUpError::NoDefaultMode`]; otherwise every failing item's error, aggregated
/// ([`SetUpError::aggregate`]).
pub fn collect_downward_api_data(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    allocatable: &NodeAllocatable,
    default_mode: Option<i32>,
) -> Result<Payload, SetUpError> {
    let default_mode = default_mode.ok_or(SetUpError::NoDefaultMode)?;
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let mode = mode_bits(item.mode.unwrap_or(default_mode));
        let data = if let Some(field) = &item.field_ref {
            extract_field(pod, &field.field_path)
        } else if let Some(resource) = &item.resource_field_ref {
            resource_value(pod, resource, allocatable)
        } else {
            Ok(String::new())
        };
        // A failing item is still inserted, with empty data.
        let data = data.unwrap_or_else(|e| {
            errors.push(SetUpError::DownwardApi(e));
            String::new()
        });
        payload.insert(clean_path(&item.path), FileProjection::new(data, mode));
    }
    match SetUpError::aggregate(errors) {
        Some(e) => Err(e),
        None => Ok(payload),
    }
}

/// The string value of a supported pod field path (the kubelet's
/// `ExtractFieldPathAsString`).
fn extract_field(pod: &Pod, field_path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    if let Some((path, subscript)) = split_subscript(field_path) {
        return match path {
            "metadata.annotations" => {
                check_qualified_name(&subscript.to_lowercase(), field_path)?;
                Ok(lookup(meta.annotations.as_ref(), subscript))
            }
            "metadata.labels" => {
                check_qualified_name(subscript, field_path)?;
                Ok(lookup(meta.labels.as_ref(), subscript))
            }
            _ => Err(format!(
                "fieldPath {field_path:?} does not support subscript"
            )),
        };
    }
    match field_path {
        "metadata.annotations" => Ok(format_map(meta.annotations.as_ref())),
        "metadata.labels" => Ok(format_map(meta.labels.as_ref())),
        "metadata.name" => Ok(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(meta.uid.clone().unwrap_or_default()),
        other => Err(format!("unsupported fieldPath: {other}")),
    }
}

fn lookup(map: Option<&BTreeMap<String, String>>, key: &str) -> String {
    map.and_then(|m| m.get(key)).cloned().unwrap_or_default()
}

/// `metadata.labels['key']` → `("metadata.labels", "key")`.
fn split_subscript(field_path: &str) -> Option<(&str, &str)> {
    let inner = field_path.strip_suffix("']")?;
    let (path, subscript) = inner.split_once("['")?;
    (!path.is_empty()).then_some((path, subscript))
}

/// Whole maps render as `key="value"` lines sorted by key, Go-quoted, no trailing newline.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    let mut out = String::new();
    for (k, v) in map.into_iter().flatten() {
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = write!(out, "{k}={}", go_quote(v));
    }
    out
}

/// Go's `%q` for a string: double quotes, backslash escapes for quotes, backslashes and
/// control characters; printable Unicode is kept.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

const QUALIFIED_NAME_FMT: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
     '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Kubernetes' `IsQualifiedName` (an optional DNS-subdomain prefix and a name of ≤ 63
/// characters), reporting `invalid key subscript in <fieldPath>: <errors joined by ;>`.
fn check_qualified_name(value: &str, field_path: &str) -> Result<(), String> {
    let mut errors: Vec<String> = Vec::new();
    let (prefix, name) = match value.split('/').collect::<Vec<_>>().as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return Err(format!(
                "invalid key subscript in {field_path}: a qualified name {QUALIFIED_NAME_FMT} \
                 with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
        }
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errors.push("prefix part must be non-empty".into());
        } else if !is_dns_subdomain(prefix) {
            errors.push(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case \
                 alphanumeric characters, '-' or '.', and must start and end with an \
                 alphanumeric character"
                    .into(),
            );
        }
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".into());
    }
    if !is_qualified_name_part(name) {
        errors.push(format!("name part {QUALIFIED_NAME_FMT}"));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "invalid key subscript in {field_path}: {}",
            errors.join(";")
        ))
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first().is_some_and(u8::is_ascii_alphanumeric)
                && b.last().is_some_and(u8::is_ascii_alphanumeric)
        })
}

#[cfg(test)]
mod tests {
    //! `TestCollectDataWithDownwardAPI` and the PL-13 rendering rules.
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "test_pod", "namespace": "test_ns", "uid": "test_uid",
                "labels": {"key1": "value1", "key2": "value2"},
                "annotations": {"a1": "x\"y\nz", "a2": "plain"}},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap()
    }

    fn data(field: &str) -> Result<String, SetUpError> {
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(
            json!([{"path": "./out//file", "fieldRef": {"fieldPath": field}}]),
        )
        .unwrap();
        let alloc = NodeAllocatable::detect(std::path::Path::new("/"));
        let p = collect_downward_api_data(&items, &pod(), &alloc, Some(0o644))?;
        let f = p.get("out/file").cloned().unwrap();
        assert_eq!(f.mode, 0o644);
        Ok(String::from_utf8(f.data).unwrap())
    }

    #[test]
    fn name_namespace_and_uid_render_as_plain_strings() {
        assert_eq!(data("metadata.name").unwrap(), "test_pod");
        assert_eq!(data("metadata.namespace").unwrap(), "test_ns");
        assert_eq!(data("metadata.uid").unwrap(), "test_uid");
    }

    #[test]
    fn labels_render_as_sorted_quoted_lines_without_a_trailing_newline() {
        assert_eq!(
            data("metadata.labels").unwrap(),
            "key1=\"value1\"\nkey2=\"value2\""
        );
        assert_eq!(
            data("metadata.annotations").unwrap(),
            "a1=\"x\\\"y\\nz\"\na2=\"plain\""
        );
    }

    #[test]
    fn subscripted_keys_render_the_value_and_a_missing_key_is_empty() {
        assert_eq!(data("metadata.labels['key2']").unwrap(), "value2");
        assert_eq!(data("metadata.annotations['a2']").unwrap(), "plain");
        assert_eq!(data("metadata.annotations['nope']").unwrap(), "");
    }

    #[test]
    fn annotation_error_an_empty_subscript_is_invalid() {
        let err = data("metadata.annotations['']").unwrap_err().to_string();
        assert!(
            err.starts_with(
                "invalid key subscript in metadata.annotations['']: name part must be non-empty"
            ),
            "{err}"
        );
    }

    #[test]
    fn unsupported_paths_and_subscripts_are_errors() {
        assert_eq!(
            data("spec.nodeName").unwrap_err().to_string(),
            "unsupported fieldPath: spec.nodeName"
        );
        assert_eq!(
            data("metadata.name['x']").unwrap_err().to_string(),
            "fieldPath \"metadata.name['x']\" does not support subscript"
        );
    }

    #[test]
    fn several_failing_items_are_aggregated() {
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(json!([
            {"path": "a", "fieldRef": {"fieldPath": "bad.one"}},
            {"path": "b", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "c", "fieldRef": {"fieldPath": "bad.two"}}
        ]))
        .unwrap();
        let alloc = NodeAllocatable::detect(std::path::Path::new("/"));
        let err = collect_downward_api_data(&items, &pod(), &alloc, Some(0o644)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "[unsupported fieldPath: bad.one, unsupported fieldPath: bad.two]"
        );
    }

    #[test]
    fn item_modes_override_the_default_mode_and_a_missing_default_is_an_error() {
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(json!([
            {"path": "a", "mode": 0o400, "fieldRef": {"fieldPath": "metadata.name"}}
        ]))
        .unwrap();
        let alloc = NodeAllocatable::detect(std::path::Path::new("/"));
        let p = collect_downward_api_data(&items, &pod(), &alloc, Some(0o644)).unwrap();
        assert_eq!(p.get("a").map(|f| f.mode), Some(0o400));
        let err = collect_downward_api_data(&items, &pod(), &alloc, None).unwrap_err();
        assert!(matches!(err, SetUpError::NoDefaultMode));
    }
}
