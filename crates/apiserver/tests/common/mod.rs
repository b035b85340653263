//! The fixtures both test binaries of this crate share (`tests/conformance` and
//! `tests/capabilities` each include this file as `mod common`): the one safety time-out and
//! the pod and ConfigMap builders, typed or as the manifest `ServerHandle::create` takes.
//!
//! nodelet-apiserver depends on no other nodelet crate, tests included, so these mirror (in
//! small) the workspace's shared fixtures in `nodelet_testutil`, with the same
//! `PATIENCE`.
#![allow(dead_code, reason = "each test binary uses part of the shared harness")]

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::{Value, json};

/// The safety net around every await or poll of these tests: never reached when the server
/// works, generous enough for a loaded 2-core CI machine, never an assertion of speed.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// The manifest of pod `namespace/name` (an empty `namespace` leaves it to the request path)
/// with one `busybox` container `c`; the keys of `extra_spec` (an object) are added to, or
/// replace, those of that spec (`{"nodeName": "n1"}`, `{"containers": [...]}`).
pub(crate) fn pod_json(namespace: &str, name: &str, extra_spec: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
        spec.extend(extra);
    }
    let mut pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec});
    if !namespace.is_empty() {
        pod["metadata"]["namespace"] = json!(namespace);
    }
    pod
}

/// The typed pod `name` of [`pod_json`], without a namespace (the `Api` gives it).
pub(crate) fn pod(name: &str, extra_spec: Value) -> Pod {
    serde_json::from_value(pod_json("", name, extra_spec)).expect("pod")
}

/// The manifest of ConfigMap `namespace/name` (an empty `namespace` leaves it to the request
/// path) with one data entry `key` = `value`.
pub(crate) fn cm_json(namespace: &str, name: &str, key: &str, value: &str) -> Value {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {key: value}});
    if !namespace.is_empty() {
        cm["metadata"]["namespace"] = json!(namespace);
    }
    cm
}

/// The typed ConfigMap `name` of [`cm_json`], without a namespace (the `Api` gives it).
pub(crate) fn cm(name: &str, key: &str, value: &str) -> ConfigMap {
    serde_json::from_value(cm_json("", name, key, value)).expect("configmap")
}
