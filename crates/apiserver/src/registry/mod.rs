//! The verbs on stored objects (get, list, create, update, patch, delete), independent of HTTP:
//! the HTTP handlers and `ServerHandle` both drive this.
//!
//! Every write runs under the store lock: (1) read the current object, (2) check preconditions
//! (resourceVersion, uid, namespace existence; NodeRestriction admission for a node writing a
//! Node or creating a PodCertificateRequest), (3) apply the strategy (defaults, resets),
//! (4) validate, (5) stamp system metadata, (6) commit — or stop before (6) for `dryRun`.

use std::sync::Arc;

use chrono::SecondsFormat;
use serde_json::{Map, Value, json};

use crate::resources::{
    CONFIGMAPS, NAMESPACES, NODES, POD_CERTIFICATE_REQUESTS, ResourceId, SECRETS, SERVICEACCOUNTS,
    Served,
};

/// The annotation upstream's root-ca-cert-publisher puts on `kube-root-ca.crt`.
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";
use crate::objects::selectors::{FieldSelector, LabelSelector};
use crate::objects::strategy;
use crate::objects::typed::json_type;
use crate::status::ApiError;
use crate::store::{Inner, Key, Store};

mod delete;
mod list;
mod managed_fields;
mod meta;
mod service_account;

pub(crate) use managed_fields::{FieldManager, manager_or_user_agent};
use meta::generate_suffix;
pub(crate) use meta::meta_str;

/// Options shared by create, update and patch.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteOptions {
    /// `dryRun=All`: validate and answer, but do not persist.
    pub(crate) dry_run: bool,
    /// The writer's node name when it is a node (`system:node:<name>` in `system:nodes`):
    /// NodeRestriction admission applies (`node_restriction.rs`).
    pub(crate) node: Option<String>,
    /// Who writes, for `metadata.managedFields` (`managed_fields/`): every client request
    /// has one. `None` (a `ServerHandle` write, the server's own controllers): the stored
    /// object's managed fields are kept as they are, and a create records none.
    pub(crate) manager: Option<FieldManager>,
}

/// `DeleteOptions` the server honours.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub(crate) grace_period_seconds: Option<i64>,
    pub(crate) precondition_uid: Option<String>,
    pub(crate) precondition_rv: Option<String>,
    pub(crate) dry_run: bool,
}

/// What a DELETE answers.
#[derive(Debug, Clone)]
pub(crate) enum DeleteOutcome {
    /// The object (deleted, or still present with `deletionTimestamp` set).
    Object(Value),
    /// A `Status` with `status: Success` and the deleted object's details.
    Status(Value),
}

impl DeleteOutcome {
    pub(crate) fn into_value(self) -> Value {
        match self {
            DeleteOutcome::Object(v) | DeleteOutcome::Status(v) => v,
        }
    }
}

/// Parsed list options.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListOptions {
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) resource_version_match: Option<String>,
}

/// The kinds of patch bodies accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Strategic merge patch: lists merged by their Kubernetes merge key (`strategic.rs`).
    Strategic,
    /// Server-side apply, approximated as a strategic merge that creates missing objects (no
    /// managedFields, no conflict detection).
    Apply,
}

/// The object verbs over a store.
pub(crate) struct Registry {
    pub(crate) store: Store,
    /// Create the `default` ServiceAccount with each namespace (`Config::auto_service_accounts`).
    pub(crate) auto_service_accounts: bool,
    /// Publish this CA bundle as ConfigMap `kube-root-ca.crt` in every new namespace
    /// (`Config::publish_root_ca`).
    pub(crate) root_ca: Option<String>,
    /// ServiceAccount admission on pod create (`Config::service_account_admission`).
    pub(crate) service_account_admission: bool,
    /// Service accounts may use their own namespace (`Config::service_account_access`).
    pub(crate) service_account_access: bool,
    /// The resources and feature gates this server serves (`Config::runtime_config`,
    /// `Config::feature_gates`).
    pub(crate) served: Served,
}

pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

/// Parses a resourceVersion query value or object field.
pub(crate) fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {s:?}")))
}

/// The checks every body gets: a JSON object whose apiVersion/kind (if given) fit `res` and
/// that decodes as the typed object (`typed.rs`); create, update and patch results all pass here.
fn check_body(res: ResourceId, ns: &str, body: &mut Value) -> Result<(), ApiError> {
    let info = res.info();
    decodes_as_typed(res, body)?;
    let Some(map) = body.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request was not a JSON object",
        ));
    };
    if let Some(kind) = map.get("kind").and_then(Value::as_str)
        && kind != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            info.kind
        )));
    }
    if let Some(av) = map.get("apiVersion").and_then(Value::as_str)
        && av != info.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    map.insert("apiVersion".into(), json!(info.api_version()));
    map.insert("kind".into(), json!(info.kind));
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    if info.namespaced {
        match meta.get("namespace").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                meta.insert("namespace".into(), json!(ns));
            }
        }
    } else {
        meta.remove("namespace");
    }
    meta.remove("selfLink");
    // The request's managed fields are the field manager's input (`managed_fields/`), not
    // decoded here: a malformed list is ignored there, as upstream ignores it.
    let managed = meta.remove("managedFields");
    // Every field must fit its type, as the real server's typed decoder demands; the JSON
    // itself is what gets stored.
    crate::objects::typed::check(res, body)?;
    if let (Some(m @ Value::Array(_)), Some(meta)) = (managed, meta_mut(body)) {
        meta.insert("managedFields".into(), m);
    }
    Ok(())
}

/// Sets `new`'s `metadata.managedFields` for this write (`old`: the stored object, `None` on
/// create): recorded for a client's write, kept from `old` for one without a manager.
fn manage_fields(
    res: ResourceId,
    sub: Option<&str>,
    old: Option<&Value>,
    new: &mut Value,
    opts: &WriteOptions,
) {
    match &opts.manager {
        Some(m) => managed_fields::record(res, sub, old, new, m, &now()),
        None => {
            managed_fields::take_managed(new);
            if let (Some(kept), Some(meta)) = (
                old.and_then(|o| o.pointer("/metadata/managedFields")),
                meta_mut(new),
            ) {
                meta.insert("managedFields".into(), kept.clone());
            }
        }
    }
}

/// The decoding checks the real server's typed decoder makes for the payload fields nodelet
/// reads: string maps must hold strings, and `[]byte` maps must hold valid base64 (400
/// `Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte N`).
fn decodes_as_typed(res: ResourceId, body: &Value) -> Result<(), ApiError> {
    use base64::Engine as _;
    let info = res.info();
    let fail = |why: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: {why}",
            kind = info.kind,
            v = info.version
        ))
    };
    let fields: &[(&str, bool)] = if res == CONFIGMAPS {
        &[("data", false), ("binaryData", true)]
    } else if res == SECRETS {
        &[("data", true), ("stringData", false)]
    } else {
        &[]
    };
    for (field, bytes) in fields {
        let Some(map) = body.get(*field).and_then(Value::as_object) else {
            continue;
        };
        for v in map.values() {
            let Some(text) = v.as_str() else {
                if v.is_null() {
                    continue;
                }
                return Err(fail(format!(
                    "json: cannot unmarshal {} into Go struct field {}.{field} of type {}",
                    json_type(v),
                    info.kind,
                    if *bytes { "[]uint8" } else { "string" }
                )));
            };
            if *bytes && let Err(e) = base64::engine::general_purpose::STANDARD.decode(text) {
                let at = match e {
                    base64::DecodeError::InvalidByte(i, _)
                    | base64::DecodeError::InvalidLastSymbol(i, _) => i,
                    _ => text.len() - text.len() % 4,
                };
                return Err(fail(format!("illegal base64 data at input byte {at}")));
            }
        }
    }
    Ok(())
}

fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

impl Registry {
    pub(crate) fn new(store: Store) -> Self {
        Registry {
            store,
            auto_service_accounts: true,
            root_ca: None,
            service_account_admission: false,
            service_account_access: false,
            served: Served::default(),
        }
    }

    /// GET one object.
    pub(crate) fn get(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let s = self.store.inner.lock();
        s.get(&Key::new(res, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(res.info(), name))
    }

    /// POST a new object. `ns` is `""` for cluster-scoped resources.
    pub(crate) fn create(
        &self,
        res: ResourceId,
        ns: &str,
        mut body: Value,
        opts: WriteOptions,
    ) -> Result<Value, ApiError> {
        check_body(res, ns, &mut body)?;
        let mut s = self.store.inner.lock();
        self.create_locked(&mut s, res, ns, body, opts)
    }

    fn create_locked(
        &self,
        s: &mut Inner,
        res: ResourceId,
        ns: &str,
        mut body: Value,
        opts: WriteOptions,
    ) -> Result<Value, ApiError> {
        let info = res.info();
        // (2) namespace lifecycle admission
        if info.namespaced && s.get(&Key::new(NAMESPACES, "", ns)).is_none() {
            return Err(ApiError::not_found(NAMESPACES.info(), ns));
        }
        // The name admission sees: before generateName is applied, as upstream.
        let requested_name = meta_str(&body, "name").unwrap_or("").to_string();
        {
            let meta = meta_mut(&mut body)
                .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
            let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty()
                && let Some(prefix) = meta
                    .get("generateName")
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
            {
                let generated = format!("{prefix}{}", generate_suffix());
                meta.insert("name".into(), json!(generated));
            }
            for f in [
                "uid",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                meta.remove(f);
            }
        }
        // (2b) admission: NodeRestriction, before defaulting and validation as upstream
        if res == NODES
            && let Some(node) = &opts.node
        {
            let name = meta_str(&body, "name").unwrap_or("");
            crate::access::node_restriction::admit_node(node, name, &body, None)?;
        }
        if res == POD_CERTIFICATE_REQUESTS
            && let Some(node) = &opts.node
        {
            crate::access::node_restriction::admit_pod_certificate_request(
                s,
                node,
                ns,
                &requested_name,
                &body,
            )?;
        }
        // (3) strategy, and ServiceAccount admission for pods
        strategy::prepare_for_create(res, &mut body);
        if res == crate::resources::PODS && self.service_account_admission {
            service_account::admit(s, ns, &mut body)?;
        }
        // The service IP allocator, before validation as in the real registry.
        if res == crate::resources::SERVICES {
            crate::objects::services::allocate(s, ns, &mut body).map_err(|e| {
                crate::objects::services::allocation_error(meta_str(&body, "name").unwrap_or(""), e)
            })?;
        }
        // (4) validate
        let name = meta_str(&body, "name").unwrap_or("").to_string();
        let errs = strategy::validate_create(res, &body);
        if !errs.is_empty() {
            return Err(ApiError::invalid(info, &name, &errs));
        }
        // The storage layer refuses a resourceVersion on create (a 500 with reason Unknown).
        if meta_str(&body, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            return Err(ApiError::new(
                500,
                "",
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if let Some(meta) = meta_mut(&mut body) {
            meta.remove("resourceVersion");
        }
        let key = Key::new(res, if info.namespaced { ns } else { "" }, &name);
        if s.get(&key).is_some() {
            return Err(ApiError::already_exists(info, &name));
        }
        // (5) system metadata
        if let Some(meta) = meta_mut(&mut body) {
            meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            meta.insert("creationTimestamp".into(), json!(now()));
            if strategy::has_generation(res) {
                meta.insert("generation".into(), json!(1));
            }
        }
        manage_fields(res, None, None, &mut body, &opts);
        if opts.dry_run {
            return Ok(body);
        }
        // (6) commit
        let stored = s.put(key, body);
        if res == NAMESPACES && self.auto_service_accounts {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}});
            // The serviceaccount controller's job; failure here cannot happen for a fresh namespace.
            let _ = self.create_locked(s, SERVICEACCOUNTS, &name, sa, WriteOptions::default());
        }
        if res == NAMESPACES
            && let Some(ca) = &self.root_ca
        {
            // The root-ca-cert-publisher controller's job, with its description annotation.
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": "kube-root-ca.crt", "namespace": name,
                "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                "data": {"ca.crt": ca}});
            let _ = self.create_locked(s, CONFIGMAPS, &name, cm, WriteOptions::default());
        }
        Ok((*stored).clone())
    }

    /// PUT an object (or its `status`). Returns the stored object and whether it was created.
    pub(crate) fn update(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        mut body: Value,
        opts: WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        check_body(res, ns, &mut body)?;
        match meta_str(&body, "name") {
            Some(n) if !n.is_empty() && n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {
                if let Some(m) = meta_mut(&mut body) {
                    m.insert("name".into(), json!(name));
                }
            }
        }
        let mut s = self.store.inner.lock();
        let key = Key::new(res, ns, name);
        let Some(old) = s.get(&key).cloned() else {
            if res.info().create_on_update && sub.is_none() {
                if let Some(m) = meta_mut(&mut body) {
                    m.remove("resourceVersion");
                }
                return self
                    .create_locked(&mut s, res, ns, body, opts)
                    .map(|v| (v, true));
            }
            return Err(ApiError::not_found(res.info(), name));
        };
        self.update_locked(&mut s, key, &old, sub, body, opts)
            .map(|v| (v, false))
    }

    fn update_locked(
        &self,
        s: &mut Inner,
        key: Key,
        old: &Value,
        sub: Option<&str>,
        mut new: Value,
        opts: WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = key.resource;
        let info = res.info();
        let name = key.name.clone();
        // (2) preconditions
        if let Some(rv) = meta_str(&new, "resourceVersion").filter(|r| !r.is_empty())
            && Some(rv) != meta_str(old, "resourceVersion")
        {
            return Err(ApiError::modified(info, &name));
        }
        if let Some(uid) = meta_str(&new, "uid").filter(|u| !u.is_empty())
            && Some(uid) != meta_str(old, "uid")
        {
            return Err(ApiError::conflict(
                info,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(old, "uid").unwrap_or("")
                ),
            ));
        }
        // (2b) admission: NodeRestriction sees the patched object against the stored one
        if res == NODES
            && let Some(node) = &opts.node
        {
            crate::access::node_restriction::admit_node(node, &name, &new, Some(old))?;
        }
        // (3) strategy; system metadata comes from the stored object
        strategy::prepare_for_update(res, sub, &mut new, old);
        if let (Some(meta), Some(old_meta)) = (
            meta_mut(&mut new),
            old.get("metadata").and_then(Value::as_object),
        ) {
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
            ] {
                match old_meta.get(f) {
                    Some(v) => meta.insert(f.into(), v.clone()),
                    None => meta.remove(f),
                };
            }
            meta.remove("generateName");
            if let Some(g) = old_meta.get("generateName") {
                meta.insert("generateName".into(), g.clone());
            }
        }
        // (4) validate
        let errs = strategy::validate_update(res, sub, &new, old);
        if !errs.is_empty() {
            return Err(ApiError::invalid(info, &name, &errs));
        }
        if strategy::has_generation(res)
            && strategy::spec_changed(&new, old)
            && let Some(meta) = meta_mut(&mut new)
        {
            let g = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta.insert("generation".into(), json!(g + 1));
        }
        if let Some(meta) = meta_mut(&mut new) {
            meta.insert(
                "resourceVersion".into(),
                old["metadata"]["resourceVersion"].clone(),
            );
        }
        manage_fields(res, sub, Some(old), &mut new, &opts);
        // A no-op update writes nothing and emits no event, as upstream.
        if without_rv(&new) == without_rv(old) {
            return Ok(old.clone());
        }
        if opts.dry_run {
            return Ok(new);
        }
        // (6) commit; removing the last finalizer of a deleting object completes the delete
        let finalizers_left = new
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let grace = new
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if new.pointer("/metadata/deletionTimestamp").is_some() && !finalizers_left && grace == 0 {
            s.put(key.clone(), new);
            let last = s.remove(&key).map(|v| (*v).clone()).unwrap_or(Value::Null);
            return Ok(last);
        }
        Ok((*s.put(key, new)).clone())
    }

    /// PATCH an object (or its `status`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        kind: PatchKind,
        patch: &Value,
        opts: WriteOptions,
    ) -> Result<(Value, bool), ApiError> {
        let mut s = self.store.inner.lock();
        let key = Key::new(res, ns, name);
        let Some(old) = s.get(&key).cloned() else {
            if kind == PatchKind::Apply && sub.is_none() {
                let mut body = patch.clone();
                check_body(res, ns, &mut body)?;
                return self
                    .create_locked(&mut s, res, ns, body, opts)
                    .map(|v| (v, true));
            }
            return Err(ApiError::not_found(res.info(), name));
        };
        let mut patched = (*old).clone();
        match kind {
            PatchKind::Merge | PatchKind::Strategic | PatchKind::Apply => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("the patch must be a JSON object"));
                }
                if kind == PatchKind::Merge {
                    json_patch::merge(&mut patched, patch);
                } else {
                    crate::objects::strategic::apply(&mut patched, patch);
                }
            }
            PatchKind::Json => {
                let ops: json_patch::Patch =
                    serde_json::from_value(patch.clone()).map_err(|e| {
                        ApiError::bad_request(format!("the JSON patch is malformed: {e}"))
                    })?;
                json_patch::patch(&mut patched, &ops).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
            }
        }
        check_body(res, ns, &mut patched)?;
        if meta_str(&patched, "name") != Some(name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&patched, "name").unwrap_or("")
            )));
        }
        self.update_locked(&mut s, key, &old, sub, patched, opts)
            .map(|v| (v, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CONFIGMAPS;

    fn registry() -> Registry {
        let r = Registry::new(Store::new(100, 16));
        let _ = r.create(
            NAMESPACES,
            "",
            json!({"metadata": {"name": "d"}}),
            WriteOptions::default(),
        );
        r
    }

    #[test]
    fn pagination_walks_a_consistent_snapshot() {
        let r = registry();
        for i in 0..5 {
            let _ = r.create(
                CONFIGMAPS,
                "d",
                json!({"metadata": {"name": format!("c{i}")}}),
                WriteOptions::default(),
            );
        }
        let opts = ListOptions {
            limit: Some(2),
            ..Default::default()
        };
        let page1 = r
            .list(CONFIGMAPS, Some("d"), &opts)
            .ok()
            .unwrap_or_default();
        assert_eq!(page1["items"].as_array().map(Vec::len), Some(2));
        assert_eq!(page1["metadata"]["remainingItemCount"], 3);
        // A change after the first page is not visible in later pages.
        let _ = r.delete(CONFIGMAPS, "d", "c3", &DeleteOptions::default());
        let token = page1["metadata"]["continue"].as_str().map(String::from);
        let opts = ListOptions {
            limit: Some(10),
            continue_token: token,
            ..Default::default()
        };
        let page2 = r
            .list(CONFIGMAPS, Some("d"), &opts)
            .ok()
            .unwrap_or_default();
        let names: Vec<_> = page2["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| meta_str(i, "name"))
            .collect();
        assert_eq!(names, vec!["c2", "c3", "c4"]);
    }
}
