//! Objects as a real client makes them, written over HTTP as that client writes them: what
//! `kubectl apply -f` creates (labels, the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation holding the manifest again, field manager `kubectl-client-side-apply`), with
//! payloads of the sizes clusters hold, and updates as a controller's merge patches. The server
//! then adds `managedFields`, so what the agent receives has a real server's JSON sizes.
//!
//! Sizes chosen (per object, before the server's metadata): a ConfigMap holds the bench's key
//! `k` and a 1 KiB `app.properties`, an application's configuration file; a Secret holds `k`,
//! a user name, a 32-character password and an 800-byte bearer token (credentials, the most
//! common Secret content). With the annotation (which repeats the manifest, Secret data
//! included, as kubectl stores it) and the server's `managedFields`, a ConfigMap is about
//! 3 KiB of JSON and a Secret about 3.5 KiB; kubectl-applied pods carry the annotation too.

use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use nodelet_apiserver::ApiServer;
use serde_json::{Value, json};

/// What kubectl 1.36 sends as its User-Agent (the server's manager for its writes is the part
/// before the first `/` unless a field manager is named).
pub(crate) const KUBECTL_USER_AGENT: &str = "kubectl/v1.36.2 (linux/amd64) kubernetes/2f9d5b1";
/// The field manager of `kubectl apply` (client-side).
pub(crate) const APPLY_MANAGER: &str = "kubectl-client-side-apply";
/// The field manager of the bench's updates.
pub(crate) const UPDATE_MANAGER: &str = "scale-bench-updater";

/// Object `j` (even: ConfigMap `cm-j`, odd: Secret `s-j`, as [`super::object`]) with key `k`
/// holding `value`, as `kubectl apply` creates it.
pub(crate) fn object(j: usize, value: &str) -> Value {
    let labels = json!({
        "app.kubernetes.io/name": format!("app-{}", j / 10),
        "app.kubernetes.io/instance": "scale-bench",
        "app.kubernetes.io/component": if j.is_multiple_of(2) { "config" } else { "credentials" },
    });
    let manifest = if j.is_multiple_of(2) {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{j}"), "namespace": "default", "labels": labels},
            "data": {"k": value, "app.properties": properties(j)}})
    } else {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": format!("s-{j}"), "namespace": "default", "labels": labels},
        "data": {
            "k": b64(value.as_bytes()),
            "username": b64(format!("svc-account-{j}").as_bytes()),
            "password": b64(pseudo_random(j, 32).as_bytes()),
            "token": b64(pseudo_random(j + 1, 800).as_bytes()),
        }})
    };
    with_last_applied(manifest)
}

/// Pod `p-i` mounting `objs` (see [`super::pod`]), as `kubectl apply` creates it.
pub(crate) fn pod(i: usize, objs: &[usize]) -> Value {
    let mut manifest = super::pod(i, objs);
    manifest["metadata"]["labels"] = json!({
        "app.kubernetes.io/name": format!("app-{i}"),
        "app.kubernetes.io/instance": "scale-bench",
    });
    with_last_applied(manifest)
}

/// `manifest` with the annotation kubectl adds: the manifest itself as compact JSON with sorted
/// keys and a newline.
fn with_last_applied(mut manifest: Value) -> Value {
    let text = format!("{}\n", manifest);
    manifest["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": text});
    manifest
}

/// A 1 KiB properties file, different per object.
fn properties(j: usize) -> String {
    let mut out = String::new();
    let mut n = 0;
    while out.len() < 1024 {
        out.push_str(&format!(
            "service.{j}.setting.{n}=value-{}-{}\n",
            j * 31 + n,
            pseudo_random(j * 97 + n, 12)
        ));
        n += 1;
    }
    out
}

/// `len` characters of `[A-Za-z0-9]` from `seed`.
fn pseudo_random(seed: usize, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut x = (seed as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

fn b64(bytes: &[u8]) -> Value {
    serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec())).unwrap_or_default()
}

/// An admin client of the server that writes as kubectl and the bench's updater do.
#[derive(Clone)]
pub(crate) struct Writer {
    client: kube::Client,
}

impl Writer {
    /// A client with kubectl's User-Agent.
    pub(crate) fn new(server: &ApiServer) -> Writer {
        let mut config = server.kube_config();
        config.headers.push((
            hyper::header::USER_AGENT,
            hyper::header::HeaderValue::from_static(KUBECTL_USER_AGENT),
        ));
        let client = kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"));
        Writer { client }
    }

    /// A writer over `client` (an admin of a real server, with kubectl's User-Agent).
    pub(crate) fn from_client(client: kube::Client) -> Writer {
        Writer { client }
    }

    /// The client it writes with.
    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    fn api(&self, obj: &Value) -> Api<DynamicObject> {
        let ar = match obj["kind"].as_str() {
            Some("ConfigMap") => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            Some("Secret") => ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
            _ => ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        };
        Api::namespaced_with(self.client.clone(), "default", &ar)
    }

    /// POSTs `obj` as `kubectl apply` does for a new object; the server's answer.
    pub(crate) async fn create(&self, obj: Value) -> Value {
        self.try_create(obj)
            .await
            .unwrap_or_else(|e| panic!("create: {e}"))
    }

    /// [`Writer::create`], the server's refusal returned.
    pub(crate) async fn try_create(&self, obj: Value) -> Result<Value, kube::Error> {
        let api = self.api(&obj);
        let dynamic: DynamicObject =
            serde_json::from_value(obj).unwrap_or_else(|e| panic!("object: {e}"));
        let params = PostParams {
            field_manager: Some(APPLY_MANAGER.into()),
            ..Default::default()
        };
        let created = api.create(&params, &dynamic).await?;
        Ok(serde_json::to_value(created).unwrap_or_default())
    }

    /// Sets key `k` of object `j` to `value` with a merge patch, as a controller would.
    pub(crate) async fn set_key(&self, j: usize, value: &str) {
        let (name, data) = if j.is_multiple_of(2) {
            (format!("cm-{j}"), json!(value))
        } else {
            (format!("s-{j}"), b64(value.as_bytes()))
        };
        let kind = if j.is_multiple_of(2) {
            "ConfigMap"
        } else {
            "Secret"
        };
        let api = self.api(&json!({"kind": kind}));
        let params = PatchParams {
            field_manager: Some(UPDATE_MANAGER.into()),
            ..Default::default()
        };
        api.patch(&name, &params, &Patch::Merge(json!({"data": {"k": data}})))
            .await
            .unwrap_or_else(|e| panic!("patch {name}: {e}"));
    }
}
