//! `metadata.managedFields` as kube-apiserver records them on every client write (its field
//! manager, `k8s.io/apimachinery/pkg/util/managedfields/internal` over structured-merge-diff),
//! without OpenAPI schemas: JSON objects are granular maps, the lists upstream declares
//! `listType=map` are keyed by their upstream keys (table below), `finalizers` is a set, every
//! other list is atomic.
//!
//! One write by manager M (operation `Update`), as upstream's chain does it:
//! 1. The managed fields are the request object's when it carries a non-empty list (`[{}]`
//!    resets them to none), else the stored object's.
//! 2. An update of an object that has none records none (upstream's skip-non-applied step);
//!    a create compares against the kind's zero object (what Go's empty struct encodes to).
//! 3. Compare old and new: fields added, modified, removed (a map or list that appears is
//!    itself a member, written `".": {}`), minus the resource's reset fields (`status` on the
//!    main resource of pods, nodes and namespaces; `spec` on their `status` subresource).
//! 4. Every entry loses the removed fields and those M set; entries left empty are dropped.
//! 5. M's entry (manager, operation, apiVersion, subresource) gains the fields it set, minus
//!    the metadata upstream strips (name, namespace, uid, resourceVersion, ...); its `time` is
//!    now when it gained any, else it is untouched (a no-op write changes nothing).
//! 6. Beyond 10 `Update` entries the oldest merge into `ancient-changes`; entries are sorted
//!    by operation, time, manager, apiVersion, subresource.
//!
//! Server-side apply (`Apply`) gives M exactly the fields of the applied configuration (list
//! items and leaves), taken from every other entry; an object without managed fields first
//! gets a `before-first-apply` `Update` entry for what it holds. **Differences:** no apply
//! conflicts (every apply forces), fields M no longer applies are not removed from the object.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use fieldpath::{Comparison, FieldPath, FieldSet, compare, decode, encode_fields, field_set};

use crate::resources::{NAMESPACES, NODES, PODS, ResourceId};

mod fieldpath;

/// Who writes: `?fieldManager=`, else the User-Agent's prefix; `applied` is the configuration
/// of a server-side apply (`None` for every other write).
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldManager {
    pub(crate) name: String,
    pub(crate) applied: Option<Value>,
}

/// Upstream's `validation.FieldManagerMaxLength`.
const MAX_MANAGER_LEN: usize = 128;
/// Upstream's `DefaultMaxUpdateManagers`.
const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager of a request (`managerOrUserAgent`): `field_manager` when not empty, else the
/// User-Agent before its first `/`, non-printable characters dropped, at most 128 bytes.
pub(crate) fn manager_or_user_agent(field_manager: Option<&str>, user_agent: &str) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let mut out = String::new();
    for c in user_agent.split('/').next().unwrap_or("").chars() {
        if c.is_control() {
            continue;
        }
        if out.len() + c.len_utf8() > MAX_MANAGER_LEN {
            break;
        }
        out.push(c);
    }
    out
}

/// One entry's identity (upstream's manager identifier) and what it owns.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: &'static str,
    api_version: String,
    subresource: String,
    time: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn same_identity(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.api_version == other.api_version
            && self.subresource == other.subresource
    }
}

/// Sets `new.metadata.managedFields` for a write of `res` (`sub`resource) by `manager`, from
/// `old` (the stored object; `None` on create) and the request's own managed fields. `now` is
/// the RFC 3339 time in seconds.
pub(crate) fn record(
    res: ResourceId,
    sub: Option<&str>,
    old: Option<&Value>,
    new: &mut Value,
    manager: &FieldManager,
    now: &str,
) {
    // (1)
    let mut entries = starting_entries(old, new);
    let writer = Writer {
        manager: &manager.name,
        api_version: res.info().api_version(),
        subresource: sub.unwrap_or("").to_string(),
        now,
    };
    let zero = zero_object(res);
    match &manager.applied {
        None => {
            // (2)
            if entries.is_empty() && old.is_some() {
                return;
            }
            let write = Write {
                res,
                sub,
                live: old.unwrap_or(&zero),
                new,
            };
            record_update(&write, &writer, &mut entries);
        }
        Some(applied) => record_apply(old, &zero, applied, &writer, &mut entries),
    }
    store_entries(new, entries);
}

/// The identity of the entry a write gives its manager, besides its operation.
struct Writer<'a> {
    manager: &'a str,
    api_version: String,
    subresource: String,
    now: &'a str,
}

