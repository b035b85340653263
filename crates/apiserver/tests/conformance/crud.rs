//! ConfigMap CRUD through `kube::Api`, with the real server's status codes and message texts.

use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{cm, cms, start, status};

#[tokio::test]
async fn a_created_configmap_can_be_read_listed_replaced_and_deleted() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let created = api
        .create(&PostParams::default(), &cm("app", "k", "v1"))
        .await
        .expect("create");
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(
        meta.generation, None,
        "configmaps have no generation in real k8s"
    );
    let rv1: u64 = meta
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("decimal rv");

    let got = api.get("app").await.expect("get");
    assert_eq!(
        got.data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str),
        Some("v1")
    );

    let list = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);
    let list_rv: u64 = list
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("list rv");
    assert!(list_rv >= rv1);

    let mut changed = got.clone();
    changed.data = Some([("k".to_string(), "v2".to_string())].into());
    let replaced = api
        .replace("app", &PostParams::default(), &changed)
        .await
        .expect("replace");
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("rv");
    assert!(rv2 > rv1);
    assert_eq!(replaced.metadata.uid, created.metadata.uid);

    let deleted = api
        .delete("app", &DeleteParams::default())
        .await
        .expect("delete");
    let st = deleted.right().expect("configmap delete answers a Status");
    assert_eq!(
        st.details.map(|d| (d.name, d.kind)),
        Some(("app".into(), "configmaps".into()))
    );
    assert!(api.get_opt("app").await.expect("get_opt").is_none());
}

#[tokio::test]
async fn errors_carry_the_real_codes_reasons_and_messages() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let e = status(api.get("nope").await.expect_err("missing"));
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (404, "NotFound", "configmaps \"nope\" not found")
    );

    api.create(&PostParams::default(), &cm("x", "k", "v"))
        .await
        .expect("create");
    let e = status(
        api.create(&PostParams::default(), &cm("x", "k", "v"))
            .await
            .expect_err("duplicate"),
    );
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (409, "AlreadyExists", "configmaps \"x\" already exists")
    );

    let mut stale = api.get("x").await.expect("get");
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .expect("patch");
    stale.data = Some([("k".to_string(), "stale".to_string())].into());
    let e = status(
        api.replace("x", &PostParams::default(), &stale)
            .await
            .expect_err("conflict"),
    );
    assert_eq!(e.code, 409);
    assert_eq!(e.reason, "Conflict");
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"x\": the object has been modified; please apply your changes to the latest version and try again"
    );

    let e = status(
        api.delete("nope", &DeleteParams::default())
            .await
            .expect_err("missing"),
    );
    assert_eq!(e.code, 404);

    let other: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "missing-ns");
    let e = status(
        other
            .create(&PostParams::default(), &cm("x", "k", "v"))
            .await
            .expect_err("no namespace"),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"missing-ns\" not found")
    );
}

#[tokio::test]
async fn creating_an_object_that_carries_a_resource_version_fails_like_the_storage_layer() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let created = api
        .create(&PostParams::default(), &cm("x", "k", "v"))
        .await
        .expect("create");
    api.delete("x", &DeleteParams::default())
        .await
        .expect("delete");
    let e = status(
        api.create(&PostParams::default(), &created)
            .await
            .expect_err("rv set"),
    );
    assert_eq!((e.code, e.reason.as_str()), (500, ""));
    assert_eq!(
        e.message,
        "resourceVersion should not be set on objects to be created"
    );
}

#[tokio::test]
async fn delete_collection_removes_only_the_selected_objects() {
    let (_server, client) = start().await;
    let api = cms(&client);
    for (name, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let mut obj = cm(name, "k", "v");
        obj.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create");
    }
    let deleted = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        )
        .await
        .expect("deletecollection");
    let names: Vec<String> = deleted
        .left()
        .expect("the deleted objects")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, vec!["a", "b"]);
    let left = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(left.items.len(), 1);
}

#[tokio::test]
async fn a_list_at_a_future_resource_version_is_a_504_too_large() {
    let (server, _client) = start().await;
    let current = server.handle().resource_version();
    let future = current + 100;
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?resourceVersion={future}",
        server.url()
    );
    let (code, body) = super::raw_get(&url).await;
    assert_eq!(code, 504);
    assert_eq!(body["reason"], "Timeout");
    assert_eq!(
        body["message"],
        format!("Too large resource version: {future}, current: {current}")
    );
}

#[tokio::test]
async fn a_get_at_resource_version_zero_is_served_and_a_future_one_is_504() {
    let (server, client) = start().await;
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("x", "k", "v"))
        .await
        .expect("create");
    // OM-11 step 4: the kubelet's cache refresh asks for resourceVersion "0".
    let got = api.get_opt("x").await.expect("get");
    assert!(got.is_some());
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps/x?resourceVersion=0",
        server.url()
    );
    assert_eq!(super::raw_get(&url).await.0, 200);
    let future = server.handle().resource_version() + 5;
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps/x?resourceVersion={future}",
        server.url()
    );
    assert_eq!(super::raw_get(&url).await.0, 504);
}

#[tokio::test]
async fn metadata_only_requests_get_partial_object_metadata() {
    let (_server, client) = start().await;
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("x", "k", "v"))
        .await
        .expect("create");
    let meta = api.get_metadata("x").await.expect("get metadata");
    assert_eq!(
        meta.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(meta.metadata.name.as_deref(), Some("x"));
    let list = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list metadata");
    assert_eq!(list.items.len(), 1);
    let meta_api: kube::Api<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::ConfigMap>> =
        kube::Api::namespaced(client.clone(), "default");
    let w = kube::runtime::watcher(meta_api, Default::default());
    let mut w = Box::pin(w);
    match super::watch::next(&mut w).await.expect("event") {
        kube::runtime::watcher::Event::Init => {}
        other => panic!("unexpected {other:?}"),
    }
    match super::watch::next(&mut w).await.expect("event") {
        kube::runtime::watcher::Event::InitApply(m) => {
            assert_eq!(m.metadata.name.as_deref(), Some("x"));
            assert_eq!(
                m.types.map(|t| t.kind),
                Some("PartialObjectMetadata".to_string())
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}
