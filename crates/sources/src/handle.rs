//! [`Sources`]: the one handle to the sources a volume reads besides objects (tokens, trust
//! bundles, pod certificates), and [`SourceChanges`], their changes as one stream.

use std::sync::Arc;

use futures::future::select_all;
use k8s_openapi::api::core::v1::{ClusterTrustBundleProjection, PodCertificateProjection};
use nodelet_core::{AdmittedPod, PodUid, SourceChange};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use crate::credential::CredentialBundle;
use crate::error::Error;
use crate::token::{Token, TokenManager};
use crate::trust_bundle::TrustBundleManager;

/// The sources the agent built, as one cheap-to-clone handle: the [`TokenManager`] always, the
/// [`TrustBundleManager`] and the pod certificate manager only when their feature gates are
/// on (and, for pod certificates, the cargo feature `pod-certificates`). A source that was not
/// built answers with the error a kubelet gives for a disabled feature.
#[derive(Debug, Clone)]
pub struct Sources {
    tokens: TokenManager,
    trust_bundles: Option<TrustBundleManager>,
    pod_certificates: PodCertificates,
}

/// How the `podCertificate` source answers.
#[derive(Debug, Clone)]
enum PodCertificates {
    /// Not built (the gate is off): the kubelet's text for a disabled feature.
    Off,
    /// The program was built without pod certificates: an error naming the volume.
    NotBuilt,
    /// Served by this manager.
    #[cfg(feature = "pod-certificates")]
    On(Arc<crate::pod_certificate::PodCertificateManager>),
}

impl Sources {
    /// Tokens only: no `clusterTrustBundle` nor `podCertificate` source (their gates off;
    /// without this crate's `pod-certificates` feature a `podCertificate` projection fails
    /// with [`Error::PodCertificatesNotBuilt`]).
    pub fn new(tokens: TokenManager) -> Self {
        let pod_certificates = if cfg!(feature = "pod-certificates") {
            PodCertificates::Off
        } else {
            PodCertificates::NotBuilt
        };
        Self {
            tokens,
            trust_bundles: None,
            pod_certificates,
        }
    }

    /// For a program built without pod certificates (its own cargo feature off, whatever
    /// this crate's): a `podCertificate` projection fails with
    /// [`Error::PodCertificatesNotBuilt`], naming its volume.
    #[must_use]
    pub fn built_without_pod_certificates(mut self) -> Self {
        self.pod_certificates = PodCertificates::NotBuilt;
        self
    }

    /// With `clusterTrustBundle` sources read through `manager` (PL-17).
    #[must_use]
    pub fn with_trust_bundles(mut self, manager: TrustBundleManager) -> Self {
        self.trust_bundles = Some(manager);
        self
    }

    /// With `podCertificate` sources served by `manager` (PL-21).
    #[cfg(feature = "pod-certificates")]
    #[must_use]
    pub fn with_pod_certificates(
        mut self,
        manager: crate::pod_certificate::PodCertificateManager,
    ) -> Self {
        self.pod_certificates = PodCertificates::On(Arc::new(manager));
        self
    }

    /// The token manager.
    pub fn tokens(&self) -> &TokenManager {
        &self.tokens
    }

    /// The trust bundle manager, if built.
    pub fn trust_bundles(&self) -> Option<&TrustBundleManager> {
        self.trust_bundles.as_ref()
    }

    /// The pod certificate manager, if built.
    #[cfg(feature = "pod-certificates")]
    pub fn pod_certificates(&self) -> Option<&crate::pod_certificate::PodCertificateManager> {
        match &self.pod_certificates {
            PodCertificates::On(manager) => Some(manager),
            PodCertificates::Off | PodCertificates::NotBuilt => None,
        }
    }

