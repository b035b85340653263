//! Which Secrets and ConfigMaps a pod references (spec OM-3, OM-4).

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, PodSpec, ProjectedVolumeSource, Volume};
use nodelet_core::{AdmittedPod, PodVolume, VolumeSource};

/// Secret names a pod references, in the kubelet's visit order (OM-3), first occurrence kept.
///
/// Order: every `spec.imagePullSecrets[].name`; then for init, regular and ephemeral containers
/// in that order, each `envFrom[].secretRef.name` and then each
/// `env[].valueFrom.secretKeyRef.name`; then per volume (one branch per volume): `azureFile`,
/// `cephfs`, `cinder`, `flexVolume`, every `projected.sources[].secret`, `rbd`, `secret`,
/// `scaleIO`, `iscsi`, `storageos`, `csi.nodePublishSecretRef`. Empty names are skipped and
/// references through PVCs/PVs are not followed. Duplicates collapse (the managers use a set).
pub fn referenced_secret_names(pod: &AdmittedPod) -> Vec<String> {
    let mut names = Names::default();
    let Some(spec) = pod.spec.as_ref() else {
        return names.0;
    };
    for s in spec.image_pull_secrets.iter().flatten() {
        names.push(&s.name);
    }
    for_each_container(spec, |env_from, env| {
        for e in env_from {
            if let Some(r) = &e.secret_ref {
                names.push(&r.name);
            }
        }
        for e in env {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                names.push(&r.name);
            }
        }
    });
    for v in pod.volumes() {
        pod_volume_secret_names(v, &mut names);
    }
    names.0
}

/// ConfigMap names a pod references, in the kubelet's visit order (OM-4), first occurrence kept.
///
/// Order: for init, regular and ephemeral containers, each `envFrom[].configMapRef.name` and
/// then each `env[].valueFrom.configMapKeyRef.name`; then per volume every
/// `projected.sources[].configMap.name`, or `configMap.name`. Empty names are skipped.
pub fn referenced_config_map_names(pod: &AdmittedPod) -> Vec<String> {
    let mut names = Names::default();
    let Some(spec) = pod.spec.as_ref() else {
        return names.0;
    };
    for_each_container(spec, |env_from, env| {
        for e in env_from {
            if let Some(r) = &e.config_map_ref {
                names.push(&r.name);
            }
        }
        for e in env {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.config_map_key_ref.as_ref())
            {
                names.push(&r.name);
            }
        }
    });
    for v in pod.volumes() {
        match v.source() {
            VolumeSource::Projected(p) => projected_config_map_names(p, &mut names),
            VolumeSource::ConfigMap(c) => names.push(&c.name),
            VolumeSource::Other(v) => volume_config_map_names(v, &mut names),
            _ => {}
        }
    }
    names.0
}

/// An ordered set of non-empty names.
#[derive(Default)]
struct Names(Vec<String>);

impl Names {
    fn push(&mut self, name: &str) {
        if !name.is_empty() && !self.0.iter().any(|n| n == name) {
            self.0.push(name.to_owned());
        }
    }
    fn push_opt(&mut self, name: Option<&str>) {
        if let Some(n) = name {
            self.push(n);
        }
    }
}

/// Calls `f(envFrom, env)` for init, regular and ephemeral containers, in that order.
fn for_each_container(spec: &PodSpec, mut f: impl FnMut(&[EnvFromSource], &[EnvVar])) {
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        f(
            c.env_from.as_deref().unwrap_or_default(),
            c.env.as_deref().unwrap_or_default(),
        );
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        f(
            c.env_from.as_deref().unwrap_or_default(),
            c.env.as_deref().unwrap_or_default(),
        );
    }
}

/// [`volume_secret_names`] of a compact volume: a `projected` or `secret` one here, any other
/// as its whole `Volume`.
fn pod_volume_secret_names(v: &PodVolume, names: &mut Names) {
    match v.source() {
        VolumeSource::Projected(p) => projected_secret_names(p, names),
        VolumeSource::Secret(s) => names.push_opt(s.secret_name.as_deref()),
        VolumeSource::Other(v) => volume_secret_names(v, names),
        _ => {}
    }
}

fn projected_secret_names(p: &ProjectedVolumeSource, names: &mut Names) {
    for source in p.sources.iter().flatten() {
        if let Some(s) = &source.secret {
            names.push(&s.name);
        }
    }
}

fn projected_config_map_names(p: &ProjectedVolumeSource, names: &mut Names) {
    for source in p.sources.iter().flatten() {
        if let Some(c) = &source.config_map {
            names.push(&c.name);
        }
    }
}

/// OM-4 for one volume: a `projected` one's ConfigMaps, or a `configMap` one's.
fn volume_config_map_names(v: &Volume, names: &mut Names) {
    if let Some(p) = &v.projected {
        projected_config_map_names(p, names);
    } else if let Some(c) = &v.config_map {
        names.push(&c.name);
    }
}

