//! `certificates.k8s.io/v1beta1` over real HTTP with the kube client: serving only with the
//! group/version and the feature gates on, ClusterTrustBundles (CRUD, watch, validation, what
//! a node may read), PodCertificateRequests (validation, status rules, the Node authorizer and
//! NodeRestriction) and the test signer.

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client};
use nodelet_apiserver::{ApiServer, Config, Error, User};
use serde_json::{Value, json};

use super::{PATIENCE, client_for, start, status};

const V1BETA1: &str = "certificates.k8s.io/v1beta1";

/// A self-signed CA certificate (PEM), as a trust bundle holds.
fn ca_pem(name: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.self_signed(&key).expect("self-signed").pem()
}

/// A leaf (non-CA) certificate (PEM).
fn leaf_pem() -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["leaf.example".to_string()]).expect("params");
    params.self_signed(&key).expect("self-signed").pem()
}

fn bundle(name: &str, signer: Option<&str>, pem: &str, labels: Value) -> ClusterTrustBundle {
    let mut b = json!({"apiVersion": V1BETA1, "kind": "ClusterTrustBundle",
        "metadata": {"name": name, "labels": labels}, "spec": {"trustBundle": pem}});
    if let Some(s) = signer {
        b["spec"]["signerName"] = json!(s);
    }
    serde_json::from_value(b).expect("bundle")
}

/// A raw GET through the kube client: the JSON body, or the API status code.
async fn get_json(client: &Client, path: &str) -> Result<Value, u16> {
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    client
        .request::<Value>(req)
        .await
        .map_err(|e| status(e).code)
}

fn group_names(apis: &Value) -> Vec<String> {
    apis["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str().map(String::from))
        .collect()
}

fn resource_names(list: &Value) -> Vec<String> {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(String::from))
        .collect()
}

async fn admin(config: Config) -> (ApiServer, Client) {
    let server = start(config).await;
    let client = client_for(&server, &User::admin()).await;
    (server, client)
}

// --- serving and discovery ---------------------------------------------------------------

#[tokio::test]
async fn certificates_are_absent_unless_the_group_version_and_the_gate_are_both_on() {
    for config in [
        Config::default(),
        Config::default().runtime_config(V1BETA1, true),
        Config::default()
            .feature_gate("ClusterTrustBundle", true)
            .feature_gate("PodCertificateRequest", true),
        Config::default()
            .with_certificates()
            .runtime_config(V1BETA1, false),
    ] {
        let (_server, client) = admin(config).await;
        let apis = get_json(&client, "/apis").await.expect("/apis");
        assert!(!group_names(&apis).contains(&"certificates.k8s.io".to_string()));
        assert_eq!(
            get_json(&client, "/apis/certificates.k8s.io").await.err(),
            Some(404)
        );
        assert_eq!(
            get_json(&client, "/apis/certificates.k8s.io/v1beta1")
                .await
                .err(),
            Some(404)
        );
        let openapi = get_json(&client, "/openapi/v3").await.expect("openapi");
        assert!(
            openapi["paths"]
                .get("apis/certificates.k8s.io/v1beta1")
                .is_none()
        );
        let ctbs: Api<ClusterTrustBundle> = Api::all(client);
        let s = status(ctbs.list(&ListParams::default()).await.unwrap_err());
        assert_eq!(s.code, 404);
    }
}

#[tokio::test]
async fn each_gate_serves_its_own_kind_in_discovery_and_openapi() {
    let (_server, client) = admin(
        Config::default()
            .runtime_config(V1BETA1, true)
            .feature_gate("ClusterTrustBundle", true),
    )
    .await;
    let list = get_json(&client, "/apis/certificates.k8s.io/v1beta1")
        .await
        .expect("list");
    assert_eq!(resource_names(&list), vec!["clustertrustbundles"]);
    assert_eq!(list["resources"][0]["namespaced"], false);

    let (_server, client) = admin(Config::default().with_certificates()).await;
    let apis = get_json(&client, "/apis").await.expect("/apis");
    assert!(group_names(&apis).contains(&"certificates.k8s.io".to_string()));
    let group = get_json(&client, "/apis/certificates.k8s.io")
        .await
        .expect("group");
    assert_eq!(group["preferredVersion"]["groupVersion"], V1BETA1);
    let list = get_json(&client, "/apis/certificates.k8s.io/v1beta1")
        .await
        .expect("list");
    assert_eq!(
        resource_names(&list),
        vec![
            "clustertrustbundles",
            "podcertificaterequests",
            "podcertificaterequests/status"
        ]
    );
    let openapi = get_json(&client, "/openapi/v3/apis/certificates.k8s.io/v1beta1")
        .await
        .expect("openapi");
    assert!(
        openapi["paths"]
            .get("/apis/certificates.k8s.io/v1beta1/clustertrustbundles")
            .is_some()
    );
    let discovery = kube::discovery::Discovery::new(client)
        .run()
        .await
        .expect("discovery");
    assert!(discovery.has_group("certificates.k8s.io"));
}

