//! [`Keep`]: how a reflector's cell holds the object it watches between two reads.
//!
//! A ConfigMap or Secret as k8s-openapi decodes it is mostly room: the struct itself (0.43
//! and 0.46 KB inline, nearly every metadata field empty), a B-tree node with room for 11
//! entries (about 0.5 KB) for a `data` map of one or two keys, and a string for each key,
//! value and metadata field that is set. A node keeps one per watched object for as long as
//! its pods run and reads it seldom: a volume's mount and remounts, a container's start. So
//! a cell keeps such an object as its JSON text ([`Packed`]: one allocation, the size of what
//! the server sent less what `source/slim.rs` dropped) and decodes it on each read; its
//! resourceVersion goes first in the same allocation, for the reflector compares versions on
//! every event. A Node (one per manager, read on every TTL check) stays decoded.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How a cell keeps an object of this kind (see the module docs).
///
/// Implemented for the kinds this crate watches; public only as a bound of
/// [`ManagedObject`](crate::ManagedObject), which is sealed.
pub trait Keep: Resource + Sized + Send + Sync + 'static {
    /// What the cell holds.
    type Kept: Send + Sync + 'static;
    /// The form `object` is kept in.
    fn keep(object: Self) -> Self::Kept;
    /// The kept object's resourceVersion.
    fn kept_version(kept: &Self::Kept) -> Option<&str>;
    /// The kept object, for a reader.
    ///
    /// # Errors
    /// The kept text does not decode (it was encoded from an object of the same kind, so
    /// this is a bug, not a server's doing).
    fn load(kept: &Self::Kept) -> Result<Arc<Self>, serde_json::Error>;
}

/// A ConfigMap or Secret as a cell keeps it.
pub enum Packed<K> {
    /// Its resourceVersion, then its JSON text.
    Text {
        /// `metadata.resourceVersion` (the first `version` bytes), then the object as JSON.
        bytes: Box<[u8]>,
        /// The length of the resourceVersion; `None`: the object has none.
        version: Option<u32>,
    },
    /// As decoded: the object did not encode (not seen with ConfigMaps and Secrets).
    Decoded(Arc<K>),
}

impl<K: Resource + Serialize + DeserializeOwned> Packed<K> {
    /// Packs `object` into an allocation of its exact size: the text is measured first, so that
    /// no buffer grows by doubling (and leaves the smaller ones it outgrew among the objects a
    /// node keeps).
    fn pack(object: K) -> Self {
        let version = object.meta().resource_version.as_deref();
        let length = version.map(|v| u32::try_from(v.len()));
        let mut counted = Counted(0);
        let measured = serde_json::to_writer(&mut counted, &object);
        let mut bytes = Vec::with_capacity(version.map_or(0, str::len) + counted.0);
        bytes.extend_from_slice(version.unwrap_or_default().as_bytes());
        let written = measured.and_then(|()| serde_json::to_writer(&mut bytes, &object));
        match (length.transpose(), written) {
            (Ok(version), Ok(())) => Packed::Text {
                bytes: bytes.into_boxed_slice(),
                version,
            },
            _ => Packed::Decoded(Arc::new(object)),
        }
    }

    /// Where the JSON text starts.
    fn split(&self) -> usize {
        match self {
            Packed::Text {
                version: Some(length),
                ..
            } => *length as usize,
            _ => 0,
        }
    }

    fn version(&self) -> Option<&str> {
        match self {
            Packed::Text { bytes, version } => {
                version.as_ref()?;
                std::str::from_utf8(bytes.get(..self.split())?).ok()
            }
            Packed::Decoded(object) => object.meta().resource_version.as_deref(),
        }
    }

    fn load(&self) -> Result<Arc<K>, serde_json::Error> {
        match self {
            Packed::Text { bytes, .. } => {
                serde_json::from_slice(bytes.get(self.split()..).unwrap_or_default()).map(Arc::new)
            }
            Packed::Decoded(object) => Ok(object.clone()),
        }
    }
}

