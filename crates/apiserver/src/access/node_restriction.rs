//! The NodeRestriction admission plugin's rules for Node objects, applied to every create,
//! update and patch of a Node (or its `status`) by a `system:node:<name>` user in
//! `system:nodes` (upstream `plugin/pkg/admission/noderestriction`, `admitNode`).
//!
//! # Rules, in the order upstream checks them
//! 1. A node may create or modify only the Node named after itself:
//!    `node "n1" is not allowed to modify node "n2"`.
//! 2. On create: no `spec.configSource`; no label outside the set a kubelet may set
//!    (`node "n1" is not allowed to set the following labels: a, b`).
//! 3. On update or patch (the object after the patch, before defaulting and validation,
//!    against the stored one): `spec.configSource` may not change to a new non-nil value;
//!    `spec.taints` may not change at all (`node "n1" is not allowed to modify taints`), so
//!    a node sets its taints only when it creates itself; labels outside the kubelet set may
//!    not be added, changed or removed (`is not allowed to modify labels: a, b`, upstream's
//!    text, without the node's name).
//!
//! Every refusal is a 403 `Forbidden` on `nodes "<name>"`. A node's PodCertificateRequest
//! create is checked against the node, pod and service account it names
//! ([`admit_pod_certificate_request`]). The label rules are
//! `nodelet_core::node_labels` (the agent checks its own `nodeLabels` with the same code).
//! Labels a kubelet may set
//! (`k8s.io/kubelet/pkg/apis.IsKubeletLabel`): `kubernetes.io/hostname`, `kubernetes.io/os`,
//! `kubernetes.io/arch`, `beta.kubernetes.io/os`, `beta.kubernetes.io/arch`,
//! `beta.kubernetes.io/instance-type`, `node.kubernetes.io/instance-type`,
//! `topology.kubernetes.io/{zone,region}`, `failure-domain.beta.kubernetes.io/{zone,region}`,
//! and any key under `[*.]kubelet.kubernetes.io/` or `[*.]node.kubernetes.io/`; other keys in a
//! `[*.]kubernetes.io` or `[*.]k8s.io` namespace, and every `[*.]node-restriction.kubernetes.io`
//! key, are forbidden. Keys outside those namespaces are free.

use std::collections::BTreeSet;

use nodelet_core::node_labels::node_may_set_label;
use serde_json::{Map, Value};

use crate::resources::{NODES, POD_CERTIFICATE_REQUESTS, PODS, SERVICEACCOUNTS};
use crate::status::ApiError;
use crate::store::{Inner, Key};

/// Admits (or refuses with a 403) `node` writing the Node `name`: `new` is the object to be
/// stored, `old` the stored one (`None` on create). See the module docs.
pub(crate) fn admit_node(
    node: &str,
    name: &str,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let refuse = |why: String| Err(ApiError::forbidden(Some(NODES.info()), name, &why));
    // (1)
    if name != node {
        return refuse(format!(
            "node {node:?} is not allowed to modify node {name:?}"
        ));
    }
    let Some(old) = old else {
        // (2)
        if config_source(new).is_some() {
            // Upstream's text says "pods" here.
            return refuse(format!(
                "node {node:?} is not allowed to create pods with a non-nil configSource"
            ));
        }
        let forbidden = forbidden_labels(modified_labels(labels(new), None));
        if !forbidden.is_empty() {
            return refuse(format!(
                "node {node:?} is not allowed to set the following labels: {}",
                forbidden.join(", ")
            ));
        }
        return Ok(());
    };
    // (3)
    if let Some(source) = config_source(new)
        && config_source(old) != Some(source)
    {
        return refuse(format!(
            "node {node:?} is not allowed to update configSource to a new non-nil configSource"
        ));
    }
    if taints(new) != taints(old) {
        return refuse(format!("node {node:?} is not allowed to modify taints"));
    }
    let forbidden = forbidden_labels(modified_labels(labels(new), labels(old)));
    if !forbidden.is_empty() {
        return refuse(format!(
            "is not allowed to modify labels: {}",
            forbidden.join(", ")
        ));
    }
    Ok(())
}

