//! The static table of API resources this server serves, and lookups by path or by kind.

/// One served resource (a group/version/plural), with the facts discovery and the handlers need.
#[derive(Debug)]
pub(crate) struct ResourceInfo {
    /// API group; `""` for the core group.
    pub(crate) group: &'static str,
    /// API version inside the group.
    pub(crate) version: &'static str,
    /// Plural resource name as used in URLs.
    pub(crate) plural: &'static str,
    /// Singular resource name (discovery).
    pub(crate) singular: &'static str,
    /// Object kind.
    pub(crate) kind: &'static str,
    /// Whether objects live in a namespace.
    pub(crate) namespaced: bool,
    /// kubectl short names (discovery).
    pub(crate) short_names: &'static [&'static str],
    /// Served subresources, with their verbs.
    pub(crate) subresources: &'static [(&'static str, &'static [&'static str])],
    /// A PUT to a missing object creates it (leases, events), as in the real registry.
    pub(crate) create_on_update: bool,
    /// DELETE answers with the deleted object instead of a `Status` (pods, namespaces).
    pub(crate) return_deleted_object: bool,
}

impl ResourceInfo {
    /// Discovery categories: pods are in `all` (`kubectl get all`), as upstream.
    pub(crate) fn categories(&self) -> &'static [&'static str] {
        match (self.group, self.plural) {
            ("", "pods") => &["all"],
            _ => &[],
        }
    }
}

/// Index of a resource in [`RESOURCES`]; cheap to copy and to use in store keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ResourceId(pub(crate) usize);

const STATUS_VERBS: &[&str] = &["get", "patch", "update"];
const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const NAMESPACE_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// Every resource served, in discovery order. `ResourceId(i)` indexes this table.
pub(crate) static RESOURCES: &[ResourceInfo] = &[
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        subresources: &[("status", STATUS_VERBS), ("finalize", &["update"])],
        create_on_update: false,
        return_deleted_object: true,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        subresources: &[("status", STATUS_VERBS), ("binding", &["create"])],
        create_on_update: false,
        return_deleted_object: true,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        subresources: &[],
        create_on_update: false,
        return_deleted_object: false,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        create_on_update: false,
        return_deleted_object: false,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        subresources: &[("status", STATUS_VERBS)],
        create_on_update: false,
        return_deleted_object: false,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
        create_on_update: true,
        return_deleted_object: false,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        short_names: &["sa"],
        subresources: &[("token", &["create"])],
        create_on_update: false,
        return_deleted_object: false,
    },
    ResourceInfo {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
        create_on_update: true,
        return_deleted_object: false,
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        create_on_update: true,
        return_deleted_object: false,
    },
];

/// Well-known ids, to keep strategy code readable.
pub(crate) const NAMESPACES: ResourceId = ResourceId(0);
pub(crate) const PODS: ResourceId = ResourceId(1);
pub(crate) const CONFIGMAPS: ResourceId = ResourceId(2);
pub(crate) const SECRETS: ResourceId = ResourceId(3);
pub(crate) const NODES: ResourceId = ResourceId(4);
pub(crate) const SERVICEACCOUNTS: ResourceId = ResourceId(6);

impl ResourceId {
    /// The table entry.
    pub(crate) fn info(self) -> &'static ResourceInfo {
        &RESOURCES[self.0]
    }
}

impl ResourceInfo {
    /// `apiVersion` as written in objects: `v1` or `group/version`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as real error messages name resources.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Kind` or `Kind.group`, as real Invalid messages name kinds.
    pub(crate) fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether `sub` is a served subresource.
    pub(crate) fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.iter().any(|(s, _)| *s == sub)
    }

    /// Verbs advertised in discovery.
    pub(crate) fn verbs(&self) -> &'static [&'static str] {
        if self.plural == "namespaces" {
            NAMESPACE_VERBS
        } else {
            ALL_VERBS
        }
    }
}

/// Finds a resource by URL group, version and plural.
pub(crate) fn by_path(group: &str, version: &str, plural: &str) -> Option<ResourceId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
        .map(ResourceId)
}

/// Finds a resource by `apiVersion` and `kind`, as written in an object.
pub(crate) fn by_kind(api_version: &str, kind: &str) -> Option<ResourceId> {
    let (group, version) = split_api_version(api_version);
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.kind == kind)
        .map(ResourceId)
}

/// Splits `group/version` (or a bare core `version`).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The groups served under `/apis`, in discovery order.
pub(crate) fn named_groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in RESOURCES {
        if !r.group.is_empty() && !out.iter().any(|(g, _)| *g == r.group) {
            out.push((r.group, r.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_ids_point_at_their_resources() {
        assert_eq!(NAMESPACES.info().plural, "namespaces");
        assert_eq!(PODS.info().plural, "pods");
        assert_eq!(CONFIGMAPS.info().plural, "configmaps");
        assert_eq!(SECRETS.info().plural, "secrets");
        assert_eq!(NODES.info().plural, "nodes");
        assert_eq!(ResourceId(5).info().plural, "events");
        assert_eq!(SERVICEACCOUNTS.info().plural, "serviceaccounts");
    }

    #[test]
    fn kinds_resolve_by_api_version() {
        assert_eq!(by_kind("v1", "ConfigMap"), Some(CONFIGMAPS));
        assert_eq!(
            by_kind("coordination.k8s.io/v1", "Lease").map(|r| r.info().plural),
            Some("leases")
        );
        assert!(by_kind("apps/v1", "Deployment").is_none());
    }
}
