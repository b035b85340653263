//! [`TrustBundleRef`] (what a `clusterTrustBundle` source reads) and [`TrustBundleChange`]
//! (what the watch saw change): how a bundle change finds the volumes to set up again (PL-20).

use k8s_openapi::api::core::v1::Volume;

/// What a `clusterTrustBundle` source reads: one bundle by name, or the bundles of a signer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TrustBundleRef {
    /// The bundle of this name.
    Name(String),
    /// Bundles of this signer (whatever the selector: a new bundle may start matching).
    Signer(String),
}

/// A ClusterTrustBundle was created, modified or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustBundleChange {
    /// The bundle's name.
    pub name: String,
    /// Its signer, if any.
    pub signer_name: Option<String>,
}

impl TrustBundleChange {
    /// Whether a source reading `what` may see different content after this change.
    pub fn affects(&self, what: &TrustBundleRef) -> bool {
        match what {
            TrustBundleRef::Name(name) => *name == self.name,
            TrustBundleRef::Signer(signer) => self.signer_name.as_ref() == Some(signer),
        }
    }
}

/// The bundles the `clusterTrustBundle` sources of a projected volume read.
pub fn referenced_trust_bundles(volume: &Volume) -> Vec<TrustBundleRef> {
    let sources = volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten());
    sources
        .filter_map(|s| s.cluster_trust_bundle.as_ref())
        .filter_map(|ctb| match (&ctb.name, &ctb.signer_name) {
            (Some(name), _) => Some(TrustBundleRef::Name(name.clone())),
            (None, Some(signer)) => Some(TrustBundleRef::Signer(signer.clone())),
            (None, None) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_affects_readers_of_its_name_or_its_signer() {
        let volume: Volume = serde_json::from_value(json!({"name": "v", "projected": {"sources": [
            {"clusterTrustBundle": {"name": "a", "path": "a.pem"}},
            {"clusterTrustBundle": {"signerName": "example.com/s", "path": "s.pem"}},
            {"clusterTrustBundle": {"path": "neither.pem"}},
            {"configMap": {"name": "cm"}}]}}))
        .unwrap();
        let refs = referenced_trust_bundles(&volume);
        assert_eq!(
            refs,
            [
                TrustBundleRef::Name("a".into()),
                TrustBundleRef::Signer("example.com/s".into())
            ]
        );
        let change = |name: &str, signer: Option<&str>| TrustBundleChange {
            name: name.into(),
            signer_name: signer.map(Into::into),
        };
        assert!(change("a", None).affects(&refs[0]));
        assert!(!change("a", None).affects(&refs[1]));
        assert!(change("example.com:s:x", Some("example.com/s")).affects(&refs[1]));
        assert!(!change("b", Some("example.com/t")).affects(&refs[0]));
    }
}