impl Writer<'_> {
    /// An entry of this writer's identity (`manager` instead of its own when given).
    fn entry(&self, manager: Option<&str>, operation: &'static str, fields: FieldSet) -> Entry {
        Entry {
            manager: manager.unwrap_or(self.manager).to_owned(),
            operation,
            api_version: self.api_version.clone(),
            subresource: self.subresource.clone(),
            time: Some(self.now.to_string()),
            fields,
        }
    }
}

/// What an `Update` compares: the object before (`live`: the stored one, or the kind's zero
/// object on create) and after.
struct Write<'a> {
    res: ResourceId,
    sub: Option<&'a str>,
    live: &'a Value,
    new: &'a Value,
}

/// (1) The managed fields a write starts from: the request object's when it carries a
/// non-empty list (removed from it), else the stored object's.
fn starting_entries(old: Option<&Value>, new: &mut Value) -> Vec<Entry> {
    match take_managed(new) {
        Some(list) if !list.is_empty() => parse(&list),
        _ => old
            .and_then(|o| o.pointer("/metadata/managedFields"))
            .and_then(Value::as_array)
            .map(|l| parse(l))
            .unwrap_or_default(),
    }
}

/// Steps 3–6 of an `Update` by `writer`.
fn record_update(write: &Write<'_>, writer: &Writer<'_>, entries: &mut Vec<Entry>) {
    // (3)
    let mut c = Comparison::default();
    compare(
        Some(write.live),
        Some(write.new),
        "",
        &mut Vec::new(),
        &mut c,
    );
    let excluded = reset_fields(write.res, write.sub);
    for set in [&mut c.added, &mut c.modified, &mut c.removed] {
        set.retain(|p| !excluded.iter().any(|x| p.starts_with(x)));
    }
    // (4)
    let taken: FieldSet = c.added.union(&c.modified).cloned().collect();
    for e in entries.iter_mut() {
        e.fields
            .retain(|p| !taken.contains(p) && !c.removed.contains(p));
    }
    entries.retain(|e| !e.fields.is_empty());
    // (5)
    let mut mine = taken;
    strip_meta(&mut mine);
    if !mine.is_empty() {
        let entry = writer.entry(None, "Update", mine);
        match entries.iter_mut().find(|e| e.same_identity(&entry)) {
            Some(e) => {
                e.fields.extend(entry.fields);
                e.time = entry.time;
            }
            None => entries.push(entry),
        }
    }
    // (6)
    cap_update_managers(entries);
}

/// A server-side apply of `applied` by `writer`: it owns exactly the applied fields, taken from
/// every other entry; an object without managed fields first gets a `before-first-apply`
/// entry for what it holds.
fn record_apply(
    old: Option<&Value>,
    zero: &Value,
    applied: &Value,
    writer: &Writer<'_>,
    entries: &mut Vec<Entry>,
) {
    if entries.is_empty() && old.is_some() {
        let mut c = Comparison::default();
        compare(Some(zero), old, "", &mut Vec::new(), &mut c);
        let mut before: FieldSet = c.added.union(&c.modified).cloned().collect();
        strip_meta(&mut before);
        if !before.is_empty() {
            entries.push(writer.entry(Some("before-first-apply"), "Update", before));
        }
    }
    let mut mine = FieldSet::new();
    field_set(applied, "", &mut Vec::new(), &mut mine);
    strip_meta(&mut mine);
    let entry = writer.entry(None, "Apply", mine);
    entries.retain(|e| !e.same_identity(&entry));
    for e in entries.iter_mut() {
        e.fields.retain(|p| !entry.fields.contains(p));
    }
    entries.retain(|e| !e.fields.is_empty());
    if !entry.fields.is_empty() {
        entries.push(entry);
    }
}

/// (6) Writes `entries`, sorted by operation, time, manager, apiVersion and subresource, as
/// `new.metadata.managedFields` (nothing when there are none).
fn store_entries(new: &mut Value, mut entries: Vec<Entry>) {
    if entries.is_empty() {
        return;
    }
    let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    entries.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    meta.insert(
        "managedFields".into(),
        Value::Array(entries.iter().map(encode).collect()),
    );
}

/// How entries are ordered: by operation, time, manager, apiVersion, subresource.
fn sort_key(e: &Entry) -> (&'static str, &Option<String>, &str, &str, &str) {
    (
        e.operation,
        &e.time,
        &e.manager,
        &e.api_version,
        &e.subresource,
    )
}

/// Removes `metadata.managedFields` from `obj`, returning it when it was a list.
pub(crate) fn take_managed(obj: &mut Value) -> Option<Vec<Value>> {
    match obj
        .get_mut("metadata")
        .and_then(Value::as_object_mut)?
        .remove("managedFields")?
    {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

/// What a create compares against: the JSON of the kind's Go zero value (its non-pointer
/// structs present).
fn zero_object(res: ResourceId) -> Value {
    if res == PODS {
        json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}, "status": {}})
    } else if res == NODES || res == NAMESPACES {
        json!({"metadata": {"creationTimestamp": null}, "spec": {}, "status": {}})
    } else {
        json!({"metadata": {"creationTimestamp": null}})
    }
}

