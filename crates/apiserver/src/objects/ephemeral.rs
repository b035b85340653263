//! The `pods/ephemeralcontainers` subresource's strategy: what an update through it may
//! change (only `spec.ephemeralContainers`) and how it is validated, as the real registry's
//! `podEphemeralContainersStrategy` does.
//!
//! 1. Everything but `spec.ephemeralContainers` comes from the stored pod: the rest of the
//!    spec, the status, and the metadata a status update keeps (labels, annotations,
//!    finalizers, owner references). The generation moves with the spec, as on any update.
//! 2. Existing ephemeral containers stay as they are: one left out is
//!    `existing ephemeral containers "<name>" may not be removed`, one altered
//!    `… may not be changed` (both `spec.ephemeralContainers: Forbidden`).
//! 3. Each ephemeral container needs a name unique among all the pod's containers and an
//!    image; a `targetContainerName` must name one of its containers or init containers; the
//!    fields an ephemeral container may not have (ports, probes, lifecycle, resources, …)
//!    are refused with `cannot be set for an Ephemeral Container`.

use std::collections::HashSet;

use serde_json::Value;

use crate::status::FieldError;

/// The subresource's name in the URL.
pub(crate) const SUBRESOURCE: &str = "ephemeralcontainers";

/// Container fields an ephemeral container may not set.
const FORBIDDEN_FIELDS: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "restartPolicy",
    "restartPolicyRules",
];

/// Step (1): `new` becomes the stored pod `old` with `new`'s ephemeral containers.
pub(crate) fn prepare_for_update(new: &mut Value, old: &Value) {
    let ephemeral = new.pointer("/spec/ephemeralContainers").cloned();
    let Some(map) = new.as_object_mut() else {
        return;
    };
    let mut spec = old
        .get("spec")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(spec) = spec.as_object_mut() {
        match ephemeral {
            Some(list) if !list.is_null() => spec.insert("ephemeralContainers".into(), list),
            _ => spec.remove("ephemeralContainers"),
        };
    }
    map.insert("spec".into(), spec);
    match old.get("status") {
        Some(status) => map.insert("status".into(), status.clone()),
        None => map.remove("status"),
    };
    let (Some(meta), Some(old_meta)) = (
        map.get_mut("metadata").and_then(Value::as_object_mut),
        old.get("metadata").and_then(Value::as_object),
    ) else {
        return;
    };
    for key in ["labels", "annotations", "finalizers", "ownerReferences"] {
        match old_meta.get(key) {
            Some(v) => meta.insert(key.into(), v.clone()),
            None => meta.remove(key),
        };
    }
}

/// Steps (2) and (3) for a prepared `new` against the stored `old`.
pub(crate) fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let list = |pod: &Value, key: &str| -> Vec<Value> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let name = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut errs = Vec::new();
    let new_ephemeral = list(new, "ephemeralContainers");
    // (2)
    for existing in list(old, "ephemeralContainers") {
        let wanted = name(&existing);
        let why = match new_ephemeral.iter().find(|c| name(c) == wanted) {
            None => "removed",
            Some(c) if *c != existing => "changed",
            Some(_) => continue,
        };
        errs.push(FieldError::forbidden(
            "spec.ephemeralContainers",
            format!("existing ephemeral containers {wanted:?} may not be {why}"),
        ));
    }
    // (3)
    let others: HashSet<String> = list(new, "containers")
        .iter()
        .chain(&list(new, "initContainers"))
        .map(name)
        .collect();
    let mut names = others.clone();
    for (i, c) in new_ephemeral.iter().enumerate() {
        let path = format!("spec.ephemeralContainers[{i}]");
        let n = name(c);
        if n.is_empty() {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        } else if !names.insert(n.clone()) {
            errs.push(FieldError::duplicate(format!("{path}.name"), &n));
        }
        if c.get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(FieldError::required(format!("{path}.image"), ""));
        }
        if let Some(target) = c
            .get("targetContainerName")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty() && !others.contains(*t))
        {
            errs.push(FieldError::not_found(
                format!("{path}.targetContainerName"),
                target,
            ));
        }
        for field in FORBIDDEN_FIELDS {
            let set = c.get(*field).is_some_and(|v| match v {
                Value::Null => false,
                Value::Object(m) => !m.is_empty(),
                Value::Array(a) => !a.is_empty(),
                _ => true,
            });
            if set {
                errs.push(FieldError::forbidden(
                    format!("{path}.{field}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(ephemeral: Value) -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "app", "image": "busybox"}], "ephemeralContainers": ephemeral},
            "status": {"phase": "Running"},
        })
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn only_the_ephemeral_containers_change_through_the_subresource() {
        let old = pod(json!([]));
        let mut new = json!({
            "metadata": {"name": "p", "labels": {"b": "2"}},
            "spec": {"containers": [{"name": "other", "image": "x"}],
                     "ephemeralContainers": [{"name": "debugger", "image": "busybox"}]},
            "status": {"phase": "Failed"},
        });
        prepare_for_update(&mut new, &old);
        assert_eq!(new["spec"]["containers"], old["spec"]["containers"]);
        assert_eq!(new["spec"]["ephemeralContainers"][0]["name"], "debugger");
        assert_eq!(new["status"], old["status"]);
        assert_eq!(new["metadata"]["labels"], json!({"a": "1"}));
        assert!(validate_update(&new, &old).is_empty());
    }

    #[test]
    fn existing_ephemeral_containers_may_be_neither_removed_nor_changed() {
        let old =
            pod(json!([{"name": "d1", "image": "busybox"}, {"name": "d2", "image": "busybox"}]));
        let new = pod(json!([{"name": "d2", "image": "agnhost"}]));
        assert_eq!(
            messages(&validate_update(&new, &old)),
            [
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"d1\" may not be removed",
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"d2\" may not be changed",
            ]
        );
    }

    #[test]
    fn a_new_ephemeral_container_needs_a_unique_name_an_image_a_known_target_and_no_ports() {
        let old = pod(json!([]));
        let new = pod(json!([
            {"name": "app", "image": "busybox"},
            {"name": "d", "targetContainerName": "nope", "ports": [{"containerPort": 80}]},
        ]));
        assert_eq!(
            messages(&validate_update(&new, &old)),
            [
                "spec.ephemeralContainers[0].name: Duplicate value: \"app\"",
                "spec.ephemeralContainers[1].image: Required value",
                "spec.ephemeralContainers[1].targetContainerName: Not found: \"nope\"",
                "spec.ephemeralContainers[1].ports: Forbidden: cannot be set for an Ephemeral Container",
            ]
        );
    }
}
