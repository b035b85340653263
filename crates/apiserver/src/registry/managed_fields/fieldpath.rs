//! Field sets as structured-merge-diff computes them, without schemas: paths of `f:`, `k:` and
//! `v:` elements, the comparison of two objects, the fields of an applied configuration, and
//! their fieldsV1 encoding.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// A field path: `f:name`, `k:{"name":"c"}`, `v:"x"` elements, as fieldsV1 spells them.
pub(crate) type FieldPath = Vec<String>;
pub(crate) type FieldSet = BTreeSet<FieldPath>;
/// Fields added, modified and removed between two objects (structured-merge-diff's `Compare`).
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub(crate) added: FieldSet,
    pub(crate) modified: FieldSet,
    pub(crate) removed: FieldSet,
}

/// How a JSON node is managed.
enum Shape {
    Leaf,
    Map,
    /// `listType=map`: items keyed by these fields.
    Keyed(&'static [&'static str]),
    /// `listType=set`: items are their own key.
    Set,
}

/// The lists v1.36 declares `listType=map` (by field name; the keys upstream lists), and the
/// `listType=set` ones.
fn list_keys(field: &str) -> Option<&'static [&'static str]> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims"
        | "secrets"
        | "allocatedResourcesStatus" => &["name"],
        "volumeMounts" => &["mountPath"],
        "volumeDevices" => &["devicePath"],
        "ports" => &["containerPort", "protocol"],
        "conditions" | "addresses" => &["type"],
        "hostAliases" | "podIPs" | "hostIPs" => &["ip"],
        "topologySpreadConstraints" => &["topologyKey", "whenUnsatisfiable"],
        "ownerReferences" => &["uid"],
        _ => return None,
    })
}

fn shape(field: &str, v: &Value) -> Shape {
    match v {
        Value::Object(_) => Shape::Map,
        Value::Array(items) => match list_keys(field) {
            Some(keys)
                if items
                    .iter()
                    .all(|i| keys.iter().all(|k| i.get(*k).is_some())) =>
            {
                Shape::Keyed(keys)
            }
            _ if field == "finalizers" => Shape::Set,
            _ => Shape::Leaf,
        },
        _ => Shape::Leaf,
    }
}

/// `k:{"name":"c"}` for an item of a keyed list.
fn item_key(keys: &[&str], item: &Value) -> String {
    let parts: Vec<String> = keys
        .iter()
        .map(|k| format!("{}:{}", json!(k), item.get(*k).unwrap_or(&Value::Null)))
        .collect();
    format!("k:{{{}}}", parts.join(","))
}

fn keyed<'a>(keys: &[&str], list: Option<&'a Value>) -> BTreeMap<String, &'a Value> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|i| (item_key(keys, i), i))
        .collect()
}

fn set_items(list: Option<&Value>) -> BTreeSet<String> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|i| format!("v:{i}"))
        .collect()
}

fn is_empty_node(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

pub(crate) fn compare(
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    field: &str,
    path: &mut FieldPath,
    c: &mut Comparison,
) {
    let Some(node) = rhs.or(lhs) else { return };
    let shape = shape(field, node);
    let same_type = match (lhs, rhs) {
        (Some(a), Some(b)) => {
            std::mem::discriminant(a) == std::mem::discriminant(b) || a.is_null() || b.is_null()
        }
        _ => true,
    };
    if matches!(shape, Shape::Leaf) || !same_type || (is_empty_node(lhs) && is_empty_node(rhs)) {
        match (lhs, rhs) {
            (None, Some(_)) => c.added.insert(path.clone()),
            (Some(_), None) => c.removed.insert(path.clone()),
            (Some(a), Some(b)) if a != b => c.modified.insert(path.clone()),
            _ => false,
        };
        return;
    }
    match (lhs, rhs) {
        (None, Some(_)) => c.added.insert(path.clone()),
        (Some(_), None) => c.removed.insert(path.clone()),
        _ => false,
    };
    match shape {
        Shape::Map => {
            let empty = Map::new();
            let l = lhs.and_then(Value::as_object).unwrap_or(&empty);
            let r = rhs.and_then(Value::as_object).unwrap_or(&empty);
            let names: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            for name in names {
                if name == "managedFields" && path.len() == 1 && path[0] == "f:metadata" {
                    continue;
                }
                path.push(format!("f:{name}"));
                compare(l.get(name), r.get(name), name, path, c);
                path.pop();
            }
        }
        Shape::Keyed(keys) => {
            let (l, r) = (keyed(keys, lhs), keyed(keys, rhs));
            let names: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            for name in names {
                path.push(name.clone());
                compare(l.get(name).copied(), r.get(name).copied(), "", path, c);
                path.pop();
            }
        }
        Shape::Set => {
            let (l, r) = (set_items(lhs), set_items(rhs));
            for item in l.symmetric_difference(&r) {
                path.push(item.clone());
                if r.contains(item) {
                    c.added.insert(path.clone());
                } else {
                    c.removed.insert(path.clone());
                }
                path.pop();
            }
        }
        Shape::Leaf => {}
    }
}

/// The fields an applied configuration sets (structured-merge-diff's `ToFieldSet`): leaves,
/// empty maps and lists, keyed list items and set items.
pub(crate) fn field_set(v: &Value, field: &str, path: &mut FieldPath, out: &mut FieldSet) {
    if is_empty_node(Some(v)) && !v.is_null() {
        out.insert(path.clone());
        return;
    }
    match shape(field, v) {
        Shape::Leaf => {
            out.insert(path.clone());
        }
        Shape::Map => {
            for (name, child) in v.as_object().into_iter().flatten() {
                path.push(format!("f:{name}"));
                field_set(child, name, path, out);
                path.pop();
            }
        }
        Shape::Keyed(keys) => {
            for (key, item) in keyed(keys, Some(v)) {
                path.push(key);
                out.insert(path.clone());
                field_set(item, "", path, out);
                path.pop();
            }
        }
        Shape::Set => {
            for item in set_items(Some(v)) {
                path.push(item);
                out.insert(path.clone());
                path.pop();
            }
        }
    }
}

/// fieldsV1 → paths: `".": {}` marks the node itself, an empty object a leaf.
pub(crate) fn decode(v: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    let Some(map) = v.as_object() else { return };
    if map.is_empty() && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (k, child) in map {
        if k == "." {
            out.insert(path.clone());
        } else {
            path.push(k.clone());
            decode(child, path, out);
            path.pop();
        }
    }
}

/// Paths → fieldsV1: a node that is a member and has children gets `".": {}`, a member
/// without children is `{}`.
pub(crate) fn encode_fields(set: &FieldSet) -> Value {
    fn level(paths: &[&[String]]) -> Value {
        let mut children: BTreeMap<&String, Vec<&[String]>> = BTreeMap::new();
        let mut member = false;
        for p in paths {
            match p.split_first() {
                None => member = true,
                Some((first, rest)) => children.entry(first).or_default().push(rest),
            }
        }
        let mut map = Map::new();
        if member && !children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (k, sub) in children {
            map.insert(k.clone(), level(&sub));
        }
        Value::Object(map)
    }
    let paths: Vec<&[String]> = set.iter().map(Vec::as_slice).collect();
    level(&paths)
}
