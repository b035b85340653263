//! The `clusterTrustBundle` projected source (PL-17, PL-20): [`TrustBundleManager`] reads
//! ClusterTrustBundles through a [`TrustBundleSource`] ([`KubeTrustBundleSource`] in
//! production) and answers a projection with normalized PEM; [`TrustBundleRef`] and
//! [`TrustBundleChange`] tie its changes to the volumes that read them.
//!
//! # How a read is answered
//!
//! 1. **Lazily started.** The first read runs discovery (`certificates.k8s.io/v1beta1`, else
//!    `v1alpha1`) and starts one cluster-wide list and watch of ClusterTrustBundles; a server
//!    serving neither is an error ([`TrustBundleError::ApiNotServed`]) and is asked again on
//!    the next read.
//! 2. **Synced.** A read waits up to 10 s for the watch's first list.
//! 3. **Selected.** By `name`; or every bundle of `signerName` that `labelSelector` selects
//!    (no selector selects nothing, `{}` everything). Nothing found is an error unless the
//!    source is `optional` (then the file is empty).
//! 4. **Normalized.** Every PEM block is decoded, blocks with equal DER bytes are kept once,
//!    the set is ordered at random (one order per process) and written out as `CERTIFICATE`
//!    blocks.
//! 5. **Cached.** Results are kept (LRU of 220 entries, 5 min) until a bundle of that name or
//!    signer changes.
//! 6. **Changes remount.** Every change is sent to [`TrustBundleManager::subscribe`]; the
//!    volume manager sets up again at once every volume that reads the bundle or the signer
//!    (PL-20; the kubelet waits for the next pod sync).
//!
//! The watch task holds a weak reference to the manager and ends with it, or with
//! [`TrustBundleManager::shutdown`].

mod error;
#[cfg(any(test, feature = "test-util"))]
mod fake;
mod manager;
mod pem;
mod selector;
mod source;

use k8s_openapi::api::core::v1::Volume;

pub use error::TrustBundleError;
#[cfg(any(test, feature = "test-util"))]
pub use fake::FakeTrustBundleSource;
pub use manager::{TrustBundleConfig, TrustBundleManager};
pub use source::{
    BundleEvent, BundleStream, KubeTrustBundleSource, TrustBundle, TrustBundleApi,
    TrustBundleSource,
};

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
