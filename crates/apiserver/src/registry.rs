//! The verbs on stored objects (get, list, create, update, patch, delete), independent of HTTP:
//! the HTTP handlers and `TestHandle` both drive this.
//!
//! Every write runs under the store lock: (1) read the current object, (2) check preconditions
//! (resourceVersion, uid, namespace existence), (3) apply the strategy (defaults, resets),
//! (4) validate, (5) stamp system metadata, (6) commit — or stop before (6) for `dryRun`.

use std::sync::Arc;

use base64::Engine as _;
use chrono::SecondsFormat;
use serde_json::{Map, Value, json};

use crate::resources::{CONFIGMAPS, NAMESPACES, PODS, ResourceId, SERVICEACCOUNTS};

/// The annotation upstream's root-ca-cert-publisher puts on `kube-root-ca.crt`.
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, FieldError};
use crate::store::{Inner, Key, Store};
use crate::strategy;

/// Options shared by create, update and patch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WriteOptions {
    /// `dryRun=All`: validate and answer, but do not persist.
    pub(crate) dry_run: bool,
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
}

pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Parses a resourceVersion query value or object field.
pub(crate) fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {s:?}")))
}

/// The checks every body gets: a JSON object whose apiVersion/kind (if given) fit `res`.
fn check_body(res: ResourceId, ns: &str, body: &mut Value) -> Result<(), ApiError> {
    let info = res.info();
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
    meta.remove("managedFields");
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
        }
    }

    /// GET one object.
    pub(crate) fn get(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let s = self.store.lock();
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
        let mut s = self.store.lock();
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
        // (3) strategy
        strategy::prepare_for_create(res, &mut body);
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
        let mut s = self.store.lock();
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
        let mut s = self.store.lock();
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
                    crate::strategic::apply(&mut patched, patch);
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

    /// DELETE an object, with the real server's graceful-deletion and finalizer semantics.
    pub(crate) fn delete(
        &self,
        res: ResourceId,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<DeleteOutcome, ApiError> {
        let info = res.info();
        let mut s = self.store.lock();
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
        let mut s = self.store.lock();
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

    /// LIST objects with selectors, pagination and resourceVersion semantics.
    pub(crate) fn list(
        &self,
        res: ResourceId,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<Value, ApiError> {
        let info = res.info();
        let s = self.store.lock();
        // Which snapshot to read, and where to start.
        let (rv, start_after) =
            if let Some(token) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
                if opts
                    .resource_version
                    .as_deref()
                    .is_some_and(|r| !r.is_empty())
                {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, start) = decode_continue(token)?;
                if rv < s.history_start {
                    return Err(ApiError::continue_expired());
                }
                (rv, Some(start))
            } else {
                (read_rv(&s, opts)?, None)
            };
        let mut items = Vec::new();
        let mut next_key = None;
        let mut remaining = 0usize;
        let snapshot = s.snapshot(res, ns, rv);
        drop(s);
        // Token positions are `namespace/name`; neither part can contain '/', and they are
        // compared as the (namespace, name) pair the store is sorted by.
        let start_after: Option<(String, String)> =
            start_after.map(|st| match st.split_once('/') {
                Some((n, m)) => (n.to_string(), m.to_string()),
                None => (String::new(), st),
            });
        for (key, obj) in snapshot {
            let pos = format!("{}/{}", key.namespace, key.name);
            if start_after.as_ref().is_some_and(|(sn, sm)| {
                (key.namespace.as_str(), key.name.as_str()) <= (sn.as_str(), sm.as_str())
            }) {
                continue;
            }
            if !opts.labels.matches(&obj) || !opts.fields.matches(info, &obj) {
                continue;
            }
            if opts.limit.is_some_and(|l| l > 0 && items.len() >= l) {
                remaining += 1;
                continue;
            }
            next_key = Some(pos);
            let mut item = (*obj).clone();
            if let Some(m) = item.as_object_mut() {
                m.remove("apiVersion");
                m.remove("kind");
            }
            items.push(item);
        }
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if remaining > 0
            && let Some(k) = next_key
        {
            metadata["continue"] = json!(encode_continue(rv, &k));
            if opts.labels.is_empty() && opts.fields.is_empty() {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": info.api_version(),
            "metadata": metadata,
            "items": items,
        }))
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

/// The snapshot rv a list without a continue token reads at.
fn read_rv(s: &Inner, opts: &ListOptions) -> Result<u64, ApiError> {
    let rv = opts.resource_version.as_deref().filter(|r| !r.is_empty());
    let rv_match = opts
        .resource_version_match
        .as_deref()
        .filter(|r| !r.is_empty());
    match (rv, rv_match) {
        (None, None) => Ok(s.rv),
        (None, Some(_)) => Err(ApiError::invalid_list_options(&[FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )])),
        (Some(r), Some("Exact")) => {
            let r = parse_rv(r)?;
            if r == 0 {
                return Err(ApiError::invalid_list_options(&[FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                )]));
            }
            if r > s.rv {
                return Err(ApiError::too_large(r, s.rv));
            }
            if r < s.history_start {
                return Err(ApiError::too_old(r, s.history_start));
            }
            Ok(r)
        }
        (Some(r), None | Some("NotOlderThan")) => {
            let r = parse_rv(r)?;
            if r > s.rv {
                return Err(ApiError::too_large(r, s.rv));
            }
            Ok(s.rv)
        }
        (Some(_), Some(other)) => Err(ApiError::invalid_list_options(&[
            FieldError::not_supported(
                "resourceVersionMatch",
                other,
                &["Exact", "NotOlderThan", ""],
            ),
        ])),
    }
}

fn encode_continue(rv: u64, start: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = v
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(bad)?
        .to_string();
    Ok((rv, start))
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
