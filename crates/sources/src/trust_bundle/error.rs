//! [`TrustBundleError`]: why a `clusterTrustBundle` source could not be read, with the
//! kubelet's texts where it has them (PL-17).

use std::sync::Arc;

use nodelet_object_manager::source::SourceError;

/// Why trust anchors could not be produced for a `clusterTrustBundle` projection. `Display`
/// follows `MountVolume.SetUp failed for volume "<vol>" : ` in the `FailedMount` event; it
/// reproduces the kubelet's text where the kubelet has one.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TrustBundleError {
    /// The projection names neither a bundle nor a signer (the API server's validation
    /// normally refuses such a pod).
    #[error("ClusterTrustBundle projection requires either name or signerName to be set")]
    NoNameOrSigner,
    /// The bundle named by the projection does not exist (and the source is not optional).
    #[error(
        "while getting ClusterTrustBundle: clustertrustbundle.certificates.k8s.io \"{name}\" not found"
    )]
    NotFound {
        /// The bundle's name.
        name: String,
    },
    /// No bundle of the signer matches the selector (a nil selector never matches), and the
    /// source is not optional.
    #[error("combination of signerName and labelSelector matched zero ClusterTrustBundles")]
    NoMatch {
        /// The signer asked for.
        signer_name: String,
    },
    /// The projection's label selector is not a valid selector.
    #[error("while parsing label selector: {reason}")]
    InvalidSelector {
        /// Why, as the kubelet says it.
        reason: String,
    },
    /// The selector, written out, is longer than 100 KiB.
    #[error("label selector length ({length}) is larger than {max}")]
    SelectorTooLong {
        /// Its length in bytes.
        length: usize,
        /// The limit (102,400).
        max: usize,
    },
    /// The cluster-wide watch has not completed its first list within the sync time-out.
    #[error("ClusterTrustBundle informer has not yet synced")]
    NotSynced,
    /// No API client: the volume manager was given no [`TrustBundleSource`](super::TrustBundleSource).
    #[error("ClusterTrustBundle projection is not supported in static kubelet mode")]
    StaticMode,
    /// Discovery found no version of the API serving `clustertrustbundles` (the kubelet's
    /// text here is the static-mode one; this names what is missing). Asked again on the next
    /// read.
    #[error(
        "ClusterTrustBundle projection is not supported by this API server: it serves \
         clustertrustbundles in neither certificates.k8s.io/v1beta1 nor certificates.k8s.io/v1alpha1"
    )]
    ApiNotServed,
    /// Discovery itself failed (asked again on the next read).
    #[error(
        "failed to ensure informer manager for ClusterTrustBundles: failed to determine which \
         informer manager to choose: {0}"
    )]
    Discovery(Arc<SourceError>),
    /// The manager was shut down.
    #[error("the ClusterTrustBundle manager is shut down")]
    ShutDown,
}

impl TrustBundleError {
    /// Whether the error says the bundle or the signer's bundles are missing (what an
    /// optional source turns into an empty file).
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            TrustBundleError::NotFound { .. } | TrustBundleError::NoMatch { .. }
        )
    }
}
