//! Pod removal and agent restarts (VM-12, VM-13, PL-14, PL-15).

use std::fs;
use std::os::unix::fs::symlink;

use nodelet_core::PodUid;
use serde_json::json;

use crate::support::*;

// VM-13, PL-14, PW-6: after removal and wait_for_unmount the volume directories are gone.
#[tokio::test]
async fn removing_a_pod_tears_down_its_volume_directories() {
    let env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    env.create(secret("s", &[("k", "v")]));
    let keep = env.create_pod(
        "keep",
        json!([{"name": "cfg", "configMap": {"name": "cm"}}]),
    );
    let pod = env.create_pod(
        "gone",
        json!([{"name": "cfg", "configMap": {"name": "cm"}},
               {"name": "sec", "secret": {"secretName": "s"}},
               {"name": "tmp", "emptyDir": {}},
               {"name": "all", "projected": {"sources": [
                   {"serviceAccountToken": {"path": "token"}}]}}]),
    );
    env.add_and_mount(&keep).await;
    env.add_and_mount(&pod).await;
    let uid = pod.metadata.uid.clone().unwrap();
    let volumes = env.root.path().join("pods").join(&uid).join("volumes");
    assert_eq!(fs::read_dir(&volumes).unwrap().count(), 4);

    env.remove_pod(&pod).await;
    assert_eq!(fs::read_dir(&volumes).unwrap().count(), 0);
    let markers = env
        .root
        .path()
        .join("pods")
        .join(&uid)
        .join("plugins/kubernetes.io~empty-dir");
    assert_eq!(fs::read_dir(&markers).map(|d| d.count()).unwrap_or(0), 0);
    assert!(
        env.vm
            .mounted_volumes(&PodUid::new(uid.clone()).unwrap())
            .is_empty()
    );
    assert!(env.vm.snapshot().iter().all(|p| p.pod_uid != uid));
    // The other pod is untouched.
    assert_eq!(files(&env.dir(&keep, CM, "cfg")).len(), 3);
}

// VM-12: waiting for a pod that never had volumes returns at once.
#[tokio::test]
async fn waiting_for_the_unmount_of_an_unknown_pod_returns_at_once() {
    let env = Env::start().await;
    let pod = env.create_pod("p", json!([]));
    within(env.vm.wait_for_unmount(admitted(&pod).uid()))
        .await
        .unwrap();
    within(env.vm.wait_for_attach_and_mount(&admitted(&pod)))
        .await
        .unwrap();
}

// PL-15 and beyond: after a restart the volumes of desired pods are adopted without
// rewriting unchanged content, leftovers of an interrupted write are cleaned, and the volumes
// of pods no longer desired are torn down once the agent's pods are synced.
#[tokio::test]
async fn a_restart_adopts_unchanged_volumes_and_tears_down_the_rest() {
    let mut env = Env::start().await;
    env.create(config_map("cm", fixture_data()));
    let stay = env.create_pod(
        "stay",
        json!([{"name": "cfg", "configMap": {"name": "cm"}}]),
    );
    let leave = env.create_pod(
        "leave",
        json!([{"name": "cfg", "configMap": {"name": "cm"}}]),
    );
    env.add_and_mount(&stay).await;
    env.add_and_mount(&leave).await;
    let stay_dir = env.dir(&stay, CM, "cfg");
    let leave_dir = env.dir(&leave, CM, "cfg");
    let data_before = fs::read_link(stay_dir.join("..data")).unwrap();

    env.restart().await;
    // Leftovers of a write interrupted by the "crash".
    let orphan = stay_dir.join("..2020_01_01_00_00_00.42");
    fs::create_dir(&orphan).unwrap();
    symlink("..2020_01_01_00_00_00.42", stay_dir.join("..data_tmp")).unwrap();

    env.add_pod(&stay);
    within(env.vm.wait_for_attach_and_mount(&admitted(&stay)))
        .await
        .unwrap();
    assert_eq!(fs::read_link(stay_dir.join("..data")).unwrap(), data_before);
    assert_eq!(files(&stay_dir).len(), 3);
    assert!(!orphan.exists());
    assert!(fs::symlink_metadata(stay_dir.join("..data_tmp")).is_err());
    // Not desired, but the agent has not said its pods are synced: kept.
    assert!(leave_dir.exists());

    env.vm.pods_synced();
    within(env.vm.wait_for_unmount(admitted(&leave).uid()))
        .await
        .unwrap();
    assert!(!leave_dir.exists());
    assert!(stay_dir.exists());
}