/// The strategy's reset fields (`GetResetFields`): what a write of this (sub)resource may not
/// change and so never owns.
fn reset_fields(res: ResourceId, sub: Option<&str>) -> Vec<FieldPath> {
    let p = |s: &[&str]| s.iter().map(|e| format!("f:{e}")).collect::<FieldPath>();
    match sub {
        None if res == PODS || res == NODES || res == NAMESPACES => vec![p(&["status"])],
        Some("status") if res == PODS => vec![
            p(&["spec"]),
            p(&["metadata", "deletionTimestamp"]),
            p(&["metadata", "ownerReferences"]),
        ],
        Some("status") if res == NODES || res == NAMESPACES => vec![p(&["spec"])],
        _ => Vec::new(),
    }
}

/// Upstream's strip-meta step: these exact paths are never owned.
fn strip_meta(set: &mut FieldSet) {
    for path in [
        &["apiVersion"][..],
        &["kind"],
        &["metadata"],
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "creationTimestamp"],
        &["metadata", "selfLink"],
        &["metadata", "uid"],
        &["metadata", "clusterName"],
        &["metadata", "generation"],
        &["metadata", "managedFields"],
        &["metadata", "resourceVersion"],
    ] {
        let path: FieldPath = path.iter().map(|e| format!("f:{e}")).collect();
        set.remove(&path);
    }
}

/// Beyond [`MAX_UPDATE_MANAGERS`] `Update` entries, the oldest are merged into one
/// `ancient-changes` entry per apiVersion.
fn cap_update_managers(entries: &mut Vec<Entry>) {
    let updates = entries.iter().filter(|e| e.operation == "Update").count();
    if updates <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut order: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == "Update")
        .collect();
    order.sort_by(|&a, &b| {
        (&entries[a].time, &entries[a].manager).cmp(&(&entries[b].time, &entries[b].manager))
    });
    let mut first_of_version: BTreeMap<String, usize> = BTreeMap::new();
    let mut merged_away = BTreeSet::new();
    let mut length = updates;
    for i in order {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        match first_of_version.get(&version) {
            Some(&first) => {
                let fields = std::mem::take(&mut entries[i].fields);
                let time = entries[i].time.clone();
                let bucket = &mut entries[first];
                bucket.manager = "ancient-changes".into();
                bucket.subresource = String::new();
                bucket.fields.extend(fields);
                bucket.time = time;
                merged_away.insert(i);
                length -= 1;
            }
            None => {
                first_of_version.insert(version, i);
            }
        }
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !merged_away.contains(&(i - 1))
    });
}

fn parse(list: &[Value]) -> Vec<Entry> {
    list.iter()
        .filter_map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let operation = match e.get("operation").and_then(Value::as_str)? {
                "Apply" => "Apply",
                "Update" => "Update",
                _ => return None,
            };
            let mut fields = FieldSet::new();
            decode(e.get("fieldsV1")?, &mut Vec::new(), &mut fields);
            Some(Entry {
                manager: s("manager"),
                operation,
                api_version: s("apiVersion"),
                subresource: s("subresource"),
                time: e.get("time").and_then(Value::as_str).map(String::from),
                fields,
            })
        })
        .collect()
}

