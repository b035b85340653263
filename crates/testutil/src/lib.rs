//! Test fixtures shared by the workspace's tests (a dev-dependency only, never published):
//! builders for the pods, ConfigMaps and Secrets tests feed the managers, the volume manager,
//! the pod workers and the agent, and [`PATIENCE`], the one safety time-out of in-process
//! tests. It depends on no nodelet crate, so any crate's own unit tests may use it.
//!
//! Every builder makes the typed object ([`PodBuilder::build`]) or its JSON manifest with
//! `apiVersion` and `kind` ([`PodBuilder::json`]), for tests that post through an API server's
//! HTTP API; there is no second JSON builder.
//!
//! ```
//! use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
//! use serde_json::json;
//!
//! let pod = PodBuilder::new("ns", "web")
//!     .uid("uid-web")
//!     .node("n1")
//!     .config_map_volume("config", "app-config")
//!     .volume(json!({"name": "token", "projected": {"sources": []}}))
//!     .build();
//! assert_eq!(pod.metadata.uid.as_deref(), Some("uid-web"));
//!
//! let cm = ConfigMapBuilder::new("ns", "app-config").data("k", "v1").immutable().json();
//! assert_eq!((cm["kind"].as_str(), cm["data"]["k"].as_str()), (Some("ConfigMap"), Some("v1")));
//! ```
//!
//! Builders panic on a fragment that does not deserialize: they are for tests only.
#![allow(
    clippy::panic,
    reason = "test fixtures: a bad fixture is a bug in the test, reported at once"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

/// Three self-signed P-256 CA certificates (PEM, one `CERTIFICATE` block each, valid until
/// 2126), for ClusterTrustBundles: an API server accepts only CA certificates in a bundle.
pub const TEST_CAS: [&str; 3] = [
    // CN=nodelet-test-ca-1
    r"-----BEGIN CERTIFICATE-----
MIIBnzCCAUWgAwIBAgIUAXZoAjbb+7tIxMYm13M2cr1FFGAwCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRbm9kZWxldC10ZXN0LWNhLTEwIBcNMjYxMTI0MjMyNTE2WhgP
MjEyNjEwMzEyMzI1MTZaMBwxGjAYBgNVBAMMEW5vZGVsZXQtdGVzdC1jYS0xMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAExXXcpx12g/uSrMQUwbyspaVXblv0glCB
7LEKlhlgCfBf4B7ZMcWFdRjhtXb4sotkbf4tNf/V9p/58cvMXCuSb6NjMGEwHQYD
VR0OBBYEFL/MrZi3MJq12i+zeoEos+rqCy7SMB8GA1UdIwQYMBaAFL/MrZi3MJq1
2i+zeoEos+rqCy7SMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG
CCqGSM49BAMCA0gAMEUCIAqZtuYR2IbzpPZ6QQo/bd6QmMGI8SqDgg6uxzfxB2v0
AiEAk0vxmZIiNWuJzof9iKeFbJCaNhuguOVpq6Rsh6uBRaE=
-----END CERTIFICATE-----
",
    // CN=nodelet-test-ca-2
    r"-----BEGIN CERTIFICATE-----
MIIBnzCCAUWgAwIBAgIUaItGLvRXEIGrYKjs/RhxqkzprWcwCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRbm9kZWxldC10ZXN0LWNhLTIwIBcNMjYxMTI0MjMyNTE2WhgP
MjEyNjEwMzEyMzI1MTZaMBwxGjAYBgNVBAMMEW5vZGVsZXQtdGVzdC1jYS0yMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEXeXK+ZjRwFaC+4Q+jZxo3Eu/jDQPoKft
sxJt4tOWi1ZuPaOkVZqRACm93A1CjPYKomNF2SPC/xipEWDxXVCpdKNjMGEwHQYD
VR0OBBYEFPUTdMuh9dBrgLCwYu0JP1+LKjfEMB8GA1UdIwQYMBaAFPUTdMuh9dBr
gLCwYu0JP1+LKjfEMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG
CCqGSM49BAMCA0gAMEUCIQCErAqj5bZN5R7yJtZef+LQnszpz2xLwA0x655ty4cC
4gIgJDQ7NJuduPyjsPZ5lrVa6Ek6z40LU35hKDox6Xjw+tM=
-----END CERTIFICATE-----
",
    // CN=nodelet-test-ca-3
    r"-----BEGIN CERTIFICATE-----
MIIBnzCCAUWgAwIBAgIUIrLq/3bbfKFEteVTqOylpjt6Ih0wCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRbm9kZWxldC10ZXN0LWNhLTMwIBcNMjYxMTI0MjMyNTE2WhgP
MjEyNjEwMzEyMzI1MTZaMBwxGjAYBgNVBAMMEW5vZGVsZXQtdGVzdC1jYS0zMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEdglg7uc0zkZ29649tXKBSZ8bRhrzHChg
Mzl5f/Hc/Nd/bE4wPyf94TXx/tqHbl1jVZDt3T7a3UG7L7mqWYmQHqNjMGEwHQYD
VR0OBBYEFD+zAthI2kW74owzUA3QUopuhsQ/MB8GA1UdIwQYMBaAFD+zAthI2kW7
4owzUA3QUopuhsQ/MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG
CCqGSM49BAMCA0gAMEUCIAQxUviB1ywNablqVQvUMceHtx71BmeVMaS7lHdH85fr
AiEAgk00Cv1LPXH8m/zjuwlSzYJY5dMURPGIawOgzrHQjQg=
-----END CERTIFICATE-----
",
];

