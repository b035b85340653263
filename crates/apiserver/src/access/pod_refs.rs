//! The objects each stored pod references, and the graph the Node authorizer answers from.
//!
//! A node may read a pod bound to it, and a Secret, ConfigMap or service account only when a
//! pod bound to it references the object (`node_authorizer.rs`). [`PodGraph`] holds those
//! edges ("pod → node" and "object ← pod → node", counted per node), so a check is two hash
//! lookups instead of a walk over the namespace's pods (a walk made a node's cold start
//! quadratic: at 1,000 watched objects the server spent half its time there). The graph is
//! fed pod changes in write order; the authorizer reads it through the lagged view of
//! `lagged_graph.rs`, which applies them some time after the store did.

use std::collections::HashMap;

use serde_json::Value;

/// What a pod can reference that a node may then read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RefKind {
    /// The pod itself: a node may read the pods bound to it.
    Pod,
    Secret,
    ConfigMap,
    ServiceAccount,
}

/// `(kind, namespace, name)` of a referenced object.
type Target = (RefKind, String, String);

/// For each referenced object, the nodes whose pods reference it, with how many pods.
#[derive(Debug, Default)]
pub(crate) struct PodGraph {
    edges: HashMap<Target, HashMap<String, usize>>,
}

impl PodGraph {
    /// Records that the pod `prev` (its previous version, if any) became `now` (`None` when
    /// it was deleted).
    pub(crate) fn pod_changed(&mut self, prev: Option<&Value>, now: Option<&Value>) {
        if let Some((node, targets)) = prev.and_then(bound) {
            for t in targets {
                if let Some(nodes) = self.edges.get_mut(&t) {
                    if let Some(n) = nodes.get_mut(node) {
                        *n -= 1;
                        if *n == 0 {
                            nodes.remove(node);
                        }
                    }
                    if nodes.is_empty() {
                        self.edges.remove(&t);
                    }
                }
            }
        }
        if let Some((node, targets)) = now.and_then(bound) {
            for t in targets {
                *self
                    .edges
                    .entry(t)
                    .or_default()
                    .entry(node.to_owned())
                    .or_default() += 1;
            }
        }
    }

    /// Whether a pod bound to `node` references the object.
    pub(crate) fn related(&self, kind: RefKind, namespace: &str, name: &str, node: &str) -> bool {
        // The key is owned; the lookup allocates two short strings, far cheaper than a walk.
        self.edges
            .get(&(kind, namespace.to_owned(), name.to_owned()))
            .is_some_and(|nodes| nodes.contains_key(node))
    }
}

/// The node a pod is bound to, the pod itself and what it references (each object once);
/// `None` when unbound.
fn bound(pod: &Value) -> Option<(&str, Vec<Target>)> {
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())?;
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let own = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(|name| (RefKind::Pod, name));
    let mut targets: Vec<Target> = own
        .into_iter()
        .chain(references(pod))
        .map(|(kind, name)| (kind, namespace.to_owned(), name.to_owned()))
        .collect();
    targets.sort_by(|a, b| (a.0 as u8, &a.2).cmp(&(b.0 as u8, &b.2)));
    targets.dedup();
    Some((node, targets))
}

/// Every object the pod's spec references: its service account (`default` when unnamed);
/// Secrets from `imagePullSecrets`, volumes (including projected sources and the secret
/// references of CSI and other in-tree drivers) and `env`/`envFrom` of every container, init
/// and ephemeral container; ConfigMaps from volumes, projected sources and `env`/`envFrom`.
pub(crate) fn references(pod: &Value) -> Vec<(RefKind, &str)> {
    let mut out = Vec::new();
    let Some(spec) = pod.get("spec") else {
        return out;
    };
    let sa = spec
        .get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    out.push((RefKind::ServiceAccount, sa));
    for r in items(spec.get("imagePullSecrets")) {
        push(&mut out, RefKind::Secret, r.get("name"));
    }
    for vol in items(spec.get("volumes")) {
        push(&mut out, RefKind::ConfigMap, vol.pointer("/configMap/name"));
        for path in SECRET_VOLUME_PATHS {
            push(&mut out, RefKind::Secret, vol.pointer(path));
        }
        for src in items(vol.pointer("/projected/sources")) {
            push(&mut out, RefKind::ConfigMap, src.pointer("/configMap/name"));
            push(&mut out, RefKind::Secret, src.pointer("/secret/name"));
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in items(spec.get(list)) {
            for e in items(c.get("env")) {
                let from = e.get("valueFrom");
                let from = |p: &str| from.and_then(|f| f.pointer(p));
                push(&mut out, RefKind::Secret, from("/secretKeyRef/name"));
                push(&mut out, RefKind::ConfigMap, from("/configMapKeyRef/name"));
            }
            for e in items(c.get("envFrom")) {
                push(&mut out, RefKind::Secret, e.pointer("/secretRef/name"));
                push(
                    &mut out,
                    RefKind::ConfigMap,
                    e.pointer("/configMapRef/name"),
                );
            }
        }
    }
    out
}

/// The items of a JSON array (none when absent or not an array).
fn items(x: Option<&Value>) -> &[Value] {
    x.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Adds `v` as a reference of `kind` when it is a string.
fn push<'a>(out: &mut Vec<(RefKind, &'a str)>, kind: RefKind, v: Option<&'a Value>) {
    if let Some(n) = v.and_then(Value::as_str) {
        out.push((kind, n));
    }
}

