//! The authorizer installed by [`Config::with_auth`](crate::Config::with_auth): admins may do
//! everything, a kubelet (`system:node:<name>` in `system:nodes`) what the upstream Node
//! authorizer plus the NodeRestriction admission plugin let it do, everyone else nothing.
//!
//! # What a node may do
//! 1. Pods: `get` a pod bound to it; `list`/`watch` with `fieldSelector=spec.nodeName=<node>`
//!    (or one pod bound to it by `metadata.name`); `update`/`patch` the `status` of, and
//!    `delete`, pods bound to it.
//! 2. Secrets and configmaps: `get`, and `list`/`watch` of a single object by `metadata.name`
//!    field selector, of the objects a pod bound to it references — volumes (including
//!    projected sources and CSI `nodePublishSecretRef`), `env`/`envFrom` of every container,
//!    init and ephemeral container, and `imagePullSecrets`.
//! 3. Service accounts: only `create` of `serviceaccounts/<sa>/token` for a service account a
//!    pod bound to it runs as.
//! 4. Nodes: `create`, `update`/`patch` (and the `status` of) a Node, which NodeRestriction
//!    admission (`node_restriction.rs`, applied to every node user) then limits to its own
//!    Node, taints only at creation, and the labels a kubelet may set; `get`, and
//!    `list`/`watch` by `metadata.name`, of its own Node only.
//! 5. Leases: `get`/`create`/`update`/`patch`/`delete` of its own Lease in `kube-node-lease`.
//! 6. Events (`v1` and `events.k8s.io`): `create`/`update`/`patch`.
//! 7. With the `ClusterTrustBundle` gate: `get`/`list`/`watch` of ClusterTrustBundles. With
//!    the `PodCertificateRequest` gate: `create` of PodCertificateRequests (NodeRestriction
//!    then checks the node, pod and service account named, `node_restriction.rs`), `get` of
//!    one naming it in `spec.nodeName`, `list`/`watch` only with
//!    `fieldSelector=spec.nodeName=<node>`, never `status`; and `get` of the service accounts
//!    its pods run as.
//! 8. `create` of `tokenreviews`, `subjectaccessreviews` and `localsubjectaccessreviews`
//!    (upstream's static node rules: a kubelet checks the callers of its own API).
//! 9. Non-resource `GET`s (discovery, `/version`, health, OIDC) and `create` of
//!    `selfsubjectreviews` (`kubectl auth whoami`) and `selfsubjectaccessreviews`
//!    (`kubectl auth can-i`) — for every authenticated user.
//!
//! Denials are 403 with the upstream message and reason texts, e.g.
//! `configmaps "x" is forbidden: User "system:node:n1" cannot get resource "configmaps" in API
//! group "" in the namespace "ns": no relationship found between node 'n1' and this object`.
//!
//! # Eventual consistency
//! The relationships "node ← pod" and "node ← pod ← object" (for pods, Secrets, ConfigMaps
//! and service accounts) are answered from the store's lagged view of the pod graph
//! (`lagged_graph.rs`), as upstream answers from a graph its informers fill: a pod write
//! becomes visible [`Config::node_authorizer_lag`](crate::Config::node_authorizer_lag) after
//! it is made (default 50 ms; 0 is immediately consistent). Until then a node is refused the
//! objects of a pod just bound to it, with the usual "no relationship found" denial, and
//! still allowed those of a pod just deleted. After a simulated restart
//! ([`ServerHandle::restart`](crate::ServerHandle::restart)) the graph is empty, so every such
//! request is refused, until it is rebuilt from the stored pods
//! [`Restart::graph_rebuild`](struct@crate::Restart#structfield.graph_rebuild) later. Checks
//! that read one stored object (PodCertificateRequests, and NodeRestriction's own-pod checks
//! on pod status and deletion) read the store as it is.
//!
//! # Differences from upstream
//! - The lag is one fixed delay per write rather than the time informers and the graph's
//!   own queue take on a busy server, and the rebuild after a restart one fixed delay.
//! - The NodeRestriction checks that need only the stored object (deleting and updating the
//!   status of other nodes' pods) are made here and answered in the authorizer's message
//!   shape; those on Node objects are made at admission with upstream's texts
//!   (`node_restriction.rs`). A node's TokenRequest must be bound to a pod scheduled on it
//!   (checked with the upstream texts by `token_request.rs`). Checks that need other request
//!   bodies (the name of a created Lease, mirror-pod creation, token audiences) are not made,
//!   and pod creation is denied.

