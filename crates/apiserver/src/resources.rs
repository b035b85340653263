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
    /// The feature gate that must be on for the resource to be served (upstream's REST
    /// storage checks it next to the group/version's runtime config); `None`: always served
    /// while its group/version is enabled.
    pub(crate) feature_gate: Option<&'static str>,
}

impl ResourceInfo {
    /// Discovery categories: pods and services are in `all` (`kubectl get all`), as upstream.
    pub(crate) fn categories(&self) -> &'static [&'static str] {
        match (self.group, self.plural) {
            ("", "pods" | "services") => &["all"],
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
        feature_gate: None,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        subresources: &[
            ("status", STATUS_VERBS),
            ("ephemeralcontainers", STATUS_VERBS),
            ("binding", &["create"]),
            ("log", &["get"]),
            ("exec", &["create", "get"]),
            ("attach", &["create", "get"]),
        ],
        create_on_update: false,
        return_deleted_object: true,
        feature_gate: None,
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
        feature_gate: None,
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
        feature_gate: None,
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
        feature_gate: None,
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
        feature_gate: None,
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
        feature_gate: None,
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
        feature_gate: None,
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
        feature_gate: None,
    },
    ResourceInfo {
        group: "certificates.k8s.io",
        version: "v1beta1",
        plural: "clustertrustbundles",
        singular: "clustertrustbundle",
        kind: "ClusterTrustBundle",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        create_on_update: false,
        return_deleted_object: false,
        feature_gate: Some(CLUSTER_TRUST_BUNDLE_GATE),
    },
    ResourceInfo {
        group: "certificates.k8s.io",
        version: "v1beta1",
        plural: "podcertificaterequests",
        singular: "podcertificaterequest",
        kind: "PodCertificateRequest",
        namespaced: true,
        short_names: &[],
        subresources: &[("status", STATUS_VERBS)],
        create_on_update: false,
        return_deleted_object: false,
        feature_gate: Some(POD_CERTIFICATE_REQUEST_GATE),
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        subresources: &[("status", STATUS_VERBS)],
        create_on_update: false,
        return_deleted_object: false,
        feature_gate: None,
    },
];

/// Well-known ids, to keep strategy code readable.
pub(crate) const NAMESPACES: ResourceId = ResourceId(0);
pub(crate) const PODS: ResourceId = ResourceId(1);
pub(crate) const CONFIGMAPS: ResourceId = ResourceId(2);
pub(crate) const SECRETS: ResourceId = ResourceId(3);
pub(crate) const NODES: ResourceId = ResourceId(4);
/// core/v1 Events.
pub(crate) const EVENTS: ResourceId = ResourceId(5);
pub(crate) const SERVICEACCOUNTS: ResourceId = ResourceId(6);
pub(crate) const CLUSTER_TRUST_BUNDLES: ResourceId = ResourceId(9);
pub(crate) const POD_CERTIFICATE_REQUESTS: ResourceId = ResourceId(10);
pub(crate) const SERVICES: ResourceId = ResourceId(11);

/// The feature gate of ClusterTrustBundles (beta since 1.33, off by default).
pub(crate) const CLUSTER_TRUST_BUNDLE_GATE: &str = "ClusterTrustBundle";
/// The feature gate of PodCertificateRequests (beta since 1.35, off by default).
pub(crate) const POD_CERTIFICATE_REQUEST_GATE: &str = "PodCertificateRequest";
/// The kubelet's gate for `clusterTrustBundle` projected volume sources: accepted (so one
/// `--feature-gates` list serves server and agent) but changes nothing here.
pub(crate) const CLUSTER_TRUST_BUNDLE_PROJECTION_GATE: &str = "ClusterTrustBundleProjection";

/// Feature gates this server recognizes; any other name is refused, as upstream refuses it
/// (`unrecognized feature gate: X`). All default to off.
pub(crate) const KNOWN_FEATURE_GATES: &[&str] = &[
    CLUSTER_TRUST_BUNDLE_GATE,
    CLUSTER_TRUST_BUNDLE_PROJECTION_GATE,
    POD_CERTIFICATE_REQUEST_GATE,
];

/// Group/versions off unless `--runtime-config` turns them on (upstream leaves beta APIs off).
const OFF_BY_DEFAULT: &[&str] = &["certificates.k8s.io/v1beta1"];

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

/// Finds a resource by URL group, version and plural in the whole table, served or not (what
/// a 403 names: upstream's authorizer runs before it knows whether the path is served).
pub(crate) fn by_path_any(group: &str, version: &str, plural: &str) -> Option<ResourceId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
        .map(ResourceId)
}

/// Finds a resource by `apiVersion` and `kind` in the whole table, served or not.
fn by_kind_any(api_version: &str, kind: &str) -> Option<ResourceId> {
    let (group, version) = split_api_version(api_version);
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.kind == kind)
        .map(ResourceId)
}

