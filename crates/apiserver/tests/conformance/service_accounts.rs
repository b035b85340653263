//! What a cluster's controllers and admission do for pods (`Config::like_a_cluster`): the
//! `default` ServiceAccount and `kube-root-ca.crt` in every namespace, and ServiceAccount
//! admission, compared field by field with what a real v1.36 server returned.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use nodelet_apiserver::Config;
use serde_json::{Value, json};

use super::{pod, start_with};

async fn create_ns(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

#[tokio::test]
async fn a_pod_gets_the_kube_api_access_volume_and_mount_a_real_server_injects() {
    let (server, client) = start_with(Config::default().like_a_cluster()).await;
    create_ns(&client, "pdtest").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "pdtest");
    let created = pods
        .create(&PostParams::default(), &pod("pd", json!({})))
        .await
        .expect("create pod");
    let v = serde_json::to_value(&created).expect("json");
    let volumes = v["spec"]["volumes"].as_array().expect("volumes");
    assert_eq!(volumes.len(), 1);
    let name = volumes[0]["name"].as_str().expect("name");
    let suffix = name.strip_prefix("kube-api-access-").expect("prefix");
    assert_eq!(suffix.len(), 5);
    assert!(
        suffix
            .bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
        "{suffix}"
    );
    // Observed on kube-apiserver v1.36, with the random suffix replaced.
    let real = json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}});
    assert_eq!(volumes[0], real);
    assert_eq!(
        v["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    );
    assert_eq!(v["spec"]["serviceAccountName"], "default");
    // The CA the volume projects is the server's, in every namespace.
    let ca = Api::<ConfigMap>::namespaced(client.clone(), "pdtest")
        .get("kube-root-ca.crt")
        .await
        .expect("kube-root-ca.crt");
    let pem = ca
        .data
        .unwrap_or_default()
        .remove("ca.crt")
        .unwrap_or_default();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    Api::<ServiceAccount>::namespaced(client, "pdtest")
        .get("default")
        .await
        .expect("default ServiceAccount");
    server.shutdown().await;
}

#[tokio::test]
async fn automount_false_on_the_pod_or_the_account_injects_nothing() {
    let (server, client) = start_with(Config::default().like_a_cluster()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p = pods
        .create(
            &PostParams::default(),
            &pod("off", json!({"automountServiceAccountToken": false})),
        )
        .await
        .expect("create");
    assert_eq!(p.spec.as_ref().and_then(|s| s.volumes.clone()), None);
    let sa: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": "quiet"}, "automountServiceAccountToken": false,
        "imagePullSecrets": [{"name": "reg"}]}))
    .expect("sa");
    Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &sa)
        .await
        .expect("create sa");
    let p = pods
        .create(
            &PostParams::default(),
            &pod("quiet", json!({"serviceAccountName": "quiet"})),
        )
        .await
        .expect("create");
    let v = serde_json::to_value(&p).expect("json");
    assert!(v["spec"].get("volumes").is_none(), "{v}");
    assert_eq!(v["spec"]["imagePullSecrets"], json!([{"name": "reg"}]));
    // The pod's own `true` wins over the account's `false`.
    let p = pods
        .create(
            &PostParams::default(),
            &pod(
                "on",
                json!({"serviceAccountName": "quiet", "automountServiceAccountToken": true}),
            ),
        )
        .await
        .expect("create");
    let v = serde_json::to_value(&p).expect("json");
    assert_eq!(v["spec"]["volumes"].as_array().map(Vec::len), Some(1));
    server.shutdown().await;
}

#[tokio::test]
async fn a_pod_whose_service_account_does_not_exist_is_refused_with_the_upstream_text() {
    let (server, client) = start_with(Config::default().like_a_cluster()).await;
    create_ns(&client, "pdtest").await;
    Api::<ServiceAccount>::namespaced(client.clone(), "pdtest")
        .delete("default", &Default::default())
        .await
        .expect("delete default sa");
    let err = Api::<Pod>::namespaced(client, "pdtest")
        .create(&PostParams::default(), &pod("pd", json!({})))
        .await
        .expect_err("refused");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "pods \"pd\" is forbidden: error looking up service account pdtest/default: serviceaccount \"default\" not found"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_bare_server_leaves_the_pod_spec_as_written() {
    let (server, client) = start_with(Config::default()).await;
    let p = Api::<Pod>::namespaced(client, "default")
        .create(&PostParams::default(), &pod("bare", json!({})))
        .await
        .expect("create");
    assert_eq!(p.spec.and_then(|s| s.volumes), None);
    server.shutdown().await;
}

#[tokio::test]
async fn an_existing_kube_api_access_volume_and_mount_are_kept() {
    let (server, client) = start_with(Config::default().like_a_cluster()).await;
    let spec = json!({
        "volumes": [{"name": "kube-api-access-mine", "emptyDir": {}}],
        "containers": [
            {"name": "c", "image": "busybox", "volumeMounts": [{"name": "kube-api-access-mine", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]},
            {"name": "d", "image": "busybox"}],
        "initContainers": [{"name": "i", "image": "busybox"}],
    });
    let p: Pod =
        serde_json::from_value(json!({"metadata": {"name": "mine"}, "spec": spec})).expect("pod");
    let created = Api::<Pod>::namespaced(client, "default")
        .create(&PostParams::default(), &p)
        .await
        .expect("create");
    let v = serde_json::to_value(&created).expect("json");
    assert_eq!(v["spec"]["volumes"].as_array().map(Vec::len), Some(1));
    let mount = json!([{"name": "kube-api-access-mine", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
    assert_eq!(v["spec"]["containers"][1]["volumeMounts"], mount);
    assert_eq!(v["spec"]["initContainers"][0]["volumeMounts"], mount);
    assert_eq!(
        v["spec"]["containers"][0]["volumeMounts"][0]["readOnly"],
        Value::Null
    );
    server.shutdown().await;
}