/// A `certificates.k8s.io/v1beta1` ClusterTrustBundle manifest: `name` (with a signer, it
/// must start with the signer name, `/` as `:`, and a `:`), `signerName` if any, labels and
/// the PEM text.
pub fn cluster_trust_bundle(
    name: &str,
    signer: Option<&str>,
    labels: &[(&str, &str)],
    pem: &str,
) -> Value {
    let labels: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let mut spec = json!({"trustBundle": pem});
    if let Some(signer) = signer {
        spec["signerName"] = json!(signer);
    }
    json!({
        "apiVersion": "certificates.k8s.io/v1beta1",
        "kind": "ClusterTrustBundle",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    })
}

/// The safety net every in-process test puts around an await or a poll (a notification, a file
/// on disk, an API object): never reached when the code works, so it is generous — a loaded
/// 2-core CI machine running the whole suite must not trip it. It is never an assertion of
/// speed (benchmarks measure speed). Tests against a real cluster use the longer bound of
/// `nodelet_e2e::PATIENCE`.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A [`Pod`] under construction. The spec starts empty; a pod built without any container gets
/// one container named `c`, so every built pod passes validation.
#[derive(Clone, Debug)]
pub struct PodBuilder {
    metadata: Map<String, Value>,
    spec: Map<String, Value>,
    status: Option<Value>,
}

impl PodBuilder {
    /// A pod `namespace/name` (an empty `namespace` leaves `metadata.namespace` unset) with no
    /// UID, labels, annotations, volumes or node.
    pub fn new(namespace: &str, name: &str) -> Self {
        let mut metadata = Map::new();
        metadata.insert("name".into(), json!(name));
        if !namespace.is_empty() {
            metadata.insert("namespace".into(), json!(namespace));
        }
        Self {
            metadata,
            spec: Map::new(),
            status: None,
        }
    }

    /// Sets `metadata.uid`.
    pub fn uid(mut self, uid: &str) -> Self {
        self.metadata.insert("uid".into(), json!(uid));
        self
    }

