//! [`PodVolume`]: one entry of a pod's `spec.volumes`, held compactly for the pod's life.
//!
//! A k8s-openapi [`Volume`] holds every volume source inline, each behind an `Option`: over
//! 3 KB per volume whichever source is set. A node keeps every admitted pod for as long as it
//! runs, so [`AdmittedPod`](crate::AdmittedPod) moves its pod's volumes into `PodVolume`s (the
//! name and the one source that is set, about a hundred bytes) and rebuilds the k8s `Volume`
//! only where an API that takes one needs it ([`PodVolume::to_volume`]).

use std::fmt;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, DownwardAPIVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource,
    ProjectedVolumeSource, SecretVolumeSource, Volume,
};

/// One volume of a pod: its name and its source, without the room for the sources it does not
/// use.
///
/// Made from a [`Volume`] (`From<Volume>`, losslessly); [`to_volume`](Self::to_volume) gives
/// the same `Volume` back. Two `PodVolume`s are equal exactly when their `Volume`s are.
/// `Debug` shows the name and which source is set, not the source.
#[derive(Clone, PartialEq)]
pub struct PodVolume {
    name: String,
    source: VolumeSource,
}

/// The source of a [`PodVolume`]: the ones a node's volume plugins and mounts read, each its
/// k8s-openapi type, and every other volume whole.
///
/// A volume with exactly one of the sources named here set is that variant; anything else (a
/// persistentVolumeClaim, a CSI volume, a volume with no source or with two) is
/// [`Other`](Self::Other), so nothing is lost.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub enum VolumeSource {
    /// `configMap`.
    ConfigMap(ConfigMapVolumeSource),
    /// `secret`.
    Secret(SecretVolumeSource),
    /// `projected`.
    Projected(ProjectedVolumeSource),
    /// `downwardAPI`.
    DownwardApi(DownwardAPIVolumeSource),
    /// `emptyDir`.
    EmptyDir(EmptyDirVolumeSource),
    /// `hostPath`.
    HostPath(HostPathVolumeSource),
    /// Any other volume, as the API sent it (its `name` empty: the name is the `PodVolume`'s).
    Other(Box<Volume>),
}

impl PodVolume {
    /// The volume's name (`spec.volumes[].name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The volume's source.
    pub fn source(&self) -> &VolumeSource {
        &self.source
    }

    /// The `configMap` source, when that is the volume's.
    pub fn config_map(&self) -> Option<&ConfigMapVolumeSource> {
        match &self.source {
            VolumeSource::ConfigMap(s) => Some(s),
            _ => None,
        }
    }

    /// The `secret` source, when that is the volume's.
    pub fn secret(&self) -> Option<&SecretVolumeSource> {
        match &self.source {
            VolumeSource::Secret(s) => Some(s),
            _ => None,
        }
    }

    /// The `projected` source, when that is the volume's.
    pub fn projected(&self) -> Option<&ProjectedVolumeSource> {
        match &self.source {
            VolumeSource::Projected(s) => Some(s),
            _ => None,
        }
    }

    /// The `downwardAPI` source, when that is the volume's.
    pub fn downward_api(&self) -> Option<&DownwardAPIVolumeSource> {
        match &self.source {
            VolumeSource::DownwardApi(s) => Some(s),
            _ => None,
        }
    }

    /// The `emptyDir` source, when that is the volume's.
    pub fn empty_dir(&self) -> Option<&EmptyDirVolumeSource> {
        match &self.source {
            VolumeSource::EmptyDir(s) => Some(s),
            _ => None,
        }
    }

    /// The `hostPath` source, when that is the volume's.
    pub fn host_path(&self) -> Option<&HostPathVolumeSource> {
        match &self.source {
            VolumeSource::HostPath(s) => Some(s),
            _ => None,
        }
    }

    /// The volume's type as the API spells its source field (`configMap`, `hostPath`,
    /// `persistentVolumeClaim`, ...): the first source set, `unknown` for none.
    pub fn type_name(&self) -> &'static str {
        match &self.source {
            VolumeSource::ConfigMap(_) => "configMap",
            VolumeSource::Secret(_) => "secret",
            VolumeSource::Projected(_) => "projected",
            VolumeSource::DownwardApi(_) => "downwardAPI",
            VolumeSource::EmptyDir(_) => "emptyDir",
            VolumeSource::HostPath(_) => "hostPath",
            VolumeSource::Other(volume) => volume_type(volume),
        }
    }

    /// The k8s-openapi [`Volume`] this was made from, rebuilt (over 3 KB: for a call that
    /// takes a `Volume`, not to keep).
    pub fn to_volume(&self) -> Volume {
        let mut volume = Volume {
            name: self.name.clone(),
            ..Volume::default()
        };
        self.source.clone().set_in(&mut volume);
        volume
    }
}