/// A writer that only counts the bytes written to it.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Keep for ConfigMap {
    type Kept = Packed<ConfigMap>;

    fn keep(object: Self) -> Self::Kept {
        Packed::pack(object)
    }

    fn kept_version(kept: &Self::Kept) -> Option<&str> {
        kept.version()
    }

    fn load(kept: &Self::Kept) -> Result<Arc<Self>, serde_json::Error> {
        kept.load()
    }
}

impl Keep for Secret {
    type Kept = Packed<Secret>;

    fn keep(object: Self) -> Self::Kept {
        Packed::pack(object)
    }

    fn kept_version(kept: &Self::Kept) -> Option<&str> {
        kept.version()
    }

    fn load(kept: &Self::Kept) -> Result<Arc<Self>, serde_json::Error> {
        kept.load()
    }
}

impl Keep for Node {
    type Kept = Arc<Node>;

    fn keep(object: Self) -> Self::Kept {
        Arc::new(object)
    }

    fn kept_version(kept: &Self::Kept) -> Option<&str> {
        kept.metadata.resource_version.as_deref()
    }

    fn load(kept: &Self::Kept) -> Result<Arc<Self>, serde_json::Error> {
        Ok(kept.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn secret() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("db".into()),
                namespace: Some("ns".into()),
                uid: Some("u-1".into()),
                resource_version: Some("42".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: "p".into(),
                    uid: "u-p".into(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([
                ("password".into(), ByteString(b"s3cr\xffet".to_vec())),
                ("empty".into(), ByteString(Vec::new())),
            ])),
            immutable: Some(true),
            type_: Some("Opaque".into()),
            ..Secret::default()
        }
    }

    #[test]
    fn a_kept_secret_reads_back_equal_to_what_was_kept() {
        let kept = Secret::keep(secret());
        assert!(matches!(kept, Packed::Text { .. }), "kept as text");
        assert_eq!(Secret::kept_version(&kept), Some("42"));
        assert_eq!(*Secret::load(&kept).unwrap(), secret());
    }

    #[test]
    fn a_kept_config_map_reads_back_equal_and_each_read_is_its_own_copy() {
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("k".into(), "v\n\"q\"".into())])),
            binary_data: Some(BTreeMap::from([("b".into(), ByteString(vec![0, 1, 2]))])),
            immutable: None,
        };
        let kept = ConfigMap::keep(config_map.clone());
        let (a, b) = (
            ConfigMap::load(&kept).unwrap(),
            ConfigMap::load(&kept).unwrap(),
        );
        assert_eq!(*a, config_map);
        assert_eq!(a, b);
        assert!(!Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn an_object_without_a_resource_version_is_kept_without_one() {
        let mut secret = secret();
        secret.metadata.resource_version = None;
        let kept = Secret::keep(secret.clone());
        assert_eq!(Secret::kept_version(&kept), None);
        assert_eq!(*Secret::load(&kept).unwrap(), secret);
        assert!(size_of::<Option<Packed<Secret>>>() <= 24);
    }

    #[test]
    fn a_kept_secret_is_smaller_than_the_decoded_one() {
        // What the decoded form holds: the struct, the data map's B-tree node, and the strings.
        let decoded = size_of::<Secret>() + 544 + 2 * 32 + 4 * 16;
        let Packed::Text { bytes, version } = Secret::keep(secret()) else {
            panic!("kept decoded");
        };
        let text = serde_json::to_vec(&secret()).unwrap();
        assert_eq!(bytes.len(), "42".len() + text.len(), "one exact allocation");
        assert_eq!(
            (&bytes[..2], &bytes[2..], version),
            (&b"42"[..], &text[..], Some(2))
        );
        let kept = size_of::<Packed<Secret>>() + bytes.len();
        assert!(
            kept * 3 < decoded,
            "kept {kept} bytes, decoded at least {decoded}"
        );
    }
}
