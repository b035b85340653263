//! What a `clusterTrustBundle` source reads, as a [`SourceRef`] ([`source_ref`]), and
//! [`TrustBundleChange`], what the watch saw change: how a bundle change finds the cached
//! results to drop and, as a [`SourceChange`], the volumes to set up again (PL-20).

use k8s_openapi::api::core::v1::ClusterTrustBundleProjection;
use nodelet_core::{SourceChange, SourceRef};

/// A ClusterTrustBundle was created, modified or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TrustBundleChange {
    /// The bundle's name.
    pub(crate) name: String,
    /// Its signer, if any.
    pub(crate) signer_name: Option<String>,
}

impl From<TrustBundleChange> for SourceChange {
    fn from(change: TrustBundleChange) -> Self {
        SourceChange::TrustBundle {
            name: change.name,
            signer_name: change.signer_name,
        }
    }
}

/// What a `clusterTrustBundle` source reads: the bundle of its `name`, else the bundles of its
/// `signerName` (whatever the selector: a new bundle may start matching); `None` when it names
/// neither.
pub fn source_ref(projection: &ClusterTrustBundleProjection) -> Option<SourceRef> {
    match (&projection.name, &projection.signer_name) {
        (Some(name), _) => Some(SourceRef::TrustBundle(name.clone())),
        (None, Some(signer)) => Some(SourceRef::TrustBundleSigner(signer.clone())),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_source_reads_its_bundle_by_name_else_its_signers_bundles() {
        let projection = |v: serde_json::Value| -> ClusterTrustBundleProjection {
            serde_json::from_value(v).unwrap()
        };
        assert_eq!(
            source_ref(&projection(
                json!({"name": "a", "signerName": "example.com/s", "path": "a.pem"})
            )),
            Some(SourceRef::TrustBundle("a".into()))
        );
        assert_eq!(
            source_ref(&projection(
                json!({"signerName": "example.com/s", "path": "s.pem"})
            )),
            Some(SourceRef::TrustBundleSigner("example.com/s".into()))
        );
        assert_eq!(
            source_ref(&projection(json!({"path": "neither.pem"}))),
            None
        );
    }
}
