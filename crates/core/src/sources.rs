//! What a volume reads that can change under it ([`SourceRef`]) and the one change type the
//! sources announce ([`SourceChange`]): how a change finds the volumes to set up again.

use crate::{ObjectRef, PodUid};

/// Something a volume's content is read from, whose changes set the volume up again at once
/// (live updates). A volume plugin names them for each volume; the volume manager matches
/// them against [`SourceChange`]s and object changes without knowing what they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceRef {
    /// A ConfigMap or Secret in the pod's namespace (the object managers' changes).
    Object(ObjectRef),
    /// The ClusterTrustBundle of this name (PL-20).
    TrustBundle(String),
    /// Every ClusterTrustBundle of this signer, whatever the selector: a new bundle may start
    /// matching (PL-20).
    TrustBundleSigner(String),
    /// The pod's own PodCertificateRequests (PL-21).
    PodCertificate,
}

/// A change announced by a source (trust bundles, pod certificates): the one type every
/// source manager sends to its subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceChange {
    /// A ClusterTrustBundle was created, modified or deleted.
    TrustBundle {
        /// The bundle's name.
        name: String,
        /// Its signer, if any.
        signer_name: Option<String>,
    },
    /// A PodCertificateRequest of this pod was created, changed (issued, refused) or deleted.
    PodCertificate {
        /// `spec.podUID` of the request.
        pod_uid: PodUid,
    },
}

impl SourceChange {
    /// Whether a volume of pod `pod_uid` reading `source` may see different content after this
    /// change.
    pub fn affects(&self, pod_uid: &PodUid, source: &SourceRef) -> bool {
        match (self, source) {
            (SourceChange::TrustBundle { name, .. }, SourceRef::TrustBundle(read)) => name == read,
            (SourceChange::TrustBundle { signer_name, .. }, SourceRef::TrustBundleSigner(read)) => {
                signer_name.as_ref() == Some(read)
            }
            (SourceChange::PodCertificate { pod_uid: changed }, SourceRef::PodCertificate) => {
                changed == pod_uid
            }
            _ => false,
        }
    }

    /// Whether the change is new content a reader waits for, whose propagation to the files is
    /// measured (a bundle's new anchors); a certificate request moving on is not.
    pub fn is_content(&self) -> bool {
        matches!(self, SourceChange::TrustBundle { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_change_affects_readers_of_its_name_or_its_signer() {
        let uid = PodUid::new("u").unwrap();
        let change = |name: &str, signer: Option<&str>| SourceChange::TrustBundle {
            name: name.into(),
            signer_name: signer.map(Into::into),
        };
        let by_name = SourceRef::TrustBundle("a".into());
        let by_signer = SourceRef::TrustBundleSigner("example.com/s".into());
        assert!(change("a", None).affects(&uid, &by_name));
        assert!(!change("a", None).affects(&uid, &by_signer));
        assert!(change("example.com:s:x", Some("example.com/s")).affects(&uid, &by_signer));
        assert!(!change("b", Some("example.com/t")).affects(&uid, &by_name));
        assert!(!change("a", None).affects(&uid, &SourceRef::PodCertificate));
    }

    #[test]
    fn a_certificate_change_affects_only_its_own_pods_certificate_sources() {
        let (u1, u2) = (PodUid::new("u1").unwrap(), PodUid::new("u2").unwrap());
        let change = SourceChange::PodCertificate {
            pod_uid: u1.clone(),
        };
        assert!(change.affects(&u1, &SourceRef::PodCertificate));
        assert!(!change.affects(&u2, &SourceRef::PodCertificate));
        assert!(!change.affects(&u1, &SourceRef::Object(ObjectRef::config_map("ns", "a"))));
        assert!(!change.is_content());
    }
}
