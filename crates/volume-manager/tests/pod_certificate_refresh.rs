//! A pod certificate refresh through the whole volume manager on fakes and paused time:
//! reconciler, projected plugin, atomic writer. (Against the stand-in a refresh cannot be
//! reached in a test: its validation puts `beginRefreshAt` at least 5 minutes ahead.)

use std::path::Path;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use nodelet_object_manager::source::FakeSource;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager};
use nodelet_testutil::PodBuilder;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use nodelet_core::AdmittedPod;
use nodelet_core::events::RecordingSink;
use nodelet_sources::pod_certificate::{FakePodCertificateSource, PodCertificateManager};
use nodelet_sources::token::FakeTokenSource;
use nodelet_sources::{Sources, TokenManager};
use nodelet_volume_manager::{Config, MemoryMedium, VolumeManager};

const CHAIN_1: &str = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n";
const CHAIN_2: &str = "-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n";

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

// PL-22: at beginRefreshAt a new request is made while the old key and chain stay on disk;
// once it is issued, the volume is rewritten with the new key and chain.
#[tokio::test(start_paused = true)]
async fn a_refresh_keeps_the_old_files_until_the_new_certificate_is_issued() {
    let root = tempfile::tempdir().unwrap();
    let mc = ManagerConfig::default();
    let configmaps = ConfigMapManager::with_sources(
        std::sync::Arc::new(FakeSource::<ConfigMap>::new()),
        None,
        mc.clone(),
    )
    .unwrap();
    let secrets =
        SecretManager::with_sources(std::sync::Arc::new(FakeSource::<Secret>::new()), None, mc)
            .unwrap();
    let fake = FakePodCertificateSource::new("node-1");
    let mut config = Config::new(root.path());
    config.memory_medium = MemoryMedium::Disk;
    config.fsync = false;
    config.resync_interval = None;
    let events = RecordingSink::new();
    let certificates = PodCertificateManager::new(
        std::sync::Arc::new(fake.clone()),
        std::sync::Arc::new(events.clone()),
        Duration::ZERO,
    );
    let tokens = TokenManager::new(std::sync::Arc::new(FakeTokenSource::new()));
    let vm = VolumeManager::new(
        config,
        configmaps,
        secrets,
        Sources::new(tokens).with_pod_certificates(certificates),
        std::sync::Arc::new(events.clone()),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let (vm, shutdown) = (vm.clone(), shutdown.clone());
        async move { vm.run(shutdown).await }
    });
    let pod = PodBuilder::new("ns", "p")
        .uid("u1")
        .container(json!({"name": "c", "volumeMounts": [{"name": "certs", "mountPath": "/c"}]}))
        .volume(
            json!({"name": "certs", "projected": {"defaultMode": 0o644, "sources": [
            {"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519",
                "keyPath": "key.pem", "certificateChainPath": "chain.pem"}}]}}),
        )
        .build();
    let pod = AdmittedPod::new(pod).unwrap();
    vm.add_pod(&pod);
    until("the first request", || fake.created().len() == 1).await;
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let first = fake.last_name().unwrap();
    fake.issue("ns", &first, CHAIN_1, now + hour, now + 2 * hour);
    vm.wait_for_attach_and_mount(&pod).await.unwrap();
    let dir = vm
        .host()
        .volume_dir(pod.uid(), "kubernetes.io/projected", "certs");
    let old_key = read(&dir, "key.pem");
    assert!(old_key.starts_with("-----BEGIN PRIVATE KEY-----"));
    assert_eq!(read(&dir, "chain.pem"), CHAIN_1);

    // beginRefreshAt: a refresh request; the old credential stays.
    tokio::time::advance(hour).await;
    until("the refresh request", || fake.created().len() == 2).await;
    assert_eq!(read(&dir, "key.pem"), old_key);
    assert_eq!(read(&dir, "chain.pem"), CHAIN_1);

    // Issued: both files replaced.
    let refresh = fake.last_name().unwrap();
    fake.issue("ns", &refresh, CHAIN_2, now + 3 * hour, now + 4 * hour);
    until("the new chain", || read(&dir, "chain.pem") == CHAIN_2).await;
    let new_key = read(&dir, "key.pem");
    assert!(new_key.starts_with("-----BEGIN PRIVATE KEY-----") && new_key != old_key);
    assert_eq!(fake.created().len(), 2);
    assert!(
        events
            .with_reason("FailedMount")
            .iter()
            .all(|e| e.message.ends_with("credential bundle is not issued yet"))
    );
    shutdown.cancel();
}