/// One branch per volume, in the kubelet's order (OM-3).
fn volume_secret_names(v: &Volume, names: &mut Names) {
    if let Some(s) = &v.azure_file {
        names.push(&s.secret_name);
    } else if let Some(s) = &v.cephfs {
        names.push_opt(s.secret_ref.as_ref().map(|r| r.name.as_str()));
    } else if let Some(s) = &v.cinder {
        names.push_opt(s.secret_ref.as_ref().map(|r| r.name.as_str()));
    } else if let Some(s) = &v.flex_volume {
        names.push_opt(s.secret_ref.as_ref().map(|r| r.name.as_str()));
    } else if let Some(p) = &v.projected {
        projected_secret_names(p, names);
    } else if let Some(s) = &v.rbd {
        names.push_opt(s.secret_ref.as_ref().map(|r| r.name.as_str()));
    } else if let Some(s) = &v.secret {
        names.push_opt(s.secret_name.as_deref());
    } else if let Some(s) = &v.scale_io {
        names.push(&s.secret_ref.name);
    } else if let Some(s) = &v.iscsi {
        names.push_opt(s.secret_ref.as_ref().map(|r| r.name.as_str()));
    } else if let Some(s) = &v.storageos {
        names.push_opt(s.secret_ref.as_ref().map(|r| r.name.as_str()));
    } else if let Some(s) = &v.csi {
        names.push_opt(s.node_publish_secret_ref.as_ref().map(|r| r.name.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use nodelet_testutil::PodBuilder;

    fn env(secret: &str, cm: &str) -> serde_json::Value {
        serde_json::json!({
            "envFrom": [{"secretRef": {"name": format!("{secret}-from")}},
                        {"configMapRef": {"name": format!("{cm}-from")}}],
            "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": format!("{secret}-key"), "key": "k"}}},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": format!("{cm}-key"), "key": "k"}}},
                    {"name": "C", "value": "plain"}],
        })
    }

    fn full_pod() -> AdmittedPod {
        let mut init = env("init-s", "init-cm");
        init["name"] = "init".into();
        let mut main = env("main-s", "main-cm");
        main["name"] = "main".into();
        let mut eph = env("eph-s", "eph-cm");
        eph["name"] = "eph".into();
        let pod = PodBuilder::new("ns", "p").uid("u1").spec(serde_json::json!({
            "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
            "initContainers": [init],
            "containers": [main],
            "ephemeralContainers": [eph],
            "volumes": [
                {"name": "v1", "azureFile": {"secretName": "azure", "shareName": "s"}},
                {"name": "v2", "cephfs": {"monitors": ["m"], "secretRef": {"name": "ceph"}}},
                {"name": "v3", "cinder": {"volumeID": "x", "secretRef": {"name": "cinder"}}},
                {"name": "v4", "flexVolume": {"driver": "d", "secretRef": {"name": "flex"}}},
                {"name": "v5", "projected": {"sources": [
                    {"secret": {"name": "proj-s"}}, {"configMap": {"name": "proj-cm"}}]}},
                {"name": "v6", "rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "rbd"}}},
                {"name": "v7", "secret": {"secretName": "sec"}},
                {"name": "v8", "scaleIO": {"gateway": "g", "system": "s", "secretRef": {"name": "scaleio"}}},
                {"name": "v9", "iscsi": {"targetPortal": "t", "iqn": "i", "lun": 0, "secretRef": {"name": "iscsi"}}},
                {"name": "v10", "storageos": {"secretRef": {"name": "storageos"}}},
                {"name": "v11", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                {"name": "v12", "configMap": {"name": "cm"}},
                {"name": "v13", "secret": {"secretName": ""}},
                {"name": "v14", "secret": {"secretName": "sec"}},
            ],
        }))
        .build();
        AdmittedPod::new(pod).unwrap()
    }

    #[test]
    fn secret_names_follow_the_om3_visit_order_and_skip_empty_names() {
        let expected = [
            "pull",
            "init-s-from",
            "init-s-key",
            "main-s-from",
            "main-s-key",
            "eph-s-from",
            "eph-s-key",
            "azure",
            "ceph",
            "cinder",
            "flex",
            "proj-s",
            "rbd",
            "sec",
            "scaleio",
            "iscsi",
            "storageos",
            "csi",
        ];
        assert_eq!(referenced_secret_names(&full_pod()), expected);
    }

    #[test]
    fn config_map_names_follow_the_om4_visit_order_and_never_include_pull_secrets() {
        let expected = [
            "init-cm-from",
            "init-cm-key",
            "main-cm-from",
            "main-cm-key",
            "eph-cm-from",
            "eph-cm-key",
            "proj-cm",
            "cm",
        ];
        assert_eq!(referenced_config_map_names(&full_pod()), expected);
    }

    #[test]
    fn a_pod_without_spec_references_nothing() {
        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        pod.metadata.uid = Some("u".into());
        let p = AdmittedPod::new(pod).unwrap();
        assert!(referenced_secret_names(&p).is_empty());
        assert!(referenced_config_map_names(&p).is_empty());
    }
}
