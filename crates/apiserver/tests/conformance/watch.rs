//! Watches through the kube client: replay from a resourceVersion, resume after a dropped
//! watch, 410 Expired and relist, bookmarks, streaming lists and timeouts.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};

use super::{PATIENCE, cm, cms, start, start_with};

/// Next item of a stream, with a generous guard so a broken server fails instead of hanging.
pub(crate) async fn next<S: Stream + Unpin>(s: &mut S) -> S::Item {
    tokio::time::timeout(PATIENCE, s.next())
        .await
        .expect("stream produced an item")
        .expect("stream did not end")
}

fn name(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

/// Drains a watcher's initial listing, returning the names seen.
async fn initial<S>(s: &mut S) -> Vec<String>
where
    S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
{
    let mut names = Vec::new();
    loop {
        match next(s).await.expect("watcher event") {
            Event::Init => {}
            Event::InitApply(o) => names.push(name(&o)),
            Event::InitDone => return names,
            other => panic!("unexpected event during init: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_watch_from_a_resource_version_replays_later_changes_in_order() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let first = api
        .create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    let rv = first.metadata.resource_version.clone().expect("rv");
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .expect("create");
    api.delete("a", &Default::default()).await.expect("delete");
    let mut w = api
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    match next(&mut w).await.expect("event") {
        WatchEvent::Added(o) => assert_eq!(name(&o), "b"),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    match next(&mut w).await.expect("event") {
        WatchEvent::Deleted(o) => assert_eq!(name(&o), "a"),
        other => panic!("expected DELETED a, got {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_zero_starts_with_synthetic_added_events() {
    let (_server, client) = start().await;
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    let mut w = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Added(o)) if name(&o) == "a"));
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .expect("create");
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Added(o)) if name(&o) == "b"));
}

#[tokio::test]
async fn a_watcher_resumes_after_closed_watches_without_missing_or_repeating_events() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("before", "k", "1"))
        .await
        .expect("create");
    let mut w = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert_eq!(initial(&mut w).await, vec!["before"]);
    let mut seen = Vec::new();
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "k", "1"))
            .await
            .expect("create");
        match next(&mut w).await.expect("event") {
            Event::Apply(o) => seen.push(name(&o)),
            other => panic!("unexpected {other:?}"),
        }
        // Drop every watch; the change made while no watch is open must still arrive once.
        handle.close_watches();
        api.create(&PostParams::default(), &cm(&format!("gap{i}"), "k", "1"))
            .await
            .expect("create");
        match next(&mut w).await.expect("event") {
            Event::Apply(o) => seen.push(name(&o)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, vec!["c0", "gap0", "c1", "gap1", "c2", "gap2"]);
    assert!(handle.count("watch", "configmaps", Some("default"), None) >= 4);
}

#[tokio::test]
async fn a_watcher_relists_after_410_gone_from_a_compacted_history() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    let mut w = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert_eq!(initial(&mut w).await, vec!["a"]);
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .expect("create");
    assert!(matches!(next(&mut w).await, Ok(Event::Apply(o)) if name(&o) == "b"));
    handle.compact();
    handle.close_watches();
    match next(&mut w).await {
        Err(watcher::Error::WatchError(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.starts_with("too old resource version: "),
                "{}",
                status.message
            );
        }
        other => panic!("expected a 410 watch error, got {other:?}"),
    }
    let mut relisted = initial(&mut w).await;
    relisted.sort();
    assert_eq!(relisted, vec!["a", "b"]);
    assert_eq!(handle.count("list", "configmaps", Some("default"), None), 2);
}

