//! What an environment reads and what changed in it (FC-10, FC-12): which containers of a
//! pod can follow and which objects their `env` and `envFrom` name; the keys whose values
//! differ between two resolutions, and the text an event gives of them (never a value).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Container;
use nodelet_core::runtime::is_sidecar;
use nodelet_core::{AdmittedPod, ObjectKind, ObjectRef};

use crate::env::{ContainerEnv, EnvSource, digest};

/// The app containers and sidecars of `pod` (those that can follow).
pub(super) fn followed(pod: &AdmittedPod) -> Vec<&Container> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_sidecar(c));
    sidecars.chain(&spec.containers).collect()
}

pub(super) fn follows_kind(pod: &AdmittedPod, name: &str) -> bool {
    followed(pod).iter().any(|c| c.name == name)
}

/// Whether `container`'s `env` or `envFrom` names `object` (of the pod's namespace).
pub(super) fn reads(container: &Container, object: &ObjectRef) -> bool {
    let from = container
        .env_from
        .iter()
        .flatten()
        .any(|s| match object.kind {
            ObjectKind::ConfigMap => s
                .config_map_ref
                .as_ref()
                .is_some_and(|r| r.name == object.name),
            ObjectKind::Secret => s.secret_ref.as_ref().is_some_and(|r| r.name == object.name),
        });
    from || container.env.iter().flatten().any(|e| {
        let Some(v) = &e.value_from else {
            return false;
        };
        match object.kind {
            ObjectKind::ConfigMap => v
                .config_map_key_ref
                .as_ref()
                .is_some_and(|r| r.name == object.name),
            ObjectKind::Secret => v
                .secret_key_ref
                .as_ref()
                .is_some_and(|r| r.name == object.name),
        }
    })
}

/// An object as a set key.
pub(super) fn object_key(object: &ObjectRef) -> (u8, String, String) {
    let kind = match object.kind {
        ObjectKind::ConfigMap => 0,
        ObjectKind::Secret => 1,
    };
    (kind, object.namespace.clone(), object.name.clone())
}

fn kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::ConfigMap => "ConfigMap",
        ObjectKind::Secret => "Secret",
    }
}

/// Each variable's digest.
pub(super) fn digests(env: &ContainerEnv) -> BTreeMap<String, u64> {
    env.vars
        .iter()
        .map(|v| (v.name.clone(), digest(&v.value)))
        .collect()
}

/// The keys whose value differs between `old` and `new`, by object (objects in the order
/// read; keys sorted). A key present on one side only counts as changed.
pub(super) fn changed_keys(old: &[EnvSource], new: &[EnvSource]) -> Vec<(ObjectRef, Vec<String>)> {
    let mut objects: Vec<&ObjectRef> = old.iter().map(|s| &s.object).collect();
    for s in new {
        if !objects.contains(&&s.object) {
            objects.push(&s.object);
        }
    }
    let empty = BTreeMap::new();
    let keys_of = |list: &[EnvSource], o: &ObjectRef| {
        list.iter().find(|s| &s.object == o).map(|s| s.keys.clone())
    };
    let mut out = Vec::new();
    for o in objects {
        let before = keys_of(old, o).unwrap_or_else(|| empty.clone());
        let after = keys_of(new, o).unwrap_or_else(|| empty.clone());
        let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        let changed: Vec<String> = names
            .into_iter()
            .filter(|k| before.get(*k).copied().flatten() != after.get(*k).copied().flatten())
            .cloned()
            .collect();
        if !changed.is_empty() {
            out.push((o.clone(), changed));
        }
    }
    out
}

