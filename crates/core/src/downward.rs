//! The downward API, one implementation for downwardAPI volumes (PL-13) and environment
//! variables (PW-10): `fieldRef` pod fields and `resourceFieldRef` container resources.
//!
//! The kubelet renders both through the same helpers (`fieldpath.ExtractFieldPathAsString`
//! and the `resource` package); this module is that single source of truth:
//!
//! * [`field_ref_value`] — the fields every consumer may read: `metadata.name`,
//!   `metadata.namespace`, `metadata.uid`, `metadata.labels`, `metadata.annotations` and the
//!   subscripted `metadata.labels['k']` / `metadata.annotations['k']`. Whole maps render as
//!   `key="value"` lines sorted by key, the value quoted like Go's `%q`, joined with `\n`, no
//!   trailing newline; a missing subscripted key is an empty string; a subscript that is not a
//!   qualified name is an error. Volumes use exactly this (PL-13).
//! * [`env_field_ref_value`] — what an environment variable may read in addition (the
//!   kubelet's `podFieldSelectorRuntimeValue`): `spec.nodeName`, `spec.serviceAccountName`,
//!   `status.hostIP(s)`, `status.podIP(s)` (comma-joined), then everything above.
//! * [`resource_field_ref_value`] — `limits.*` / `requests.*` of `cpu`, `memory`,
//!   `ephemeral-storage` and `hugepages-*`, divided by the divisor and rounded up; unset
//!   `cpu`, `memory` and `ephemeral-storage` limits are the node's allocatable.
//!
//! Errors are [`DownwardError`], whose `Display` is the kubelet's text; callers wrap it in
//! their own error types (the volume plugin aggregates it, env resolution returns it).
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use nodelet_core::downward::{env_field_ref_value, field_ref_value};
//!
//! let pod: Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "web", "labels": {"tier": "front", "app": "web"}},
//!     "spec": {"nodeName": "node-1", "containers": []}}))?;
//! assert_eq!(field_ref_value(&pod, "metadata.labels")?, "app=\"web\"\ntier=\"front\"");
//! assert_eq!(field_ref_value(&pod, "metadata.labels['tier']")?, "front");
//! let selector = serde_json::from_value(serde_json::json!({"fieldPath": "spec.nodeName"}))?;
//! assert_eq!(env_field_ref_value(&pod, &selector)?, "node-1");
//! // Volumes cannot read spec.nodeName (the API server rejects such a volume anyway).
//! assert!(field_ref_value(&pod, "spec.nodeName").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod resources;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{ObjectFieldSelector, Pod};

use crate::go::quote as go_quote;
pub use error::DownwardError;
pub use resources::{node_allocatable_from_quantities, quantity_units, resource_field_ref_value};

/// The value of a `fieldRef` in a downwardAPI volume (PL-13; the kubelet's
/// `ExtractFieldPathAsString`). See the [module docs](self) for the fields and rendering.
///
/// # Errors
/// [`DownwardError::UnsupportedFieldPath`], [`DownwardError::SubscriptNotSupported`],
/// [`DownwardError::InvalidKeySubscript`].
pub fn field_ref_value(pod: &Pod, field_path: &str) -> Result<String, DownwardError> {
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
            _ => Err(DownwardError::SubscriptNotSupported {
                field_path: field_path.to_owned(),
            }),
        };
    }
    match field_path {
        "metadata.annotations" => Ok(format_map(meta.annotations.as_ref())),
        "metadata.labels" => Ok(format_map(meta.labels.as_ref())),
        "metadata.name" => Ok(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(meta.uid.clone().unwrap_or_default()),
        _ => Err(DownwardError::UnsupportedFieldPath {
            field_path: field_path.to_owned(),
        }),
    }
}

