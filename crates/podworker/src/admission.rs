//! What the kubelet refuses before it runs a pod, for a node whose containers are host
//! processes: a pod for another operating system ([`admit`], PW-40, the kubelet's admission)
//! a pod naming a RuntimeClass ([`runtime_class_refusal`], PW-41, the kubelet's sandbox
//! creation), and a pod declaring a port another pod of the node already declares
//! ([`admit_ports`], PW-85: the kubelet's host port check, every declared port being a host
//! port on the host network).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod};

/// The operating system of this node, as the kubelet names it (`runtime.GOOS`).
pub const NODE_OS: &str = "linux";

/// The node label a pod may carry to say which operating system it needs.
const OS_LABEL: &str = "kubernetes.io/os";

/// Event reasons of a refused pod, with the kubelet's spelling.
pub mod rejection_reasons {
    /// PW-40: the pod's `kubernetes.io/os` label names another operating system.
    pub const POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH: &str =
        "PodOSSelectorNodeLabelDoesNotMatch";
    /// PW-40: the pod's `spec.os.name` is another operating system.
    pub const POD_OS_NOT_SUPPORTED: &str = "PodOSNotSupported";
    /// PW-41: the pod's sandbox could not be made (its RuntimeClass).
    pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    /// PW-85: a declared port is already another running pod's (the kubelet's predicate name).
    pub const NODE_PORTS: &str = "NodePorts";
}

/// Why the node does not admit a pod (PW-40): the Warning event's reason and message; the
/// pod's status becomes `Failed` with that reason and [`status_message`](Self::status_message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The reason (event and status).
    pub reason: &'static str,
    /// The event's message.
    pub message: String,
}

impl Rejection {
    /// The pod's `status.message`: `Pod was rejected: <message>`, as the kubelet writes it.
    pub fn status_message(&self) -> String {
        format!("Pod was rejected: {}", self.message)
    }
}

/// PW-40, the kubelet's OS checks of pod admission, in its order:
/// 1. a `kubernetes.io/os` label on the pod (its labels, not its node selector) naming
///    another system than the node's ([`NODE_OS`]) → `PodOSSelectorNodeLabelDoesNotMatch`;
/// 2. a `spec.os.name` other than the node's → `PodOSNotSupported`.
///
/// # Errors
/// The [`Rejection`], with the kubelet's reason and text.
pub fn admit(pod: &Pod) -> Result<(), Rejection> {
    // (1)
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get(OS_LABEL));
    if label.is_some_and(|os| os != NODE_OS) {
        return Err(Rejection {
            reason: rejection_reasons::POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH,
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .to_owned(),
        });
    }
    // (2)
    let os = pod.spec.as_ref().and_then(|s| s.os.as_ref());
    if os.is_some_and(|os| os.name != NODE_OS) {
        return Err(Rejection {
            reason: rejection_reasons::POD_OS_NOT_SUPPORTED,
            message: "Failed to admit pod as the OS field doesn't match node OS".to_owned(),
        });
    }
    Ok(())
}

/// PW-41: why a process runtime cannot make the sandbox of a pod that names a RuntimeClass.
/// A RuntimeClass always names a handler (the API requires one), and a node whose containers
/// are host processes has only its default one: the kubelet's `FailedCreatePodSandBox`, the
/// pod staying `Pending`. `None` for a pod without `runtimeClassName`.
pub fn runtime_class_refusal(pod: &Pod) -> Option<String> {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|n| !n.is_empty())?;
    Some(format!(
        "RuntimeClass {name:?}: nodelet's process runtime has no runtime handler but its \
         default one (it runs containers as host processes); remove runtimeClassName to run \
         the pod here"
    ))
}

/// One port a container declares, as it is bound on the host network: the protocol, the
/// address (`hostIP`; empty is every address, `0.0.0.0`) and the port (`containerPort`: a
/// process on the host network binds the port it listens on, whatever `hostPort` says).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct HostPort {
    protocol: String,
    ip: String,
    port: i32,
}

impl HostPort {
    /// The scheduler's and kubelet's conflict rule: same protocol and port, and the same
    /// address or either one every address.
    fn conflicts(&self, other: &Self) -> bool {
        const ANY: &str = "0.0.0.0";
        self.protocol == other.protocol
            && self.port == other.port
            && (self.ip == other.ip || self.ip == ANY || other.ip == ANY)
    }
}

/// The ports `pod` binds on the host network while it runs: those its app containers and its
/// sidecars (restartable init containers, which run beside them) declare. A regular init
/// container runs before the others and alone, as the kubelet counts it (not at all).
fn host_ports(pod: &Pod) -> BTreeSet<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeSet::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c: &Container| c.ports.iter().flatten())
        .filter(|p| p.container_port > 0)
        .map(|p| HostPort {
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            ip: p
                .host_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| "0.0.0.0".to_owned()),
            port: p.container_port,
        })
        .collect()
}

