//! Label and field selectors on list and watch, and the 400 for unsupported field selectors.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::watch::next;
use super::{cm, cms, pod, start, status};

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items
        .iter()
        .map(|o| o.meta().name.clone().unwrap_or_default())
        .collect()
}

fn labelled(name: &str, labels: serde_json::Value) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("cm")
}

#[tokio::test]
async fn label_selectors_support_equality_and_set_based_requirements() {
    let (_server, client) = start().await;
    let api = cms(&client);
    for (n, l) in [
        ("web", json!({"app": "web", "tier": "fe"})),
        ("db", json!({"app": "db"})),
        ("none", json!({})),
    ] {
        api.create(&PostParams::default(), &labelled(n, l))
            .await
            .expect("create");
    }
    for (sel, want) in [
        ("app=web", vec!["web"]),
        ("app!=web", vec!["db", "none"]),
        ("app in (web,db)", vec!["db", "web"]),
        ("app notin (web)", vec!["db", "none"]),
        ("tier", vec!["web"]),
        ("!tier", vec!["db", "none"]),
    ] {
        let got = api
            .list(&ListParams::default().labels(sel))
            .await
            .expect("list");
        assert_eq!(names(&got.items), want, "{sel}");
    }
}

#[tokio::test]
async fn pods_can_be_selected_by_node_name_and_metadata_fields() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("p1", json!({"nodeName": "n1"})),
    )
    .await
    .expect("create");
    pods.create(
        &PostParams::default(),
        &pod("p2", json!({"nodeName": "n2"})),
    )
    .await
    .expect("create");
    pods.create(&PostParams::default(), &pod("p3", json!({})))
        .await
        .expect("create");
    let all: Api<Pod> = Api::all(client.clone());
    let on_n1 = all
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("list");
    assert_eq!(names(&on_n1.items), vec!["p1"]);
    let unbound = all
        .list(&ListParams::default().fields("spec.nodeName=="))
        .await
        .expect("list");
    assert_eq!(names(&unbound.items), vec!["p3"]);
    let not_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName!=n1,metadata.namespace=default"))
        .await
        .expect("list");
    assert_eq!(names(&not_n1.items), vec!["p2", "p3"]);
    let by_name = pods
        .list(&ListParams::default().fields("metadata.name=p2"))
        .await
        .expect("list");
    assert_eq!(names(&by_name.items), vec!["p2"]);
    // The name from a metadata.name field selector is recorded, as upstream's RequestInfo does.
    assert_eq!(
        server
            .handle()
            .count("list", "pods", Some("default"), Some("p2")),
        1
    );
}

#[tokio::test]
async fn a_watch_with_a_field_selector_sees_objects_enter_and_leave_it() {
    let (_server, client) = start().await;
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    let mut w = Box::pin(
        api.watch(
            &WatchParams::default().labels("app=x").disable_bookmarks(),
            "0",
        )
        .await
        .expect("watch"),
    );
    let patch = |v: serde_json::Value| kube::api::Patch::Merge(json!({"metadata": {"labels": v}}));
    api.patch("a", &Default::default(), &patch(json!({"app": "x"})))
        .await
        .expect("patch");
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Added(_))));
    api.patch("a", &Default::default(), &patch(json!({"other": "y"})))
        .await
        .expect("patch");
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Modified(_))));
    api.patch("a", &Default::default(), &patch(json!({"app": null})))
        .await
        .expect("patch");
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Deleted(_))));
}

#[tokio::test]
async fn an_unsupported_field_selector_is_a_bad_request() {
    let (_server, client) = start().await;
    let e = status(
        cms(&client)
            .list(&ListParams::default().fields("data.k=v"))
            .await
            .expect_err("400"),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        e.message,
        "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    let pods: Api<Pod> = Api::all(client);
    let e = status(
        pods.list(&ListParams::default().fields("spec.foo=x"))
            .await
            .expect_err("400"),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "field label not supported: spec.foo")
    );
}