    /// PL-10: a token for `pod`'s `service_account` and when to refresh it (see
    /// [`TokenManager::get`]).
    ///
    /// # Errors
    /// [`Error::Token`].
    pub async fn token(
        &self,
        pod: &AdmittedPod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<(Token, Instant), Error> {
        Ok(self
            .tokens
            .get(pod, service_account, audience, expiration_seconds)
            .await?)
    }

    /// PL-17: the trust anchors a `clusterTrustBundle` projection asks for (see
    /// [`TrustBundleManager::trust_anchors`]).
    ///
    /// # Errors
    /// [`Error::NotEnabled`] without a trust bundle manager; [`Error::TrustBundle`].
    pub async fn trust_anchors(
        &self,
        projection: &ClusterTrustBundleProjection,
    ) -> Result<Arc<[u8]>, Error> {
        let Some(bundles) = &self.trust_bundles else {
            return Err(Error::NotEnabled {
                what: "a clusterTrustBundle projection",
            });
        };
        Ok(bundles.trust_anchors(projection).await?)
    }

    /// PL-21: the credential of source `index` of `pod`'s volume `volume`, stepping its state
    /// machine (see `PodCertificateManager::credential_bundle`).
    ///
    /// # Errors
    /// [`Error::PodCertificatesNotBuilt`] in a build without pod certificates;
    /// [`Error::NotEnabled`] without a pod certificate manager; `Error::PodCertificate`.
    pub async fn pod_certificate(
        &self,
        pod: &AdmittedPod,
        volume: &str,
        index: usize,
        projection: &PodCertificateProjection,
    ) -> Result<CredentialBundle, Error> {
        match &self.pod_certificates {
            PodCertificates::Off => Err(Error::NotEnabled {
                what: "a podCertificate projection",
            }),
            PodCertificates::NotBuilt => {
                let _ = (pod, index, projection);
                Err(Error::PodCertificatesNotBuilt {
                    volume: volume.to_owned(),
                })
            }
            #[cfg(feature = "pod-certificates")]
            PodCertificates::On(manager) => Ok(manager
                .credential_bundle(pod, volume, index, projection)
                .await?),
        }
    }

    /// Every source's changes, as one stream. Only changes after this call arrive.
    pub fn subscribe(&self) -> SourceChanges {
        let mut receivers = Vec::new();
        if let Some(bundles) = &self.trust_bundles {
            receivers.push(bundles.subscribe());
        }
        #[cfg(feature = "pod-certificates")]
        if let PodCertificates::On(certificates) = &self.pod_certificates {
            receivers.push(certificates.subscribe());
        }
        SourceChanges { receivers }
    }

    /// Forgets what every source holds for the pod (its volumes are gone). Never blocks.
    pub fn unregister_pod(&self, pod_uid: &PodUid) {
        self.tokens.unregister_pod(pod_uid);
        #[cfg(feature = "pod-certificates")]
        if let PodCertificates::On(certificates) = &self.pod_certificates {
            certificates.unregister_pod(pod_uid);
        }
    }

    /// Stops the sources' watches; later reads fail.
    pub fn shutdown(&self) {
        if let Some(bundles) = &self.trust_bundles {
            bundles.shutdown();
        }
    }
}

/// The changes of every source of a [`Sources`] handle, merged.
#[derive(Debug)]
pub struct SourceChanges {
    receivers: Vec<broadcast::Receiver<SourceChange>>,
}

/// A subscriber fell behind and missed changes: treat everything as changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the subscriber fell behind and missed source changes")]
pub struct Lagged;

impl SourceChanges {
    /// The next change of any source; pending for ever once every source has stopped (or
    /// when none was built).
    ///
    /// # Errors
    /// [`Lagged`] when this subscriber missed changes.
    ///
    /// # Cancel safety
    /// Cancel-safe: a change is never lost by dropping the future.
    pub async fn recv(&mut self) -> Result<SourceChange, Lagged> {
        loop {
            if self.receivers.is_empty() {
                return std::future::pending().await;
            }
            let (result, index) = {
                let next = self.receivers.iter_mut().map(|r| Box::pin(r.recv()));
                let (result, index, _) = select_all(next).await;
                (result, index)
            };
            match result {
                Ok(change) => return Ok(change),
                Err(RecvError::Lagged(_)) => return Err(Lagged),
                Err(RecvError::Closed) => {
                    self.receivers.swap_remove(index);
                }
            }
        }
    }
}
