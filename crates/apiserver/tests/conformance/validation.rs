//! Validation and defaulting: names, ConfigMap/Secret keys and sizes, immutability, Secret
//! `stringData`, generateName, with the upstream `Invalid` messages and causes.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::{cm, cms, start, status};

fn configmap(v: serde_json::Value) -> ConfigMap {
    serde_json::from_value(v).expect("configmap")
}

#[tokio::test]
async fn an_invalid_configmap_key_is_rejected_with_the_upstream_message_and_cause() {
    let (_server, client) = start().await;
    let e = status(
        cms(&client)
            .create(&PostParams::default(), &cm("x", "bad key", "v"))
            .await
            .expect_err("422"),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let detail = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    assert_eq!(
        e.message,
        format!("ConfigMap \"x\" is invalid: data[bad key]: Invalid value: \"bad key\": {detail}")
    );
    let details = e.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("x", "ConfigMap")
    );
    let cause = &details.causes[0];
    assert_eq!(cause.reason, "FieldValueInvalid");
    assert_eq!(cause.field, "data[bad key]");
    assert_eq!(
        cause.message,
        format!("Invalid value: \"bad key\": {detail}")
    );
}

#[tokio::test]
async fn reserved_and_duplicate_keys_and_oversized_payloads_are_invalid() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let e = status(
        api.create(&PostParams::default(), &cm("x", "..", "v"))
            .await
            .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"x\" is invalid: data[..]: Invalid value: \"..\": must not be '..'"
    );
    let dup = configmap(
        json!({"metadata": {"name": "x"}, "data": {"k": "v"}, "binaryData": {"k": "dg=="}}),
    );
    let e = status(
        api.create(&PostParams::default(), &dup)
            .await
            .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"x\" is invalid: data[k]: Invalid value: \"k\": duplicate of key present in binaryData"
    );
    let big = cm("x", "k", &"a".repeat(1024 * 1024 + 1));
    let e = status(
        api.create(&PostParams::default(), &big)
            .await
            .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"x\" is invalid: []: Too long: may not be more than 1048576 bytes"
    );
    let exactly = cm("ok", "k", &"a".repeat(1024 * 1024));
    api.create(&PostParams::default(), &exactly)
        .await
        .expect("1 MiB is allowed");
}

/// Clients see upstream's validation texts: a real kube-apiserver names the `data` entry
/// (ValidateConfigMap checks
/// `data` against `binaryData`), and reports the duplicate once.
#[tokio::test]
async fn a_key_in_both_data_and_binary_data_is_reported_under_data_as_the_real_server_does() {
    let (_server, client) = start().await;
    let both = configmap(
        json!({"metadata": {"name": "both"}, "data": {"a": "1"}, "binaryData": {"a": "Mg=="}}),
    );
    let e = status(
        cms(&client)
            .create(&PostParams::default(), &both)
            .await
            .expect_err("422"),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "ConfigMap \"both\" is invalid: data[a]: Invalid value: \"a\": duplicate of key present in binaryData"
    );
    let causes = e.details.expect("details").causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].field, "data[a]");
}

#[tokio::test]
async fn object_names_must_be_rfc_1123() {
    let (_server, client) = start().await;
    let e = status(
        cms(&client)
            .create(&PostParams::default(), &cm("Bad_Name", "k", "v"))
            .await
            .expect_err("422"),
    );
    assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of"), "{}", e.message);
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let bad: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "a.b"}})).expect("ns");
    let e = status(
        ns.create(&PostParams::default(), &bad)
            .await
            .expect_err("422"),
    );
    assert!(
        e.message
            .contains("a lowercase RFC 1123 label must consist of"),
        "{}",
        e.message
    );
    let nameless = configmap(json!({"metadata": {}}));
    let e = status(
        cms(&client)
            .create(&PostParams::default(), &nameless)
            .await
            .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
}

#[tokio::test]
async fn generate_name_appends_five_random_characters() {
    let (_server, client) = start().await;
    let obj = configmap(json!({"metadata": {"generateName": "cfg-"}}));
    let created = cms(&client)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let name = created.metadata.name.expect("name");
    assert!(name.starts_with("cfg-") && name.len() == 9, "{name}");
}

#[tokio::test]
async fn an_immutable_configmap_refuses_data_changes_but_allows_metadata_changes() {
    let (_server, client) = start().await;
    let api = cms(&client);
    let obj = configmap(json!({"metadata": {"name": "x"}, "data": {"k": "v"}, "immutable": true}));
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let e = status(
        api.patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"x\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let e = status(
        api.patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"immutable": false})),
        )
        .await
        .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"x\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set"
    );
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .expect("labels may change");
    api.delete("x", &Default::default())
        .await
        .expect("an immutable object can be deleted");
}