    /// Adds the label `key=value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        insert_in(&mut self.metadata, "labels", key, json!(value));
        self
    }

    /// Adds the annotation `key=value`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        insert_in(&mut self.metadata, "annotations", key, json!(value));
        self
    }

    /// Binds the pod to `node` (`spec.nodeName`).
    pub fn node(mut self, node: &str) -> Self {
        self.spec.insert("nodeName".into(), json!(node));
        self
    }

    /// Sets `spec.serviceAccountName`.
    pub fn service_account(mut self, name: &str) -> Self {
        self.spec.insert("serviceAccountName".into(), json!(name));
        self
    }

    /// Appends a container given as its JSON (`{"name": "c", "env": [...], "envFrom": [...]}`).
    pub fn container(self, container: Value) -> Self {
        self.push("containers", container)
    }

    /// Appends an init container given as its JSON.
    pub fn init_container(self, container: Value) -> Self {
        self.push("initContainers", container)
    }

    /// Appends a volume given as its JSON, for any kind (`projected`, `downwardAPI`, ...).
    pub fn volume(self, volume: Value) -> Self {
        self.push("volumes", volume)
    }

    /// Appends the volume `volume` of ConfigMap `config_map` (`configMap.name`).
    pub fn config_map_volume(self, volume: &str, config_map: &str) -> Self {
        self.volume(json!({"name": volume, "configMap": {"name": config_map}}))
    }

    /// Appends the volume `volume` of Secret `secret` (`secret.secretName`).
    pub fn secret_volume(self, volume: &str, secret: &str) -> Self {
        self.volume(json!({"name": volume, "secret": {"secretName": secret}}))
    }

    /// Appends `name` to `spec.imagePullSecrets`.
    pub fn image_pull_secret(self, name: &str) -> Self {
        self.push("imagePullSecrets", json!({"name": name}))
    }

    /// Sets the keys of `spec` (a JSON object), replacing those already set: the pod "from
    /// this JSON spec".
    pub fn spec(mut self, spec: Value) -> Self {
        match spec {
            Value::Object(keys) => self.spec.extend(keys),
            other => panic!("PodBuilder::spec takes a JSON object, got {other}"),
        }
        self
    }

    /// Sets `status` (a JSON object: `hostIP`, `podIPs`, ...).
    pub fn status(mut self, status: Value) -> Self {
        self.status = Some(status);
        self
    }

    /// The typed pod.
    pub fn build(self) -> Pod {
        let value = self.json();
        serde_json::from_value(value).unwrap_or_else(|e| panic!("bad test pod: {e}"))
    }

    /// The pod's manifest: `apiVersion`, `kind`, `metadata`, `spec` (and `status` if set).
    pub fn json(self) -> Value {
        let Self {
            metadata,
            mut spec,
            status,
        } = self;
        spec.entry("containers")
            .or_insert_with(|| json!([{"name": "c"}]));
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
        if let Some(status) = status {
            pod["status"] = status;
        }
        pod
    }

    fn push(mut self, list: &str, item: Value) -> Self {
        match self.spec.entry(list).or_insert_with(|| json!([])) {
            Value::Array(items) => items.push(item),
            other => panic!("spec.{list} is not a list: {other}"),
        }
        self
    }
}

/// A [`ConfigMap`] under construction.
#[derive(Clone, Debug)]
pub struct ConfigMapBuilder(ConfigMap);

impl ConfigMapBuilder {
    /// A ConfigMap `namespace/name` (an empty `namespace` leaves it unset) without data.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self(ConfigMap {
            metadata: meta(namespace, name),
            ..ConfigMap::default()
        })
    }

    /// Adds `data[key] = value`.
    pub fn data(mut self, key: &str, value: &str) -> Self {
        self.0
            .data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// Adds `binaryData[key] = bytes`.
    pub fn binary_data(mut self, key: &str, bytes: &[u8]) -> Self {
        self.0
            .binary_data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), ByteString(bytes.to_vec()));
        self
    }

    /// Marks the ConfigMap immutable (`immutable: true`).
    pub fn immutable(mut self) -> Self {
        self.0.immutable = Some(true);
        self
    }

    /// The typed ConfigMap.
    pub fn build(self) -> ConfigMap {
        self.0
    }

    /// The manifest, with `apiVersion` and `kind`.
    pub fn json(self) -> Value {
        serde_json::to_value(self.0).unwrap_or_else(|e| panic!("configmap to JSON: {e}"))
    }
}

/// A [`Secret`] under construction.
#[derive(Clone, Debug)]
pub struct SecretBuilder(Secret);

impl SecretBuilder {
    /// A Secret `namespace/name` (an empty `namespace` leaves it unset) without data.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self(Secret {
            metadata: meta(namespace, name),
            ..Secret::default()
        })
    }

    /// Adds `data[key] = bytes` (base64 in [`json`](Self::json)).
    pub fn data(mut self, key: &str, bytes: impl AsRef<[u8]>) -> Self {
        self.0
            .data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), ByteString(bytes.as_ref().to_vec()));
        self
    }

    /// Adds `stringData[key] = value` (the API server folds it into `data`).
    pub fn string_data(mut self, key: &str, value: &str) -> Self {
        self.0
            .string_data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// Marks the Secret immutable (`immutable: true`).
    pub fn immutable(mut self) -> Self {
        self.0.immutable = Some(true);
        self
    }

    /// The typed Secret.
    pub fn build(self) -> Secret {
        self.0
    }

    /// The manifest, with `apiVersion` and `kind`.
    pub fn json(self) -> Value {
        serde_json::to_value(self.0).unwrap_or_else(|e| panic!("secret to JSON: {e}"))
    }
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        ..ObjectMeta::default()
    }
}

fn insert_in(map: &mut Map<String, Value>, field: &str, key: &str, value: Value) {
    if let Value::Object(entries) = map.entry(field).or_insert_with(|| json!({})) {
        entries.insert(key.to_owned(), value);
    }
}
