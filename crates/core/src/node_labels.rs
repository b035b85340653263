//! The NodeRestriction admission plugin's label rules: which label keys a node
//! (`system:node:<name>`) may set, change or remove on its own Node. The agent checks its
//! configured `nodeLabels` with them; nodelet-apiserver enforces them.
//!
//! A node may set: any key outside the `[*.]kubernetes.io` and `[*.]k8s.io` namespaces; the
//! well-known kubelet labels ([`KUBELET_LABELS`]); any key under `[*.]kubelet.kubernetes.io/`
//! or `[*.]node.kubernetes.io/`. Never a key under `[*.]node-restriction.kubernetes.io/`.

/// Label keys a kubelet may set on its own Node (upstream `IsKubeletLabel`'s list).
pub const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// Label namespaces (and their subdomains) a kubelet may set keys in.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The label namespace (and its subdomains) no node may set keys in.
pub const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// Whether NodeRestriction lets a node set (add, change or remove) label `key` on its own
/// Node. See the module docs.
pub fn node_may_set_label(key: &str) -> bool {
    let ns = label_namespace(key);
    if in_domain(ns, NODE_RESTRICTION_NAMESPACE) {
        return false;
    }
    let kubernetes = in_domain(ns, "kubernetes.io") || in_domain(ns, "k8s.io");
    !kubernetes || is_kubelet_label(key)
}

/// Whether `key` is one a kubelet sets (upstream `IsKubeletLabel`): a well-known kubelet
/// label, or a key under `[*.]kubelet.kubernetes.io/` or `[*.]node.kubernetes.io/`.
pub fn is_kubelet_label(key: &str) -> bool {
    let ns = label_namespace(key);
    KUBELET_LABELS.contains(&key) || KUBELET_LABEL_NAMESPACES.iter().any(|d| in_domain(ns, d))
}

/// The prefix of `key` before its `/` (`""` without one).
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

/// `ns` is `domain` or a subdomain of it.
fn in_domain(ns: &str, domain: &str) -> bool {
    ns == domain
        || ns
            .strip_suffix(domain)
            .is_some_and(|prefix| prefix.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_labels_and_free_namespaces_are_allowed_other_kubernetes_keys_are_not() {
        for key in KUBELET_LABELS {
            assert!(node_may_set_label(key), "{key}");
        }
        for key in [
            "a.kubelet.kubernetes.io/x",
            "node.kubernetes.io/anything",
            "example.com/x",
            "plain",
            "notkubernetes.io/x",
        ] {
            assert!(node_may_set_label(key), "{key}");
        }
        for key in [
            "kubernetes.io/role",
            "node-role.kubernetes.io/worker",
            "sub.k8s.io/x",
            "k8s.io/x",
            "x.node-restriction.kubernetes.io/y",
            "node-restriction.kubernetes.io/y",
        ] {
            assert!(!node_may_set_label(key), "{key}");
        }
    }
}