#[tokio::test]
async fn secret_string_data_is_merged_into_data_and_the_type_defaults_to_opaque() {
    let (_server, client) = start().await;
    let api: Api<Secret> = Api::namespaced(client, "default");
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eA=="}, "stringData": {"a": "plain"}
    }))
    .expect("secret");
    let created = api
        .create(&PostParams::default(), &s)
        .await
        .expect("create");
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert!(created.string_data.is_none());
    let data = created.data.expect("data");
    assert_eq!(data["a"].0, b"plain".to_vec());
    assert_eq!(data["b"].0, b"x".to_vec());
    let imm: Secret = serde_json::from_value(
        json!({"metadata": {"name": "i"}, "data": {"a": "eA=="}, "immutable": true}),
    )
    .expect("secret");
    api.create(&PostParams::default(), &imm)
        .await
        .expect("create");
    let e = status(
        api.patch(
            "i",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"a": "y"}})),
        )
        .await
        .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "Secret \"i\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let tls: Secret = serde_json::from_value(json!({"metadata": {"name": "t"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}})).expect("secret");
    let e = status(
        api.create(&PostParams::default(), &tls)
            .await
            .expect_err("422"),
    );
    assert_eq!(
        e.message,
        "Secret \"t\" is invalid: data[tls.key]: Required value"
    );
}

#[tokio::test]
async fn dry_run_validates_and_answers_without_persisting() {
    let (server, client) = start().await;
    let api = cms(&client);
    let rv = server.handle().resource_version();
    let created = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("x", "k", "v"),
        )
        .await
        .expect("dry run");
    assert_eq!(created.metadata.name.as_deref(), Some("x"));
    assert!(api.get_opt("x").await.expect("get").is_none());
    assert_eq!(server.handle().resource_version(), rv);
    let e = status(
        api.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("x", "a b", "v"),
        )
        .await
        .expect_err("422"),
    );
    assert_eq!(e.code, 422);
}

#[tokio::test]
async fn payloads_that_do_not_decode_as_the_typed_object_are_bad_requests() {
    let (server, _client) = start().await;
    let handle = server.handle();
    let e = handle
        .create(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "a$b="}}))
        .expect_err("bad base64");
    let e = e.api_error().expect("api error");
    assert_eq!((e.code(), e.reason()), (400, "BadRequest"));
    assert_eq!(
        e.message(),
        "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 1"
    );
    let e = handle
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"n": 5}}))
        .expect_err("number");
    assert_eq!(
        e.api_error().map(|a| a.message().to_string()).as_deref(),
        Some(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        )
    );
}

/// Regression: a pod with `defaultMode: "0400"` (a string) was stored and then broke every
/// typed list and watch of pods (kube-rs decode error); the real server answers 400.
#[tokio::test]
async fn a_field_of_the_wrong_type_is_a_bad_request_on_create_update_and_patch() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{ApiResource, DynamicObject};
    let (_server, client) = start().await;
    let ar = ApiResource::erase::<Pod>(&());
    let dynamic: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let pod = |mode: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "futureField": {"kept": true},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}],
                     "volumes": [{"name": "v", "configMap": {"name": "cm", "defaultMode": mode}}]}}))
        .expect("pod")
    };
    let e = status(
        dynamic
            .create(&PostParams::default(), &pod(json!("0400")))
            .await
            .expect_err("400"),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert!(
        e.message.starts_with(
            "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field Pod.spec.volumes[0].configMap.defaultMode"
        ),
        "{}",
        e.message
    );
    // The well-typed pod is stored as sent: unknown fields are kept.
    let created = dynamic
        .create(&PostParams::default(), &pod(json!(256)))
        .await
        .expect("created");
    assert_eq!(created.data["futureField"], json!({"kept": true}));
    // A patch whose result does not decode is refused too, and so is a PUT.
    let e = status(
        dynamic
            .patch(
                "p",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": "soon"}})),
            )
            .await
            .expect_err("400"),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    let mut bad = created.clone();
    bad.data["spec"]["volumes"][0]["configMap"]["defaultMode"] = json!("0400");
    let e = status(
        dynamic
            .replace("p", &PostParams::default(), &bad)
            .await
            .expect_err("400"),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    // Typed clients can still list every pod.
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let list = pods.list(&Default::default()).await.expect("typed list");
    let modes: Vec<_> = list
        .items
        .iter()
        .flat_map(|p| p.spec.iter().flat_map(|s| s.volumes.iter().flatten()))
        .filter_map(|v| v.config_map.as_ref().and_then(|c| c.default_mode))
        .collect();
    assert_eq!(modes, vec![256]);
}
