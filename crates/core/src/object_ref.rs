//! [`ObjectRef`]: the one way the node names a ConfigMap or Secret — its kind, namespace and
//! name.
//!
//! The object managers (nodelet-object-manager) key their stores by it and send it in change
//! notifications (each `Manager<K>` knows its [`ObjectKind`], so a notification is a full
//! reference); the volume manager lists the objects a volume reads with it and reports the
//! versions it projected with it; the agent matches failed pods against it.

use std::fmt;

/// The kind of object a manager serves and a volume reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

/// One ConfigMap or Secret: kind, namespace and name.
///
/// `Display` is `namespace/name` (the kind is a separate field in logs and documents).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// ConfigMap or Secret.
    pub kind: ObjectKind,
    /// The object's namespace (a pod reads only objects of its own namespace).
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl ObjectRef {
    /// The `kind` object `namespace/name`.
    pub fn new(kind: ObjectKind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The ConfigMap `namespace/name`.
    pub fn config_map(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self::new(ObjectKind::ConfigMap, namespace, name)
    }

    /// The Secret `namespace/name`.
    pub fn secret(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self::new(ObjectKind::Secret, namespace, name)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_displays_as_namespace_slash_name_and_keeps_its_kind() {
        let cm = ObjectRef::config_map("ns", "settings");
        assert_eq!(cm.to_string(), "ns/settings");
        assert_eq!(cm.kind, ObjectKind::ConfigMap);
        assert_eq!(format!("{:?}", cm.kind), "ConfigMap");
        let secret = ObjectRef::secret("ns", "settings");
        assert_ne!(cm, secret, "same name, different kinds");
        assert_eq!(secret, ObjectRef::new(ObjectKind::Secret, "ns", "settings"));
    }
}
