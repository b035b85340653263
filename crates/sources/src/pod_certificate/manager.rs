//! [`PodCertificateManager`]: the kubelet's pod certificate manager — one state machine per
//! (pod, volume, source index), stepped by the projected plugin's SetUp (PL-21, PL-22).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1beta1::{PodCertificateRequest, PodCertificateRequestSpec};
use k8s_openapi::api::core::v1::PodCertificateProjection;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use nodelet_core::events::{EventSink, reasons};
use nodelet_core::{AdmittedPod, EventType, PodUid, SourceChange};
use parking_lot::Mutex;
use rand::Rng as _;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::error::PodCertificateError;
use super::keys::{KeyType, generate_key};
use super::source::PodCertificateSource;
use crate::credential::{CredentialBundle, PrivateKeyPem};

/// PL-22: a request not seen this long (plus jitter) after it was created is taken as deleted
/// and made again.
pub(crate) const ASSUME_DELETED_AFTER: Duration = Duration::from_secs(600);
/// PL-22: the kubelet's largest random delay added to a credential's `beginRefreshAt` and to
/// the 10 min after which an unseen request is made again (a [`PodCertificateManager::new`]
/// argument; tests pass zero).
pub const MAX_JITTER: Duration = Duration::from_secs(300);
/// PL-22: a credential still not refreshed this long after its `beginRefreshAt` is overdue.
pub(crate) const REFRESH_OVERDUE_AFTER: Duration = Duration::from_secs(600);

/// The kubelet's pod certificate manager: per `podCertificate` source of every desired pod,
/// a state machine that creates PodCertificateRequests, waits for the signer, refreshes the
/// credential and reports late refreshes. Built by the agent when the `PodCertificateRequest`
/// gate is on, over a [`PodCertificateSource`]; cheap to share behind the
/// [`Sources`](crate::Sources) handle.
///
/// ```text
///                        ┌───────────────────────────┐
///                        ▼                           │ issued
/// initial ──► wait ──► fresh ──(beginRefreshAt)──► wait-refresh
///    ▲          │ issued                              │
///    └──────────┤ unseen 10 min      unseen 10 min ───┘──► fresh (request made again)
///               ├──► denied ◄─────────────────────────┤
///               └──► failed ◄─────────────────────────┘
/// ```
pub struct PodCertificateManager {
    source: Arc<dyn PodCertificateSource>,
    events: Arc<dyn EventSink>,
    max_jitter: Duration,
    states: Mutex<HashMap<ProjectionKey, CredState>>,
}

impl std::fmt::Debug for PodCertificateManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodCertificateManager")
            .field("source", &self.source)
            .field("projections", &self.states.lock().len())
            .finish_non_exhaustive()
    }
}

/// One `podCertificate` source of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ProjectionKey {
    pod_uid: PodUid,
    volume: String,
    source_index: usize,
}

/// A request made and not answered yet.
#[derive(Debug)]
struct Pending {
    private_key: PrivateKeyPem,
    namespace: String,
    name: String,
    abandon_at: Instant,
}

/// An issued credential and what was reported about it.
#[derive(Debug)]
struct Issued {
    private_key: PrivateKeyPem,
    chain: Vec<u8>,
    begin_refresh_at: Instant,
    not_after: Instant,
    overdue_reported: bool,
    expired_reported: bool,
}

#[derive(Debug)]
enum CredState {
    Initial,
    Wait(Pending),
    Refused(PodCertificateError),
    Fresh(Issued),
    WaitRefresh(Issued, Pending),
}

/// What the node's watch shows of a request.
enum Observed {
    Missing,
    Pending,
    Refused {
        failed: bool,
        reason: String,
        message: String,
    },
    Issued {
        chain: Vec<u8>,
        begin_refresh_at: Instant,
        not_after: Instant,
    },
}