/// Admits (or refuses) `node` creating, in `ns`, the PodCertificateRequest `req` (`name` as
/// requested, empty with `generateName`), against the stored node, pod and service account
/// (upstream `admitPodCertificateRequest`, in its order):
/// 1. `spec.nodeName` is the requesting node (403);
/// 2. the node exists (else 500) and has `spec.nodeUID` (else 500: informer lag upstream);
/// 3. the pod exists (else 500), has `spec.podUID` (else 500), runs on the node (403), is not
///    a mirror pod (403) and runs as `spec.serviceAccountName` (403);
/// 4. the service account exists (else 500) and has `spec.serviceAccountUID` (else 500).
///
/// A 500 is upstream's plain error (no reason): a retry may succeed once caches catch up.
pub(crate) fn admit_pod_certificate_request(
    s: &Inner,
    node: &str,
    ns: &str,
    name: &str,
    req: &Value,
) -> Result<(), ApiError> {
    let forbid = |why: String| {
        Err(ApiError::forbidden(
            Some(POD_CERTIFICATE_REQUESTS.info()),
            name,
            &why,
        ))
    };
    let retry = |why: String| Err(ApiError::new(500, "", why));
    let spec = |f: &str| {
        req.pointer(&format!("/spec/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let uid = |o: &Value| {
        o.pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (node_name, pod_name, sa_name) = (
        spec("nodeName"),
        spec("podName"),
        spec("serviceAccountName"),
    );
    let pod_ref = format!("{ns}/{pod_name}");
    // (1)
    if node_name != node {
        return forbid(format!(
            "PodCertificateRequest.Spec.NodeName={node_name:?}, which is not the requesting node {node:?}"
        ));
    }
    // (2)
    let Some(stored_node) = s.get(&Key::new(NODES, "", node_name)) else {
        return retry(format!(
            "while retrieving node {node_name:?} named in the PodCertificateRequest: nodes {node_name:?} not found"
        ));
    };
    if uid(stored_node) != spec("nodeUID") {
        return retry(format!(
            "PodCertificateRequest for pod {pod_ref:?} names node UID {:?}, inconsistent with the running node ({:?})",
            spec("nodeUID"),
            uid(stored_node)
        ));
    }
    // (3)
    let Some(pod) = s.get(&Key::new(PODS, ns, pod_name)) else {
        return retry(format!(
            "while retrieving pod {pod_ref:?} named in the PodCertificateRequest: pods {pod_name:?} not found"
        ));
    };
    if spec("podUID") != uid(pod) {
        return retry(format!(
            "PodCertificateRequest for pod {pod_ref:?} contains pod UID ({:?}) which differs from running pod {:?}",
            spec("podUID"),
            uid(pod)
        ));
    }
    if pod.pointer("/spec/nodeName").and_then(Value::as_str) != Some(node_name) {
        return forbid(format!(
            "pod {pod_ref:?} is not running on node {node_name:?} named in the PodCertificateRequest"
        ));
    }
    if pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some()
    {
        return forbid(format!("pod {pod_ref:?} is a mirror pod"));
    }
    let pod_sa = pod
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if sa_name != pod_sa {
        return forbid(format!(
            "PodCertificateRequest for pod {pod_ref:?} contains serviceAccountName ({sa_name:?}) that differs from running pod ({pod_sa:?})"
        ));
    }
    // (4)
    let Some(sa) = s.get(&Key::new(SERVICEACCOUNTS, ns, sa_name)) else {
        return retry(format!(
            "while retrieving service account {:?} named in the PodCertificateRequest: serviceaccounts {sa_name:?} not found",
            format!("{ns}/{sa_name}")
        ));
    };
    if spec("serviceAccountUID") != uid(sa) {
        return retry(format!(
            "PodCertificateRequest for pod {pod_ref:?} names service account UID {:?}, which differs from the running service account ({:?})",
            spec("serviceAccountUID"),
            uid(sa)
        ));
    }
    Ok(())
}

fn config_source(node: &Value) -> Option<&Value> {
    node.pointer("/spec/configSource").filter(|c| !c.is_null())
}

fn labels(node: &Value) -> Option<&Map<String, Value>> {
    node.pointer("/metadata/labels").and_then(Value::as_object)
}

/// The taints as upstream's semantic equality sees them: a missing, null or empty list are the
/// same, and so are a missing and an empty `value` or `timeAdded` inside a taint.
fn taints(node: &Value) -> Vec<Map<String, Value>> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            t.as_object()
                .into_iter()
                .flatten()
                .filter(|(_, v)| !(v.is_null() || v.as_str() == Some("")))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .collect()
}

/// Keys added, removed or changed between two label maps, sorted.
fn modified_labels(
    new: Option<&Map<String, Value>>,
    old: Option<&Map<String, Value>>,
) -> BTreeSet<String> {
    let empty = Map::new();
    let (new, old) = (new.unwrap_or(&empty), old.unwrap_or(&empty));
    let changed = |a: &Map<String, Value>, b: &Map<String, Value>| {
        a.iter()
            .filter(|(k, v)| b.get(k.as_str()) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    changed(new, old)
        .into_iter()
        .chain(changed(old, new))
        .collect()
}

/// The modified keys a node may not touch, in sorted order.
fn forbidden_labels(modified: BTreeSet<String>) -> Vec<String> {
    modified
        .into_iter()
        .filter(|key| !node_may_set_label(key))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}})
    }

    #[test]
    fn kubelet_labels_and_free_namespaces_are_allowed_others_in_kubernetes_namespaces_are_not() {
        let keys: BTreeSet<String> = [
            "kubernetes.io/hostname",
            "a.kubelet.kubernetes.io/x",
            "node.kubernetes.io/anything",
            "example.com/x",
            "plain",
            "kubernetes.io/role",
            "sub.k8s.io/x",
            "x.node-restriction.kubernetes.io/y",
            "notkubernetes.io/x",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(
            forbidden_labels(keys),
            vec![
                "kubernetes.io/role",
                "sub.k8s.io/x",
                "x.node-restriction.kubernetes.io/y"
            ]
        );
    }

    #[test]
    fn missing_null_and_empty_taint_lists_are_the_same_list() {
        let old = node(json!({}), Value::Null);
        let new = node(json!({}), json!([]));
        assert!(admit_node("n1", "n1", &new, Some(&old)).is_ok());
        let t = json!([{"key": "k", "effect": "NoSchedule", "value": ""}]);
        let same = json!([{"key": "k", "effect": "NoSchedule"}]);
        assert!(
            admit_node(
                "n1",
                "n1",
                &node(json!({}), same),
                Some(&node(json!({}), t))
            )
            .is_ok()
        );
    }

    #[test]
    fn an_unchanged_forbidden_label_is_not_a_modification() {
        let labels = json!({"node-role.kubernetes.io/worker": ""});
        let old = node(labels.clone(), Value::Null);
        let new = node(labels, Value::Null);
        assert!(admit_node("n1", "n1", &new, Some(&old)).is_ok());
    }
}