/// What one server serves: the resources of [`RESOURCES`] whose group/version is enabled
/// (`Config::runtime_config`) and whose feature gate, if any, is on (`Config::feature_gate`),
/// and the gates themselves. Every lookup by path or kind goes through it, so a resource that
/// is not served is absent from discovery and OpenAPI and its paths answer 404.
#[derive(Debug, Clone)]
pub(crate) struct Served {
    resources: Vec<bool>,
    gates: Vec<&'static str>,
}

/// A `Config` the server cannot start with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServedError {
    /// A feature gate this server does not know.
    UnknownGate(String),
    /// A `--runtime-config` key that names no group/version this server has.
    UnknownGroupVersion(String),
}

impl Default for Served {
    /// The default surface: every group/version but the beta ones, no feature gate on.
    fn default() -> Self {
        Served::new(&[], &[]).unwrap_or_else(|_| Served {
            resources: Vec::new(),
            gates: Vec::new(),
        })
    }
}

impl Served {
    /// The surface for these runtime-config entries (`group/version` or `v1` → on/off) and
    /// feature gates (name → on/off); later entries win.
    pub(crate) fn new(
        runtime_config: &[(String, bool)],
        feature_gates: &[(String, bool)],
    ) -> Result<Self, ServedError> {
        let mut gates: Vec<&'static str> = Vec::new();
        for (name, on) in feature_gates {
            let Some(known) = KNOWN_FEATURE_GATES.iter().find(|g| **g == name.as_str()) else {
                return Err(ServedError::UnknownGate(name.clone()));
            };
            gates.retain(|g| g != known);
            if *on {
                gates.push(known);
            }
        }
        for (gv, _) in runtime_config {
            if !RESOURCES.iter().any(|r| r.api_version() == *gv) {
                return Err(ServedError::UnknownGroupVersion(gv.clone()));
            }
        }
        let resources = RESOURCES
            .iter()
            .map(|r| {
                let gv = r.api_version();
                let gv_on = runtime_config
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == gv)
                    .map_or(!OFF_BY_DEFAULT.contains(&gv.as_str()), |(_, on)| *on);
                gv_on && r.feature_gate.is_none_or(|g| gates.contains(&g))
            })
            .collect();
        Ok(Served { resources, gates })
    }

    /// Whether `res` is served.
    pub(crate) fn contains(&self, res: ResourceId) -> bool {
        self.resources.get(res.0).copied().unwrap_or(false)
    }

    /// Whether feature gate `name` is on.
    pub(crate) fn gate(&self, name: &str) -> bool {
        self.gates.contains(&name)
    }

    /// The served resources, in discovery order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'static ResourceInfo> + '_ {
        RESOURCES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.contains(ResourceId(*i)))
            .map(|(_, r)| r)
    }

    /// Finds a served resource by URL group, version and plural.
    pub(crate) fn by_path(&self, group: &str, version: &str, plural: &str) -> Option<ResourceId> {
        by_path_any(group, version, plural).filter(|id| self.contains(*id))
    }

    /// Finds a served resource by `apiVersion` and `kind`, as written in an object.
    pub(crate) fn by_kind(&self, api_version: &str, kind: &str) -> Option<ResourceId> {
        by_kind_any(api_version, kind).filter(|id| self.contains(*id))
    }

    /// The served groups under `/apis`, in discovery order, each with its version.
    pub(crate) fn named_groups(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&'static str, &'static str)> = Vec::new();
        for r in self.iter() {
            if !r.group.is_empty() && !out.iter().any(|(g, _)| *g == r.group) {
                out.push((r.group, r.version));
            }
        }
        out
    }
}

/// Splits `group/version` (or a bare core `version`).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
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
        let served = Served::default();
        assert_eq!(served.by_kind("v1", "ConfigMap"), Some(CONFIGMAPS));
        assert_eq!(
            served
                .by_kind("coordination.k8s.io/v1", "Lease")
                .map(|r| r.info().plural),
            Some("leases")
        );
        assert!(served.by_kind("apps/v1", "Deployment").is_none());
    }

    #[test]
    fn certificates_are_served_only_with_their_group_version_and_gate_on() {
        let ctb = "ClusterTrustBundle";
        let av = "certificates.k8s.io/v1beta1";
        assert!(Served::default().by_kind(av, ctb).is_none());
        let gv_only = Served::new(&[(av.into(), true)], &[]).unwrap();
        assert!(gv_only.by_kind(av, ctb).is_none());
        let gate_only = Served::new(&[], &[(ctb.into(), true)]).unwrap();
        assert!(gate_only.by_kind(av, ctb).is_none());
        let both = Served::new(&[(av.into(), true)], &[(ctb.into(), true)]).unwrap();
        assert_eq!(both.by_kind(av, ctb), Some(CLUSTER_TRUST_BUNDLES));
        assert!(both.by_kind(av, "PodCertificateRequest").is_none());
        assert_eq!(
            Served::new(&[], &[("Nope".into(), true)]).err(),
            Some(ServedError::UnknownGate("Nope".into()))
        );
        assert_eq!(CLUSTER_TRUST_BUNDLES.info().kind, ctb);
        assert_eq!(
            POD_CERTIFICATE_REQUESTS.info().kind,
            "PodCertificateRequest"
        );
    }
}