#[tokio::test]
async fn a_raw_watch_from_a_compacted_version_gets_an_expired_error_event() {
    let (server, client) = start().await;
    let api = cms(&client);
    let a = api
        .create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    server.handle().compact();
    let rv = a.metadata.resource_version.clone().expect("rv");
    let mut w = api
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    match next(&mut w).await.expect("event") {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
            let oldest = server.handle().resource_version();
            assert_eq!(
                e.message,
                format!("too old resource version: {rv} ({oldest})")
            );
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert!(w.next().await.is_none(), "the stream ends after the error");
}

#[tokio::test]
async fn bookmarks_are_sent_on_request_and_periodically() {
    let config = nodelet_apiserver::Config::default().bookmark_interval(Duration::from_millis(50));
    let (server, client) = start_with(config).await;
    let api = cms(&client);
    let mut w = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    // Periodic.
    match next(&mut w).await.expect("event") {
        WatchEvent::Bookmark(b) => assert!(!b.metadata.resource_version.is_empty()),
        other => panic!("expected BOOKMARK, got {other:?}"),
    }
    // On request, carrying the current resourceVersion.
    let created = api
        .create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    server.handle().bookmark_now();
    let mut saw_bookmark_at_created = false;
    for _ in 0..10 {
        match next(&mut w).await.expect("event") {
            WatchEvent::Added(o) => assert_eq!(name(&o), "a"),
            WatchEvent::Bookmark(b) => {
                let rv: u64 = b.metadata.resource_version.parse().expect("decimal");
                let created_rv: u64 = created
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|r| r.parse().ok())
                    .expect("rv");
                assert!(rv >= created_rv - 1);
                if rv >= created_rv {
                    saw_bookmark_at_created = true;
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_bookmark_at_created);
    // A watch without allowWatchBookmarks gets none.
    let mut plain = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .expect("watch")
        .boxed();
    assert!(matches!(next(&mut plain).await, Ok(WatchEvent::Added(_))));
    server.handle().bookmark_now();
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .expect("create");
    assert!(matches!(next(&mut plain).await, Ok(WatchEvent::Added(o)) if name(&o) == "b"));
}

#[tokio::test]
async fn a_streaming_list_watcher_sees_the_initial_events_end_bookmark() {
    let (server, client) = start().await;
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .expect("create");
    let mut w = watcher::watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    assert_eq!(initial(&mut w).await, vec!["a", "b"]);
    api.create(&PostParams::default(), &cm("c", "k", "1"))
        .await
        .expect("create");
    assert!(matches!(next(&mut w).await, Ok(Event::Apply(o)) if name(&o) == "c"));
    let handle = server.handle();
    assert_eq!(
        handle.count("list", "configmaps", None, None),
        0,
        "no LIST with streaming lists"
    );
    assert_eq!(
        handle.count("watch", "configmaps", Some("default"), None),
        1
    );
}

#[tokio::test]
async fn send_initial_events_without_not_older_than_is_rejected_like_upstream() {
    let (server, _client) = start().await;
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true",
        server.url()
    );
    let (code, body) = super::raw_get(&url).await;
    assert_eq!(code, 422);
    assert_eq!(body["reason"], "Invalid");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("ListOptions.meta.k8s.io \"\" is invalid: ")
    );
}

#[tokio::test]
async fn a_reflector_store_follows_creates_updates_and_deletes() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(api.clone(), watcher::Config::default()),
    )
    .applied_objects()
    .boxed();
    let mut stream = stream;
    api.create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .expect("create");
    let first = next(&mut stream).await.expect("applied");
    assert_eq!(name(&first), "a");
    api.patch(
        "a",
        &Default::default(),
        &kube::api::Patch::Merge(serde_json::json!({"data": {"k": "2"}})),
    )
    .await
    .expect("patch");
    let updated = next(&mut stream).await.expect("applied");
    assert_eq!(
        updated.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("2")
    );
    reader.wait_until_ready().await.expect("ready");
    assert_eq!(reader.state().len(), 1);
    api.delete("a", &Default::default()).await.expect("delete");
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .expect("create");
    assert_eq!(name(&next(&mut stream).await.expect("applied")), "b");
    let mut names: Vec<String> = reader.state().iter().map(|c| name(c)).collect();
    names.sort();
    assert_eq!(names, vec!["b"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_ends_after_its_timeout_seconds() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let mut w = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch")
        .boxed();
    assert!(
        tokio::time::timeout(PATIENCE, w.next())
            .await
            .expect("ended")
            .is_none()
    );
}

#[tokio::test]
async fn a_watcher_catches_up_after_the_listener_restarts() {
    let (server, client) = start().await;
    let handle = server.handle();
    let api = cms(&client);
    let mut w = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert!(initial(&mut w).await.is_empty());
    handle.stop_listener().await;
    // Written while the server is unreachable; seeded directly into the store.
    handle
        .create(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "offline"}}))
        .expect("seed");
    handle.restart_listener().await.expect("restart");
    loop {
        match next(&mut w).await {
            Err(_) => continue, // the dropped connection surfaces once
            Ok(Event::Apply(o)) => {
                assert_eq!(name(&o), "offline");
                break;
            }
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }
}
