//! Model tests: random write sequences against the registry, checked against a
//! `BTreeMap` model — current state, exact reads of every past resourceVersion, watch-style
//! history replay, and pagination.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions, meta_str};
use crate::resources::{CONFIGMAPS, NAMESPACES};
use crate::store::{Store, WatchEventType};

#[derive(Debug, Clone)]
enum Op {
    Create(u8, u8, u8),
    Update(u8, u8, u8),
    Delete(u8, u8),
}

/// Namespaces whose names prefix each other, so cross-namespace paging order matters.
const NAMESPACES_USED: [&str; 2] = ["a", "a-b"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..2, 0u8..4, 0u8..3).prop_map(|(ns, n, v)| Op::Create(ns, n, v)),
        (0u8..2, 0u8..4, 0u8..3).prop_map(|(ns, n, v)| Op::Update(ns, n, v)),
        (0u8..2, 0u8..4).prop_map(|(ns, n)| Op::Delete(ns, n)),
    ]
}

type Model = BTreeMap<(String, String), String>;

fn listed(v: &Value) -> Model {
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                (
                    meta_str(i, "namespace").unwrap_or("").to_string(),
                    meta_str(i, "name").unwrap_or("").to_string(),
                ),
                i["data"]["k"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn cm(name: &str, v: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": v}})
}

proptest! {
    #[test]
    fn the_registry_matches_a_map_model_at_every_resource_version(ops in proptest::collection::vec(op(), 1..40), limit in 1usize..4) {
        let reg = Registry::new(Store::new(1_000, 64));
        for ns in NAMESPACES_USED {
            reg.create(NAMESPACES, "", json!({"metadata": {"name": ns}}), WriteOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let mut model = Model::new();
        let mut past: Vec<(u64, Model)> = vec![(reg.store.inner.lock().rv, model.clone())];
        for op in ops {
            let before = reg.store.inner.lock().rv;
            let (ok, changed) = match &op {
                Op::Create(ns, n, v) => {
                    let (ns, name) = (NAMESPACES_USED[usize::from(*ns)], format!("c{n}"));
                    let r = reg.create(CONFIGMAPS, ns, cm(&name, &v.to_string()), WriteOptions::default());
                    let key = (ns.to_string(), name);
                    let fresh = !model.contains_key(&key);
                    if fresh { model.insert(key, v.to_string()); }
                    (r.is_ok() == fresh, fresh)
                }
                Op::Update(ns, n, v) => {
                    let (ns, name) = (NAMESPACES_USED[usize::from(*ns)], format!("c{n}"));
                    let r = reg.update(CONFIGMAPS, ns, &name, None, cm(&name, &v.to_string()), WriteOptions::default());
                    let key = (ns.to_string(), name);
                    let exists = model.contains_key(&key);
                    let changed = exists && model.get(&key) != Some(&v.to_string());
                    if exists { model.insert(key, v.to_string()); }
                    (r.is_ok() == exists, changed)
                }
                Op::Delete(ns, n) => {
                    let (ns, name) = (NAMESPACES_USED[usize::from(*ns)], format!("c{n}"));
                    let r = reg.delete(CONFIGMAPS, ns, &name, &DeleteOptions::default());
                    let existed = model.remove(&(ns.to_string(), name)).is_some();
                    (r.is_ok() == existed, existed)
                }
            };
            prop_assert!(ok, "{op:?} succeeded/failed unlike the model");
            let after = reg.store.inner.lock().rv;
            // (1) every real change takes exactly one new resourceVersion; no-ops take none.
            prop_assert_eq!(after, before + u64::from(changed), "{:?}", op);
            past.push((after, model.clone()));
        }
        // (2) current state
        let now = reg.list(CONFIGMAPS, None, &ListOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(listed(&now), model.clone());
        // (3) exact reads of every past version, and paging through them
        for (rv, expected) in &past {
            let exact = ListOptions { resource_version: Some(rv.to_string()), resource_version_match: Some("Exact".into()), ..Default::default() };
            let got = reg.list(CONFIGMAPS, None, &exact).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&listed(&got), expected);
            let mut paged = Model::new();
            let mut token = None;
            loop {
                let page_opts = ListOptions { limit: Some(limit), continue_token: token.clone(), ..exact.clone() };
                let page_opts = if token.is_some() { ListOptions { resource_version: None, resource_version_match: None, ..page_opts } } else { page_opts };
                let page = reg.list(CONFIGMAPS, None, &page_opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
                paged.extend(listed(&page));
                token = page["metadata"]["continue"].as_str().map(String::from);
                if token.is_none() { break; }
            }
            prop_assert_eq!(&paged, expected);
        }
        // (4) replaying history after any past version onto that version's state gives now
        let s = reg.store.inner.lock();
        for (rv, then) in &past {
            let mut replayed = then.clone();
            for ev in s.history.iter().filter(|e| e.rv > *rv && e.key.resource == CONFIGMAPS) {
                match ev.kind {
                    WatchEventType::Added | WatchEventType::Modified => {
                        replayed.insert((ev.key.namespace.clone(), ev.key.name.clone()), ev.object["data"]["k"].as_str().unwrap_or("").to_string());
                    }
                    WatchEventType::Deleted => { replayed.remove(&(ev.key.namespace.clone(), ev.key.name.clone())); }
                }
            }
            prop_assert_eq!(&replayed, &model);
        }
    }
}