use std::sync::Arc;

use serde_json::Value;

use crate::access::auth::{Attributes, Authorizer, Decision};
use crate::access::pod_refs::RefKind;
use crate::registry::Registry;
use crate::resources::{
    CLUSTER_TRUST_BUNDLE_GATE, POD_CERTIFICATE_REQUEST_GATE, POD_CERTIFICATE_REQUESTS, PODS,
};
use crate::store::Key;

/// The Node authorizer (see the module docs). Only meaningful when built by the server for
/// [`Config::with_auth`](crate::Config::with_auth), with the server's registry to read; built
/// with `Default` it has no store, and allows admins and denies everyone else.
#[derive(Clone, Default)]
pub struct NodeAuthorizer {
    registry: Option<Arc<Registry>>,
}

impl std::fmt::Debug for NodeAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAuthorizer")
            .field("has_store", &self.registry.is_some())
            .finish()
    }
}

/// What a node's request is checked against in the pod graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vertex {
    Pod,
    PodCertificateRequest,
    Secret,
    ConfigMap,
    ServiceAccount,
}

impl NodeAuthorizer {
    /// The Node authorizer of the server whose registry this is.
    pub(crate) fn for_registry(registry: Arc<Registry>) -> Self {
        NodeAuthorizer {
            registry: Some(registry),
        }
    }

    fn node_request(&self, node: &str, a: &Attributes) -> Decision {
        let sub = a.subresource.as_deref().unwrap_or("");
        match (a.api_group.as_str(), a.resource.as_str()) {
            ("", "secrets") => self.read_namespaced(node, Vertex::Secret, a),
            ("", "configmaps") => self.read_namespaced(node, Vertex::ConfigMap, a),
            ("", "serviceaccounts")
                if a.verb == "get"
                    && a.subresource.is_none()
                    && self.gate(POD_CERTIFICATE_REQUEST_GATE) =>
            {
                self.read_namespaced(node, Vertex::ServiceAccount, a)
            }
            ("", "serviceaccounts") => self.create_token(node, a),
            ("certificates.k8s.io", "clustertrustbundles")
                if self.gate(CLUSTER_TRUST_BUNDLE_GATE)
                    && sub.is_empty()
                    && matches!(a.verb.as_str(), "get" | "list" | "watch") =>
            {
                Decision::Allow
            }
            ("certificates.k8s.io", "podcertificaterequests")
                if self.gate(POD_CERTIFICATE_REQUEST_GATE) =>
            {
                self.pod_certificate_request(node, a, sub)
            }
            // Not the Node authorizer's: RBAC's `system:node` role lets every node read
            // services (the kubelet's service environment), and this server has no RBAC.
            ("", "services")
                if sub.is_empty() && matches!(a.verb.as_str(), "get" | "list" | "watch") =>
            {
                Decision::Allow
            }
            ("coordination.k8s.io", "leases") => lease(node, a),
            ("", "nodes") => self.node_object(node, a, sub),
            ("", "pods") => self.pod(node, a, sub),
            ("" | "events.k8s.io", "events")
                if sub.is_empty() && matches!(a.verb.as_str(), "create" | "update" | "patch") =>
            {
                Decision::Allow
            }
            // The static node rules: delegated authentication and authorization (a kubelet
            // checks the callers of its own API).
            ("authentication.k8s.io", "tokenreviews")
            | ("authorization.k8s.io", "subjectaccessreviews" | "localsubjectaccessreviews")
                if sub.is_empty() && a.verb == "create" =>
            {
                Decision::Allow
            }
            _ => Decision::Deny(String::new()),
        }
    }

    /// `Config::service_account_access`: a service account may do anything with namespaced
    /// objects of its own namespace, as if the `edit` role were bound to it there.
    fn service_account_may(&self, a: &Attributes) -> bool {
        let on = self
            .registry
            .as_deref()
            .is_some_and(|r| r.service_account_access);
        let Some(namespace) = a.namespace.as_deref().filter(|n| !n.is_empty()) else {
            return false;
        };
        let own = format!("system:serviceaccounts:{namespace}");
        on && a.user.groups.contains(&own)
    }

