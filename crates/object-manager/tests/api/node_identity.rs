//! The request shape a node identity needs under the Node authorizer.
//!
//! nodelet-apiserver has no Node authorizer yet, so this asserts the shape from the request
//! log: every configmap request names one object (GET by name, LIST/WATCH with a
//! `metadata.name=` field selector), in the object's namespace; no namespace-wide or
//! cluster-wide list or watch, no writes.

use nodelet_object_manager::Strategy;

use super::*;

#[tokio::test]
async fn every_request_of_the_watch_and_cache_strategies_names_a_single_object() {
    let (server, handle) = server().await;
    create(&handle, config_map("a", "v1", false));
    create(&handle, config_map("frozen", "v1", true));
    for strategy in [Strategy::Watch, Strategy::Cache, Strategy::Get] {
        let m = manager(&server, config(strategy));
        let mut changes = m.subscribe();
        let p = pod(&format!("p-{strategy}"), &["a", "frozen", "missing"]);
        m.register_pod(&p);
        for name in ["a", "frozen", "missing"] {
            let _ = m.get("default", name).await;
        }
        if strategy == Strategy::Watch {
            update(
                &handle,
                config_map("a", &format!("after-{strategy}"), false),
            );
            changed(&mut changes, "a").await;
        }
        m.unregister_pod(&p);
        m.shutdown().await;
    }
    let records = handle.requests();
    assert!(!records.is_empty());
    for r in records.iter().filter(|r| r.resource == "configmaps") {
        assert!(matches!(r.verb.as_str(), "get" | "list" | "watch"), "{r:?}");
        assert_eq!(r.namespace.as_deref(), Some("default"), "{r:?}");
        assert!(
            r.name.as_deref().is_some_and(|n| !n.is_empty()),
            "unnamed request: {r:?}"
        );
    }
    assert!(
        records
            .iter()
            .all(|r| r.resource == "configmaps" || r.resource.is_empty())
    );
}
