//! What a node keeps of a ConfigMap or Secret the API server sends: everything but the
//! metadata no node reads.
//!
//! The API server records `metadata.managedFields` on every write (one entry per manager, each
//! naming every field it set: on a ConfigMap of 8 keys written by kubectl, about as many bytes
//! as the data itself, and many small allocations once decoded), and `kubectl apply` stores
//! the whole object it applied in the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation — for a Secret, a second copy of its values. Labels and the other annotations
//! (a chart's, a controller's) are a map each: one B-tree node of about 0.5 KiB plus two
//! strings per entry. None of them is read on a node (volumes and environment variables read
//! `data`, `binaryData`, `type` and `immutable`; the managers the name, namespace, UID and
//! resource version), so [`KubeSource`](super::KubeSource) drops them from every ConfigMap and
//! Secret it decodes, before a manager stores it for the life of the pods that use it.

use kube::Resource;

/// Drops what no node reads from `obj` (see the module docs). Of other kinds (a Node, whose
/// annotations carry the cache TTL) only `managedFields` goes.
pub(crate) fn for_node<K: Resource<DynamicType = ()>>(obj: &mut K) {
    let kind = K::kind(&());
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if kind == "ConfigMap" || kind == "Secret" {
        meta.annotations = None;
        meta.labels = None;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Secret};

    use super::*;

    #[test]
    fn managed_fields_labels_and_annotations_are_dropped_and_nothing_else() {
        let mut secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "db", "namespace": "ns", "resourceVersion": "7", "uid": "u-1",
                "labels": {"app": "db"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration":
                        "{\"data\":{\"password\":\"c2VjcmV0\"}}",
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
        assert_eq!(secret.metadata.annotations, None);
        assert_eq!(secret.metadata.labels, None);
        // What volumes, env vars and the managers read is untouched.
        assert_eq!(secret.data, before.data);
        assert_eq!(secret.type_, before.type_);
        assert_eq!(secret.immutable, before.immutable);
        assert_eq!(secret.metadata.name, before.metadata.name);
        assert_eq!(secret.metadata.namespace, before.metadata.namespace);
        assert_eq!(
            secret.metadata.resource_version,
            before.metadata.resource_version
        );
        assert_eq!(secret.metadata.uid, before.metadata.uid);
    }

    #[test]
    fn a_nodes_labels_and_annotations_are_kept() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "n1",
                "labels": {"kubernetes.io/hostname": "n1"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
        }))
        .unwrap();
        let before = node.clone();
        for_node(&mut node);

        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(node.metadata.labels, before.metadata.labels);
        assert_eq!(node.metadata.annotations, before.metadata.annotations);
    }
}
