//! Strategic merge patch for the served types: JSON merge semantics, plus lists merged by
//! their Kubernetes `patchMergeKey` (containers and volumes by `name`, ports by
//! `containerPort`, conditions by `type`, ...), `finalizers` merged as a set, and the patch
//! directives (`$patch: replace|delete`, `$deleteFromPrimitiveList/<f>`, `$setElementOrder/<f>`
//! and `$retainKeys`, the last two accepted and ignored).
//!
//! The merge keys come from a field-name table rather than from OpenAPI schemas; a list whose
//! field is not in the table is replaced, as for types without a merge key.

use serde_json::{Map, Value};

/// Merge key of list fields with `patchStrategy: merge`, by field name.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "volumeMounts"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => "name",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "podIPs" | "hostIPs" => "ip",
        "addresses" => "type",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Primitive lists merged as sets (`patchStrategy: merge` on scalars).
fn is_set_list(field: &str) -> bool {
    matches!(field, "finalizers")
}

/// Applies `patch` to `target` with strategic merge semantics.
pub(crate) fn apply(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => merge_map(t, p),
        _ => *target = strip(patch),
    }
}

fn merge_map(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_map(patch);
        return;
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) = (target.get_mut(field), v.as_array())
            {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(po) if po.get("$patch").and_then(Value::as_str) == Some("delete") => {
                target.remove(k);
            }
            Value::Object(po) => match target.get_mut(k) {
                Some(Value::Object(to)) => merge_map(to, po),
                _ => {
                    target.insert(k.clone(), strip(v));
                }
            },
            Value::Array(pa) => {
                let merged = match (target.get(k), merge_key(k)) {
                    (Some(Value::Array(ta)), Some(key)) => merge_list(ta, pa, key),
                    (Some(Value::Array(ta)), None) if is_set_list(k) => {
                        let mut out = ta.clone();
                        for x in pa {
                            if !out.contains(x) {
                                out.push(x.clone());
                            }
                        }
                        out
                    }
                    _ => pa
                        .iter()
                        .filter(|x| !is_delete_directive(x))
                        .map(strip)
                        .collect(),
                };
                target.insert(k.clone(), Value::Array(merged));
            }
            other => {
                target.insert(k.clone(), other.clone());
            }
        }
    }
}

fn is_delete_directive(v: &Value) -> bool {
    v.get("$patch").and_then(Value::as_str) == Some("delete")
}

fn merge_list(target: &[Value], patch: &[Value], key: &str) -> Vec<Value> {
    if patch
        .iter()
        .any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return patch
            .iter()
            .filter(|p| p.get("$patch").is_none())
            .map(strip)
            .collect();
    }
    let mut out: Vec<Value> = target.to_vec();
    for p in patch {
        let Some(id) = p.get(key) else {
            out.push(strip(p));
            continue;
        };
        let pos = out.iter().position(|t| t.get(key) == Some(id));
        match (pos, is_delete_directive(p)) {
            (Some(i), true) => {
                out.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => apply(&mut out[i], p),
            (None, false) => out.push(strip(p)),
        }
    }
    out
}

/// A patch value with its directives removed (for inserting new content).
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_map(m)),
        Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
        other => other.clone(),
    }
}

fn strip_map(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        .map(|(k, v)| (k.clone(), strip(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_merge_by_type_and_containers_by_name() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
        apply(
            &mut pod,
            &json!({
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
                "spec": {"containers": [{"name": "b", "image": "z"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }),
        );
        assert_eq!(
            pod,
            json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "z"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}})
        );
    }

    #[test]
    fn directives_delete_replace_and_remove_from_primitive_lists() {
        let mut obj = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1"}},
            "spec": {"volumes": [{"name": "v1"}, {"name": "v2"}], "tolerations": [{"key": "k"}]}});
        apply(
            &mut obj,
            &json!({
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"$patch": "replace", "y": "2"}},
                "spec": {"volumes": [{"name": "v1", "$patch": "delete"}], "tolerations": [{"key": "new"}]}
            }),
        );
        assert_eq!(
            obj,
            json!({"metadata": {"finalizers": ["b"], "labels": {"y": "2"}},
            "spec": {"volumes": [{"name": "v2"}], "tolerations": [{"key": "new"}]}})
        );
    }

    // The container status lists are atomic in the API (no merge key): a patch naming one
    // replaces it whole, as the real server does.
    #[test]
    fn container_status_lists_are_replaced_whole() {
        let mut pod = json!({"status": {"containerStatuses": [{"name": "a"}, {"name": "b"}]}});
        apply(
            &mut pod,
            &json!({"status": {"containerStatuses": [{"name": "b", "ready": true}]}}),
        );
        assert_eq!(
            pod,
            json!({"status": {"containerStatuses": [{"name": "b", "ready": true}]}})
        );
    }

    #[test]
    fn finalizers_merge_as_a_set() {
        let mut obj = json!({"metadata": {"finalizers": ["a"]}});
        apply(&mut obj, &json!({"metadata": {"finalizers": ["a", "b"]}}));
        assert_eq!(obj, json!({"metadata": {"finalizers": ["a", "b"]}}));
    }
}
