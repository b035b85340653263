//! Payload construction for configMap and secret volumes and projections (PL-7, PL-8).

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, Secret};
use nodelet_atomic_writer::{FileProjection, Payload};

use crate::SetUpError;

/// PL-7: the files of a configMap volume (or projection).
///
/// Without `items`: one file per `data` key (UTF-8 bytes) and per `binaryData` key, mode
/// `default_mode`. With `items`: only those keys, in order, looked up in `data` then
/// `binaryData`, at the item's `path` with the item's `mode` (else `default_mode`); a missing
/// key is skipped when `optional`, else an error. A later item with the same path wins.
///
/// # Errors
/// [`SetUpError::NoDefaultMode`], [`SetUpError::MissingConfigMapKey`].
pub fn config_map_payload(
    items: Option<&[KeyToPath]>,
    config_map: &ConfigMap,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, SetUpError> {
    let default_mode = default_mode.ok_or(SetUpError::NoDefaultMode)?;
    let mut payload = Payload::new();
    let data = config_map.data.as_ref();
    let binary = config_map.binary_data.as_ref();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (key, value) in data.into_iter().flatten() {
                let file = FileProjection::new(value.as_bytes(), mode_bits(default_mode));
                payload.insert(key.clone(), file);
            }
            for (key, value) in binary.into_iter().flatten() {
                let file = FileProjection::new(value.0.clone(), mode_bits(default_mode));
                payload.insert(key.clone(), file);
            }
        }
        Some(items) => {
            for item in items {
                let bytes = match (
                    data.and_then(|d| d.get(&item.key)),
                    binary.and_then(|b| b.get(&item.key)),
                ) {
                    (Some(text), _) => text.as_bytes().to_vec(),
                    (None, Some(bytes)) => bytes.0.clone(),
                    (None, None) if optional => continue,
                    (None, None) => {
                        return Err(SetUpError::MissingConfigMapKey {
                            key: item.key.clone(),
                        });
                    }
                };
                let mode = mode_bits(item.mode.unwrap_or(default_mode));
                payload.insert(item.path.clone(), FileProjection::new(bytes, mode));
            }
        }
    }
    Ok(payload)
}

/// PL-8: the files of a secret volume (or projection): the rules of [`config_map_payload`]
/// over `data` only (`stringData` never reaches a node).
///
/// # Errors
/// [`SetUpError::NoDefaultMode`], [`SetUpError::MissingSecretKey`].
pub fn secret_payload(
    items: Option<&[KeyToPath]>,
    secret: &Secret,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, SetUpError> {
    let default_mode = default_mode.ok_or(SetUpError::NoDefaultMode)?;
    let mut payload = Payload::new();
    let data = secret.data.as_ref();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (key, value) in data.into_iter().flatten() {
                let file = FileProjection::new(value.0.clone(), mode_bits(default_mode));
                payload.insert(key.clone(), file);
            }
        }
        Some(items) => {
            for item in items {
                let Some(bytes) = data.and_then(|d| d.get(&item.key)) else {
                    if optional {
                        continue;
                    }
                    return Err(SetUpError::MissingSecretKey {
                        key: item.key.clone(),
                    });
                };
                let mode = mode_bits(item.mode.unwrap_or(default_mode));
                payload.insert(
                    item.path.clone(),
                    FileProjection::new(bytes.0.clone(), mode),
                );
            }
        }
    }
    Ok(payload)
}

