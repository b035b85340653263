//! Unit tests of the pod certificate state machine on paused time, through the fake source.

use std::time::{Duration, SystemTime};

use nodelet_testutil::PodBuilder;
use serde_json::json;
use x509_parser::prelude::{FromDer, X509CertificationRequest};

use super::*;
use crate::pod_certificate::FakePodCertificateSource;
use nodelet_core::events::RecordingSink;

const CHAIN: &str = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n";

struct Fixture {
    fake: FakePodCertificateSource,
    events: RecordingSink,
    manager: PodCertificateManager,
    pod: AdmittedPod,
    projection: PodCertificateProjection,
}

fn fixture(max_jitter: Duration) -> Fixture {
    let fake = FakePodCertificateSource::new("node-1");
    let events = RecordingSink::new();
    let manager =
        PodCertificateManager::new(Arc::new(fake.clone()), Arc::new(events.clone()), max_jitter);
    let pod = PodBuilder::new("ns", "web")
        .uid("pod-uid")
        .service_account("sa")
        .build();
    let projection: PodCertificateProjection = serde_json::from_value(json!({
        "signerName": "example.com/signer", "keyType": "ECDSAP256",
        "maxExpirationSeconds": 3600, "credentialBundlePath": "bundle.pem",
        "userAnnotations": {"example.com/a": "b"}}))
    .unwrap();
    Fixture {
        fake,
        events,
        manager,
        pod: AdmittedPod::new(pod).unwrap(),
        projection,
    }
}

impl Fixture {
    async fn bundle(&self) -> Result<CredentialBundle, PodCertificateError> {
        self.manager
            .credential_bundle(&self.pod, "certs", 0, &self.projection)
            .await
    }

    fn issue_last(&self, begin_refresh_in: Duration, expires_in: Duration) {
        let name = self.fake.last_name().unwrap();
        let now = SystemTime::now();
        self.fake
            .issue("ns", &name, CHAIN, now + begin_refresh_in, now + expires_in);
    }