/// The value of a `fieldRef` in an environment variable (PW-10; the kubelet's
/// `podFieldSelectorRuntimeValue`): the field label is checked (`apiVersion` `v1`, the pod's
/// field labels; the legacy `spec.host` means `spec.nodeName`), the env-only fields are
/// answered from the pod (`status.hostIP(s)` and `status.podIP(s)` from its status: nodelet
/// has no sandbox), everything else goes to [`field_ref_value`].
///
/// # Errors
/// [`DownwardError::UnsupportedApiVersion`], [`DownwardError::FieldLabelNotSupported`],
/// [`DownwardError::FieldLabelSubscriptNotSupported`], and those of [`field_ref_value`].
pub fn env_field_ref_value(
    pod: &Pod,
    selector: &ObjectFieldSelector,
) -> Result<String, DownwardError> {
    let field_path = selector.field_path.as_str();
    // (1) ConvertDownwardAPIFieldLabel: the API version defaults to v1.
    match selector.api_version.as_deref() {
        None | Some("v1") => {}
        Some(other) => {
            return Err(DownwardError::UnsupportedApiVersion {
                api_version: other.to_owned(),
            });
        }
    }
    let field_path = if let Some((path, _)) = split_subscript(field_path) {
        if !matches!(path, "metadata.annotations" | "metadata.labels") {
            return Err(DownwardError::FieldLabelSubscriptNotSupported {
                field_path: field_path.to_owned(),
            });
        }
        field_path
    } else {
        match field_path {
            "spec.host" => "spec.nodeName",
            "metadata.annotations"
            | "metadata.labels"
            | "metadata.name"
            | "metadata.namespace"
            | "metadata.uid"
            | "spec.nodeName"
            | "spec.restartPolicy"
            | "spec.serviceAccountName"
            | "spec.schedulerName"
            | "status.phase"
            | "status.hostIP"
            | "status.hostIPs"
            | "status.podIP"
            | "status.podIPs" => field_path,
            _ => {
                return Err(DownwardError::FieldLabelNotSupported {
                    field_path: field_path.to_owned(),
                });
            }
        }
    };
    // (2) The fields only environment variables offer.
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let value = match field_path {
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => status.and_then(|s| s.host_ip.clone()).unwrap_or_default(),
        "status.hostIPs" => status
            .and_then(|s| s.host_ips.as_ref())
            .map(|ips| join(ips.iter().map(|i| i.ip.as_str())))
            .unwrap_or_default(),
        "status.podIP" => status.and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
        "status.podIPs" => status
            .and_then(|s| s.pod_ips.as_ref())
            .map(|ips| join(ips.iter().map(|i| i.ip.as_str())))
            .unwrap_or_default(),
        // (3) Everything else: the common extraction (which rejects spec.restartPolicy,
        // spec.schedulerName and status.phase, as the kubelet does).
        _ => return field_ref_value(pod, field_path),
    };
    Ok(value)
}

fn lookup(map: Option<&BTreeMap<String, String>>, key: &str) -> String {
    map.and_then(|m| m.get(key)).cloned().unwrap_or_default()
}

/// `metadata.labels['key']` → `("metadata.labels", "key")` (the kubelet's
/// `SplitMaybeSubscriptedPath`).
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

fn join<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(",")
}