/// The mode as the writer takes it; out-of-range values are kept out of range so the writer
/// rejects them with a clear error.
pub(crate) fn mode_bits(mode: i32) -> u32 {
    u32::try_from(mode).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    //! Ports of the kubelet's `TestMakePayload` cases (PL-16) for both plugins.
    use super::*;
    use nodelet_testutil::{ConfigMapBuilder, SecretBuilder};

    /// Secret `s` with `data` (key, text).
    fn secret(data: &[(&str, &str)]) -> Secret {
        data.iter()
            .fold(SecretBuilder::new("", "s"), |s, (k, v)| s.data(k, v))
            .build()
    }

    fn items(list: &[(&str, &str, Option<i32>)]) -> Vec<KeyToPath> {
        list.iter()
            .map(|(key, path, mode)| KeyToPath {
                key: (*key).into(),
                path: (*path).into(),
                mode: *mode,
            })
            .collect()
    }

    fn files(p: &Payload) -> Vec<(String, Vec<u8>, u32)> {
        p.iter()
            .map(|(k, f)| (k.to_owned(), f.data.clone(), f.mode))
            .collect()
    }

    fn f(path: &str, data: &str, mode: u32) -> (String, Vec<u8>, u32) {
        (path.into(), data.as_bytes().to_vec(), mode)
    }

    fn two_keys() -> ConfigMap {
        ConfigMapBuilder::new("", "cm")
            .data("foo", "foo")
            .data("bar", "bar")
            .build()
    }

    #[test]
    fn no_overrides_projects_every_data_key_with_the_default_mode() {
        let p = config_map_payload(None, &two_keys(), Some(0o644), false).unwrap();
        assert_eq!(
            files(&p),
            vec![f("bar", "bar", 0o644), f("foo", "foo", 0o644)]
        );
    }

    #[test]
    fn no_overrides_binary_data_projects_raw_bytes() {
        let c = ConfigMapBuilder::new("", "cm")
            .binary_data("dump.bin", &[0xde, 0xca, 0xfe, 0xba, 0xd0, 0xfe, 0xff])
            .build();
        let p = config_map_payload(None, &c, Some(0o644), false).unwrap();
        assert_eq!(
            files(&p),
            vec![(
                "dump.bin".into(),
                vec![0xde, 0xca, 0xfe, 0xba, 0xd0, 0xfe, 0xff],
                0o644
            )]
        );
    }

    #[test]
    fn no_overrides_mixed_data_projects_text_and_binary_keys() {
        let c = ConfigMapBuilder::new("", "cm")
            .data("foo", "foo")
            .binary_data("bar", b"bar")
            .build();
        let p = config_map_payload(None, &c, Some(0o644), false).unwrap();
        assert_eq!(
            files(&p),
            vec![f("bar", "bar", 0o644), f("foo", "foo", 0o644)]
        );
    }

    #[test]
    fn basic_1_projects_only_the_listed_keys_at_their_paths() {
        let i = items(&[("foo", "path/to/foo.txt", None)]);
        let p = config_map_payload(Some(&i), &two_keys(), Some(0o644), false).unwrap();
        assert_eq!(files(&p), vec![f("path/to/foo.txt", "foo", 0o644)]);
    }

    #[test]
    fn subdirs_and_several_items_keep_their_paths() {
        let i = items(&[
            ("foo", "path/to/foo.txt", None),
            ("bar", "another/path/to/bar.txt", None),
        ]);
        let p = config_map_payload(Some(&i), &two_keys(), Some(0o644), false).unwrap();
        assert_eq!(
            files(&p),
            vec![
                f("another/path/to/bar.txt", "bar", 0o644),
                f("path/to/foo.txt", "foo", 0o644)
            ]
        );
    }

    #[test]
    fn non_existent_key_fails_with_the_kubelet_text() {
        let i = items(&[("zab", "path/to/foo.txt", None)]);
        let err = config_map_payload(Some(&i), &two_keys(), Some(0o644), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configmap references non-existent config key: zab"
        );
        let s = secret(&[("foo", "foo")]);
        let err = secret_payload(Some(&i), &s, Some(0o644), false).unwrap_err();
        assert_eq!(err.to_string(), "references non-existent secret key: zab");
    }

    #[test]
    fn mapping_with_mode_uses_the_item_mode_and_default_mode_otherwise() {
        let i = items(&[("foo", "foo.txt", Some(0o400)), ("bar", "bar.txt", None)]);
        let p = config_map_payload(Some(&i), &two_keys(), Some(0o600), false).unwrap();
        assert_eq!(
            files(&p),
            vec![f("bar.txt", "bar", 0o600), f("foo.txt", "foo", 0o400)]
        );
    }

    #[test]
    fn optional_non_existent_key_is_skipped() {
        let i = items(&[("foo", "foo.txt", None), ("zab", "zab.txt", None)]);
        let p = config_map_payload(Some(&i), &two_keys(), Some(0o644), true).unwrap();
        assert_eq!(files(&p), vec![f("foo.txt", "foo", 0o644)]);
        let s = secret(&[("foo", "foo")]);
        let p = secret_payload(Some(&i), &s, Some(0o644), true).unwrap();
        assert_eq!(files(&p), vec![f("foo.txt", "foo", 0o644)]);
    }

    #[test]
    fn a_missing_default_mode_is_an_error() {
        let err = config_map_payload(None, &two_keys(), None, false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no defaultMode used, not even the default value for it"
        );
        assert!(secret_payload(None, &secret(&[]), None, false).is_err());
    }

    #[test]
    fn a_later_item_with_the_same_path_wins() {
        let i = items(&[("foo", "same", None), ("bar", "same", None)]);
        let p = config_map_payload(Some(&i), &two_keys(), Some(0o644), false).unwrap();
        assert_eq!(files(&p), vec![f("same", "bar", 0o644)]);
    }

    #[test]
    fn secret_payload_ignores_nothing_but_reads_data_only() {
        let s = secret(&[("data-1", "value-1\n"), ("data-2", "value-2\n")]);
        let p = secret_payload(None, &s, Some(0o400), false).unwrap();
        assert_eq!(
            files(&p),
            vec![
                f("data-1", "value-1\n", 0o400),
                f("data-2", "value-2\n", 0o400)
            ]
        );
    }

    #[test]
    fn an_empty_object_gives_an_empty_payload() {
        let p = config_map_payload(None, &ConfigMap::default(), Some(0o644), true).unwrap();
        assert!(p.is_empty());
    }
}