#[tokio::test]
async fn an_unknown_feature_gate_or_group_version_refuses_to_start() {
    let err = ApiServer::start(Config::default().feature_gate("NoSuchGate", true))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "unrecognized feature gate: NoSuchGate");
    assert!(matches!(
        Config::default().runtime_config("nope.io/v1", true).check(),
        Err(Error::UnknownGroupVersion { .. })
    ));
    assert!(Config::default().with_certificates().check().is_ok());
}

// --- ClusterTrustBundles ---------------------------------------------------------------------

#[tokio::test]
async fn cluster_trust_bundles_are_created_read_listed_by_label_updated_and_deleted() {
    let (_server, client) = admin(Config::default().with_certificates()).await;
    let ctbs: Api<ClusterTrustBundle> = Api::all(client);
    let pem = ca_pem("one");
    let created = ctbs
        .create(
            &PostParams::default(),
            &bundle(
                "example.com:signer:one",
                Some("example.com/signer"),
                &pem,
                json!({"app": "a"}),
            ),
        )
        .await
        .expect("create");
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.namespace.is_none());
    ctbs.create(
        &PostParams::default(),
        &bundle("plain", None, &ca_pem("two"), json!({"app": "b"})),
    )
    .await
    .expect("create plain");

    let by_label = ctbs
        .list(&ListParams::default().labels("app=a"))
        .await
        .expect("list");
    let names: Vec<_> = by_label
        .items
        .iter()
        .filter_map(|b| b.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["example.com:signer:one"]);
    let by_signer = ctbs
        .list(&ListParams::default().fields("spec.signerName=example.com/signer"))
        .await
        .expect("list by signer");
    assert_eq!(by_signer.items.len(), 1);

    let both = format!("{pem}{}", ca_pem("three"));
    let patched = ctbs
        .patch(
            "example.com:signer:one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"trustBundle": both}})),
        )
        .await
        .expect("patch");
    assert_eq!(patched.spec.trust_bundle, both);

    let s = status(
        ctbs.patch(
            "example.com:signer:one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"signerName": "example.com/other"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    assert!(
        s.message
            .contains("spec.signerName: Invalid value: \"example.com/other\": field is immutable"),
        "{}",
        s.message
    );

    ctbs.delete("plain", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(ctbs.get_opt("plain").await.expect("get").is_none());
}

#[tokio::test]
async fn a_label_selected_watch_sees_its_bundles_change() {
    let (_server, client) = admin(Config::default().with_certificates()).await;
    let ctbs: Api<ClusterTrustBundle> = Api::all(client);
    let mut events = ctbs
        .watch(&WatchParams::default().labels("app=x"), "0")
        .await
        .expect("watch")
        .boxed();
    ctbs.create(
        &PostParams::default(),
        &bundle("other", None, &ca_pem("o"), json!({"app": "y"})),
    )
    .await
    .expect("create other");
    ctbs.create(
        &PostParams::default(),
        &bundle("mine", None, &ca_pem("m"), json!({"app": "x"})),
    )
    .await
    .expect("create mine");
    ctbs.patch(
        "mine",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"trustBundle": ca_pem("m2")}})),
    )
    .await
    .expect("patch");
    ctbs.delete("mine", &DeleteParams::default())
        .await
        .expect("delete");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(PATIENCE, events.try_next())
            .await
            .expect("event in time")
            .expect("watch ok")
            .expect("stream open");
        match ev {
            WatchEvent::Added(b) => seen.push(("ADDED", b.metadata.name)),
            WatchEvent::Modified(b) => seen.push(("MODIFIED", b.metadata.name)),
            WatchEvent::Deleted(b) => seen.push(("DELETED", b.metadata.name)),
            _ => {}
        }
    }
    let mine = Some("mine".to_string());
    assert_eq!(
        seen,
        vec![
            ("ADDED", mine.clone()),
            ("MODIFIED", mine.clone()),
            ("DELETED", mine)
        ]
    );
}

