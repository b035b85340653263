//! Per-resource create/update strategies: defaulting, field resets, validation and generation,
//! mirroring the real registry strategies for the resources served.

use serde_json::{Value, json};

use crate::certificates::{pod_request, pod_status, trust_bundle};
use crate::objects::defaults;
use crate::objects::validation::{self, NameRule};
use crate::resources::{
    CLUSTER_TRUST_BUNDLES, CONFIGMAPS, NAMESPACES, NODES, POD_CERTIFICATE_REQUESTS, PODS,
    ResourceId, SECRETS, SERVICES,
};
use crate::status::FieldError;

/// Whether objects of `res` carry `metadata.generation` (bumped on spec changes).
pub(crate) fn has_generation(res: ResourceId) -> bool {
    res == PODS
}

/// Whether `res` has a `status` that only the `status` subresource may change.
pub(crate) fn has_status(res: ResourceId) -> bool {
    res == PODS
        || res == NODES
        || res == NAMESPACES
        || res == POD_CERTIFICATE_REQUESTS
        || res == SERVICES
}

/// Defaulting and resets on create (before validation).
pub(crate) fn prepare_for_create(res: ResourceId, obj: &mut Value) {
    if res == PODS {
        defaults::pod(obj);
    } else if res == SECRETS {
        defaults::secret(obj);
    } else if res == NAMESPACES {
        defaults::namespace(obj);
    } else if res == SERVICES {
        crate::objects::services::default(obj);
    } else if res == POD_CERTIFICATE_REQUESTS {
        pod_request::prepare_for_create(obj);
    }
}

/// Defaulting and resets on update (and on patch results), before validation: the same
/// defaulting as on create where upstream applies it on update too; the main resource keeps
/// the old status, `status` keeps the old spec.
pub(crate) fn prepare_for_update(res: ResourceId, sub: Option<&str>, new: &mut Value, old: &Value) {
    if res == POD_CERTIFICATE_REQUESTS {
        pod_request::prepare_for_update(sub, new, old);
        return;
    }
    if res == SECRETS {
        defaults::secret(new);
    }
    if res == SERVICES && sub.is_none() {
        crate::objects::services::default(new);
        crate::objects::services::keep_cluster_ip(new, old);
    }
    if res == PODS {
        defaults::pod_spec(new);
        // The Priority admission plugin keeps the old priority and preemption policy when an
        // update leaves them out.
        if let (Some(spec), Some(old_spec)) = (
            new.get_mut("spec").and_then(Value::as_object_mut),
            old.get("spec"),
        ) {
            for key in ["priority", "preemptionPolicy"] {
                if spec.get(key).is_none_or(Value::is_null)
                    && let Some(v) = old_spec.get(key)
                {
                    spec.insert(key.into(), v.clone());
                }
            }
        }
    }
    if res == NAMESPACES {
        // Labels are re-defaulted; spec.finalizers only change through `finalize`.
        let name = old.pointer("/metadata/name").cloned().unwrap_or(json!(""));
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), name);
            }
        }
        if sub != Some("finalize")
            && let (Some(map), Some(spec)) = (new.as_object_mut(), old.get("spec"))
        {
            map.insert("spec".into(), spec.clone());
        }
    }
    if res == PODS && sub == Some(crate::objects::ephemeral::SUBRESOURCE) {
        crate::objects::ephemeral::prepare_for_update(new, old);
        return;
    }
    if !has_status(res) {
        return;
    }
    let Some(map) = new.as_object_mut() else {
        return;
    };
    match sub {
        Some("status") => {
            match old.get("spec") {
                Some(spec) => map.insert("spec".into(), spec.clone()),
                None => map.remove("spec"),
            };
        }
        _ => {
            match old.get("status") {
                Some(st) => map.insert("status".into(), st.clone()),
                None => map.remove("status"),
            };
        }
    }
}

fn name_rule(res: ResourceId) -> NameRule {
    if res == NAMESPACES || res == SERVICES {
        NameRule::Label
    } else {
        NameRule::Subdomain
    }
}

fn validate_pod_spec(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let containers = obj.pointer("/spec/containers").and_then(Value::as_array);
    match containers {
        None => errs.push(FieldError::required("spec.containers", "")),
        Some(list) if list.is_empty() => errs.push(FieldError::required("spec.containers", "")),
        Some(list) => {
            for (i, c) in list.iter().enumerate() {
                if c.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errs.push(FieldError::required(
                        format!("spec.containers[{i}].name"),
                        "",
                    ));
                }
                if c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errs.push(FieldError::required(
                        format!("spec.containers[{i}].image"),
                        "",
                    ));
                }
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (i, v) in obj
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(format!("spec.volumes[{i}].name"), ""));
        } else if !seen.insert(name) {
            errs.push(FieldError {
                kind: crate::status::FieldErrorKind::Duplicate,
                field: format!("spec.volumes[{i}].name"),
                value: Some(format!("{name:?}")),
                detail: String::new(),
            });
        }
    }
    errs
}