const QUALIFIED_NAME_FMT: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
     '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Kubernetes' `IsQualifiedName` (an optional DNS-subdomain prefix and a name of ≤ 63
/// characters), reported as [`DownwardError::InvalidKeySubscript`].
fn check_qualified_name(value: &str, field_path: &str) -> Result<(), DownwardError> {
    let invalid = |problems: Vec<String>| DownwardError::InvalidKeySubscript {
        field_path: field_path.to_owned(),
        problems,
    };
    let mut problems: Vec<String> = Vec::new();
    let (prefix, name) = match value.split('/').collect::<Vec<_>>().as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return Err(invalid(vec![format!(
                "a qualified name {QUALIFIED_NAME_FMT} with an optional DNS subdomain prefix \
                 and '/' (e.g. 'example.com/MyName')"
            )]));
        }
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            problems.push("prefix part must be non-empty".into());
        } else if !is_dns_subdomain(prefix) {
            problems.push(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case \
                 alphanumeric characters, '-' or '.', and must start and end with an \
                 alphanumeric character"
                    .into(),
            );
        }
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".into());
    }
    if !is_qualified_name_part(name) {
        problems.push(format!("name part {QUALIFIED_NAME_FMT}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(invalid(problems))
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
    //! PL-13 (`TestCollectDataWithDownwardAPI` rendering) and PW-10 (env `fieldRef`).
    use super::*;
    use serde_json::json;

    /// The kubelet test's pod, bound to `node-1`, with both IP families in its status.
    fn pod() -> Pod {
        nodelet_testutil::PodBuilder::new("test_ns", "test_pod")
            .uid("test_uid")
            .label("key1", "value1")
            .label("key2", "value2")
            .annotation("a1", "x\"y\nz")
            .annotation("a2", "plain")
            .annotation("a3", "tab\there\u{1}é")
            .node("node-1")
            .service_account("sa")
            .status(
                json!({"hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}, {"ip": "fd01::5"}]}),
            )
            .build()
    }

    fn env(path: &str) -> Result<String, DownwardError> {
        env_with(None, path)
    }

    fn env_with(api_version: Option<&str>, path: &str) -> Result<String, DownwardError> {
        let selector = ObjectFieldSelector {
            api_version: api_version.map(str::to_owned),
            field_path: path.to_owned(),
        };
        env_field_ref_value(&pod(), &selector)
    }

    #[test]
    fn pl13_name_namespace_and_uid_render_as_plain_strings() {
        let p = pod();
        assert_eq!(field_ref_value(&p, "metadata.name").unwrap(), "test_pod");
        assert_eq!(
            field_ref_value(&p, "metadata.namespace").unwrap(),
            "test_ns"
        );
        assert_eq!(field_ref_value(&p, "metadata.uid").unwrap(), "test_uid");
    }

    #[test]
    fn pl13_maps_render_as_sorted_go_quoted_lines_without_a_trailing_newline() {
        let p = pod();
        assert_eq!(
            field_ref_value(&p, "metadata.labels").unwrap(),
            "key1=\"value1\"\nkey2=\"value2\""
        );
        assert_eq!(
            field_ref_value(&p, "metadata.annotations").unwrap(),
            "a1=\"x\\\"y\\nz\"\na2=\"plain\"\na3=\"tab\\there\\x01é\""
        );
        let empty = Pod::default();
        assert_eq!(field_ref_value(&empty, "metadata.labels").unwrap(), "");
    }

    #[test]
    fn pl13_subscripted_keys_render_the_value_and_a_missing_key_is_empty() {
        let p = pod();
        assert_eq!(
            field_ref_value(&p, "metadata.labels['key2']").unwrap(),
            "value2"
        );
        assert_eq!(
            field_ref_value(&p, "metadata.annotations['a2']").unwrap(),
            "plain"
        );
        assert_eq!(
            field_ref_value(&p, "metadata.annotations['nope']").unwrap(),
            ""
        );
    }

    #[test]
    fn pl13_an_empty_or_malformed_subscript_is_an_invalid_key() {
        let err = field_ref_value(&pod(), "metadata.annotations['']")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "invalid key subscript in metadata.annotations['']: name part must be non-empty"
            ),
            "{err}"
        );
        let err = field_ref_value(&pod(), "metadata.labels['a/b/c']").unwrap_err();
        assert!(matches!(err, DownwardError::InvalidKeySubscript { .. }));
        let err = field_ref_value(&pod(), "metadata.labels['/x']")
            .unwrap_err()
            .to_string();
        assert!(err.contains("prefix part must be non-empty"), "{err}");
        assert_eq!(
            field_ref_value(&pod(), "metadata.labels['example.com/key1']").unwrap(),
            ""
        );
    }

    #[test]
    fn pl13_volumes_reject_env_only_paths_and_subscripts_on_plain_fields() {
        let p = pod();
        assert_eq!(
            field_ref_value(&p, "spec.nodeName")
                .unwrap_err()
                .to_string(),
            "unsupported fieldPath: spec.nodeName"
        );
        assert_eq!(
            field_ref_value(&p, "metadata.name['x']")
                .unwrap_err()
                .to_string(),
            "fieldPath \"metadata.name['x']\" does not support subscript"
        );
    }

    #[test]
    fn pw10_env_reads_the_env_only_fields_from_the_pod() {
        assert_eq!(env("spec.nodeName").unwrap(), "node-1");
        assert_eq!(env("spec.host").unwrap(), "node-1");
        assert_eq!(env("spec.serviceAccountName").unwrap(), "sa");
        assert_eq!(env("status.hostIP").unwrap(), "10.0.0.1");
        assert_eq!(env("status.hostIPs").unwrap(), "10.0.0.1,fd00::1");
        assert_eq!(env("status.podIP").unwrap(), "10.1.0.5");
        assert_eq!(env("status.podIPs").unwrap(), "10.1.0.5,fd01::5");
        assert_eq!(env_with(Some("v1"), "metadata.name").unwrap(), "test_pod");
    }

    #[test]
    fn pw10_env_shares_the_common_fields_and_their_rendering() {
        for path in [
            "metadata.name",
            "metadata.namespace",
            "metadata.uid",
            "metadata.labels",
            "metadata.annotations",
            "metadata.labels['key1']",
            "metadata.annotations['nope']",
        ] {
            assert_eq!(env(path), field_ref_value(&pod(), path), "{path}");
        }
        let err = env("metadata.annotations['']").unwrap_err();
        assert!(matches!(err, DownwardError::InvalidKeySubscript { .. }));
    }

    #[test]
    fn pw10_env_rejects_unknown_labels_versions_and_subscripts_with_the_kubelet_texts() {
        assert_eq!(
            env("spec.bogus").unwrap_err().to_string(),
            "field label not supported: spec.bogus"
        );
        assert_eq!(
            env("metadata.name['x']").unwrap_err().to_string(),
            "field label does not support subscript: metadata.name['x']"
        );
        assert_eq!(
            env_with(Some("v2"), "metadata.name")
                .unwrap_err()
                .to_string(),
            "unsupported pod version: v2"
        );
        // Field labels the extraction itself does not render.
        assert_eq!(
            env("status.phase").unwrap_err().to_string(),
            "unsupported fieldPath: status.phase"
        );
    }
}