/// The first source field set on `volume`, as the API spells it; `unknown` for none.
pub fn volume_type(volume: &Volume) -> &'static str {
    let sources = [
        (
            volume.aws_elastic_block_store.is_some(),
            "awsElasticBlockStore",
        ),
        (volume.azure_disk.is_some(), "azureDisk"),
        (volume.azure_file.is_some(), "azureFile"),
        (volume.cephfs.is_some(), "cephfs"),
        (volume.cinder.is_some(), "cinder"),
        (volume.config_map.is_some(), "configMap"),
        (volume.csi.is_some(), "csi"),
        (volume.downward_api.is_some(), "downwardAPI"),
        (volume.empty_dir.is_some(), "emptyDir"),
        (volume.ephemeral.is_some(), "ephemeral"),
        (volume.fc.is_some(), "fc"),
        (volume.flex_volume.is_some(), "flexVolume"),
        (volume.flocker.is_some(), "flocker"),
        (volume.gce_persistent_disk.is_some(), "gcePersistentDisk"),
        (volume.git_repo.is_some(), "gitRepo"),
        (volume.glusterfs.is_some(), "glusterfs"),
        (volume.host_path.is_some(), "hostPath"),
        (volume.image.is_some(), "image"),
        (volume.iscsi.is_some(), "iscsi"),
        (volume.nfs.is_some(), "nfs"),
        (
            volume.persistent_volume_claim.is_some(),
            "persistentVolumeClaim",
        ),
        (
            volume.photon_persistent_disk.is_some(),
            "photonPersistentDisk",
        ),
        (volume.portworx_volume.is_some(), "portworxVolume"),
        (volume.projected.is_some(), "projected"),
        (volume.quobyte.is_some(), "quobyte"),
        (volume.rbd.is_some(), "rbd"),
        (volume.scale_io.is_some(), "scaleIO"),
        (volume.secret.is_some(), "secret"),
        (volume.storageos.is_some(), "storageos"),
        (volume.vsphere_volume.is_some(), "vsphereVolume"),
    ];
    sources
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
        .unwrap_or("unknown")
}

impl From<Volume> for PodVolume {
    fn from(mut volume: Volume) -> Self {
        let name = std::mem::take(&mut volume.name);
        let source = if let Some(s) = volume.config_map.take() {
            VolumeSource::ConfigMap(s)
        } else if let Some(s) = volume.secret.take() {
            VolumeSource::Secret(s)
        } else if let Some(s) = volume.projected.take() {
            VolumeSource::Projected(s)
        } else if let Some(s) = volume.downward_api.take() {
            VolumeSource::DownwardApi(s)
        } else if let Some(s) = volume.empty_dir.take() {
            VolumeSource::EmptyDir(s)
        } else if let Some(s) = volume.host_path.take() {
            VolumeSource::HostPath(s)
        } else {
            return PodVolume {
                name,
                source: VolumeSource::Other(Box::new(volume)),
            };
        };
        // Another source set beside the one taken (API validation refuses it, a manifest file
        // may not): kept whole.
        let source = if volume == Volume::default() {
            source
        } else {
            source.set_in(&mut volume);
            VolumeSource::Other(Box::new(volume))
        };
        PodVolume { name, source }
    }
}

impl From<&PodVolume> for Volume {
    fn from(volume: &PodVolume) -> Self {
        volume.to_volume()
    }
}

impl VolumeSource {
    /// The source's field in a `Volume` (`configMap`, ...); `other` for [`Other`](Self::Other).
    fn field(&self) -> &'static str {
        match self {
            VolumeSource::ConfigMap(_) => "configMap",
            VolumeSource::Secret(_) => "secret",
            VolumeSource::Projected(_) => "projected",
            VolumeSource::DownwardApi(_) => "downwardAPI",
            VolumeSource::EmptyDir(_) => "emptyDir",
            VolumeSource::HostPath(_) => "hostPath",
            VolumeSource::Other(_) => "other",
        }
    }

    /// Sets this source in `volume` (an `Other` replaces everything but the name).
    fn set_in(self, volume: &mut Volume) {
        match self {
            VolumeSource::ConfigMap(s) => volume.config_map = Some(s),
            VolumeSource::Secret(s) => volume.secret = Some(s),
            VolumeSource::Projected(s) => volume.projected = Some(s),
            VolumeSource::DownwardApi(s) => volume.downward_api = Some(s),
            VolumeSource::EmptyDir(s) => volume.empty_dir = Some(s),
            VolumeSource::HostPath(s) => volume.host_path = Some(s),
            VolumeSource::Other(rest) => {
                let name = std::mem::take(&mut volume.name);
                *volume = *rest;
                volume.name = name;
            }
        }
    }
}

