//! `PodUid`: a pod's `metadata.uid`, validated once where pods enter the node.
//!
//! The UID keys pod workers, volume-manager state and reference counts, and names the pod's
//! directory `<root>/pods/<uid>/`. A missing UID must never become the directory `pods/`, and a
//! UID like `../x` must never leave it, so the raw string is checked once, when the pod is
//! admitted ([`AdmittedPod::new`](crate::AdmittedPod::new)), and carried as a [`PodUid`]
//! afterwards.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// A pod UID that is non-empty and safe as a single path component: no `/`, no NUL byte,
/// not `.` or `..`.
///
/// `Display` and [`as_str`](Self::as_str) give the UID for paths and logs; serde serializes
/// it as a plain string. Clones share one string: a UID keys a dozen maps across the agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodUid(Arc<str>);

/// Why a pod UID was refused. Names the pod (`namespace/name`) when it is known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PodUidError {
    /// The pod has no (or an empty) `metadata.uid`.
    #[error("pod {pod} has no metadata.uid")]
    Missing {
        /// `namespace/name` of the pod, `<unknown>` parts where absent.
        pod: String,
    },
    /// The UID is not a single, plain path component.
    #[error("pod {pod} has metadata.uid {uid:?}, which is not a single path component")]
    NotAPathComponent {
        /// `namespace/name` of the pod, or `<unknown>` when only the UID was given.
        pod: String,
        /// The refused UID.
        uid: String,
    },
}

impl PodUid {
    /// Validates a bare UID string (for example a directory name read back from disk).
    ///
    /// # Errors
    /// [`PodUidError`] when `uid` is empty, `.`, `..`, or contains `/` or a NUL byte.
    pub fn new(uid: impl Into<String>) -> Result<Self, PodUidError> {
        Self::checked(uid.into(), || "<unknown>".to_owned())
    }

    /// The validated UID of `pod`. Where a pod enters the node, use
    /// [`AdmittedPod::new`](crate::AdmittedPod::new), which calls this once and carries the
    /// result with the pod.
    ///
    /// # Errors
    /// [`PodUidError::Missing`] when the pod has no UID, [`PodUidError::NotAPathComponent`]
    /// when it is not safe as a directory name; both name the pod `namespace/name`.
    pub fn from_pod(pod: &Pod) -> Result<Self, PodUidError> {
        let name = || {
            let m = &pod.metadata;
            format!(
                "{}/{}",
                m.namespace.as_deref().unwrap_or("<unknown>"),
                m.name.as_deref().unwrap_or("<unknown>")
            )
        };
        match pod.metadata.uid.as_deref() {
            None | Some("") => Err(PodUidError::Missing { pod: name() }),
            Some(uid) => Self::checked(uid.to_owned(), name),
        }
    }

    /// The UID as a string slice, for paths, map lookups and logs.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn checked(uid: String, pod: impl FnOnce() -> String) -> Result<Self, PodUidError> {
        if uid.is_empty() {
            return Err(PodUidError::Missing { pod: pod() });
        }
        if uid == "." || uid == ".." || uid.contains('/') || uid.contains('\0') {
            return Err(PodUidError::NotAPathComponent { pod: pod(), uid });
        }
        Ok(Self(uid.into()))
    }
}

/// As the plain string (what `#[serde(transparent)]` gave when it was a `String`).
impl serde::Serialize for PodUid {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for PodUid {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for PodUid {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for PodUid {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl AsRef<str> for PodUid {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::path::Path> for PodUid {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&*self.0)
    }
}

impl std::borrow::Borrow<str> for PodUid {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pod `ns/web` (no UID).
    fn web() -> PodBuilder {
        PodBuilder(Pod::default()).named("ns", "web")
    }

    struct PodBuilder(Pod);

    impl PodBuilder {
        fn named(mut self, namespace: &str, name: &str) -> Self {
            self.0.metadata.namespace = Some(namespace.into());
            self.0.metadata.name = Some(name.into());
            self
        }
        fn uid(mut self, uid: &str) -> Self {
            self.0.metadata.uid = Some(uid.into());
            self
        }
        fn build(self) -> Pod {
            self.0
        }
    }

    #[test]
    fn a_pod_without_a_uid_is_refused_naming_the_pod() {
        let err = PodUid::from_pod(&web().build()).unwrap_err();
        assert_eq!(
            err,
            PodUidError::Missing {
                pod: "ns/web".into()
            }
        );
        assert_eq!(err.to_string(), "pod ns/web has no metadata.uid");
        assert!(matches!(
            PodUid::from_pod(&web().uid("").build()),
            Err(PodUidError::Missing { .. })
        ));
    }

    #[test]
    fn uids_that_are_not_one_path_component_are_refused() {
        for bad in ["..", ".", "../x", "a/b", "/abs", "nul\0byte"] {
            let err = PodUid::from_pod(&web().uid(bad).build()).unwrap_err();
            assert_eq!(
                err,
                PodUidError::NotAPathComponent {
                    pod: "ns/web".into(),
                    uid: bad.into()
                },
                "{bad:?}"
            );
            assert!(PodUid::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_plain_uid_is_kept_verbatim_and_serializes_as_a_string() {
        let uid = PodUid::from_pod(&web().uid("1234-abcd").build()).unwrap();
        assert_eq!(uid.as_str(), "1234-abcd");
        assert_eq!(uid.to_string(), "1234-abcd");
        assert_eq!(PodUid::new("..x").unwrap().as_str(), "..x");
        assert_eq!(serde_json::to_string(&uid).unwrap(), "\"1234-abcd\"");
    }
}
