//! Helpers for tests in any crate (the `testing` feature): [`PodCertificateSigner`], a signer
//! for `certificates.k8s.io/v1beta1` PodCertificateRequests that issues from its own CA and
//! publishes that CA as a ClusterTrustBundle.
//!
//! # How the signer works
//! 1. [`PodCertificateSigner::start`] generates a CA (ECDSA P-256, rcgen) and spawns a task
//!    that watches the PodCertificateRequests of its signer name in every namespace
//!    (`fieldSelector=spec.signerName=<name>`, through the given client).
//! 2. Each request without a terminal condition (`Issued`, `Denied`, `Failed`) is answered
//!    according to the current [`SignerMode`]: issued (a leaf for the requested public key,
//!    signed by the CA), denied, failed, or held (left pending). A request whose key the
//!    signer cannot sign for (P-521: ring has no such signer) is denied with reason
//!    `UnsupportedKeyType`, as the API asks of signers.
//! 3. [`PodCertificateSigner::set_mode`] changes the answer for later requests and goes over
//!    the pending ones again (so held requests are answered once the mode changes).
//! 4. [`PodCertificateSigner::publish_trust_bundle`] creates or updates the ClusterTrustBundle
//!    `<signer name with ':' for '/'>:ca` holding the CA certificate.
//!
//! An issued status: `certificateChain` = the leaf (PEM), `notBefore` = now, `notAfter` =
//! now + the lifetime (default: the request's `maxExpirationSeconds`), `beginRefreshAt` =
//! halfway, and an `Issued` condition (reason `Issued`).
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use nodelet_apiserver::testing::{PodCertificateSigner, SignerMode};
//! let signer = PodCertificateSigner::start(client, "example.com/test").await?;
//! signer.publish_trust_bundle().await?;      // ClusterTrustBundle example.com:test:ca
//! signer.set_mode(SignerMode::Hold);         // requests stay pending ...
//! signer.set_mode(SignerMode::Issue);        // ... and are issued now
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1beta1::{ClusterTrustBundle, PodCertificateRequest};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use parking_lot::Mutex;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SignatureAlgorithm,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::certificates::keys::{KeyKind, SubjectKey};
use crate::certificates::pod_request::requested_key;
use crate::certificates::pod_status::has_condition;
use crate::error::Error;

/// How the signer answers pending requests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignerMode {
    /// Issue a certificate (the default).
    Issue,
    /// Set a `Denied` condition with this reason and message.
    Deny {
        /// The condition's reason (`[A-Za-z][A-Za-z0-9_,:]*`).
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// Set a `Failed` condition with this reason and message.
    Fail {
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// Leave requests pending.
    Hold,
}

/// What the signer did with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Issued: the leaf certificate's PEM.
    Issued(String),
    /// Denied with this reason.
    Denied(String),
    /// Failed with this reason.
    Failed(String),
}

/// One answered request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The request's namespace.
    pub namespace: String,
    /// The request's name.
    pub name: String,
    /// What was done.
    pub outcome: Outcome,
}

/// A test signer for PodCertificateRequests (see the module docs). Dropping it stops its task.
pub struct PodCertificateSigner {
    shared: Arc<SignerState>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for PodCertificateSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodCertificateSigner")
            .field("signer_name", &self.shared.signer_name)
            .finish_non_exhaustive()
    }
}

/// What the signer's task and its handle share.
struct SignerState {
    client: Client,
    signer_name: String,
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
    settings: Mutex<Settings>,
    decisions: Mutex<Vec<Decision>>,
    /// Woken when the mode changes: pending requests are answered again.
    again: Arc<Notify>,
}

struct Settings {
    mode: SignerMode,
    lifetime: Option<Duration>,
}

impl Drop for PodCertificateSigner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodCertificateSigner {
    /// Generates the CA and starts answering the PodCertificateRequests for `signer_name`
    /// through `client` (which must be allowed to list, watch and update their status: an
    /// admin), in a task on the current tokio runtime. Returns at once: requests created
    /// before or after are answered as the watch delivers them.
    ///
    /// # Errors
    /// [`Error::Keygen`] if the CA cannot be generated.
    pub async fn start(client: Client, signer_name: &str) -> Result<Self, Error> {
        let keygen = |e: rcgen::Error| Error::Keygen {
            what: "test signer CA",
            source: Box::new(e),
        };
        let key = KeyPair::generate().map_err(keygen)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(keygen)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{signer_name} test CA"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = params.self_signed(&key).map_err(keygen)?;
        let shared = Arc::new(SignerState {
            client,
            signer_name: signer_name.to_string(),
            ca_pem: ca.pem(),
            issuer: Issuer::new(params, key),
            settings: Mutex::new(Settings {
                mode: SignerMode::Issue,
                lifetime: None,
            }),
            decisions: Mutex::new(Vec::new()),
            again: Arc::new(Notify::new()),
        });
        let task = tokio::spawn(run(Arc::downgrade(&shared)));
        Ok(PodCertificateSigner { shared, task })
    }

