//! `metadata.managedFields` as kube-apiserver records them: the manager from the User-Agent or
//! `?fieldManager=`, one entry per manager and operation, fieldsV1 naming the fields set.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use nodelet_apiserver::{ApiServer, Config};
use serde_json::{Value, json};

/// A client whose User-Agent is kubectl's.
async fn kubectl() -> (ApiServer, Api<ConfigMap>) {
    let server = ApiServer::start(Config::default())
        .await
        .expect("server starts");
    let mut config = kube::Config::new(server.url().parse().expect("url"));
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static("kubectl/v1.36.2 (linux/amd64) kubernetes/2f9d5b1"),
    ));
    let client = kube::Client::try_from(config).expect("client");
    (server, Api::namespaced(client, "default"))
}

fn managed(cm: &ConfigMap) -> Value {
    serde_json::to_value(&cm.metadata.managed_fields).expect("json")
}

#[tokio::test]
async fn a_create_is_an_update_by_the_user_agent_naming_every_field_it_set() {
    let (_server, api) = kubectl().await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a",
        "labels": {"app": "x"}}, "data": {"key": "v"}}))
    .expect("cm");
    let created = api
        .create(&PostParams::default(), &cm)
        .await
        .expect("created");
    let m = managed(&created);
    assert_eq!(m[0]["manager"], "kubectl");
    assert_eq!(m[0]["operation"], "Update");
    assert_eq!(m[0]["apiVersion"], "v1");
    assert_eq!(m[0]["fieldsType"], "FieldsV1");
    assert_eq!(
        m[0]["fieldsV1"],
        json!({"f:data": {".": {}, "f:key": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    );
    assert!(m[0]["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    // What a GET answers is what the create answered.
    let got = api.get("a").await.expect("get");
    assert_eq!(managed(&got), m);
}

#[tokio::test]
async fn a_named_field_manager_gets_its_own_entry_for_the_keys_it_changed() {
    let (_server, api) = kubectl().await;
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "a"}, "data": {"key": "v", "other": "w"}}),
    )
    .expect("cm");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("created");
    let params = PatchParams {
        field_manager: Some("updater".into()),
        ..Default::default()
    };
    let patched = api
        .patch("a", &params, &Patch::Merge(json!({"data": {"key": "v2"}})))
        .await
        .expect("patched");
    let m = managed(&patched);
    assert_eq!(m.as_array().map(Vec::len), Some(2));
    assert_eq!(m[1]["manager"], "updater");
    assert_eq!(m[1]["fieldsV1"], json!({"f:data": {"f:key": {}}}));
    assert_eq!(m[0]["manager"], "kubectl");
    assert_eq!(
        m[0]["fieldsV1"],
        json!({"f:data": {".": {}, "f:other": {}}})
    );
}

#[tokio::test]
async fn server_side_apply_is_an_apply_entry_of_its_field_manager() {
    let (_server, api) = kubectl().await;
    let applied = api
        .patch(
            "a",
            &PatchParams::apply("my-controller"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a"}, "data": {"key": "v"}})),
        )
        .await
        .expect("applied");
    let m = managed(&applied);
    assert_eq!(m[0]["manager"], "my-controller");
    assert_eq!(m[0]["operation"], "Apply");
    assert_eq!(m[0]["fieldsV1"], json!({"f:data": {"f:key": {}}}));
}