#[tokio::test]
async fn invalid_bundles_are_refused_with_the_upstream_texts() {
    let (_server, client) = admin(Config::default().with_certificates()).await;
    let ctbs: Api<ClusterTrustBundle> = Api::all(client);
    let pem = ca_pem("ca");
    let cases = [
        (
            bundle("wrong", Some("example.com/signer"), &pem, json!({})),
            "ClusterTrustBundle.certificates.k8s.io \"wrong\" is invalid: metadata.name: Invalid value: \"wrong\": ClusterTrustBundle for signerName example.com/signer must be named with prefix example.com:signer:",
        ),
        (
            bundle("a:b", None, &pem, json!({})),
            "ClusterTrustBundle.certificates.k8s.io \"a:b\" is invalid: metadata.name: Invalid value: \"a:b\": ClusterTrustBundle without signer name must not have \":\" in its name",
        ),
        (
            bundle("nosigner:x", Some("nosigner"), &pem, json!({})),
            "ClusterTrustBundle.certificates.k8s.io \"nosigner:x\" is invalid: spec.signerName: Invalid value: \"nosigner\": must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ),
        (
            bundle("empty", None, "", json!({})),
            "ClusterTrustBundle.certificates.k8s.io \"empty\" is invalid: spec.trustBundle: Invalid value: \"<value omitted>\": at least one trust anchor must be provided",
        ),
        (
            bundle("leaf", None, &leaf_pem(), json!({})),
            "ClusterTrustBundle.certificates.k8s.io \"leaf\" is invalid: spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 does not have the CA bit set",
        ),
        (
            bundle(
                "key",
                None,
                "-----BEGIN RSA PRIVATE KEY-----\nAQID\n-----END RSA PRIVATE KEY-----\n",
                json!({}),
            ),
            "ClusterTrustBundle.certificates.k8s.io \"key\" is invalid: spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 has bad block type: RSA PRIVATE KEY",
        ),
        (
            bundle(
                "junk",
                None,
                "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n",
                json!({}),
            ),
            "ClusterTrustBundle.certificates.k8s.io \"junk\" is invalid: spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 does not parse as X.509",
        ),
        (
            bundle(
                "headers",
                None,
                &pem.replacen("-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n", 1),
                json!({}),
            ),
            "ClusterTrustBundle.certificates.k8s.io \"headers\" is invalid: spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 has PEM block headers",
        ),
        (
            bundle("twice", None, &format!("{pem}{pem}"), json!({})),
            "ClusterTrustBundle.certificates.k8s.io \"twice\" is invalid: spec.trustBundle: Invalid value: \"<value omitted>\": duplicate trust anchor (indices [0 1])",
        ),
        (
            bundle("huge", None, &"x".repeat(1024 * 1024 + 1), json!({})),
            "ClusterTrustBundle.certificates.k8s.io \"huge\" is invalid: spec.trustBundle: Too long: may not be more than 1048576 bytes",
        ),
    ];
    for (b, want) in cases {
        let s = status(ctbs.create(&PostParams::default(), &b).await.unwrap_err());
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (422, "Invalid", want)
        );
    }
}

#[tokio::test]
async fn a_node_reads_cluster_trust_bundles_but_never_writes_them() {
    let server = start(Config::default().with_auth().with_certificates()).await;
    let admin = client_for(&server, &User::admin()).await;
    let admin_ctbs: Api<ClusterTrustBundle> = Api::all(admin);
    admin_ctbs
        .create(
            &PostParams::default(),
            &bundle("b", None, &ca_pem("b"), json!({"app": "x"})),
        )
        .await
        .expect("create");
    let node: Api<ClusterTrustBundle> = Api::all(client_for(&server, &User::node("n1")).await);
    assert!(node.get("b").await.is_ok());
    assert_eq!(
        node.list(&ListParams::default().labels("app=x"))
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    let mut w = node
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    let first = tokio::time::timeout(PATIENCE, w.try_next())
        .await
        .expect("in time");
    assert!(matches!(first, Ok(Some(WatchEvent::Added(_)))));
    let s = status(
        node.create(
            &PostParams::default(),
            &bundle("n", None, &ca_pem("n"), json!({})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert!(
        s.message.starts_with("clustertrustbundles.certificates.k8s.io is forbidden: User \"system:node:n1\" cannot create resource \"clustertrustbundles\" in API group \"certificates.k8s.io\" at the cluster scope"),
        "{}",
        s.message
    );
    let s = status(
        node.delete("b", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 403);

    // Without the gate a node may not even read them (and the kind is not served).
    let server = start(Config::default().with_auth()).await;
    let node: Api<ClusterTrustBundle> = Api::all(client_for(&server, &User::node("n1")).await);
    assert_eq!(
        status(node.list(&ListParams::default()).await.unwrap_err()).code,
        403
    );
}
