//! What the kubelet refuses before it runs a pod, for a node whose containers are host
//! processes: a pod for another operating system ([`admit`], PW-40, the kubelet's admission)
//! and a pod naming a RuntimeClass ([`runtime_class_refusal`], PW-41, the kubelet's sandbox
//! creation).

use k8s_openapi::api::core::v1::Pod;

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
}