impl fmt::Debug for PodVolume {
    /// The name and the source's field: enough for a log line, and small.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PodVolume")
            .field("name", &self.name)
            .field("source", &format_args!("{}", self.source.field()))
            .finish()
    }
}

impl fmt::Debug for VolumeSource {
    /// The source's field only (`configMap`, ..., `other`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn volume(json: serde_json::Value) -> Volume {
        serde_json::from_value(json).unwrap()
    }

    fn every_kind() -> Vec<Volume> {
        [
            json!({"name": "cm", "configMap": {"name": "settings", "defaultMode": 420,
                   "items": [{"key": "a", "path": "x/a", "mode": 256}], "optional": true}}),
            json!({"name": "cm-empty", "configMap": {}}),
            json!({"name": "s", "secret": {"secretName": "creds", "optional": false}}),
            json!({"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}),
            json!({"name": "d", "downwardAPI": {"items": [{"path": "labels",
                   "fieldRef": {"fieldPath": "metadata.labels"}}]}}),
            json!({"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}),
            json!({"name": "host", "hostPath": {"path": "/var/log", "type": "Directory"}}),
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "pvc", "readOnly": true}}),
            json!({"name": "csi", "csi": {"driver": "x.example.com",
                   "nodePublishSecretRef": {"name": "s"}, "volumeAttributes": {"a": "b"}}}),
            json!({"name": "none"}),
            json!({"name": "two", "configMap": {"name": "a"}, "secret": {"secretName": "b"}}),
            json!({"name": "two-others", "emptyDir": {}, "nfs": {"server": "n", "path": "/"}}),
        ]
        .into_iter()
        .map(volume)
        .collect()
    }

    #[test]
    fn every_kind_of_volume_comes_back_unchanged_from_its_compact_form() {
        for original in every_kind() {
            let compact = PodVolume::from(original.clone());
            assert_eq!(compact.name(), original.name);
            assert_eq!(compact.to_volume(), original, "{compact:?}");
            assert_eq!(Volume::from(&compact), original);
        }
    }

    #[test]
    fn a_volume_is_its_one_source_and_anything_else_is_kept_whole() {
        let kinds: Vec<_> = every_kind()
            .into_iter()
            .map(|v| format!("{:?}", PodVolume::from(v).source()))
            .collect();
        assert_eq!(
            kinds,
            [
                "configMap",
                "configMap",
                "secret",
                "projected",
                "downwardAPI",
                "emptyDir",
                "hostPath",
                "other",
                "other",
                "other",
                "other",
                "other"
            ]
        );
        let cm = PodVolume::from(every_kind().remove(0));
        assert_eq!(cm.config_map().map(|c| c.name.as_str()), Some("settings"));
        assert!(cm.secret().is_none() && cm.projected().is_none() && cm.empty_dir().is_none());
        assert_eq!(
            format!("{cm:?}"),
            r#"PodVolume { name: "cm", source: configMap }"#
        );
    }

    #[test]
    fn compact_volumes_are_equal_exactly_when_their_volumes_are() {
        let all = every_kind();
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                let (ca, cb) = (PodVolume::from(a.clone()), PodVolume::from(b.clone()));
                assert_eq!(ca == cb, i == j, "{ca:?} / {cb:?}");
            }
        }
        let mut renamed = all[0].clone();
        renamed.name = "other-name".into();
        assert_ne!(PodVolume::from(renamed), PodVolume::from(all[0].clone()));
    }

    // The point of the type: a k8s `Volume` is over 3 KB inline whichever source is set.
    #[test]
    fn a_compact_volume_is_a_small_fraction_of_a_k8s_volume() {
        assert!(size_of::<Volume>() > 3000, "{}", size_of::<Volume>());
        assert!(
            size_of::<PodVolume>() <= 128,
            "PodVolume is {} bytes",
            size_of::<PodVolume>()
        );
    }
}