    /// Whether feature gate `name` is on in the server this authorizer reads.
    fn gate(&self, name: &str) -> bool {
        self.registry
            .as_deref()
            .is_some_and(|r| r.served.gate(name))
    }

    /// PodCertificateRequests: `create` (NodeRestriction admission then checks the node, pod
    /// and service account it names), `get` of one naming this node, `list`/`watch` only with
    /// `fieldSelector=spec.nodeName=<node>`; no `status`.
    fn pod_certificate_request(&self, node: &str, a: &Attributes, sub: &str) -> Decision {
        if !sub.is_empty() {
            return deny("nodes may not access the status subresource of PodCertificateRequests");
        }
        match a.verb.as_str() {
            "create" => Decision::Allow,
            "get" => self.related(node, Vertex::PodCertificateRequest, a),
            "list" | "watch" => {
                if a.field_selector
                    .as_deref()
                    .is_some_and(|fs| selects_node(fs, node))
                {
                    Decision::Allow
                } else {
                    deny("can only list/watch podcertificaterequests with nodeName field selector")
                }
            }
            verb => Decision::Deny(format!("nodes may not {verb} podcertificaterequests")),
        }
    }

    fn read_namespaced(&self, node: &str, v: Vertex, a: &Attributes) -> Decision {
        if !matches!(a.verb.as_str(), "get" | "list" | "watch") {
            return deny("can only read resources of this type");
        }
        if a.subresource.is_some() {
            return deny("cannot read subresource");
        }
        if a.namespace.as_deref().unwrap_or("").is_empty() {
            return deny("can only read namespaced object of this type");
        }
        self.related(node, v, a)
    }

    /// The graph check: is there a path node ← pod (← object)?
    fn related(&self, node: &str, v: Vertex, a: &Attributes) -> Decision {
        let Some(name) = a.name.as_deref().filter(|n| !n.is_empty()) else {
            return deny("No Object name found");
        };
        let ns = a.namespace.as_deref().unwrap_or("");
        let found = self
            .registry
            .as_deref()
            .is_some_and(|r| pods_on_node_reference(r, node, ns, v, name));
        if found {
            Decision::Allow
        } else {
            Decision::Deny(format!(
                "no relationship found between node '{node}' and this object"
            ))
        }
    }

    fn create_token(&self, node: &str, a: &Attributes) -> Decision {
        if a.verb != "create" || a.name.as_deref().unwrap_or("").is_empty() {
            return deny("can only create tokens for individual service accounts");
        }
        if a.subresource.as_deref() != Some("token") {
            return deny("can only create token subresource of serviceaccount");
        }
        self.related(node, Vertex::ServiceAccount, a)
    }

    fn node_object(&self, node: &str, a: &Attributes, sub: &str) -> Decision {
        let name = a.name.as_deref().unwrap_or("");
        match (sub, a.verb.as_str()) {
            // NodeRestriction admission (`node_restriction.rs`) limits these to its own Node.
            ("", "create") | ("" | "status", "update" | "patch") => Decision::Allow,
            ("", "get" | "list" | "watch") => match name {
                n if n == node => Decision::Allow,
                "" => Decision::Deny(format!(
                    "node '{node}' cannot read all nodes, only its own Node object"
                )),
                other => Decision::Deny(format!(
                    "node '{node}' cannot read '{other}', only its own Node object"
                )),
            },
            _ => Decision::Deny(String::new()),
        }
    }

    fn pod(&self, node: &str, a: &Attributes, sub: &str) -> Decision {
        match (sub, a.verb.as_str()) {
            ("", "get") => self.related(node, Vertex::Pod, a),
            ("", "list" | "watch") => {
                if a
                    .field_selector
                    .as_deref()
                    .is_some_and(|fs| selects_node(fs, node))
                {
                    return Decision::Allow;
                }
                if a.name.as_deref().is_some_and(|n| !n.is_empty()) {
                    return self.related(node, Vertex::Pod, a);
                }
                deny("can only list/watch pods with spec.nodeName field selector")
            }
            ("", "delete") => self.own_pod_or(
                node,
                a,
                format!("node {node:?} can only delete pods with spec.nodeName set to itself"),
            ),
            ("status", "update" | "patch") => self.own_pod_or(
                node,
                a,
                format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ),
            ),
            _ => Decision::Deny(String::new()),
        }
    }

    /// NodeRestriction on an existing pod: allowed if it is bound to `node` (or gone, so the
    /// handler answers 404), else denied with `why`.
    fn own_pod_or(&self, node: &str, a: &Attributes, why: String) -> Decision {
        let Some(registry) = self.registry.as_deref() else {
            return Decision::Deny(why);
        };
        let ns = a.namespace.as_deref().unwrap_or("");
        let name = a.name.as_deref().unwrap_or("");
        let s = registry.store.inner.lock();
        match s.get(&Key::new(PODS, ns, name)) {
            None => Decision::Allow,
            Some(pod) if node_name(pod) == Some(node) => Decision::Allow,
            Some(_) => Decision::Deny(why),
        }
    }
}

