//! Which labels NodeRestriction lets a node set on its own Node: read by the configuration
//! check (`nodeLabels`) and by registration.

/// Whether NodeRestriction lets a node set label `key` on its own Node: any key outside the
/// `[*.]kubernetes.io` and `[*.]k8s.io` namespaces, keys under `[*.]kubelet.kubernetes.io` and
/// `[*.]node.kubernetes.io`, and the well-known kubelet labels; never
/// `[*.]node-restriction.kubernetes.io`.
pub(crate) fn node_may_set_label(key: &str) -> bool {
    const KUBELET_LABELS: &[&str] = &[
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    ];
    let ns = key.split_once('/').map_or("", |(ns, _)| ns);
    let within =
        |domain: &str| ns == domain || ns.strip_suffix(domain).is_some_and(|p| p.ends_with('.'));
    if within("node-restriction.kubernetes.io") {
        return false;
    }
    if !(within("kubernetes.io") || within("k8s.io")) {
        return true;
    }
    KUBELET_LABELS.contains(&key) || within("kubelet.kubernetes.io") || within("node.kubernetes.io")
}