impl PodCertificateManager {
    /// A manager creating requests through `source`, reporting to `events`; refresh times and
    /// the re-create deadline get a random delay below `max_jitter` (the kubelet: 5 min).
    pub fn new(
        source: Arc<dyn PodCertificateSource>,
        events: Arc<dyn EventSink>,
        max_jitter: Duration,
    ) -> Self {
        Self {
            source,
            events,
            max_jitter,
            states: Mutex::default(),
        }
    }

    /// A [`SourceChange::PodCertificate`] for every request of a pod the node's watch sees
    /// created, changed or deleted. Only changes after this call arrive.
    pub fn subscribe(&self) -> broadcast::Receiver<SourceChange> {
        self.source.subscribe()
    }

    /// Forgets every state machine of the pod (its volumes are gone). Never blocks.
    pub fn unregister_pod(&self, pod_uid: &PodUid) {
        self.states.lock().retain(|k, _| &k.pod_uid != pod_uid);
    }

    /// Steps the state machine of source `source_index` of volume `volume` and returns the
    /// credential to project, with the instant it must be looked at again.
    ///
    /// # Errors
    /// [`PodCertificateError::NotIssued`] while the first request waits for the signer;
    /// `Denied` / `Failed` for good once the signer refused; API and key errors as they come
    /// (the next SetUp retries).
    pub async fn credential_bundle(
        &self,
        pod: &AdmittedPod,
        volume: &str,
        source_index: usize,
        projection: &PodCertificateProjection,
    ) -> Result<CredentialBundle, PodCertificateError> {
        let key = ProjectionKey {
            pod_uid: pod.uid().clone(),
            volume: volume.to_owned(),
            source_index,
        };
        // The volume manager runs one SetUp per volume at a time: nobody else steps this entry
        // while it is out of the map.
        let state = self
            .states
            .lock()
            .remove(&key)
            .unwrap_or(CredState::Initial);
        let (state, result) = self.step(pod, projection, state).await;
        self.states.lock().insert(key, state);
        result
    }

    /// (1)–(5) of the crate docs' "podCertificate" steps.
    async fn step(
        &self,
        pod: &AdmittedPod,
        projection: &PodCertificateProjection,
        mut state: CredState,
    ) -> (CredState, Result<CredentialBundle, PodCertificateError>) {
        loop {
            let now = Instant::now();
            state = match state {
                // (1) Nothing asked yet: make a key and a request; the pod waits.
                CredState::Initial => {
                    return match self.create(pod, projection, false).await {
                        Ok(p) => (CredState::Wait(p), Err(PodCertificateError::NotIssued)),
                        Err(e) => (CredState::Initial, Err(e)),
                    };
                }
                // (2) Waiting for the first answer.
                CredState::Wait(p) => match self.observe(&p.namespace, &p.name) {
                    Observed::Missing if now > p.abandon_at => CredState::Initial,
                    Observed::Missing | Observed::Pending => {
                        return (CredState::Wait(p), Err(PodCertificateError::NotIssued));
                    }
                    Observed::Refused {
                        failed,
                        reason,
                        message,
                    } => return self.refused(pod, &p, failed, reason, message),
                    Observed::Issued {
                        chain,
                        begin_refresh_at,
                        not_after,
                    } => CredState::Fresh(self.issued(p, chain, begin_refresh_at, not_after)),
                },
                CredState::Refused(e) => {
                    let result = Err(e.clone());
                    return (CredState::Refused(e), result);
                }
                // (3) Issued: project it; from beginRefreshAt (+ jitter) on, ask for a new one.
                CredState::Fresh(mut issued) => {
                    if now < issued.begin_refresh_at {
                        let bundle = bundle(&issued, issued.begin_refresh_at);
                        return (CredState::Fresh(issued), Ok(bundle));
                    }
                    self.report_lateness(pod, &mut issued, now);
                    match self.create(pod, projection, true).await {
                        Ok(p) => CredState::WaitRefresh(issued, p),
                        // The remount fails and the old files stay; the retry asks again.
                        Err(e) => return (CredState::Fresh(issued), Err(e)),
                    }
                }
                // (4) Refreshing: the old credential stays projected until the new one is
                // issued.
                CredState::WaitRefresh(mut issued, p) => {
                    match self.observe(&p.namespace, &p.name) {
                        Observed::Missing if now > p.abandon_at => CredState::Fresh(issued),
                        seen @ (Observed::Missing | Observed::Pending) => {
                            self.report_lateness(pod, &mut issued, now);
                            let missing = matches!(seen, Observed::Missing);
                            let at = next_look(&issued, missing.then_some(p.abandon_at));
                            let bundle = bundle(&issued, at);
                            return (CredState::WaitRefresh(issued, p), Ok(bundle));
                        }
                        Observed::Refused {
                            failed,
                            reason,
                            message,
                        } => return self.refused(pod, &p, failed, reason, message),
                        Observed::Issued {
                            chain,
                            begin_refresh_at,
                            not_after,
                        } => CredState::Fresh(self.issued(p, chain, begin_refresh_at, not_after)),
                    }
                }
            };
        }
    }

