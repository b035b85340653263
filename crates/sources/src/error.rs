//! [`Error`]: why a source could not answer a volume, with the kubelet's texts.

use crate::token::TokenError;
use crate::trust_bundle::TrustBundleError;

/// Why a source could not give a volume its content. `Display` follows
/// `MountVolume.SetUp failed for volume "<vol>" : ` in the `FailedMount` event; it reproduces
/// the kubelet's text where the kubelet has one and never contains a token or key.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// PL-10: a service account token could not be obtained.
    #[error("failed to fetch token: {0}")]
    Token(#[from] TokenError),
    /// PL-17: a `clusterTrustBundle` source could not be read.
    #[error(transparent)]
    TrustBundle(#[from] TrustBundleError),
    /// PL-21 / PL-22: a `podCertificate` source has no credential (yet, or for good).
    #[cfg(feature = "pod-certificates")]
    #[error(transparent)]
    PodCertificate(#[from] crate::pod_certificate::PodCertificateError),
    /// The source was not built: its feature gates are off (`clusterTrustBundle` without
    /// `ClusterTrustBundle` + `ClusterTrustBundleProjection`, `podCertificate` without
    /// `PodCertificateRequest`).
    #[error("{what} is not supported by nodelet")]
    NotEnabled {
        /// What was asked for, e.g. `a clusterTrustBundle projection`.
        what: &'static str,
    },
    /// A `podCertificate` source, in a build without the `pod-certificates` cargo feature.
    #[error(
        "the podCertificate projection of volume {volume:?} cannot be served: this agent was \
         built without pod certificates (cargo feature `pod-certificates`)"
    )]
    PodCertificatesNotBuilt {
        /// The pod volume.
        volume: String,
    },
}
