//! Sysctls and the pod's IPC namespace under the process runtime (needs root, as
//! `process_runtime`): an IPC sysctl is set in the pod's own IPC namespace, which its
//! containers share and the host does not see (PW-58); sysctls the node cannot set for the pod
//! alone — not allowlisted, network ones (every pod shares the node's network), IPC ones of a
//! `hostIPC` pod — reject the pod as the kubelet's admission does (PW-56).

use std::fs;

use serde_json::{Value, json};

use crate::process_runtime::{
    create, event_is, pod, shell_with, start, start_on, wait_for_event, wait_for_log,
    wait_for_phase,
};

/// `sysctls` as a pod-level security context (running as uid 1000).
fn with_sysctls(sysctls: &[(&str, &str)]) -> Value {
    let list: Vec<Value> = sysctls
        .iter()
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect();
    json!({"restartPolicy": "Never", "securityContext": {"runAsUser": 1000, "sysctls": list}})
}

/// The host's IPC namespace (`ipc:[inode]`).
fn host_ipc() -> String {
    fs::read_link("/proc/self/ns/ipc")
        .unwrap_or_else(|e| panic!("{e}"))
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw58_an_ipc_sysctl_is_set_in_the_pods_own_ipc_namespace_its_containers_share() {
    let (world, _reaper) = start(false).await;
    let root = world.root_dir();
    let host_value =
        fs::read_to_string("/proc/sys/kernel/shm_rmid_forced").unwrap_or_else(|e| panic!("{e}"));
    let wanted = if host_value.trim() == "1" { "0" } else { "1" };
    let script = "echo \"value=$(cat /proc/sys/kernel/shm_rmid_forced)\"; \
                  echo \"ns=$(readlink /proc/self/ns/ipc)\"";
    let init = json!({"name": "init", "image": "busybox:1.36", "command": ["sh", "-c", script]});
    let created = create(
        &world,
        pod("shm")
            .spec(with_sysctls(&[("kernel/shm_rmid_forced", wanted)]))
            .init_container(init)
            .container(shell_with(script, json!({})))
            .json(),
    );
    wait_for_phase(&world, "shm", "Succeeded").await;
    let log = wait_for_log(&root, &created, &["value=", "ns="]).await;
    assert!(log.contains(&format!("value={wanted}")), "{log}");
    let ns = log
        .lines()
        .find_map(|l| l.strip_prefix("ns="))
        .unwrap_or_default()
        .to_owned();
    assert!(ns.starts_with("ipc:["), "{log}");
    assert_ne!(ns, host_ipc(), "a namespace of the pod's own");
    let init_log = crate::process_runtime::read_log(&root, &created, "init").await;
    assert!(
        init_log.contains(&format!("ns={ns}")),
        "the init container shares it: {init_log}"
    );
    assert_eq!(
        fs::read_to_string("/proc/sys/kernel/shm_rmid_forced").unwrap_or_else(|e| panic!("{e}")),
        host_value,
        "the host's value is untouched"
    );

    // A hostIPC pod's containers stay in the host's namespace.
    let shared = create(
        &world,
        pod("host-ipc")
            .spec(json!({"restartPolicy": "Never", "hostIPC": true,
                         "securityContext": {"runAsUser": 1000}}))
            .container(shell_with(
                "echo \"ns=$(readlink /proc/self/ns/ipc)\"",
                json!({}),
            ))
            .json(),
    );
    let log = wait_for_log(&root, &shared, &["ns="]).await;
    assert!(log.contains(&format!("ns={}", host_ipc())), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw56_sysctls_the_node_cannot_set_for_the_pod_alone_reject_it_as_the_kubelet_does() {
    let (world, _reaper) = start(false).await;
    let admin = world.admin.clone();
    let cases = [
        (
            "unsafe",
            json!(with_sysctls(&[("kernel.msgmax", "10000000000")])),
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted",
        ),
        (
            "network",
            json!(with_sysctls(&[(
                "net.ipv4.ip_local_port_range",
                "1024 65535"
            )])),
            "forbidden sysctl: \"net.ipv4.ip_local_port_range\" not allowed with host net enabled",
        ),
        (
            "host-ipc",
            {
                let mut spec = with_sysctls(&[("kernel.shm_rmid_forced", "1")]);
                spec["hostIPC"] = json!(true);
                spec
            },
            "forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled",
        ),
    ];
    for (name, spec, text) in cases {
        let created = create(
            &world,
            pod(name)
                .spec(spec)
                .container(shell_with("true", json!({})))
                .json(),
        );
        let failed = wait_for_phase(&world, name, "Failed").await;
        assert_eq!(failed["status"]["reason"], "SysctlForbidden", "{name}");
        assert_eq!(
            failed["status"]["message"],
            format!("Pod was rejected: {text}"),
            "{name}"
        );
        wait_for_event(&admin, &created, "SysctlForbidden", |e| {
            event_is(e, "Warning", "SysctlForbidden") && e.message.as_deref() == Some(text)
        })
        .await;
        assert!(!world.pod_dir(&created).exists(), "{name}: nothing ran");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pw56_an_unsafe_ipc_sysctl_the_node_allows_is_set_in_the_pods_namespace() {
    let (world, _reaper) = start_on(nodelet_apiserver::Config::default(), false, |c, _| {
        c.allowed_unsafe_sysctls = vec!["kernel.msg*".into()];
    })
    .await;
    let root = world.root_dir();
    let created = create(
        &world,
        pod("msgmax")
            .spec(with_sysctls(&[("kernel.msgmax", "12345")]))
            .container(shell_with(
                "echo \"msgmax=$(cat /proc/sys/kernel/msgmax)\"",
                json!({}),
            ))
            .json(),
    );
    let log = wait_for_log(&root, &created, &["msgmax="]).await;
    assert!(log.contains("msgmax=12345"), "{log}");
    assert_ne!(
        fs::read_to_string("/proc/sys/kernel/msgmax")
            .unwrap_or_else(|e| panic!("{e}"))
            .trim(),
        "12345"
    );
}