/// What changed, for an event: `ConfigMap ns/a: k1, k2; Secret ns/b: k3`; the variables
/// that changed when no key of an object did (a Service's variables, say). Never a value.
pub(super) fn describe(
    old: &[EnvSource],
    new: &[EnvSource],
    old_vars: &BTreeMap<String, u64>,
    new_vars: &BTreeMap<String, u64>,
) -> String {
    let changed = changed_keys(old, new);
    if changed.is_empty() {
        let names: BTreeSet<&String> = old_vars.keys().chain(new_vars.keys()).collect();
        let vars: Vec<&str> = names
            .into_iter()
            .filter(|n| old_vars.get(*n) != new_vars.get(*n))
            .map(String::as_str)
            .collect();
        return format!("variables {}", vars.join(", "));
    }
    changed
        .iter()
        .map(|(o, keys)| format!("{} {o}: {}", kind_name(o.kind), keys.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(kind: ObjectKind, name: &str, rv: &str, keys: &[(&str, Option<&str>)]) -> EnvSource {
        EnvSource {
            object: ObjectRef::new(kind, "ns", name),
            resource_version: Some(rv.to_owned()),
            keys: keys
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(|v| digest(v.as_bytes()))))
                .collect(),
        }
    }

    #[test]
    fn the_keys_that_changed_are_named_by_object_and_a_new_version_alone_is_no_change() {
        let old = vec![
            source(
                ObjectKind::ConfigMap,
                "cfg",
                "1",
                &[("mode", Some("a")), ("level", Some("1"))],
            ),
            source(ObjectKind::Secret, "creds", "5", &[("token", Some("s1"))]),
        ];
        let new = vec![
            source(
                ObjectKind::ConfigMap,
                "cfg",
                "2",
                &[("mode", Some("b")), ("level", Some("1"))],
            ),
            source(
                ObjectKind::Secret,
                "creds",
                "6",
                &[("token", Some("s1")), ("extra", Some("x"))],
            ),
        ];
        let changed = changed_keys(&old, &new);
        assert_eq!(
            changed,
            vec![
                (ObjectRef::config_map("ns", "cfg"), vec!["mode".to_owned()]),
                (ObjectRef::secret("ns", "creds"), vec!["extra".to_owned()]),
            ]
        );
        let text = describe(&old, &new, &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(text, "ConfigMap ns/cfg: mode; Secret ns/creds: extra");
        assert!(!text.contains("s1"), "{text}");
        let same_values = vec![
            source(
                ObjectKind::ConfigMap,
                "cfg",
                "9",
                &[("mode", Some("a")), ("level", Some("1"))],
            ),
            source(ObjectKind::Secret, "creds", "9", &[("token", Some("s1"))]),
        ];
        assert!(changed_keys(&old, &same_values).is_empty());
    }

    #[test]
    fn an_optional_object_that_appears_changes_the_keys_read_from_it() {
        let missing = EnvSource {
            object: ObjectRef::config_map("ns", "opt"),
            resource_version: None,
            keys: BTreeMap::new(),
        };
        let present = source(ObjectKind::ConfigMap, "opt", "3", &[("mode", Some("on"))]);
        assert_eq!(
            changed_keys(
                std::slice::from_ref(&missing),
                std::slice::from_ref(&present)
            ),
            vec![(ObjectRef::config_map("ns", "opt"), vec!["mode".to_owned()])]
        );
        assert_eq!(
            changed_keys(&[present], &[missing]),
            vec![(ObjectRef::config_map("ns", "opt"), vec!["mode".to_owned()])]
        );
    }

    #[test]
    fn without_a_changed_key_the_changed_variables_are_named_never_their_values() {
        let old: BTreeMap<String, u64> = [
            ("A".to_owned(), digest(b"1")),
            ("B".to_owned(), digest(b"2")),
        ]
        .into();
        let new: BTreeMap<String, u64> = [
            ("A".to_owned(), digest(b"1")),
            ("B".to_owned(), digest(b"3")),
        ]
        .into();
        assert_eq!(describe(&[], &[], &old, &new), "variables B");
    }

    #[test]
    fn an_env_source_debug_shows_keys_never_digests() {
        let s = source(
            ObjectKind::Secret,
            "creds",
            "1",
            &[("token", Some("hunter2"))],
        );
        let text = format!("{s:?}");
        assert!(text.contains("token") && text.contains("creds"), "{text}");
        assert!(!text.contains(&digest(b"hunter2").to_string()), "{text}");
    }
}
