//! [`DownwardError`]: why a downward API value could not be rendered, in the kubelet's words
//! (Go-quoted where the kubelet quotes, [`crate::go::quote`]).

use crate::go::quote as go_quote;

/// Why a downward API value could not be rendered; `Display` is the kubelet's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DownwardError {
    /// `fieldRef`: a path the field extraction does not know.
    #[error("unsupported fieldPath: {field_path}")]
    UnsupportedFieldPath {
        /// The requested path.
        field_path: String,
    },
    /// `fieldRef`: a subscript on a field other than labels or annotations.
    #[error("fieldPath {} does not support subscript", go_quote(.field_path))]
    SubscriptNotSupported {
        /// The requested path.
        field_path: String,
    },
    /// `fieldRef`: the subscript of `metadata.labels['k']` / `metadata.annotations['k']` is not
    /// a qualified name (e.g. empty).
    #[error("invalid key subscript in {field_path}: {}", .problems.join(";"))]
    InvalidKeySubscript {
        /// The requested path.
        field_path: String,
        /// What is wrong with the key, in the kubelet's words.
        problems: Vec<String>,
    },
    /// Environment `fieldRef`: `apiVersion` is not `v1`.
    #[error("unsupported pod version: {api_version}")]
    UnsupportedApiVersion {
        /// The requested version.
        api_version: String,
    },
    /// Environment `fieldRef`: a path the pod field labels do not include.
    #[error("field label not supported: {field_path}")]
    FieldLabelNotSupported {
        /// The requested path.
        field_path: String,
    },
    /// Environment `fieldRef`: a subscript on a field other than labels or annotations.
    #[error("field label does not support subscript: {field_path}")]
    FieldLabelSubscriptNotSupported {
        /// The requested path.
        field_path: String,
    },
    /// `resourceFieldRef`: the pod has no container of that name.
    #[error("container {container} not found")]
    ContainerNotFound {
        /// The requested container name.
        container: String,
    },
    /// `resourceFieldRef`: a resource the downward API does not offer.
    #[error("unsupported container resource : {resource}")]
    UnsupportedResource {
        /// The requested resource, e.g. `limits.gpu`.
        resource: String,
    },
    /// `resourceFieldRef`: a resource value, node allocatable value or divisor is not a valid
    /// quantity, or out of range (the API server never stores such a pod).
    #[error("invalid quantity {value:?} for resource {resource}")]
    InvalidQuantity {
        /// The resource.
        resource: String,
        /// The offending text.
        value: String,
    },
}
