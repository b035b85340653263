//! Fixtures: managers over fake sources, objects from JSON, pods.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use nodelet_object_manager::source::FakeSource;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, Strategy};
use nodelet_podworker::EnvSources;
use serde_json::{Value, json};

pub(crate) struct Api {
    pub(crate) configmaps: FakeSource<ConfigMap>,
    pub(crate) secrets: FakeSource<Secret>,
    pub(crate) sources: EnvSources,
}

pub(crate) fn api(strategy: Strategy) -> Api {
    let configmaps = FakeSource::<ConfigMap>::new();
    let secrets = FakeSource::<Secret>::new();
    let cfg = ManagerConfig::new(strategy);
    let sources = EnvSources {
        configmaps: ConfigMapManager::with_sources(Arc::new(configmaps.clone()), None, cfg.clone())
            .unwrap_or_else(|e| panic!("{e}")),
        secrets: SecretManager::with_sources(Arc::new(secrets.clone()), None, cfg)
            .unwrap_or_else(|e| panic!("{e}")),
    };
    Api {
        configmaps,
        secrets,
        sources,
    }
}

impl Api {
    /// The E2E fixtures (spec §6): ConfigMap `data-1..3 = value-1..3`, Secret values with a
    /// trailing newline.
    pub(crate) fn with_fixtures(self, namespace: &str) -> Self {
        self.configmap(
            namespace,
            "cm",
            json!({"data-1": "value-1", "data-2": "value-2", "data-3": "value-3"}),
        );
        self.secret(
            namespace,
            "sec",
            &[
                ("data-1", "value-1\n"),
                ("data-2", "value-2\n"),
                ("data-3", "value-3\n"),
            ],
        );
        self
    }

    pub(crate) fn configmap(&self, namespace: &str, name: &str, data: Value) {
        let cm = from(json!({"metadata": {"name": name}, "data": data}));
        self.configmaps.apply(namespace, cm);
    }

    pub(crate) fn configmap_json(&self, namespace: &str, object: Value) {
        self.configmaps.apply(namespace, from(object));
    }

    pub(crate) fn secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        use base64::Engine as _;
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| {
                (
                    (*k).to_owned(),
                    json!(base64::engine::general_purpose::STANDARD.encode(v)),
                )
            })
            .collect();
        let s = from(json!({"metadata": {"name": name}, "data": data}));
        self.secrets.apply(namespace, s);
    }

    pub(crate) fn register(&self, pod: &Pod) {
        self.sources.secrets.register_pod(pod);
        self.sources.configmaps.register_pod(pod);
    }
}

pub(crate) fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
}

/// A pod in `ns` with uid `u1` and one container `c` with `container` merged in.
pub(crate) fn pod(container: Value) -> Pod {
    pod_with(json!({}), container)
}

/// Like [`pod`] with extra `spec` fields.
pub(crate) fn pod_with(spec: Value, container: Value) -> Pod {
    let mut c = json!({"name": "c", "image": "busybox"});
    merge(&mut c, container);
    let mut s = json!({"enableServiceLinks": true, "nodeName": "node-1", "containers": [c]});
    merge(&mut s, spec);
    from(json!({
        "metadata": {"namespace": "ns", "name": "web", "uid": "u1",
                     "labels": {"app": "web"}, "annotations": {"note": "hi"}},
        "spec": s,
        "status": {"hostIP": "10.0.0.1", "podIP": "10.1.0.5"},
    }))
}

pub(crate) fn first_container(pod: &Pod) -> Container {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first().cloned())
        .unwrap_or_default()
}

fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            b.insert(k, v);
        }
    }
}