/// Where a volume source names a Secret.
const SECRET_VOLUME_PATHS: &[&str] = &[
    "/secret/secretName",
    "/csi/nodePublishSecretRef/name",
    "/azureFile/secretName",
    "/cephfs/secretRef/name",
    "/cinder/secretRef/name",
    "/flexVolume/secretRef/name",
    "/iscsi/secretRef/name",
    "/rbd/secretRef/name",
    "/scaleIO/secretRef/name",
    "/storageos/secretRef/name",
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(node: &str, secret: &str) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": "robot",
                "volumes": [{"name": "v", "secret": {"secretName": secret}},
                            {"name": "w", "projected": {"sources": [{"configMap": {"name": "cm"}}]}}],
                "containers": [{"name": "c", "envFrom": [{"secretRef": {"name": secret}}],
                                "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}}]}],
            }
        })
    }

    #[test]
    fn the_graph_follows_pods_as_they_are_bound_changed_and_deleted() {
        let mut g = PodGraph::default();
        let unbound = pod("", "s1");
        g.pod_changed(None, Some(&unbound));
        assert!(!g.related(RefKind::Secret, "ns", "s1", "n1"));

        let a = pod("n1", "s1");
        g.pod_changed(Some(&unbound), Some(&a));
        assert!(g.related(RefKind::Secret, "ns", "s1", "n1"));
        assert!(g.related(RefKind::ConfigMap, "ns", "cm", "n1"));
        assert!(g.related(RefKind::ConfigMap, "ns", "env-cm", "n1"));
        assert!(g.related(RefKind::ServiceAccount, "ns", "robot", "n1"));
        assert!(g.related(RefKind::Pod, "ns", "p", "n1"));
        assert!(!g.related(RefKind::Pod, "ns", "p", "n2"));
        assert!(!g.related(RefKind::Secret, "ns", "s1", "n2"));
        assert!(!g.related(RefKind::Secret, "other", "s1", "n1"));
        assert!(!g.related(RefKind::ConfigMap, "ns", "s1", "n1"));

        // A second pod on the same node referencing s1: s1 stays related until both are gone.
        let mut b = pod("n1", "s1");
        b["metadata"]["name"] = json!("q");
        g.pod_changed(None, Some(&b));
        let a2 = pod("n1", "s2");
        g.pod_changed(Some(&a), Some(&a2));
        assert!(g.related(RefKind::Secret, "ns", "s1", "n1"));
        assert!(g.related(RefKind::Secret, "ns", "s2", "n1"));
        g.pod_changed(Some(&b), None);
        assert!(!g.related(RefKind::Secret, "ns", "s1", "n1"));
        g.pod_changed(Some(&a2), None);
        assert!(g.edges.is_empty(), "{:?}", g.edges);
    }

    #[test]
    fn a_pod_references_secrets_through_volumes_env_envfrom_and_pull_secrets() {
        let pod = json!({"spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "vol"}},
                {"name": "b", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "pcm"}}]}},
                {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
            ],
            "initContainers": [{"name": "i", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}]}],
            "containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "from"}}, {"configMapRef": {"name": "cmfrom"}}]}],
        }});
        let refs = references(&pod);
        let has = |kind: RefKind, name: &str| refs.contains(&(kind, name));
        for s in ["pull", "vol", "proj", "csi", "env", "from"] {
            assert!(has(RefKind::Secret, s), "{s}");
        }
        assert!(!has(RefKind::Secret, "pcm"));
        assert!(has(RefKind::ConfigMap, "pcm"));
        assert!(has(RefKind::ConfigMap, "cmfrom"));
        assert!(!has(RefKind::ConfigMap, "vol"));
        assert!(has(RefKind::ServiceAccount, "default"));
    }

    #[test]
    fn a_pod_naming_an_object_twice_counts_once() {
        let mut g = PodGraph::default();
        let p = pod("n1", "same");
        g.pod_changed(None, Some(&p));
        g.pod_changed(Some(&p), None);
        assert!(g.edges.is_empty());
    }
}