impl Authorizer for NodeAuthorizer {
    fn authorize(&self, a: &Attributes) -> Decision {
        if a.user.groups.iter().any(|g| g == "system:masters") {
            return Decision::Allow;
        }
        if !a.resource_request {
            // system:discovery, system:public-info-viewer, service-account-issuer-discovery.
            return if matches!(a.verb.as_str(), "get" | "head") {
                Decision::Allow
            } else {
                Decision::Deny(String::new())
            };
        }
        // system:basic-user: every authenticated user may ask who it is and what it may do.
        let self_review = matches!(
            (a.api_group.as_str(), a.resource.as_str()),
            ("authentication.k8s.io", "selfsubjectreviews")
                | ("authorization.k8s.io", "selfsubjectaccessreviews")
        );
        if self_review && a.verb == "create" && a.subresource.is_none() {
            return Decision::Allow;
        }
        match a.user.node_name() {
            Some(node) if !node.is_empty() => self.node_request(node, a),
            Some(_) => Decision::Deny(format!("unknown node for user {:?}", a.user.name)),
            None if self.service_account_may(a) => Decision::Allow,
            None => Decision::Deny(String::new()),
        }
    }
}

fn deny(why: &str) -> Decision {
    Decision::Deny(why.to_string())
}

fn lease(node: &str, a: &Attributes) -> Decision {
    let verb = a.verb.as_str();
    if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
        return deny("can only get, create, update, patch, or delete a node lease");
    }
    if a.namespace.as_deref() != Some("kube-node-lease") {
        return deny("can only access leases in the \"kube-node-lease\" system namespace");
    }
    if verb != "create" && a.name.as_deref() != Some(node) {
        return deny("can only access node lease with the same name as the requesting node");
    }
    Decision::Allow
}

/// Whether a field selector contains `spec.nodeName=<node>` (or `==`).
fn selects_node(fs: &str, node: &str) -> bool {
    fs.split(',').any(|t| {
        let t = t.trim();
        t.strip_prefix("spec.nodeName==")
            .or_else(|| t.strip_prefix("spec.nodeName="))
            == Some(node)
    })
}

fn node_name(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName").and_then(Value::as_str)
}

/// Whether a pod in `ns` bound to `node` is (for [`Vertex::Pod`]) or references the object:
/// PodCertificateRequests as stored, the rest as the lagged pod graph sees it now.
fn pods_on_node_reference(
    registry: &Registry,
    node: &str,
    ns: &str,
    v: Vertex,
    name: &str,
) -> bool {
    let mut s = registry.store.inner.lock();
    let kind = match v {
        Vertex::PodCertificateRequest => {
            return s
                .get(&Key::new(POD_CERTIFICATE_REQUESTS, ns, name))
                .and_then(|p| p.pointer("/spec/nodeName"))
                .and_then(Value::as_str)
                == Some(node);
        }
        Vertex::Pod => RefKind::Pod,
        Vertex::Secret => RefKind::Secret,
        Vertex::ConfigMap => RefKind::ConfigMap,
        Vertex::ServiceAccount => RefKind::ServiceAccount,
    };
    s.node_graph.related(kind, ns, name, node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_spec_node_name_selector_for_the_node_itself_scopes_a_pod_list() {
        assert!(selects_node("spec.nodeName=n1", "n1"));
        assert!(selects_node("metadata.namespace=x,spec.nodeName==n1", "n1"));
        assert!(!selects_node("spec.nodeName=n2", "n1"));
        assert!(!selects_node("spec.nodeName!=n1", "n1"));
    }
}
