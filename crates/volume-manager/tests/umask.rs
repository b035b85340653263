//! Modes do not depend on the process umask (PL-5, AW-5): its own test binary, because the
//! umask is process-wide.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use nodelet_core::AdmittedPod;
use nodelet_core::events::RecordingSink;
use nodelet_object_manager::source::FakeSource;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager};
use nodelet_sources::token::FakeTokenSource;
use nodelet_sources::{Sources, TokenManager};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use nodelet_volume_manager::{Config, MemoryMedium, VolumeManager};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[tokio::test]
async fn volume_modes_are_exact_under_a_restrictive_umask() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let root = tempfile::tempdir().unwrap();
    let source = Arc::new(FakeSource::<ConfigMap>::new());
    source.apply(
        "ns",
        ConfigMapBuilder::new("", "cm")
            .data("a", "1")
            .data("b", "2")
            .build(),
    );
    let configmaps =
        ConfigMapManager::with_sources(source, None, ManagerConfig::default()).unwrap();
    let secrets = SecretManager::with_sources(
        Arc::new(FakeSource::<Secret>::new()),
        None,
        ManagerConfig::default(),
    )
    .unwrap();
    let mut config = Config::new(root.path());
    config.memory_medium = MemoryMedium::Disk;
    let vm = VolumeManager::new(
        config,
        configmaps.clone(),
        secrets,
        Sources::new(TokenManager::new(Arc::new(FakeTokenSource::new()))),
        Arc::new(RecordingSink::new()),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let runner = vm.clone();
    let token = shutdown.clone();
    let run = tokio::spawn(async move { runner.run(token).await });

    let pod = PodBuilder::new("ns", "p")
        .uid("u1")
        .container(json!({"name": "c", "volumeMounts": [
            {"name": "cfg", "mountPath": "/cfg"},
            {"name": "inner", "mountPath": "/cfg/inner"}]}))
        .volume(
            json!({"name": "cfg", "configMap": {"name": "cm", "defaultMode": 0o644,
            "items": [{"key": "a", "path": "sub/dir/a"}, {"key": "b", "path": "b"}]}}),
        )
        .volume(json!({"name": "inner", "emptyDir": {}}))
        .build();
    configmaps.register_pod(&admitted(&pod));
    vm.add_pod(&admitted(&pod.clone()));
    vm.wait_for_attach_and_mount(&admitted(&pod)).await.unwrap();

    let dir = vm.host().volume_dir(
        &nodelet_core::PodUid::new("u1").unwrap(),
        "kubernetes.io/configmap",
        "cfg",
    );
    assert_eq!(mode(&dir), 0o777);
    assert_eq!(mode(&dir.join("..data")), 0o755);
    assert_eq!(mode(&dir.join("sub")), 0o755);
    assert_eq!(mode(&dir.join("sub/dir")), 0o755);
    assert_eq!(mode(&dir.join("sub/dir/a")), 0o644);
    assert_eq!(mode(&dir.join("b")), 0o644);
    assert_eq!(mode(&dir.join("inner")), 0o755);
    let empty = vm.host().volume_dir(
        &nodelet_core::PodUid::new("u1").unwrap(),
        "kubernetes.io/empty-dir",
        "inner",
    );
    assert_eq!(mode(&empty), 0o777);
    shutdown.cancel();
    run.await.unwrap();
}

/// `pod` as the agent's pod source admits it (the fixtures always carry a UID).
fn admitted(pod: &Pod) -> AdmittedPod {
    AdmittedPod::new(pod.clone()).unwrap()
}
