//! Offline mode's scheduler (`Config::schedule_to`): a pod that names no node is bound to the
//! one node, with the `Scheduled` event kube-scheduler writes; every other pod is left alone,
//! and without the option nothing binds a pod by itself.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use nodelet_apiserver::{Config, User};
use serde_json::json;

use super::common::pod;
use super::{client_for, eventually, start};

fn node_of(handle: &nodelet_apiserver::ServerHandle, name: &str) -> Option<String> {
    handle
        .get("v1", "Pod", Some("default"), name)
        .and_then(|p| p["spec"]["nodeName"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn a_pod_without_a_node_is_bound_to_the_one_node_with_the_scheduled_event() {
    let server = start(Config::default().schedule_to("dev-1")).await;
    let handle = server.handle();
    let client = client_for(&server, &User::admin()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    // Created in this order: the scheduler takes changes in order, so once `web` is bound it
    // has looked at the three before it.
    for (name, spec) in [
        ("other", json!({"schedulerName": "my-scheduler"})),
        ("pinned", json!({"nodeName": "elsewhere"})),
        (
            "gated",
            json!({"schedulingGates": [{"name": "example.com/wait"}]}),
        ),
    ] {
        pods.create(&pp, &pod(name, spec))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    let created = pods
        .create(&pp, &pod("web", json!({})))
        .await
        .expect("creating web");
    assert_eq!(created.spec.and_then(|s| s.node_name), None);
    eventually("web bound to dev-1", || {
        node_of(&handle, "web").as_deref() == Some("dev-1")
    })
    .await;
    assert_eq!(node_of(&handle, "other"), None, "another scheduler's pod");
    assert_eq!(node_of(&handle, "pinned").as_deref(), Some("elsewhere"));
    assert_eq!(node_of(&handle, "gated"), None, "a gated pod");

    let web = pods.get("web").await.expect("web");
    let scheduled = web
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| c.status);
    assert_eq!(scheduled.as_deref(), Some("True"));

    let events: Api<Event> = Api::namespaced(client, "default");
    let mut all = Vec::new();
    eventually("the Scheduled event", || {
        all = handle.list("v1", "Event", Some("default"));
        !all.is_empty()
    })
    .await;
    let listed = events.list(&ListParams::default()).await.expect("events");
    assert_eq!(listed.items.len(), 1, "one event, for web only: {all:?}");
    let event = &listed.items[0];
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.reason.as_deref(), Some("Scheduled"));
    assert_eq!(event.action.as_deref(), Some("Binding"));
    assert_eq!(
        event.message.as_deref(),
        Some("Successfully assigned default/web to dev-1")
    );
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("default-scheduler")
    );
    assert!(
        event
            .reporting_instance
            .as_deref()
            .is_some_and(|i| i.starts_with("default-scheduler-")),
        "{:?}",
        event.reporting_instance
    );
    assert!(event.event_time.is_some());
    assert_eq!(event.involved_object.kind.as_deref(), Some("Pod"));
    assert_eq!(event.involved_object.name.as_deref(), Some("web"));
    assert_eq!(event.involved_object.uid, web.metadata.uid);
    assert!(
        event
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("web.")),
        "{:?}",
        event.metadata.name
    );
    server.shutdown().await;
}

#[tokio::test]
async fn without_schedule_to_nothing_binds_a_pod_but_a_client() {
    let server = start(Config::default()).await;
    let handle = server.handle();
    handle
        .create(super::common::pod_json("default", "web", json!({})))
        .expect("creating web");
    // A client's binding finds the pod unbound (a Conflict if anything had bound it).
    handle
        .bind_pod("default", "web", "dev-1")
        .expect("binding web as a test does");
    assert_eq!(node_of(&handle, "web").as_deref(), Some("dev-1"));
    assert!(handle.list("v1", "Event", Some("default")).is_empty());
    server.shutdown().await;
}
