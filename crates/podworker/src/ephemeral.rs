//! A pod's ephemeral containers as the containers a runtime starts (PW-57): an ephemeral
//! container has every field of a container but `targetContainerName`, which names the
//! container whose namespaces it would share; a process runtime's containers share the host's
//! process and network namespaces already, so nothing of it is lost here.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

/// The container `ec` describes, field for field.
pub(crate) fn as_container(ec: &EphemeralContainer) -> Container {
    let ec = ec.clone();
    Container {
        args: ec.args,
        command: ec.command,
        env: ec.env,
        env_from: ec.env_from,
        image: ec.image,
        image_pull_policy: ec.image_pull_policy,
        lifecycle: ec.lifecycle,
        liveness_probe: ec.liveness_probe,
        name: ec.name,
        ports: ec.ports,
        readiness_probe: ec.readiness_probe,
        resize_policy: ec.resize_policy,
        resources: ec.resources,
        restart_policy: ec.restart_policy,
        restart_policy_rules: ec.restart_policy_rules,
        security_context: ec.security_context,
        startup_probe: ec.startup_probe,
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        termination_message_path: ec.termination_message_path,
        termination_message_policy: ec.termination_message_policy,
        tty: ec.tty,
        volume_devices: ec.volume_devices,
        volume_mounts: ec.volume_mounts,
        working_dir: ec.working_dir,
    }
}

/// `pod`'s ephemeral containers, in order, as containers.
pub(crate) fn containers(pod: &Pod) -> Vec<Container> {
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .map(as_container)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ephemeral_container_keeps_every_field_a_container_has() {
        let ec: EphemeralContainer = serde_json::from_value(serde_json::json!({
            "name": "debugger", "image": "busybox", "command": ["sh", "-c", "echo polo"],
            "args": ["x"], "env": [{"name": "A", "value": "1"}], "stdin": true, "tty": true,
            "workingDir": "/w", "volumeMounts": [{"name": "v", "mountPath": "/v"}],
            "securityContext": {"runAsUser": 1000}, "targetContainerName": "app",
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let c = serde_json::to_value(as_container(&ec)).unwrap_or_else(|e| panic!("{e}"));
        let mut expected = serde_json::to_value(&ec).unwrap_or_else(|e| panic!("{e}"));
        if let Some(map) = expected.as_object_mut() {
            map.remove("targetContainerName");
        }
        assert_eq!(c, expected);
    }
}