fn encode(e: &Entry) -> Value {
    let mut out = json!({
        "manager": e.manager,
        "operation": e.operation,
        "apiVersion": e.api_version,
        "time": e.time,
        "fieldsType": "FieldsV1",
        "fieldsV1": encode_fields(&e.fields),
    });
    if e.manager.is_empty()
        && let Some(m) = out.as_object_mut()
    {
        m.remove("manager");
    }
    if !e.subresource.is_empty()
        && let Some(m) = out.as_object_mut()
    {
        m.insert("subresource".into(), json!(e.subresource));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CONFIGMAPS;

    fn by(name: &str) -> FieldManager {
        FieldManager {
            name: name.into(),
            applied: None,
        }
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "a", "namespace": "d", "uid": "u", "labels": {"app": "x"}},
               "data": data})
    }

    #[test]
    fn a_create_owns_every_field_it_set_with_dots_for_new_maps() {
        let mut obj = cm(json!({"k": "v"}));
        record(CONFIGMAPS, None, None, &mut obj, &by("kubectl"), "T1");
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": "T1",
                    "fieldsType": "FieldsV1", "fieldsV1": {
                        "f:data": {".": {}, "f:k": {}},
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}])
        );
    }

    #[test]
    fn an_update_by_another_manager_takes_the_changed_key_only() {
        let mut old = cm(json!({"k": "v", "j": "w"}));
        record(CONFIGMAPS, None, None, &mut old, &by("kubectl"), "T1");
        let mut new = cm(json!({"k": "v2", "j": "w"}));
        record(CONFIGMAPS, None, Some(&old), &mut new, &by("bench"), "T2");
        let entries = &new["metadata"]["managedFields"];
        assert_eq!(entries[1]["manager"], "bench");
        assert_eq!(entries[1]["fieldsV1"], json!({"f:data": {"f:k": {}}}));
        assert_eq!(
            entries[0]["fieldsV1"]["f:data"],
            json!({".": {}, "f:j": {}})
        );
        assert_eq!(entries[0]["time"], "T1");
    }

    #[test]
    fn a_no_op_update_keeps_the_time_and_an_unmanaged_object_stays_unmanaged() {
        let mut old = cm(json!({"k": "v"}));
        record(CONFIGMAPS, None, None, &mut old, &by("kubectl"), "T1");
        let mut same = old.clone();
        record(
            CONFIGMAPS,
            None,
            Some(&old),
            &mut same,
            &by("kubectl"),
            "T2",
        );
        assert_eq!(same, old);
        let bare = cm(json!({"k": "v"}));
        let mut changed = cm(json!({"k": "w"}));
        record(CONFIGMAPS, None, Some(&bare), &mut changed, &by("x"), "T2");
        assert!(changed["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn keyed_lists_and_pod_status_follow_upstream_reset_fields() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
            "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cm"}}]},
            "status": {"phase": "Pending"}});
        record(PODS, None, None, &mut pod, &by("kubectl"), "T1");
        let f = &pod["metadata"]["managedFields"][0]["fieldsV1"];
        assert!(f.get("f:status").is_none());
        let c = &f["f:spec"]["f:containers"];
        assert!(c.get(".").is_none());
        assert_eq!(
            c["k:{\"name\":\"c\"}"]["f:ports"],
            json!({".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}":
                   {".": {}, "f:containerPort": {}, "f:protocol": {}}})
        );
        assert_eq!(
            f["f:spec"]["f:volumes"]["k:{\"name\":\"v\"}"]["f:configMap"],
            json!({".": {}, "f:name": {}})
        );
        let mut status = pod.clone();
        status["status"]["phase"] = json!("Running");
        record(
            PODS,
            Some("status"),
            Some(&pod),
            &mut status,
            &by("nodelet"),
            "T2",
        );
        let e = &status["metadata"]["managedFields"][1];
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
    }

    #[test]
    fn apply_owns_the_applied_fields_and_takes_them_from_others() {
        let mut old = cm(json!({"k": "v", "j": "w"}));
        record(CONFIGMAPS, None, None, &mut old, &by("kubectl"), "T1");
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a"}, "data": {"k": "v2"}});
        let mut new = cm(json!({"k": "v2", "j": "w"}));
        let m = FieldManager {
            name: "ssa".into(),
            applied: Some(applied),
        };
        record(CONFIGMAPS, None, Some(&old), &mut new, &m, "T2");
        let entries = &new["metadata"]["managedFields"];
        assert_eq!(entries[0]["operation"], "Apply");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {"f:k": {}}}));
        assert!(entries[1]["fieldsV1"]["f:data"].get("f:k").is_none());
    }

    #[test]
    fn eleven_update_managers_become_ten_with_ancient_changes() {
        let mut obj = cm(json!({}));
        record(CONFIGMAPS, None, None, &mut obj, &by("m0"), "T00");
        for i in 1..=11 {
            let mut next = obj.clone();
            next["data"][format!("k{i}")] = json!("v");
            record(
                CONFIGMAPS,
                None,
                Some(&obj),
                &mut next,
                &by(&format!("m{i}")),
                &format!("T{i:02}"),
            );
            obj = next;
        }
        let entries = obj["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(entries.len(), 10);
        assert!(entries.iter().any(|e| e["manager"] == "ancient-changes"));
    }

    #[test]
    fn the_manager_is_the_user_agent_prefix_unless_named() {
        assert_eq!(
            manager_or_user_agent(None, "kubectl/v1.36.2 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(manager_or_user_agent(Some("mine"), "kubectl/v1"), "mine");
        assert_eq!(manager_or_user_agent(Some(""), "a\u{7}b/1"), "ab");
        assert_eq!(manager_or_user_agent(None, &"x".repeat(300)).len(), 128);
    }
}