    /// The signer name it answers for.
    pub fn signer_name(&self) -> &str {
        &self.shared.signer_name
    }

    /// The CA certificate (PEM) that signs every issued leaf.
    pub fn ca_pem(&self) -> &str {
        &self.shared.ca_pem
    }

    /// Answers later (and still pending) requests this way.
    pub fn set_mode(&self, mode: SignerMode) {
        self.shared.settings.lock().mode = mode;
        self.shared.again.notify_one();
    }

    /// Issues certificates valid for `lifetime` (at least an hour, at most the request's
    /// `maxExpirationSeconds`, or the API server refuses the status) instead of each
    /// request's `maxExpirationSeconds`.
    pub fn set_lifetime(&self, lifetime: Duration) {
        self.shared.settings.lock().lifetime = Some(lifetime);
    }

    /// Every request answered so far, in order.
    pub fn decisions(&self) -> Vec<Decision> {
        self.shared.decisions.lock().clone()
    }

    /// The name of the ClusterTrustBundle [`publish_trust_bundle`](Self::publish_trust_bundle)
    /// writes: the signer name with `/` replaced by `:`, then `:ca`.
    pub fn trust_bundle_name(&self) -> String {
        format!("{}:ca", self.shared.signer_name.replace('/', ":"))
    }

    /// Creates, or updates, the ClusterTrustBundle [`trust_bundle_name`](Self::trust_bundle_name)
    /// with `spec.signerName` this signer and `spec.trustBundle` its CA certificate.
    ///
    /// # Errors
    /// The API error of the create or update.
    pub async fn publish_trust_bundle(&self) -> Result<ClusterTrustBundle, kube::Error> {
        self.publish_trust_bundle_labeled(&BTreeMap::new()).await
    }

    /// [`publish_trust_bundle`](Self::publish_trust_bundle) with these labels (for
    /// `clusterTrustBundle` volume sources that select by label).
    ///
    /// # Errors
    /// The API error of the create or update.
    pub async fn publish_trust_bundle_labeled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<ClusterTrustBundle, kube::Error> {
        let api: Api<ClusterTrustBundle> = Api::all(self.shared.client.clone());
        let name = self.trust_bundle_name();
        let body = json!({
            "apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle",
            "metadata": {"name": name, "labels": labels},
            "spec": {"signerName": self.shared.signer_name, "trustBundle": self.shared.ca_pem},
        });
        if api.get_opt(&name).await?.is_some() {
            let patch = json!({"metadata": {"labels": labels},
                "spec": {"trustBundle": self.shared.ca_pem}});
            return api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await;
        }
        let bundle: ClusterTrustBundle =
            serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
        api.create(&PostParams::default(), &bundle).await
    }
}

/// (1)–(3) The signer's task: holds only a `Weak` reference, so it ends with its signer.
async fn run(state: std::sync::Weak<SignerState>) {
    let Some(s) = state.upgrade() else { return };
    let api: Api<PodCertificateRequest> = Api::all(s.client.clone());
    let selector = format!("spec.signerName={}", s.signer_name);
    let again = s.again.clone();
    drop(s);
    let mut events =
        watcher::watcher(api.clone(), watcher::Config::default().fields(&selector)).boxed();
    loop {
        let batch: Vec<PodCertificateRequest> = tokio::select! {
            ev = events.next() => match ev {
                None => return,
                Some(Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r))) => vec![r],
                Some(Ok(_)) => continue,
                Some(Err(_)) => {
                    // The watcher retries by itself; wait a little before the next attempt.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = again.notified() => match api.list(&ListParams::default().fields(&selector)).await {
                Ok(list) => list.items,
                Err(_) => continue,
            },
        };
        let Some(s) = state.upgrade() else { return };
        for req in batch {
            s.answer(&req).await;
        }
    }
}

/// A requested public key in the form rcgen signs for.
struct RequestedKey {
    bits: Vec<u8>,
    alg: &'static SignatureAlgorithm,
}

