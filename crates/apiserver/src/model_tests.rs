//! Model tests (STYLE 22): random write sequences against the registry, checked against a
//! `BTreeMap` model — current state, exact reads of every past resourceVersion, watch-style
//! history replay, and pagination.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::registry::{DeleteOptions, ListOptions, Registry, WriteOptions, meta_str};
use crate::resources::{CONFIGMAPS, NAMESPACES};
use crate::store::{EventType, Store};

#[derive(Debug, Clone)]
enum Op {
    Create(u8, u8),
    Update(u8, u8),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6, 0u8..3).prop_map(|(n, v)| Op::Create(n, v)),
        (0u8..6, 0u8..3).prop_map(|(n, v)| Op::Update(n, v)),
        (0u8..6).prop_map(Op::Delete),
    ]
}

type Model = BTreeMap<String, String>;

fn listed(v: &Value) -> Model {
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                meta_str(i, "name").unwrap_or("").to_string(),
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
        reg.create(NAMESPACES, "", json!({"metadata": {"name": "d"}}), WriteOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut model = Model::new();
        let mut past: Vec<(u64, Model)> = vec![(reg.store.lock().rv, model.clone())];
        for op in ops {
            let before = reg.store.lock().rv;
            let (ok, changed) = match &op {
                Op::Create(n, v) => {
                    let name = format!("c{n}");
                    let r = reg.create(CONFIGMAPS, "d", cm(&name, &v.to_string()), WriteOptions::default());
                    let fresh = !model.contains_key(&name);
                    if fresh { model.insert(name, v.to_string()); }
                    (r.is_ok() == fresh, fresh)
                }
                Op::Update(n, v) => {
                    let name = format!("c{n}");
                    let r = reg.update(CONFIGMAPS, "d", &name, None, cm(&name, &v.to_string()), WriteOptions::default());
                    let exists = model.contains_key(&name);
                    let changed = exists && model.get(&name) != Some(&v.to_string());
                    if exists { model.insert(name, v.to_string()); }
                    (r.is_ok() == exists, changed)
                }
                Op::Delete(n) => {
                    let name = format!("c{n}");
                    let r = reg.delete(CONFIGMAPS, "d", &name, &DeleteOptions::default());
                    let existed = model.remove(&name).is_some();
                    (r.is_ok() == existed, existed)
                }
            };
            prop_assert!(ok, "{op:?} succeeded/failed unlike the model");
            let after = reg.store.lock().rv;
            // (1) every real change takes exactly one new resourceVersion; no-ops take none.
            prop_assert_eq!(after, before + u64::from(changed), "{:?}", op);
            past.push((after, model.clone()));
        }
        // (2) current state
        let now = reg.list(CONFIGMAPS, Some("d"), &ListOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(listed(&now), model.clone());
        // (3) exact reads of every past version, and paging through them
        for (rv, expected) in &past {
            let exact = ListOptions { resource_version: Some(rv.to_string()), resource_version_match: Some("Exact".into()), ..Default::default() };
            let got = reg.list(CONFIGMAPS, Some("d"), &exact).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&listed(&got), expected);
            let mut paged = Model::new();
            let mut token = None;
            loop {
                let page_opts = ListOptions { limit: Some(limit), continue_token: token.clone(), ..exact.clone() };
                let page_opts = if token.is_some() { ListOptions { resource_version: None, resource_version_match: None, ..page_opts } } else { page_opts };
                let page = reg.list(CONFIGMAPS, Some("d"), &page_opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
                paged.extend(listed(&page));
                token = page["metadata"]["continue"].as_str().map(String::from);
                if token.is_none() { break; }
            }
            prop_assert_eq!(&paged, expected);
        }
        // (4) replaying history after any past version onto that version's state gives now
        let s = reg.store.lock();
        for (rv, then) in &past {
            let mut replayed = then.clone();
            for ev in s.history.iter().filter(|e| e.rv > *rv && e.key.resource == CONFIGMAPS) {
                match ev.kind {
                    EventType::Added | EventType::Modified => {
                        replayed.insert(ev.key.name.clone(), ev.object["data"]["k"].as_str().unwrap_or("").to_string());
                    }
                    EventType::Deleted => { replayed.remove(&ev.key.name); }
                }
            }
            prop_assert_eq!(&replayed, &model);
        }
    }
}
