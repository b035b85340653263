//! Pod events as core/v1 Events, aggregated like the kubelet's correlator (PL-9, VM-10): the
//! message is part of an event's identity, repeats of one message bump its count, and a node
//! identity may create and patch them.

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
use serde_json::{Value, json};

use crate::support::{NODE, PATIENCE, World, poll_pause};

const NOT_FOUND: &str = r#"MountVolume.SetUp failed for volume "v" : configmap "cm" not found"#;
const MISSING_KEY: &str =
    r#"MountVolume.SetUp failed for volume "v" : configmap references non-existent config key: k"#;

/// A pod on the test node whose volume `v` maps key `k` of ConfigMap `cm`.
fn pod() -> Value {
    PodBuilder::new("default", "p")
        .node(NODE)
        .container(json!({"name": "c", "image": "x",
            "volumeMounts": [{"name": "v", "mountPath": "/v"}]}))
        .volume(json!({"name": "v", "configMap": {"name": "cm",
            "items": [{"key": "k", "path": "k"}]}}))
        .json()
}

/// The FailedMount events about pod `p`.
async fn failed_mounts(admin: &kube::Client) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(admin.clone(), "default");
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some("p")
                && e.reason.as_deref() == Some("FailedMount")
        })
        .collect()
}

/// Waits until `done` holds for the FailedMount events of pod `p`; returns them.
async fn wait_for_events(admin: &kube::Client, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let mut last = Vec::new();
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            last = failed_mounts(admin).await;
            if done(&last) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    if waited.is_err() {
        let seen: Vec<_> = last.iter().map(|e| (&e.message, e.count)).collect();
        panic!("FailedMount events never converged: {seen:?}");
    }
    last
}

fn with_message<'a>(events: &'a [Event], message: &str) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| e.message.as_deref() == Some(message))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_failed_mount_message_is_published_as_a_new_event() {
    // Regression: kube-rs's Recorder keyed events without the message, so the second message
    // only bumped the count of the first event and never reached the API.
    let world = World::start().await;
    let h = world.server.handle();
    let pod = h.create(pod()).unwrap_or_else(|e| panic!("{e}"));
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    wait_for_events(&world.admin, |e| !with_message(e, NOT_FOUND).is_empty()).await;

    h.create(
        ConfigMapBuilder::new("default", "cm")
            .data("other", "x")
            .json(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let events = wait_for_events(&world.admin, |e| !with_message(e, MISSING_KEY).is_empty()).await;

    assert_eq!(with_message(&events, NOT_FOUND).len(), 1);
    assert_eq!(with_message(&events, MISSING_KEY).len(), 1);
    for e in &events {
        // What a kubelet writes (PL-9): a Warning on the pod, from the node.
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        let name = e.metadata.name.as_deref().unwrap_or_default();
        let hex = name.strip_prefix("p.").unwrap_or_default();
        assert_eq!(hex.len(), 16, "event name {name}");
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
        let involved = &e.involved_object;
        assert_eq!(involved.api_version.as_deref(), Some("v1"));
        assert_eq!(involved.kind.as_deref(), Some("Pod"));
        assert_eq!(involved.namespace.as_deref(), Some("default"));
        assert_eq!(involved.uid.as_deref(), Some(uid.as_str()));
        let source = e.source.clone().unwrap_or_default();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some(NODE));
        assert_eq!(e.reporting_component.as_deref(), Some("kubelet"));
        assert_eq!(e.reporting_instance.as_deref(), Some(NODE));
        assert!(e.count.unwrap_or(0) >= 1);
        assert!(e.first_timestamp.is_some());
        assert!(e.last_timestamp >= e.first_timestamp);
    }
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_failed_mount_message_twice_is_one_event_with_count_two() {
    // The volume manager retries the failed mount with backoff (VM-9), repeating the message.
    let world = World::start().await;
    world
        .server
        .handle()
        .create(pod())
        .unwrap_or_else(|e| panic!("{e}"));
    let events = wait_for_events(&world.admin, |e| {
        with_message(e, NOT_FOUND)
            .iter()
            .any(|e| e.count.unwrap_or(0) >= 2)
    })
    .await;
    let same = with_message(&events, NOT_FOUND);
    assert_eq!(same.len(), 1, "one event per message");
    assert!(same[0].last_timestamp >= same[0].first_timestamp);
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_identity_may_create_and_patch_core_v1_events() {
    // The Node authorizer lets a node create and patch core/v1 events.
    let world = World::start().await;
    let h = world.server.handle();
    h.create(pod()).unwrap_or_else(|e| panic!("{e}"));
    wait_for_events(&world.admin, |e| {
        with_message(e, NOT_FOUND)
            .iter()
            .any(|e| e.count.unwrap_or(0) >= 2)
    })
    .await;
    let user = format!("system:node:{NODE}");
    let node_event_requests = || -> Vec<_> {
        h.requests()
            .into_iter()
            .filter(|r| r.user.as_deref() == Some(user.as_str()) && r.resource == "events")
            .collect()
    };
    // The server records a request after answering it, so the patch that raised the count may
    // be visible in the store a moment before its record: wait (bounded) for the record.
    let _ = tokio::time::timeout(PATIENCE, async {
        while !node_event_requests().iter().any(|r| r.verb == "patch") {
            poll_pause().await;
        }
    })
    .await;
    let mine = node_event_requests();
    assert!(
        mine.iter()
            .any(|r| r.verb == "create" && r.api_group.is_empty() && r.status == 201),
        "{mine:#?}"
    );
    assert!(
        mine.iter()
            .any(|r| r.verb == "patch" && r.api_group.is_empty() && r.status == 200),
        "{mine:#?}"
    );
    let refused: Vec<_> = mine.iter().filter(|r| r.status >= 400).collect();
    assert!(refused.is_empty(), "{refused:#?}");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_of_an_event_deleted_from_the_api_creates_it_again() {
    // The API server's event TTL may drop an Event the agent still aggregates: the next repeat's
    // PATCH gets 404 and the Event is created again with the running count.
    let world = World::start().await;
    world
        .server
        .handle()
        .create(pod())
        .unwrap_or_else(|e| panic!("{e}"));
    let events = wait_for_events(&world.admin, |e| {
        with_message(e, NOT_FOUND)
            .iter()
            .any(|e| e.count.unwrap_or(0) >= 2)
    })
    .await;
    let first = with_message(&events, NOT_FOUND)[0].clone();
    let name = first.metadata.name.clone().unwrap_or_default();
    let count = first.count.unwrap_or(0);
    let api: Api<Event> = Api::namespaced(world.admin.clone(), "default");
    api.delete(&name, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let events = wait_for_events(&world.admin, |e| {
        with_message(e, NOT_FOUND)
            .iter()
            .any(|e| e.count.unwrap_or(0) > count)
    })
    .await;
    let again = with_message(&events, NOT_FOUND);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].metadata.name.as_deref(), Some(name.as_str()));
    world.stop().await;
}
