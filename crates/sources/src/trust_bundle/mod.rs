//! The `clusterTrustBundle` projected source (PL-17 … PL-20): [`TrustBundleManager`] reads
//! ClusterTrustBundles through a [`TrustBundleSource`] ([`KubeTrustBundleSource`] in
//! production) and answers a projection with normalized PEM; [`source_ref`] names what a
//! projection reads and every change goes out as a
//! [`SourceChange::TrustBundle`](nodelet_core::SourceChange), which ties it to the volumes that
//! read it.
//!
//! # How a read is answered
//!
//! 1. **Lazily started** (PL-19). The first read runs discovery (`certificates.k8s.io/v1beta1`, else
//!    `v1alpha1`) and starts one cluster-wide list and watch of ClusterTrustBundles; a server
//!    serving neither is an error ([`TrustBundleError::ApiNotServed`]) and is asked again on
//!    the next read.
//! 2. **Synced.** A read waits up to 10 s for the watch's first list.
//! 3. **Selected.** By `name`; or every bundle of `signerName` that `labelSelector` selects
//!    (no selector selects nothing, `{}` everything). Nothing found is an error unless the
//!    source is `optional` (then the file is empty).
//! 4. **Normalized** (PL-18). Every PEM block is decoded, blocks with equal DER bytes are kept once,
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
mod refs;
mod selector;
mod source;

pub use error::TrustBundleError;
#[cfg(any(test, feature = "test-util"))]
pub use fake::FakeTrustBundleSource;
pub use manager::{TrustBundleConfig, TrustBundleManager};
pub use refs::source_ref;
pub use source::{
    BundleEvent, BundleStream, KubeTrustBundleSource, TrustBundle, TrustBundleApi,
    TrustBundleSource,
};
