//! The sources a kubelet's volumes read besides ConfigMaps and Secrets: service account tokens
//! (PL-10), ClusterTrustBundles (PL-17 … PL-20) and pod certificates (PL-21, PL-22; cargo
//! feature `pod-certificates`). Each is a manager in the mould of the object managers — a
//! cheap-to-clone handle that answers a read, forgets a pod's state when it goes and tells
//! subscribers what changed — and every change goes out as one type,
//! [`nodelet_core::SourceChange`].
//!
//! # Principal types
//!
//! * [`Sources`] — the one handle a volume manager holds: the managers the agent built (a
//!   source whose feature gates are off is simply not built, and a read of it fails with the
//!   kubelet's text for a disabled feature), reads ([`Sources::token`],
//!   [`Sources::trust_anchors`], [`Sources::pod_certificate`]),
//!   [`Sources::unregister_pod`], and [`Sources::subscribe`]: every source's changes as one
//!   [`SourceChanges`] stream.
//! * [`TokenManager`] ([`token`]) — TokenRequest tokens through a [`TokenSource`]
//!   ([`KubeTokenSource`]), cached per pod and request, refreshed at 80 % of their lifetime.
//!   Tokens change by time only: a read returns the instant the volume must be set up again.
//! * [`TrustBundleManager`] ([`trust_bundle`]) — one lazily started cluster-wide watch of
//!   ClusterTrustBundles through a [`TrustBundleSource`] ([`KubeTrustBundleSource`]),
//!   normalized PEM, an LRU + TTL cache; a `SourceChange::TrustBundle` per bundle change.
//! * `PodCertificateManager` (`pod_certificate`, feature `pod-certificates`) — a key made on
//!   the node, a PodCertificateRequest through a `PodCertificateSource` (one
//!   `spec.nodeName` watch), a state machine per pod, volume and source stepped by the
//!   volume's SetUp; a `SourceChange::PodCertificate` when one of a pod's requests changes.
//!   Its keys are made by rcgen on aws-lc-rs (a C build): without the feature no crypto
//!   library is linked and [`Sources::pod_certificate`] fails with
//!   [`Error::PodCertificatesNotBuilt`], naming the volume.
//! * [`SourceRef`](nodelet_core::SourceRef) — what a volume reads
//!   ([`trust_bundle::source_ref`] for a `clusterTrustBundle` projection); a volume manager
//!   matches it against the changes with
//!   [`SourceChange::affects`](nodelet_core::SourceChange::affects).
//! * [`Error`] — why a source could not answer; `Display` is the kubelet's text.
//!
//! # Invariants
//!
//! * Nothing is sent to the API server before a volume reads a source: the trust bundle watch
//!   starts with the first read, the pod certificate watch with the first request.
//! * Tokens and private keys never reach logs, events or `Debug` output ([`Token`] and
//!   [`PrivateKeyPem`] redact themselves).
//! * Every background task ends with its manager's last handle or
//!   [`Sources::shutdown`].
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use nodelet_core::AdmittedPod;
//! use nodelet_sources::token::FakeTokenSource;
//! use nodelet_sources::{Sources, TokenManager};
//!
//! // In production: `TokenManager::new(Arc::new(KubeTokenSource::new(client)))`, and
//! // `.with_trust_bundles(..)` when the ClusterTrustBundle gates are on.
//! let sources = Sources::new(TokenManager::new(Arc::new(FakeTokenSource::new())));
//! let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "web", "namespace": "default", "uid": "uid-1"}}))?;
//! let pod = AdmittedPod::new(pod)?;
//! let (token, _refresh_at) = sources.token(&pod, "default", None, 3600).await?;
//! assert!(!token.token.is_empty());
//! // The gates are off: no trust bundle manager was built.
//! let projection = serde_json::from_value(serde_json::json!({"name": "ca", "path": "ca.pem"}))?;
//! let err = sources.trust_anchors(&projection).await.unwrap_err();
//! assert_eq!(err.to_string(), "a clusterTrustBundle projection is not supported by nodelet");
//! sources.unregister_pod(pod.uid());
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod credential;
mod error;
mod handle;
#[cfg(feature = "pod-certificates")]
pub mod pod_certificate;
pub mod token;
pub mod trust_bundle;

pub use credential::{CredentialBundle, PrivateKeyPem};
pub use error::Error;
pub use handle::{Lagged, SourceChanges, Sources};
pub use token::{KubeTokenSource, Token, TokenError, TokenManager, TokenSource};
pub use trust_bundle::{
    KubeTrustBundleSource, TrustBundleConfig, TrustBundleManager, TrustBundleSource,
};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
