//! Downward-API values for environment variables: `fieldRef` and `resourceFieldRef`
//! (spec PW-10).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::error::EnvError;
use crate::quantity::{self, Nanos};

/// The value of `fieldRef.fieldPath` for `pod`.
///
/// Supported: `metadata.name`, `metadata.namespace`, `metadata.uid`, `metadata.labels`,
/// `metadata.annotations` (as `key="value"` lines), `metadata.labels['k']`,
/// `metadata.annotations['k']`, `spec.nodeName`, `spec.serviceAccountName`, `status.hostIP`,
/// `status.hostIPs`, `status.podIP`, `status.podIPs` (IPs from the pod's status, comma-joined).
///
/// # Errors
/// [`EnvError::UnsupportedFieldPath`] for anything else.
pub(crate) fn field_ref_value(pod: &Pod, field_path: &str) -> Result<String, EnvError> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    if let Some((map, key)) = subscript(field_path) {
        let source = match map {
            "metadata.labels" => &meta.labels,
            "metadata.annotations" => &meta.annotations,
            _ => return Err(unsupported(field_path)),
        };
        return Ok(source
            .as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default());
    }
    let value = match field_path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
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
        _ => return Err(unsupported(field_path)),
    };
    Ok(value)
}

/// The value of a `resourceFieldRef` for `container` of `pod`: `ceil(quantity / divisor)`,
/// CPU in cores by default, memory and storage in bytes. A limit the container does not set
/// is the node's allocatable amount (`node_allocatable`), as in the kubelet.
///
/// # Errors
/// [`EnvError::UnsupportedResource`], [`EnvError::ResourceContainerNotFound`],
/// [`EnvError::InvalidQuantity`].
pub(crate) fn resource_field_ref_value(
    pod: &Pod,
    container: &Container,
    selector: &ResourceFieldSelector,
    node_allocatable: &BTreeMap<String, String>,
) -> Result<String, EnvError> {
    let target = match selector.container_name.as_deref() {
        None | Some("") => container,
        Some(name) => pod
            .spec
            .as_ref()
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
            .find(|c| c.name == name)
            .ok_or_else(|| EnvError::ResourceContainerNotFound {
                container: name.to_owned(),
            })?,
    };
    let resource = selector.resource.as_str();
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| EnvError::UnsupportedResource {
            resource: resource.to_owned(),
        })?;
    let supported =
        matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-");
    if !supported || !matches!(kind, "limits" | "requests") {
        return Err(EnvError::UnsupportedResource {
            resource: resource.to_owned(),
        });
    }
    let resources = target.resources.as_ref();
    let set = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        _ => resources.and_then(|r| r.requests.as_ref()),
    };
    let text = match set.and_then(|m| m.get(name)) {
        Some(Quantity(q)) => q.clone(),
        None if kind == "limits" => node_allocatable.get(name).cloned().unwrap_or_default(),
        None => String::new(),
    };
    let invalid = |value: &str| EnvError::InvalidQuantity {
        resource: resource.to_owned(),
        value: value.to_owned(),
    };
    let amount = if text.is_empty() {
        Nanos(0)
    } else {
        quantity::parse(&text).ok_or_else(|| invalid(&text))?
    };
    let divisor_text = selector
        .divisor
        .as_ref()
        .map(|d| d.0.clone())
        .unwrap_or_default();
    let divisor = if divisor_text.is_empty() {
        quantity::parse("1")
    } else {
        quantity::parse(&divisor_text)
    }
    .ok_or_else(|| invalid(&divisor_text))?;
    let value = amount
        .ceil_div(divisor)
        .ok_or_else(|| invalid(&divisor_text))?;
    Ok(value.to_string())
}

fn subscript(path: &str) -> Option<(&str, &str)> {
    let (map, rest) = path.split_once("['")?;
    let key = rest.strip_suffix("']")?;
    Some((map, key))
}

fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    let lines: Vec<String> = map
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    lines.join("\n")
}

fn join<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(",")
}

fn unsupported(field_path: &str) -> EnvError {
    EnvError::UnsupportedFieldPath {
        field_path: field_path.to_owned(),
    }
}
