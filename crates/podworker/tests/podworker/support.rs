//! Fixtures: managers over fake sources; objects and pods from the shared builders.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use nodelet_core::AdmittedPod;
use nodelet_object_manager::source::FakeSource;
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, Strategy};
use nodelet_podworker::EnvSources;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
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
        services: None,
    };
    Api {
        configmaps,
        secrets,
        sources,
    }
}

impl Api {
    /// The end-to-end fixtures: ConfigMap `data-1..3 = value-1..3`, Secret values with a
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

    /// Applies ConfigMap `namespace/name` with `data` (a JSON object of strings).
    pub(crate) fn configmap(&self, namespace: &str, name: &str, data: Value) {
        let data = data
            .as_object()
            .unwrap_or_else(|| panic!("data is not an object"));
        let cm = data
            .iter()
            .fold(ConfigMapBuilder::new("", name), |cm, (k, v)| {
                cm.data(
                    k,
                    v.as_str().unwrap_or_else(|| panic!("{k} is not a string")),
                )
            });
        self.configmaps.apply(namespace, cm.build());
    }

    /// Applies Secret `namespace/name` with `data` (key, text).
    pub(crate) fn secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let s = data
            .iter()
            .fold(SecretBuilder::new("", name), |s, (k, v)| s.data(k, v));
        self.secrets.apply(namespace, s.build());
    }

    pub(crate) fn register(&self, pod: &Pod) {
        let pod = admit(pod.clone());
        self.sources.secrets.register_pod(&pod);
        self.sources.configmaps.register_pod(&pod);
    }
}

/// A pod `ns/web` (uid `u1`, label `app=web`, annotation `note=hi`, bound to `node-1`, with
/// host and pod IPs) and one container `c` (`busybox`) with the keys of `container` merged in.
pub(crate) fn pod(container: Value) -> Pod {
    pod_with(json!({}), container)
}

/// Like [`pod`] with the keys of `spec` merged into the spec.
pub(crate) fn pod_with(spec: Value, container: Value) -> Pod {
    let mut c = json!({"name": "c", "image": "busybox"});
    merge(&mut c, container);
    PodBuilder::new("ns", "web")
        .uid("u1")
        .label("app", "web")
        .annotation("note", "hi")
        .node("node-1")
        .spec(json!({"enableServiceLinks": true}))
        .container(c)
        .spec(spec)
        .status(json!({"hostIP": "10.0.0.1", "podIP": "10.1.0.5"}))
        .build()
}

/// `pod` as the agent's pod source admits it (the fixtures always carry a UID).
pub(crate) fn admit(pod: Pod) -> AdmittedPod {
    AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"))
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