    fn reasons(&self) -> Vec<String> {
        self.events.events().into_iter().map(|e| e.reason).collect()
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test(start_paused = true)]
async fn the_first_set_up_creates_one_request_filled_as_the_kubelet_fills_it_and_waits() {
    let f = fixture(Duration::ZERO);
    assert_eq!(
        f.bundle().await.unwrap_err(),
        PodCertificateError::NotIssued
    );
    assert_eq!(
        f.bundle().await.unwrap_err().to_string(),
        "credential bundle is not issued yet"
    );
    let created = f.fake.created();
    assert_eq!(created.len(), 1, "waiting makes no second request");
    let r = &created[0];
    assert_eq!(r.metadata.generate_name.as_deref(), Some("req-"));
    assert_eq!(r.metadata.namespace.as_deref(), Some("ns"));
    let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (&*owner.api_version, &*owner.kind, &*owner.name, &*owner.uid),
        ("v1", "Pod", "web", "pod-uid")
    );
    let spec = &r.spec;
    assert_eq!(spec.signer_name, "example.com/signer");
    assert_eq!((&*spec.pod_name, &*spec.pod_uid), ("web", "pod-uid"));
    assert_eq!(
        (&*spec.service_account_name, &*spec.service_account_uid),
        ("sa", "sa-uid-sa")
    );
    assert_eq!((&*spec.node_name, &*spec.node_uid), ("node-1", "node-uid"));
    assert_eq!(spec.max_expiration_seconds, Some(3600));
    assert_eq!(
        spec.unverified_user_annotations.as_ref().unwrap()["example.com/a"],
        "b"
    );
    assert!(spec.pkix_public_key.is_none() && spec.proof_of_possession.is_none());
    let (_, csr) = X509CertificationRequest::from_der(&spec.stub_pkc_s10_request.0).unwrap();
    csr.verify_signature().unwrap();
    assert!(f.events.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_issued_credential_is_projected_and_refreshed_at_begin_refresh_at_plus_jitter() {
    let f = fixture(Duration::from_secs(300));
    f.bundle().await.unwrap_err();
    f.issue_last(secs(1800), secs(3600));
    let first = f.bundle().await.unwrap();
    assert!(
        std::str::from_utf8(first.private_key.as_bytes())
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );
    assert_eq!(first.chain, CHAIN.as_bytes());
    // beginRefreshAt + [0, 5 min).
    let begin = Instant::now() + secs(1800);
    assert!(
        first.refresh_at + secs(1) >= begin,
        "not before beginRefreshAt"
    );
    assert!(
        first.refresh_at < begin + secs(301),
        "at most 5 min of jitter"
    );

    // Before the refresh time the same credential, and no request.
    tokio::time::advance(secs(1700)).await;
    let again = f.bundle().await.unwrap();
    assert_eq!(again.private_key, first.private_key);
    assert_eq!(f.fake.created().len(), 1);

    // At the refresh time: a second request, the old credential still projected.
    tokio::time::sleep_until(first.refresh_at).await;
    let refreshing = f.bundle().await.unwrap();
    assert_eq!(f.fake.created().len(), 2);
    assert_eq!(refreshing.private_key, first.private_key);
    assert_eq!(f.bundle().await.unwrap().private_key, first.private_key);
    assert_eq!(f.fake.created().len(), 2, "one refresh request");

    // Issued: the new key and chain.
    f.issue_last(secs(1800), secs(3600));
    let fresh = f.bundle().await.unwrap();
    assert_ne!(fresh.private_key, first.private_key);
    assert!(f.events.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_request_never_seen_for_ten_minutes_is_made_again() {
    let f = fixture(Duration::ZERO);
    f.bundle().await.unwrap_err();
    let first = f.fake.last_name().unwrap();
    f.fake.delete("ns", &first);
    tokio::time::advance(secs(599)).await;
    f.bundle().await.unwrap_err();
    assert_eq!(f.fake.created().len(), 1, "informer lag is waited out");
    tokio::time::advance(secs(2)).await;
    assert_eq!(
        f.bundle().await.unwrap_err(),
        PodCertificateError::NotIssued
    );
    assert_eq!(f.fake.created().len(), 2);

    // The same for a refresh request: the old credential stays meanwhile.
    f.issue_last(Duration::ZERO, secs(7200));
    let issued = f.bundle().await.unwrap();
    assert_eq!(
        f.fake.created().len(),
        3,
        "beginRefreshAt passed: refresh asked"
    );
    f.fake.delete("ns", &f.fake.last_name().unwrap());
    tokio::time::advance(secs(601)).await;
    let still = f.bundle().await.unwrap();
    assert_eq!(still.private_key, issued.private_key);
    assert_eq!(f.fake.created().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn overdue_and_expired_are_each_reported_once_while_the_refresh_waits() {
    let f = fixture(Duration::ZERO);
    f.bundle().await.unwrap_err();
    f.issue_last(secs(60), secs(1200));
    let b = f.bundle().await.unwrap();
    tokio::time::sleep_until(b.refresh_at).await;
    let waiting = f.bundle().await.unwrap();
    assert!(f.reasons().is_empty());
    // The refresh stays pending: the volume is looked at again when the overdue event is due.
    tokio::time::sleep_until(waiting.refresh_at).await;
    let overdue = f.bundle().await.unwrap();
    assert_eq!(f.reasons(), ["CertificateOverdueForRefresh"]);
    let e = &f.events.events()[0];
    assert_eq!(
        (e.type_, &*e.message),
        (EventType::Warning, "PodCertificate refresh overdue")
    );
    tokio::time::sleep_until(overdue.refresh_at).await;
    f.bundle().await.unwrap();
    assert_eq!(
        f.reasons(),
        ["CertificateOverdueForRefresh", "CertificateExpired"]
    );
    assert_eq!(f.events.events()[1].message, "PodCertificate expired");
    tokio::time::advance(secs(300)).await;
    f.bundle().await.unwrap();
    assert_eq!(f.reasons().len(), 2, "each once");
    assert_eq!(f.fake.created().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_denied_request_is_terminal_with_one_warning_event_and_no_new_request() {
    let f = fixture(Duration::ZERO);
    f.bundle().await.unwrap_err();
    let name = f.fake.last_name().unwrap();
    f.fake.refuse("ns", &name, false, "UnsupportedKeyType");
    for _ in 0..3 {
        let e = f.bundle().await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "PodCertificateRequest was permanently denied: reason=\"UnsupportedKeyType\" \
             message=\"refused by the test\""
        );
        tokio::time::advance(secs(900)).await;
    }
    assert_eq!(f.fake.created().len(), 1);
    let events = f.events.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].type_, &*events[0].reason, &*events[0].message),
        (
            EventType::Warning,
            "Denied",
            "PodCertificateRequest ns/req-1 was denied, reason=\"UnsupportedKeyType\", \
             message=\"refused by the test\""
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_refresh_is_terminal_too() {
    let f = fixture(Duration::ZERO);
    f.bundle().await.unwrap_err();
    f.issue_last(Duration::ZERO, secs(3600));
    f.bundle().await.unwrap();
    let refresh = f.fake.last_name().unwrap();
    f.fake.refuse("ns", &refresh, true, "SignerDown");
    let e = f.bundle().await.unwrap_err();
    assert!(matches!(e, PodCertificateError::Failed { .. }), "{e}");
    assert_eq!(f.reasons(), ["Failed"]);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_key_type_fails_before_any_request() {
    let mut f = fixture(Duration::ZERO);
    f.projection.key_type = "DSA".into();
    assert_eq!(
        f.bundle().await.unwrap_err().to_string(),
        "while generating keypair: unknown key type \"DSA\""
    );
    assert!(f.fake.created().is_empty());
}

#[tokio::test(start_paused = true)]
async fn forgetting_a_pod_starts_its_sources_over() {
    let f = fixture(Duration::ZERO);
    f.bundle().await.unwrap_err();
    f.manager.unregister_pod(f.pod.uid());
    f.bundle().await.unwrap_err();
    assert_eq!(f.fake.created().len(), 2);
}

#[test]
fn a_chain_keeps_only_certificate_blocks_without_headers_or_text_between() {
    let messy = "junk\n-----BEGIN TRUSTED CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAQID\n\
                 -----END TRUSTED CERTIFICATE-----\nmore junk\n-----BEGIN CERTIFICATE-----\n\
                 BAUG\n-----END CERTIFICATE-----\n";
    assert_eq!(
        String::from_utf8(clean_chain(messy)).unwrap(),
        "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
         -----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n"
    );
}
