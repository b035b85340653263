//! DELETE, deletecollection and pods/binding: graceful pod deletion, finalizers, namespace
//! cascade, preconditions.

use chrono::SecondsFormat;
use serde_json::{Value, json};

use super::{
    DeleteOptions, DeleteOutcome, ListOptions, Registry, WriteOptions, meta_mut, meta_str, now,
};
use crate::resources::{NAMESPACES, PODS, ResourceId};
use crate::status::{ApiError, FieldError};
use crate::store::Key;

impl Registry {
    /// DELETE an object, with the real server's graceful-deletion and finalizer semantics.
    pub(crate) fn delete(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<DeleteOutcome, ApiError> {
        let info = res.info();
        let mut s = self.store.inner.lock();
        let key = Key::new(res, ns, name);
        let Some(old) = s.get(&key).cloned() else {
            return Err(ApiError::not_found(info, name));
        };
        let uid = meta_str(&old, "uid").unwrap_or("").to_string();
        if let Some(p) = &opts.precondition_uid
            && *p != uid
        {
            return Err(ApiError::conflict(
                info,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {p}, UID in object meta: {uid}"
                ),
            ));
        }
        if let Some(p) = &opts.precondition_rv
            && Some(p.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                info,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {p}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        if res == NAMESPACES {
            let mut shown = (*old).clone();
            if let Some(m) = meta_mut(&mut shown) {
                m.insert("deletionTimestamp".into(), json!(now()));
            }
            shown["status"] = json!({"phase": "Terminating"});
            if opts.dry_run {
                return Ok(DeleteOutcome::Object(shown));
            }
            let contents: Vec<Key> = s
                .objects
                .keys()
                .filter(|k| k.namespace == name)
                .cloned()
                .collect();
            for k in contents {
                s.remove(&k);
            }
            s.remove(&key);
            return Ok(DeleteOutcome::Object(shown));
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let grace = if res == PODS {
            pod_grace(&old, opts.grace_period_seconds)
        } else {
            0
        };
        let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        if grace > 0 || has_finalizers {
            if deleting {
                let current = old
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                // Already terminating with an equal or shorter grace period: nothing changes.
                if grace >= current {
                    return Ok(DeleteOutcome::Object((*old).clone()));
                }
            }
            let mut marked = (*old).clone();
            let when = chrono::Utc::now() + chrono::Duration::seconds(grace);
            if let Some(m) = meta_mut(&mut marked) {
                m.insert(
                    "deletionTimestamp".into(),
                    json!(when.to_rfc3339_opts(SecondsFormat::Secs, true)),
                );
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                if !deleting
                    && let Some(g) = m
                        .get("generation")
                        .and_then(Value::as_i64)
                        .filter(|g| *g > 0)
                {
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            if opts.dry_run {
                return Ok(DeleteOutcome::Object(marked));
            }
            return Ok(DeleteOutcome::Object((*s.put(key, marked)).clone()));
        }
        if opts.dry_run {
            return Ok(finalize_outcome(res, &old, &uid));
        }
        let last = s.remove(&key).map(|v| (*v).clone()).unwrap_or(Value::Null);
        Ok(finalize_outcome(res, &last, &uid))
    }

    /// POST `pods/binding`: assigns an unbound pod to `node`, as the scheduler does.
    pub(crate) fn bind(
        &self,
        ns: &str,
        name: &str,
        node: &str,
        opts: WriteOptions,
    ) -> Result<Value, ApiError> {
        let info = PODS.info();
        if node.is_empty() {
            return Err(ApiError::invalid(
                info,
                name,
                &[FieldError::required("target.name", "")],
            ));
        }
        let mut s = self.store.inner.lock();
        let key = Key::new(PODS, ns, name);
        let Some(old) = s.get(&key).cloned() else {
            return Err(ApiError::not_found(info, name));
        };
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict(
                info,
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        if let Some(current) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                info,
                name,
                &format!("pod {name} is already assigned to node {current:?}"),
            ));
        }
        let mut new = (*old).clone();
        new["spec"]["nodeName"] = json!(node);
        let conditions = new["status"]
            .as_object_mut()
            .map(|st| st.entry("conditions").or_insert_with(|| json!([])));
        if let Some(Value::Array(list)) = conditions {
            list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
            list.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()}));
        }
        if opts.dry_run {
            return Ok(new);
        }
        Ok((*s.put(key, new)).clone())
    }

    /// DELETE a collection: deletes every matching object, answering the list of them as they
    /// were before deletion.
    pub(crate) fn delete_collection(
        &self,
        res: ResourceId,
        ns: Option<&str>,
        list_opts: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let list = self.list(
            res,
            ns,
            &ListOptions {
                limit: None,
                continue_token: None,
                ..list_opts.clone()
            },
        )?;
        // Answers the list as it was before the deletes, as upstream does.
        for item in list["items"].as_array().into_iter().flatten() {
            let name = meta_str(item, "name").unwrap_or("");
            let ns = meta_str(item, "namespace").unwrap_or("");
            match self.delete(res, ns, name, opts) {
                Ok(_) => {}
                Err(e) if e.code() == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(list)
    }
}

/// The grace period a pod DELETE gets: 0 for unbound or finished pods, else the request's or
/// the pod's `terminationGracePeriodSeconds` (default 30); negative means 1.
fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !bound || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    let g = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    if g < 0 { 1 } else { g }
}

fn finalize_outcome(res: ResourceId, last: &Value, uid: &str) -> DeleteOutcome {
    let info = res.info();
    if info.return_deleted_object {
        return DeleteOutcome::Object(last.clone());
    }
    let mut details =
        json!({"name": meta_str(last, "name").unwrap_or(""), "kind": info.plural, "uid": uid});
    if !info.group.is_empty() {
        details["group"] = json!(info.group);
    }
    DeleteOutcome::Status(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_pods_get_a_grace_period_and_unbound_ones_do_not() {
        let p = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
        assert_eq!(pod_grace(&p, None), 30);
        assert_eq!(pod_grace(&p, Some(0)), 0);
        assert_eq!(pod_grace(&json!({"spec": {}}), Some(10)), 0);
        assert_eq!(
            pod_grace(
                &json!({"spec": {"nodeName": "n"}, "status": {"phase": "Succeeded"}}),
                None
            ),
            0
        );
    }
}
