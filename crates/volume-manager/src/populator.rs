//! The desired-state populator (VM-4): turns a pod into its desired volumes. Event-driven:
//! it runs when the agent adds or updates a pod, not on a 100 ms loop.

use std::collections::{BTreeSet, HashSet};

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::{AdmittedPod, PodUid, PodVolume};

use crate::dsw::{DesiredPod, DesiredVolume, MAX_POD_ERRORS, UnsupportedVolume, VolumeInPod};
use crate::plugins::PluginRegistry;

/// VM-2: `<plugin name>/<pod UID>-<pod volume name>`.
pub(crate) fn unique_volume_name(plugin: &str, pod_uid: &PodUid, volume: &str) -> String {
    format!("{plugin}/{pod_uid}-{volume}")
}

/// VM-4: names of the volumes some container (init, regular, ephemeral) mounts or uses as a
/// device. Other pod volumes are never mounted nor waited for.
pub(crate) fn used_volume_names(pod: &Pod) -> HashSet<String> {
    let mut used = HashSet::new();
    let Some(spec) = pod.spec.as_ref() else {
        return used;
    };
    let regular = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in regular {
        used.extend(c.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        used.extend(c.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        used.extend(c.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        used.extend(c.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    used
}

/// The used pod volumes with their index in [`AdmittedPod::volumes`], in spec order.
fn used_volumes(pod: &AdmittedPod) -> Vec<(usize, &PodVolume)> {
    let used = used_volume_names(pod);
    pod.volumes()
        .iter()
        .enumerate()
        .filter(|(_, v)| used.contains(v.name()))
        .collect()
}

/// VM-4 `processPodVolumes` for one pod: a desired volume per used, supported volume; used
/// volumes without a plugin are recorded as unsupported; a volume name that cannot be a
/// directory name is a pod error.
pub(crate) fn desired_pod(pod: &AdmittedPod, registry: &PluginRegistry) -> DesiredPod {
    let uid = pod.uid();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut volumes = Vec::new();
    let mut unsupported = Vec::new();
    let mut errors = BTreeSet::new();
    for (index, compact) in used_volumes(pod) {
        if !is_directory_name(compact.name()) {
            if errors.len() < MAX_POD_ERRORS {
                errors.insert(format!(
                    "volume name {:?} cannot be used as a directory name",
                    compact.name()
                ));
            }
            continue;
        }
        // The plugin API takes a k8s `Volume`: one built for these calls, not kept.
        let volume = compact.to_volume();
        match (registry.find(&volume), VolumeInPod::new(pod, index)) {
            (Some(plugin), Some(in_pod)) => volumes.push(DesiredVolume {
                unique: unique_volume_name(plugin.name(), uid, &volume.name),
                outer_name: volume.name.clone(),
                sources: plugin.sources(&namespace, &volume),
                plugin,
                volume: in_pod,
            }),
            // (`VolumeInPod::new` is `Some`: the index came from this pod's own list.)
            _ => unsupported.push(UnsupportedVolume {
                name: volume.name.clone(),
                volume_type: nodelet_core::volume_type(&volume).to_owned(),
            }),
        }
    }
    // Kept for the pod's life: without the room doubling left (10 volumes took 16 slots).
    volumes.shrink_to_fit();
    DesiredPod {
        uid: uid.clone(),
        pod: pod.clone(),
        volumes,
        unsupported,
        errors,
        reported: HashSet::new(),
    }
}

/// `(outer name, unique name)` of every volume `wait_for_attach_and_mount` waits for.
pub(crate) fn expected_volumes(
    uid: &PodUid,
    pod: &AdmittedPod,
    registry: &PluginRegistry,
) -> Vec<(String, String)> {
    used_volumes(pod)
        .into_iter()
        .filter_map(|(_, v)| {
            let name = v.name();
            registry
                .find(&v.to_volume())
                .map(|p| (name.to_owned(), unique_volume_name(p.name(), uid, name)))
        })
        .collect()
}

fn is_directory_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

#[cfg(test)]
mod tests {
    use nodelet_testutil::PodBuilder;
    use serde_json::json;

    use super::*;

    fn pod() -> AdmittedPod {
        AdmittedPod::new(
            PodBuilder::new("ns", "p")
                .uid("u1")
                .init_container(
                    json!({"name": "i", "volumeMounts": [{"name": "init-cfg", "mountPath": "/i"}]}),
                )
                .container(json!({"name": "c", "volumeMounts": [
                    {"name": "cfg", "mountPath": "/a"},
                    {"name": "host", "mountPath": "/h"},
                    {"name": "claim", "mountPath": "/c"},
                    {"name": "../evil", "mountPath": "/e"}]}))
                .config_map_volume("cfg", "cm")
                .secret_volume("init-cfg", "s")
                .config_map_volume("unused", "cm2")
                .volume(json!({"name": "host", "hostPath": {"path": "/"}}))
                .volume(json!({"name": "claim", "persistentVolumeClaim": {"claimName": "c"}}))
                .config_map_volume("../evil", "cm")
                .build(),
        )
        .unwrap()
    }

    fn u1() -> PodUid {
        PodUid::new("u1").unwrap()
    }

    // VM-2, VM-4: unique names, unused volumes skipped, unsupported ones recorded.
    #[test]
    fn used_volumes_become_desired_and_unused_ones_are_skipped() {
        let d = desired_pod(&pod(), &PluginRegistry::default());
        let names: Vec<_> = d.volumes.iter().map(|v| v.unique.as_str()).collect();
        assert_eq!(
            names,
            [
                "kubernetes.io/configmap/u1-cfg",
                "kubernetes.io/secret/u1-init-cfg",
                "kubernetes.io/host-path/u1-host"
            ]
        );
        assert_eq!(
            d.unsupported,
            vec![UnsupportedVolume {
                name: "claim".into(),
                volume_type: "persistentVolumeClaim".into()
            }]
        );
        assert_eq!(d.errors.len(), 1);
        assert_eq!(
            d.volumes[0].sources,
            [nodelet_core::SourceRef::Object(
                nodelet_core::ObjectRef::config_map("ns", "cm")
            )]
        );
    }

    #[test]
    fn expected_volumes_are_the_supported_used_ones() {
        let expected = expected_volumes(&u1(), &pod(), &PluginRegistry::default());
        let outer: Vec<_> = expected.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(outer, ["cfg", "init-cfg", "host", "../evil"]);
    }
}