/// Validation on create.
pub(crate) fn validate_create(res: ResourceId, obj: &Value) -> Vec<FieldError> {
    if res == CLUSTER_TRUST_BUNDLES {
        return trust_bundle::validate(obj, None);
    }
    if res == POD_CERTIFICATE_REQUESTS {
        return pod_request::validate_create(obj);
    }
    let mut errs = validation::object_meta(obj, name_rule(res));
    if res == CONFIGMAPS {
        errs.extend(validation::config_map(obj));
    } else if res == SECRETS {
        errs.extend(validation::secret(obj));
    } else if res == PODS {
        errs.extend(validate_pod_spec(obj));
    } else if res == SERVICES {
        errs.extend(crate::objects::services::validate(obj));
    }
    errs
}

/// The pod spec with the fields an update may change blanked out.
fn pod_spec_mask(spec: Option<&Value>) -> Value {
    let mut spec = spec.cloned().unwrap_or(json!({}));
    for key in ["containers", "initContainers"] {
        if let Some(list) = spec.get_mut(key).and_then(Value::as_array_mut) {
            for c in list.iter_mut().filter_map(Value::as_object_mut) {
                c.remove("image");
            }
        }
    }
    if let Some(map) = spec.as_object_mut() {
        for key in ["activeDeadlineSeconds", "tolerations", "schedulingGates"] {
            map.remove(key);
        }
    }
    spec
}

/// Validation on update (`new` already prepared).
pub(crate) fn validate_update(
    res: ResourceId,
    sub: Option<&str>,
    new: &Value,
    old: &Value,
) -> Vec<FieldError> {
    let mut errs = if res == CLUSTER_TRUST_BUNDLES {
        trust_bundle::validate(new, Some(old))
    } else if res == POD_CERTIFICATE_REQUESTS && sub == Some("status") {
        pod_status::validate_status(new, old, chrono::Utc::now())
    } else if res == POD_CERTIFICATE_REQUESTS {
        pod_request::validate_update(new, old)
    } else {
        validation::object_meta(new, name_rule(res))
    };
    if res == CONFIGMAPS {
        errs.extend(validation::config_map(new));
        errs.extend(validation::immutable_update(
            new,
            old,
            &["data", "binaryData"],
        ));
    } else if res == SECRETS {
        errs.extend(validation::secret(new));
        errs.extend(validation::immutable_update(new, old, &["data"]));
        let ty = |o: &Value| {
            o.get("type")
                .and_then(Value::as_str)
                .unwrap_or("Opaque")
                .to_string()
        };
        if ty(new) != ty(old) {
            errs.push(FieldError::invalid("type", &ty(new), "field is immutable"));
        }
    } else if res == PODS && sub == Some(crate::objects::ephemeral::SUBRESOURCE) {
        errs.extend(validate_pod_spec(new));
        errs.extend(crate::objects::ephemeral::validate_update(new, old));
    } else if res == PODS && sub.is_none() {
        errs.extend(validate_pod_spec(new));
        if pod_spec_mask(new.get("spec")) != pod_spec_mask(old.get("spec")) {
            errs.push(FieldError::forbidden(
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
            ));
        }
    } else if res == SERVICES && sub.is_none() {
        errs.extend(crate::objects::services::validate(new));
        errs.extend(crate::objects::services::validate_update(new, old));
    }
    // No new finalizers once deletion has started.
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        let fin = |o: &Value| -> Vec<String> {
            o.pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let old_f = fin(old);
        if fin(new).iter().any(|f| !old_f.contains(f)) {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                "no new finalizers can be added if the object is being deleted",
            ));
        }
    }
    errs
}

/// Whether an update changed what `metadata.generation` tracks.
pub(crate) fn spec_changed(new: &Value, old: &Value) -> bool {
    new.get("spec") != old.get("spec")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_update_may_change_images_but_not_volumes() {
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a"}]}});
        let new_image = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "b"}]}});
        assert!(validate_update(PODS, None, &new_image, &old).is_empty());
        let new_vol = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a"}], "volumes": [{"name": "v"}]}});
        assert_eq!(validate_update(PODS, None, &new_vol, &old).len(), 1);
    }

    #[test]
    fn a_status_update_keeps_the_old_spec() {
        let old = json!({"spec": {"a": 1}, "status": {"phase": "Pending"}});
        let mut new = json!({"spec": {"a": 2}, "status": {"phase": "Running"}});
        prepare_for_update(PODS, Some("status"), &mut new, &old);
        assert_eq!(
            new,
            json!({"spec": {"a": 1}, "status": {"phase": "Running"}})
        );
        let mut new = json!({"spec": {"a": 2}, "status": {"phase": "Running"}});
        prepare_for_update(PODS, None, &mut new, &old);
        assert_eq!(new["spec"]["a"], 2);
        assert_eq!(new["status"], json!({"phase": "Pending"}));
    }

    #[test]
    fn a_pod_update_is_defaulted_again_and_keeps_priority_but_not_the_service_account() {
        let old = json!({"spec": {"priority": 7, "preemptionPolicy": "Never", "serviceAccountName": "default"}});
        let mut new = json!({"spec": {"volumes": [{"name": "v", "secret": {"secretName": "s"}}]}});
        prepare_for_update(PODS, None, &mut new, &old);
        let spec = &new["spec"];
        assert_eq!(spec["volumes"][0]["secret"]["defaultMode"], 420);
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["tolerations"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            (spec["priority"].clone(), spec["preemptionPolicy"].clone()),
            (json!(7), json!("Never"))
        );
        // ServiceAccount admission is create-only upstream.
        assert!(spec.get("serviceAccountName").is_none());
    }
}
