//! emptyDir, hostPath and the security context under the process runtime (needs root), end to
//! end: a `medium: Memory` emptyDir is a tmpfs of its `sizeLimit` that refuses a write past it
//! and is unmounted with its pod (PL-30, PL-32); hostPath volumes are the node's paths, checked
//! by type (PL-33); `readOnlyRootFilesystem` and `allowPrivilegeEscalation: false` reach the
//! process (PW-42, PW-43); a pod for another OS is rejected and one naming a RuntimeClass gets
//! no sandbox (PW-40, PW-41).

use std::fs;

use serde_json::{Value, json};

use crate::process_runtime::{
    Reaper, create, delete_and_wait, event_is, get_pod, pod, shell_with, start, start_on,
    wait_for_event, wait_for_log, wait_for_phase,
};
use crate::support::World;

/// [`start`] with memory-medium volumes on tmpfs (the other agent tests keep them on disk).
async fn start_with_tmpfs() -> (World, Reaper) {
    start_on(nodelet_apiserver::Config::default(), false, |c, _| {
        c.volumes_on_disk = false;
    })
    .await
}

/// Whether the host's mount table names `needle` anywhere.
fn host_mounts_mention(needle: &str) -> bool {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_empty_dir_is_a_tmpfs_of_its_size_limit_refusing_more_and_unmounted_with_its_pod()
{
    let (world, _reaper) = start_with_tmpfs().await;
    let root = world.root_dir();
    // (`2>&1`: one stream, one order.)
    let script = "grep ' /mem ' /proc/self/mountinfo; \
                  if dd if=/dev/zero of=/mem/big bs=1024 count=2048 2>&1; \
                  then echo write=ok; else echo write=refused; fi; rm -f /mem/big; \
                  if dd if=/dev/zero of=/mem/small bs=1024 count=64 2>&1; \
                  then echo small=ok; else echo small=refused; fi; \
                  while true; do sleep 0.1; done";
    let created = create(
        &world,
        pod("memory")
            .spec(json!({"securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                script,
                json!({"volumeMounts": [{"name": "mem", "mountPath": "/mem"}]}),
            ))
            .volume(json!({"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}))
            .json(),
    );
    let log = wait_for_log(&root, &created, &["write=", "small="]).await;
    let mount = log
        .lines()
        .find(|l| l.contains(" /mem "))
        .unwrap_or_else(|| panic!("no /mem in the container's mount table:\n{log}"));
    assert!(mount.contains(" - tmpfs "), "{mount}");
    assert!(mount.contains("size=1024k"), "{mount}");
    assert!(log.contains("write=refused"), "{log}");
    assert!(log.contains("No space left on device"), "{log}");
    // The tmpfs root is 1777: a user other than root writes in it.
    assert!(log.contains("small=ok"), "{log}");

    let volume = world
        .pod_dir(&created)
        .join("volumes/kubernetes.io~empty-dir/mem");
    let volume_text = volume.display().to_string();
    assert!(
        host_mounts_mention(&volume_text),
        "the tmpfs is mounted on the node"
    );
    delete_and_wait(&world, "memory", 1).await;
    assert!(
        !host_mounts_mention(&volume_text),
        "the tmpfs went with its pod"
    );
    assert!(!volume.exists());
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_path_volumes_are_the_nodes_paths_created_or_checked_by_type() {
    let (world, _reaper) = start(true).await;
    let root = world.root_dir();
    let host = tempfile::tempdir().unwrap();
    let made = host.path().join("made/here");
    let file = host.path().join("file");
    fs::write(&file, "from the node\n").unwrap();
    let created = create(
        &world,
        pod("host-paths")
            .spec(json!({"securityContext": {"runAsUser": 0}}))
            .container(shell_with(
                "cat /f; echo written > /d/out && echo write=ok; while true; do sleep 0.1; done",
                json!({"volumeMounts": [
                    {"name": "d", "mountPath": "/d"},
                    {"name": "f", "mountPath": "/f"},
                ]}),
            ))
            .volume(json!({"name": "d", "hostPath": {"path": made, "type": "DirectoryOrCreate"}}))
            .volume(json!({"name": "f", "hostPath": {"path": file, "type": "File"}}))
            .json(),
    );
    let log = wait_for_log(&root, &created, &["write="]).await;
    assert!(log.contains("from the node"), "{log}");
    assert!(log.contains("write=ok"), "{log}");
    assert_eq!(fs::read_to_string(made.join("out")).unwrap(), "written\n");

    // The wrong type, or a path that is missing: the kubelet's texts, nothing started.
    let missing = host.path().join("missing");
    let wrong = create(
        &world,
        pod("wrong-type")
            .spec(json!({"securityContext": {"runAsUser": 0}}))
            .container(shell_with(
                "true",
                json!({"volumeMounts": [
                    {"name": "d", "mountPath": "/d"},
                    {"name": "m", "mountPath": "/m"},
                ]}),
            ))
            .volume(json!({"name": "d", "hostPath": {"path": file, "type": "Directory"}}))
            .volume(json!({"name": "m", "hostPath": {"path": missing, "type": "Socket"}}))
            .json(),
    );
    let admin = world.admin.clone();
    let expected = format!(
        "MountVolume.SetUp failed for volume \"d\" : hostPath type check failed: {} is not a \
         directory, it's a File",
        file.display()
    );
    wait_for_event(&admin, &wrong, &expected, |e| {
        event_is(e, "Warning", "FailedMount") && e.message.as_deref() == Some(expected.as_str())
    })
    .await;
    let expected = format!(
        "MountVolume.SetUp failed for volume \"m\" : hostPath {} doesn't exist",
        missing.display()
    );
    wait_for_event(&admin, &wrong, &expected, |e| {
        event_is(e, "Warning", "FailedMount") && e.message.as_deref() == Some(expected.as_str())
    })
    .await;
    assert_eq!(
        get_pod(&world, "wrong-type").unwrap()["status"]["phase"],
        "Pending"
    );
    delete_and_wait(&world, "host-paths", 1).await;
    delete_and_wait(&world, "wrong-type", 1).await;
    // The node's paths stay.
    assert!(made.join("out").exists() && file.exists());
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_root_refuses_writes_and_no_new_privs_shows_in_the_process_status() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    let script = "if touch /checkfile 2>&1; then echo root=writable; else echo root=refused; fi; \
                  if echo ok > /data/f; then echo volume=ok; else echo volume=refused; fi; \
                  grep -E '^(NoNewPrivs|CapEff):' /proc/self/status";
    let guarded = create(
        &world,
        pod("guarded")
            .spec(json!({"restartPolicy": "Never", "securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                script,
                json!({
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "securityContext": {
                        "readOnlyRootFilesystem": true,
                        "allowPrivilegeEscalation": false,
                    },
                }),
            ))
            .volume(json!({"name": "data", "emptyDir": {}}))
            .json(),
    );
    let plain = create(
        &world,
        pod("plain")
            .spec(json!({"restartPolicy": "Never", "securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                "grep -E '^NoNewPrivs:' /proc/self/status",
                json!({}),
            ))
            .json(),
    );
    wait_for_phase(&world, "guarded", "Succeeded").await;
    wait_for_phase(&world, "plain", "Succeeded").await;
    let log = wait_for_log(&root, &guarded, &["NoNewPrivs"]).await;
    assert!(log.contains("root=refused"), "{log}");
    assert!(log.contains("Read-only file system"), "{log}");
    assert!(log.contains("volume=ok"), "{log}");
    assert!(log.contains("NoNewPrivs:\t1"), "{log}");
    // A user other than root runs with no capability.
    assert!(log.contains("CapEff:\t0000000000000000"), "{log}");
    let log = wait_for_log(&root, &plain, &["NoNewPrivs"]).await;
    assert!(log.contains("NoNewPrivs:\t0"), "{log}");
    world.stop().await;
}

/// The pod's `status.phase`, `reason` and `message`.
fn phase_reason_message(pod: &Value) -> (String, String, String) {
    let field = |k: &str| pod["status"][k].as_str().unwrap_or_default().to_owned();
    (field("phase"), field("reason"), field("message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_for_another_os_is_rejected_and_one_naming_a_runtime_class_gets_no_sandbox() {
    let (world, _reaper) = start(false).await;
    let admin = world.admin.clone();
    let windows = create(
        &world,
        pod("windows")
            .spec(json!({"os": {"name": "windows"}, "securityContext": {"runAsUser": 1000}}))
            .container(shell_with("true", json!({})))
            .json(),
    );
    let failed = wait_for_phase(&world, "windows", "Failed").await;
    assert_eq!(
        phase_reason_message(&failed),
        (
            "Failed".to_owned(),
            "PodOSNotSupported".to_owned(),
            "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"
                .to_owned()
        )
    );
    wait_for_event(&admin, &windows, "PodOSNotSupported", |e| {
        event_is(e, "Warning", "PodOSNotSupported")
            && e.message.as_deref()
                == Some("Failed to admit pod as the OS field doesn't match node OS")
    })
    .await;
    // Never handed to the workers: no pod directory.
    assert!(!world.pod_dir(&windows).exists());

    let sandboxed = create(
        &world,
        pod("sandboxed")
            .spec(json!({"runtimeClassName": "gvisor", "securityContext": {"runAsUser": 1000}}))
            .container(shell_with("true", json!({})))
            .json(),
    );
    let event = wait_for_event(&admin, &sandboxed, "FailedCreatePodSandBox", |e| {
        event_is(e, "Warning", "FailedCreatePodSandBox")
    })
    .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.starts_with("Failed to create pod sandbox: RuntimeClass \"gvisor\": "),
        "{message}"
    );
    assert_eq!(
        get_pod(&world, "sandboxed").unwrap()["status"]["phase"],
        "Pending"
    );
    assert!(
        get_pod(&world, "sandboxed").unwrap()["status"]["containerStatuses"]
            .as_array()
            .is_none_or(|s| s.iter().all(|c| c["state"]["running"].is_null()))
    );
    delete_and_wait(&world, "sandboxed", 1).await;
    world.stop().await;
}
