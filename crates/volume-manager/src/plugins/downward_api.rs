//! The downwardAPI volume plugin, `kubernetes.io/downward-api`, and `CollectData`, shared with
//! projected volumes (PL-13); the values come from [`nodelet_core::downward`].

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, Pod, Volume};
use nodelet_atomic_writer::{FileProjection, Payload, WriteOutcome, clean_path};

use super::api::{SetUpOutcome, VolumePlugin};
use super::host::{Medium, SetUpContext};
use super::payload::mode_bits;
use crate::SetUpError;
use nodelet_core::NodeAllocatable;
use nodelet_core::downward::{field_ref_value, resource_field_ref_value};

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
        let Some(source) = ctx.volume.downward_api() else {
            return Err(SetUpError::Unsupported {
                what: "a volume without a downwardAPI source".into(),
            });
        };
        let _slot = ctx.host.write_slot().await;
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
/// `default_mode`; `fieldRef` renders a pod field ([`field_ref_value`]), `resourceFieldRef` a
/// container resource ([`resource_field_ref_value`]); a failing item is still written, empty.
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
            field_ref_value(pod, &field.field_path)
        } else if let Some(resource) = &item.resource_field_ref {
            resource_field_ref_value(pod, resource, None, allocatable)
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

#[cfg(test)]
mod tests {
    //! `TestCollectDataWithDownwardAPI` through `CollectData` (PL-13); the rendering rules
    //! themselves are tested in `nodelet_core::downward`.
    use super::*;
    use serde_json::json;

    /// The kubelet test's pod: `test_ns/test_pod`, two labels, two annotations.
    fn pod() -> Pod {
        nodelet_testutil::PodBuilder::new("test_ns", "test_pod")
            .uid("test_uid")
            .label("key1", "value1")
            .label("key2", "value2")
            .annotation("a1", "x\"y\nz")
            .annotation("a2", "plain")
            .build()
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
    fn resource_items_use_the_shared_rendering_and_failing_items_are_written_empty() {
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(json!([
            {"path": "cpu", "resourceFieldRef":
                {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}},
            {"path": "gpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.gpu"}}
        ]))
        .unwrap();
        let alloc = NodeAllocatable {
            cpu_millis: 2500,
            memory_bytes: 0,
            ephemeral_storage_bytes: 0,
        };
        let err = collect_downward_api_data(&items, &pod(), &alloc, Some(0o644)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported container resource : limits.gpu"
        );
        assert!(matches!(
            err,
            SetUpError::DownwardApi(
                nodelet_core::downward::DownwardError::UnsupportedResource { .. }
            )
        ));
        let ok = collect_downward_api_data(&items[..1], &pod(), &alloc, Some(0o644)).unwrap();
        assert_eq!(
            ok.get("cpu").map(|f| f.data.clone()),
            Some(b"2500".to_vec())
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