/// PW-85, the kubelet's host port check (`NodePorts`) for a node whose containers run on the
/// host network: every port a pod declares is bound on the host, so a pod declaring a port
/// that one of `running` (the node's other pods that may still run) declares is rejected,
/// with the kubelet's reason and text, instead of started to fail binding it.
///
/// # Errors
/// The [`Rejection`] (`NodePorts`) and, beside it, the first port in conflict and the pod
/// holding it (`namespace/name`), for the agent's log.
pub fn admit_ports<'a>(
    pod: &Pod,
    running: impl IntoIterator<Item = &'a Pod>,
) -> Result<(), (Rejection, String)> {
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return Ok(());
    }
    for other in running {
        let held = host_ports(other);
        let clash = wanted
            .iter()
            .find_map(|w| held.iter().find(|h| w.conflicts(h)).map(|h| (w, h)));
        if let Some((want, _)) = clash {
            let holder = format!(
                "{}/{}",
                other.metadata.namespace.as_deref().unwrap_or_default(),
                other.metadata.name.as_deref().unwrap_or_default()
            );
            let detail = format!(
                "{}/{} port {} is declared by pod {holder}",
                want.ip, want.protocol, want.port
            );
            return Err((
                Rejection {
                    reason: rejection_reasons::NODE_PORTS,
                    message: "Predicate NodePorts failed: node(s) didn't have free ports for the \
                              requested pod ports"
                        .to_owned(),
                },
                detail,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(labels: serde_json::Value, spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c"}]);
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn a_pod_for_another_os_is_rejected_with_the_kubelets_reason_and_text() {
        let windows = pod(json!({}), json!({"os": {"name": "windows"}}));
        let r = admit(&windows).unwrap_err();
        assert_eq!(r.reason, "PodOSNotSupported");
        assert_eq!(
            r.status_message(),
            "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"
        );
        let labelled = pod(
            json!({"kubernetes.io/os": "windows"}),
            json!({"os": {"name": "windows"}}),
        );
        let r = admit(&labelled).unwrap_err();
        assert_eq!(r.reason, "PodOSSelectorNodeLabelDoesNotMatch");
        assert_eq!(
            r.message,
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
        );
    }

    #[test]
    fn a_linux_pod_or_one_that_names_no_os_is_admitted() {
        admit(&pod(json!({}), json!({}))).unwrap();
        admit(&pod(
            json!({"kubernetes.io/os": "linux"}),
            json!({"os": {"name": "linux"}}),
        ))
        .unwrap();
    }

    #[test]
    fn only_a_pod_naming_a_runtime_class_is_refused_its_sandbox() {
        assert_eq!(runtime_class_refusal(&pod(json!({}), json!({}))), None);
        assert_eq!(
            runtime_class_refusal(&pod(json!({}), json!({"runtimeClassName": ""}))),
            None
        );
        let message = runtime_class_refusal(&pod(json!({}), json!({"runtimeClassName": "gvisor"})));
        assert!(message.unwrap().starts_with("RuntimeClass \"gvisor\": "));
    }

    fn with_ports(name: &str, containers: serde_json::Value, init: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": containers, "initContainers": init},
        }))
        .unwrap()
    }

    fn serving(name: &str, ports: serde_json::Value) -> Pod {
        with_ports(name, json!([{"name": "c", "ports": ports}]), json!([]))
    }

    #[test]
    fn a_pod_declaring_a_port_another_pod_declares_is_rejected_naming_the_holder() {
        let web = serving("web", json!([{"containerPort": 8080}]));
        let again = serving("again", json!([{"containerPort": 8080, "protocol": "TCP"}]));
        let (r, detail) = admit_ports(&again, [&web]).unwrap_err();
        assert_eq!(r.reason, "NodePorts");
        assert_eq!(
            r.status_message(),
            "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for \
             the requested pod ports"
        );
        assert_eq!(detail, "0.0.0.0/TCP port 8080 is declared by pod ns/web");
    }

    #[test]
    fn another_protocol_another_port_or_another_address_is_no_conflict() {
        let web = serving(
            "web",
            json!([{"containerPort": 8080, "hostIP": "127.0.0.1"}, {"containerPort": 53, "protocol": "UDP"}]),
        );
        for ports in [
            json!([{"containerPort": 8081}]),
            json!([{"containerPort": 53}]),
            json!([{"containerPort": 8080, "hostIP": "127.0.0.2"}]),
            json!([]),
        ] {
            admit_ports(&serving("p", ports.clone()), [&web])
                .unwrap_or_else(|e| panic!("{ports}: {e:?}"));
        }
        // Every address (no hostIP) overlaps one address, either way round.
        admit_ports(&serving("p", json!([{"containerPort": 8080}])), [&web]).unwrap_err();
        let any = serving("any", json!([{"containerPort": 9090}]));
        let one = serving(
            "one",
            json!([{"containerPort": 9090, "hostIP": "127.0.0.1"}]),
        );
        admit_ports(&one, [&any]).unwrap_err();
    }

    #[test]
    fn a_sidecars_port_counts_and_a_regular_init_containers_does_not() {
        let sidecar = with_ports(
            "side",
            json!([{"name": "c"}]),
            json!([{"name": "s", "restartPolicy": "Always", "ports": [{"containerPort": 8080}]}]),
        );
        let init = with_ports(
            "init",
            json!([{"name": "c"}]),
            json!([{"name": "i", "ports": [{"containerPort": 8080}]}]),
        );
        let web = serving("web", json!([{"containerPort": 8080}]));
        assert_eq!(
            admit_ports(&sidecar, [&web]).unwrap_err().0.reason,
            "NodePorts"
        );
        assert_eq!(
            admit_ports(&web, [&sidecar]).unwrap_err().0.reason,
            "NodePorts"
        );
        admit_ports(&init, [&web]).unwrap();
        admit_ports(&web, [&init]).unwrap();
    }
}
