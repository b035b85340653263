//! What a node keeps of a ConfigMap or Secret the API server sends: everything but the
//! metadata no node reads.
//!
//! The API server records `metadata.managedFields` on every write (one entry per manager, each
//! naming every field it set: on a ConfigMap of 8 keys written by kubectl, about as many bytes
//! as the data itself, and many small allocations once decoded), and `kubectl apply` stores
//! the whole object it applied in the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation — for a Secret, a second copy of its values. Neither is read on a node (volumes
//! and environment variables read `data`, `binaryData`, `type` and
//! `immutable`), so [`KubeSource`](super::KubeSource) drops both from every object it
//! decodes, before a manager stores it for the life of the pods that use it.

use kube::Resource;

/// The annotation `kubectl apply` keeps its last applied object in.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no node reads from `obj` (see the module docs), and the spare capacity of the
/// annotation map when that leaves it empty.
pub(crate) fn for_node<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;

    use super::*;

    #[test]
    fn managed_fields_and_the_last_applied_copy_are_dropped_and_nothing_else() {
        let mut secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "db", "namespace": "ns", "resourceVersion": "7", "uid": "u-1",
                "labels": {"app": "db"},
                "annotations": {
                    LAST_APPLIED: "{\"data\":{\"password\":\"c2VjcmV0\"}}",
                    "team": "storage",
                },
                "managedFields": [{
                    "manager": "kubectl-client-side-apply", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {"f:password": {}}},
                }],
            },
            "type": "Opaque",
            "immutable": true,
            "data": {"password": "c2VjcmV0"},
        }))
        .unwrap();
        let before = secret.clone();
        for_node(&mut secret);

        assert_eq!(secret.metadata.managed_fields, None);
        let annotations = secret.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations["team"], "storage");
        // What volumes, env vars and the managers read is untouched.
        assert_eq!(secret.data, before.data);
        assert_eq!(secret.type_, before.type_);
        assert_eq!(secret.immutable, before.immutable);
        assert_eq!(secret.metadata.labels, before.metadata.labels);
        assert_eq!(
            secret.metadata.resource_version,
            before.metadata.resource_version
        );
        assert_eq!(secret.metadata.uid, before.metadata.uid);
    }

    #[test]
    fn an_annotation_map_left_empty_is_freed() {
        let mut secret = Secret::default();
        secret.metadata.annotations = Some([(LAST_APPLIED.to_owned(), "{}".to_owned())].into());
        for_node(&mut secret);
        assert_eq!(secret.metadata.annotations, None);
    }
}
