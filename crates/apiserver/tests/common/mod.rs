//! The fixtures both test binaries of this crate share (`tests/conformance` and
//! `tests/capabilities` each include this file as `mod common`): the one safety time-out and
//! the pod and ConfigMap shapes these tests use, typed or as the manifest `ServerHandle::create`
//! takes, built with the workspace's shared fixtures (`nodelet-testutil`, a dev-only crate that
//! depends on no nodelet crate, so this crate stays a leaf).
#![allow(dead_code, reason = "each test binary uses part of the shared harness")]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::{Value, json};

pub(crate) use nodelet_testutil::PATIENCE;

/// The manifest of pod `namespace/name` (an empty `namespace` leaves it to the request path)
/// with one `busybox` container `c`; the keys of `extra_spec` (an object) are added to, or
/// replace, those of that spec (`{"nodeName": "n1"}`, `{"containers": [...]}`).
pub(crate) fn pod_json(namespace: &str, name: &str, extra_spec: Value) -> Value {
    let pod = PodBuilder::new(namespace, name).container(json!({"name": "c", "image": "busybox"}));
    match extra_spec {
        Value::Object(_) => pod.spec(extra_spec),
        _ => pod,
    }
    .json()
}

/// The typed pod `name` of [`pod_json`], without a namespace (the `Api` gives it).
pub(crate) fn pod(name: &str, extra_spec: Value) -> Pod {
    serde_json::from_value(pod_json("", name, extra_spec)).expect("pod")
}

/// The manifest of ConfigMap `namespace/name` (an empty `namespace` leaves it to the request
/// path) with one data entry `key` = `value`.
pub(crate) fn cm_json(namespace: &str, name: &str, key: &str, value: &str) -> Value {
    ConfigMapBuilder::new(namespace, name)
        .data(key, value)
        .json()
}

/// The typed ConfigMap `name` of [`cm_json`], without a namespace (the `Api` gives it).
pub(crate) fn cm(name: &str, key: &str, value: &str) -> ConfigMap {
    serde_json::from_value(cm_json("", name, key, value)).expect("configmap")
}