    /// A key pair and a request for it, filled as the kubelet fills it.
    async fn create(
        &self,
        pod: &AdmittedPod,
        projection: &PodCertificateProjection,
        refresh: bool,
    ) -> Result<Pending, PodCertificateError> {
        let key_type: KeyType = projection.key_type.parse()?;
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let service_account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let service_account_uid = self
            .source
            .service_account_uid(&namespace, &service_account)
            .await
            .map_err(PodCertificateError::ServiceAccount)?;
        let node_uid = self
            .source
            .node_uid()
            .await
            .map_err(PodCertificateError::Node)?;
        let key = tokio::task::spawn_blocking(move || generate_key(key_type))
            .await
            .map_err(|_| PodCertificateError::TaskFailed)??;
        let request = PodCertificateRequest {
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                generate_name: Some("req-".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod.name().to_owned(),
                    uid: pod.uid().to_string(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: PodCertificateRequestSpec {
                signer_name: projection.signer_name.clone(),
                pod_name: pod.name().to_owned(),
                pod_uid: pod.uid().to_string(),
                service_account_name: service_account,
                service_account_uid,
                node_name: self.source.node_name().to_owned(),
                node_uid,
                max_expiration_seconds: projection.max_expiration_seconds,
                stub_pkc_s10_request: ByteString(key.stub_pkcs10_request),
                unverified_user_annotations: projection.user_annotations.clone(),
                pkix_public_key: None,
                proof_of_possession: None,
            },
            status: None,
        };
        let created = self
            .source
            .create(&request)
            .await
            .map_err(|cause| PodCertificateError::Create { refresh, cause })?;
        let name = created.metadata.name.ok_or(PodCertificateError::Unnamed)?;
        Ok(Pending {
            private_key: key.private_key,
            namespace,
            name,
            abandon_at: Instant::now() + ASSUME_DELETED_AFTER + self.jitter(),
        })
    }

    fn observe(&self, namespace: &str, name: &str) -> Observed {
        let Some(request) = self.source.get(namespace, name) else {
            return Observed::Missing;
        };
        let Some(status) = request.status.as_ref() else {
            return Observed::Pending;
        };
        // The first condition of a known type decides, as in the kubelet.
        for c in status.conditions.iter().flatten() {
            let failed = match c.type_.as_str() {
                "Denied" => false,
                "Failed" => true,
                "Issued" => {
                    let chain = status.certificate_chain.as_deref().unwrap_or_default();
                    return Observed::Issued {
                        chain: clean_chain(chain),
                        begin_refresh_at: instant(status.begin_refresh_at.as_ref()),
                        not_after: instant(status.not_after.as_ref()),
                    };
                }
                _ => continue,
            };
            return Observed::Refused {
                failed,
                reason: c.reason.clone(),
                message: c.message.clone(),
            };
        }
        Observed::Pending
    }

    fn issued(
        &self,
        p: Pending,
        chain: Vec<u8>,
        begin_refresh_at: Instant,
        not_after: Instant,
    ) -> Issued {
        Issued {
            private_key: p.private_key,
            chain,
            begin_refresh_at: begin_refresh_at + self.jitter(),
            not_after,
            overdue_reported: false,
            expired_reported: false,
        }
    }

    /// (5) Denied or Failed: terminal, one Warning event.
    fn refused(
        &self,
        pod: &AdmittedPod,
        p: &Pending,
        failed: bool,
        reason: String,
        message: String,
    ) -> (CredState, Result<CredentialBundle, PodCertificateError>) {
        let (event_reason, verb) = if failed {
            (reasons::POD_CERTIFICATE_FAILED, "failed")
        } else {
            (reasons::POD_CERTIFICATE_DENIED, "was denied")
        };
        let text = format!(
            "PodCertificateRequest {}/{} {verb}, reason={reason:?}, message={message:?}",
            p.namespace, p.name
        );
        self.events
            .event(pod, EventType::Warning, event_reason, text);
        let error = if failed {
            PodCertificateError::Failed { reason, message }
        } else {
            PodCertificateError::Denied { reason, message }
        };
        (CredState::Refused(error.clone()), Err(error))
    }

    /// `CertificateOverdueForRefresh` 10 min after `beginRefreshAt`, `CertificateExpired` after
    /// `notAfter`: each once per credential.
    fn report_lateness(&self, pod: &AdmittedPod, issued: &mut Issued, now: Instant) {
        if now > issued.begin_refresh_at + REFRESH_OVERDUE_AFTER && !issued.overdue_reported {
            issued.overdue_reported = true;
            self.events.event(
                pod,
                EventType::Warning,
                reasons::CERTIFICATE_OVERDUE_FOR_REFRESH,
                "PodCertificate refresh overdue".into(),
            );
        }
        if now > issued.not_after && !issued.expired_reported {
            issued.expired_reported = true;
            self.events.event(
                pod,
                EventType::Warning,
                reasons::CERTIFICATE_EXPIRED,
                "PodCertificate expired".into(),
            );
        }
    }

    /// A random delay in `[0, max_jitter)`.
    fn jitter(&self) -> Duration {
        if self.max_jitter.is_zero() {
            return Duration::ZERO;
        }
        rand::rng().random_range(Duration::ZERO..self.max_jitter)
    }
}

fn bundle(issued: &Issued, refresh_at: Instant) -> CredentialBundle {
    CredentialBundle {
        private_key: issued.private_key.clone(),
        chain: issued.chain.clone(),
        refresh_at,
    }
}

/// While a refresh waits: the next event due, or the re-create deadline of a request not seen
/// yet; the request's own changes come through the watch. Never in the past.
fn next_look(issued: &Issued, abandon_at: Option<Instant>) -> Instant {
    let after = |t: Instant| t + Duration::from_millis(1);
    let overdue =
        (!issued.overdue_reported).then(|| after(issued.begin_refresh_at + REFRESH_OVERDUE_AFTER));
    let expired = (!issued.expired_reported).then(|| after(issued.not_after));
    let at = [overdue, expired, abandon_at.map(after)]
        .into_iter()
        .flatten()
        .min()
        // Nothing due: the periodic resync looks again.
        .unwrap_or_else(|| Instant::now() + REFRESH_OVERDUE_AFTER);
    at.max(after(Instant::now()))
}

/// A wall-clock time of the API as an instant of tokio's clock (a missing one is now).
fn instant(t: Option<&Time>) -> Instant {
    let now = Instant::now();
    let Some(t) = t else { return now };
    let at = SystemTime::from(t.0);
    let wall = SystemTime::now();
    match at.duration_since(wall) {
        Ok(ahead) => now + ahead,
        Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
    }
}

/// The chain as `CERTIFICATE` PEM blocks only: block headers and text between blocks dropped.
fn clean_chain(chain: &str) -> Vec<u8> {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::parse_many(chain)
        .unwrap_or_default()
        .into_iter()
        .map(|b| pem::encode_config(&pem::Pem::new("CERTIFICATE", b.contents()), config))
        .collect::<String>()
        .into_bytes()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