impl PublicKeyData for RequestedKey {
    fn der_bytes(&self) -> &[u8] {
        &self.bits
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}

/// The key rcgen can certify, or `None` (P-521, unknown kinds).
fn rcgen_key(key: SubjectKey) -> Option<RequestedKey> {
    let alg = match key.kind {
        KeyKind::Ed25519 => &rcgen::PKCS_ED25519,
        KeyKind::Ec("P-256") => &rcgen::PKCS_ECDSA_P256_SHA256,
        KeyKind::Ec("P-384") => &rcgen::PKCS_ECDSA_P384_SHA384,
        KeyKind::Rsa(_) => &rcgen::PKCS_RSA_SHA256,
        _ => return None,
    };
    Some(RequestedKey {
        bits: key.bits,
        alg,
    })
}

impl SignerState {
    /// (2) Answers one request, unless it is already answered or the mode is `Hold`.
    async fn answer(&self, req: &PodCertificateRequest) {
        let Ok(obj) = serde_json::to_value(req) else {
            return;
        };
        if ["Issued", "Denied", "Failed"]
            .iter()
            .any(|t| has_condition(&obj, t))
        {
            return;
        }
        let (mode, lifetime) = {
            let settings = self.settings.lock();
            (settings.mode.clone(), settings.lifetime)
        };
        let now = chrono::Utc::now();
        let (status, outcome) = match mode {
            SignerMode::Hold => return,
            SignerMode::Deny { reason, message } => (
                condition_status("Denied", &reason, &message, now),
                Outcome::Denied(reason),
            ),
            SignerMode::Fail { reason, message } => (
                condition_status("Failed", &reason, &message, now),
                Outcome::Failed(reason),
            ),
            SignerMode::Issue => match self.issue(&obj, lifetime, now) {
                Some((status, pem)) => (status, Outcome::Issued(pem)),
                None => {
                    let reason = "UnsupportedKeyType".to_string();
                    let message =
                        "this test signer issues for RSA, ECDSA P-256/P-384 and Ed25519 keys";
                    (
                        condition_status("Denied", &reason, message, now),
                        Outcome::Denied(reason),
                    )
                }
            },
        };
        let namespace = req.metadata.namespace.clone().unwrap_or_default();
        let name = req.metadata.name.clone().unwrap_or_default();
        let api: Api<PodCertificateRequest> = Api::namespaced(self.client.clone(), &namespace);
        let patch = json!({"status": status});
        // A failed write (a conflict, the request gone) is retried by the next event, if any.
        if api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .is_ok()
        {
            self.decisions.lock().push(Decision {
                namespace,
                name,
                outcome,
            });
        }
    }

    /// An issued status and the leaf's PEM, or `None` for a key the signer cannot certify.
    fn issue(
        &self,
        obj: &Value,
        lifetime: Option<Duration>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<(Value, String)> {
        let key = rcgen_key(requested_key(obj)?)?;
        let max = obj
            .pointer("/spec/maxExpirationSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(86_400);
        let seconds = lifetime.map_or(max, |l| i64::try_from(l.as_secs()).unwrap_or(max));
        let not_before = now.timestamp();
        let not_after = not_before + seconds;
        let refresh = not_before + seconds / 2;
        let mut params = CertificateParams::new(Vec::<String>::new()).ok()?;
        let pod = obj
            .pointer("/spec/podName")
            .and_then(Value::as_str)
            .unwrap_or("");
        params.distinguished_name.push(DnType::CommonName, pod);
        params.not_before = time::OffsetDateTime::from_unix_timestamp(not_before).ok()?;
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).ok()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let pem = params.signed_by(&key, &self.issuer).ok()?.pem();
        let at = |secs: i64| {
            chrono::DateTime::from_timestamp(secs, 0)
                .unwrap_or(now)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        };
        let mut status = condition_status("Issued", "Issued", "issued by the test signer", now);
        status["certificateChain"] = json!(pem);
        status["notBefore"] = json!(at(not_before));
        status["notAfter"] = json!(at(not_after));
        status["beginRefreshAt"] = json!(at(refresh));
        Some((status, pem))
    }
}

/// A status with one condition of type `ty`.
fn condition_status(
    ty: &str,
    reason: &str,
    message: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Value {
    json!({"conditions": [{
        "type": ty, "status": "True", "reason": reason, "message": message,
        "lastTransitionTime": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }]})
}
