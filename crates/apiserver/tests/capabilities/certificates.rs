//! `certificates.k8s.io/v1beta1` over real HTTP with the kube client: serving only with the
//! group/version and the feature gates on, ClusterTrustBundles (CRUD, watch, validation, what
//! a node may read), PodCertificateRequests (validation, status rules, the Node authorizer and
//! NodeRestriction) and the test signer.

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::certificates::v1beta1::{ClusterTrustBundle, PodCertificateRequest};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client};
use nodelet_apiserver::testing::{Outcome, PodCertificateSigner, SignerMode};
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

// --- PodCertificateRequests ------------------------------------------------------------------

const SIGNER: &str = "example.com/test-signer";

/// What a kubelet fills in from the API: the node, pod and service account and their UIDs.
struct PodFacts {
    node_uid: String,
    pod_uid: String,
    sa_uid: String,
}

/// Node n1, namespace ns, service account `runner`, pod p1 on n1 running as it; pod p2 on n2.
fn seed_pod(h: &nodelet_apiserver::ServerHandle) -> PodFacts {
    let uid = |v: &Value| v["metadata"]["uid"].as_str().expect("uid").to_string();
    let node = h
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))
        .expect("node");
    h.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}))
        .expect("ns");
    let sa = h
        .create(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner", "namespace": "ns"}}))
        .expect("sa");
    let pod = h
        .create(super::pod_json(
            "ns",
            "p1",
            json!({"nodeName": "n1", "serviceAccountName": "runner"}),
        ))
        .expect("pod");
    h.create(super::pod_json(
        "ns",
        "p2",
        json!({"nodeName": "n2", "serviceAccountName": "runner"}),
    ))
    .expect("pod 2");
    PodFacts {
        node_uid: uid(&node),
        pod_uid: uid(&pod),
        sa_uid: uid(&sa),
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A PodCertificateRequest for pod p1 with a stub PKCS#10 request for `key`, as a v1.36
/// kubelet sends it; `extra` (an object) is merged into the spec.
fn pcr_json(name: &str, f: &PodFacts, key: &rcgen::KeyPair, extra: Value) -> Value {
    let csr = rcgen::CertificateParams::default()
        .serialize_request(key)
        .expect("csr");
    let mut spec = json!({
        "signerName": SIGNER, "podName": "p1", "podUID": f.pod_uid,
        "serviceAccountName": "runner", "serviceAccountUID": f.sa_uid,
        "nodeName": "n1", "nodeUID": f.node_uid,
        "stubPKCS10Request": b64(csr.der()),
    });
    if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
        for (k, v) in e {
            if v.is_null() {
                s.remove(&k);
            } else {
                s.insert(k, v);
            }
        }
    }
    json!({"apiVersion": V1BETA1, "kind": "PodCertificateRequest",
        "metadata": {"name": name, "namespace": "ns"}, "spec": spec})
}

fn pcr(v: Value) -> PodCertificateRequest {
    serde_json::from_value(v).expect("pcr")
}

async fn pcr_setup(config: Config) -> (ApiServer, Api<PodCertificateRequest>, PodFacts) {
    let server = start(config.with_certificates()).await;
    let facts = seed_pod(&server.handle());
    let admin = client_for(&server, &User::admin()).await;
    (server, Api::namespaced(admin, "ns"), facts)
}

#[tokio::test]
async fn a_request_is_created_with_defaults_and_without_a_status() {
    let (_server, pcrs, f) = pcr_setup(Config::default()).await;
    let key = rcgen::KeyPair::generate().expect("key");
    let mut body = pcr_json("r1", &f, &key, json!({}));
    body["status"] = json!({"certificateChain": "x"});
    let created = pcrs
        .create(&PostParams::default(), &pcr(body))
        .await
        .expect("create");
    assert_eq!(created.spec.max_expiration_seconds, Some(86_400));
    assert!(created.status.is_none_or(|s| s.certificate_chain.is_none()));
    let listed = pcrs
        .list(
            &ListParams::default()
                .fields("spec.nodeName=n1,spec.signerName=example.com/test-signer"),
        )
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
}

#[tokio::test]
async fn both_key_forms_are_accepted_and_their_proofs_checked() {
    let (_server, pcrs, f) = pcr_setup(Config::default()).await;
    // Ed25519 and ECDSA P-384 stub requests.
    for (i, alg) in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P384_SHA384]
        .into_iter()
        .enumerate()
    {
        let key = rcgen::KeyPair::generate_for(alg).expect("key");
        pcrs.create(
            &PostParams::default(),
            &pcr(pcr_json(&format!("stub{i}"), &f, &key, json!({}))),
        )
        .await
        .expect("stub request");
    }
    // The deprecated pair: a PKIX key and an Ed25519 signature over the pod UID.
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng).expect("pkcs8");
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair");
    let rc = rcgen::KeyPair::try_from(pkcs8.as_ref()).expect("rcgen key");
    use rcgen::PublicKeyData as _;
    let pkix = rc.subject_public_key_info();
    let proof = pair.sign(f.pod_uid.as_bytes());
    pcrs.create(
        &PostParams::default(),
        &pcr(pcr_json(
            "pkix",
            &f,
            &rc,
            json!({"stubPKCS10Request": null,
            "pkixPublicKey": b64(&pkix), "proofOfPossession": b64(proof.as_ref())}),
        )),
    )
    .await
    .expect("pkix request");
    let wrong = pair.sign(b"another pod");
    let s = status(
        pcrs.create(
            &PostParams::default(),
            &pcr(pcr_json(
                "bad-proof",
                &f,
                &rc,
                json!({"stubPKCS10Request": null,
                "pkixPublicKey": b64(&pkix), "proofOfPossession": b64(wrong.as_ref())}),
            )),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        s.message,
        "PodCertificateRequest.certificates.k8s.io \"bad-proof\" is invalid: spec.proofOfPossession: Invalid value: could not verify proof-of-possession signature"
    );
}

#[tokio::test]
async fn invalid_requests_are_refused_with_the_upstream_texts() {
    let (_server, pcrs, f) = pcr_setup(Config::default()).await;
    let key = rcgen::KeyPair::generate().expect("key");
    let prefix =
        |n: &str| format!("PodCertificateRequest.certificates.k8s.io \"{n}\" is invalid: ");
    let mut tampered = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .expect("csr")
        .der()
        .to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 0xff;
    let cases = [
        ("r-signer", json!({"signerName": "nope"}), "spec.signerName: Invalid value: \"nope\": must be a fully qualified domain and path of the form 'example.com/signer-name'".to_string()),
        ("r-annotations", json!({"unverifiedUserAnnotations": {"plain": "x", "example.com/ok": "y"}}), "spec.unverifiedUserAnnotations: Invalid value: \"plain\": must be a domain-prefixed key (such as \"acme.io/foo\")".to_string()),
        ("r-uid", json!({"podUID": ""}), "spec.podUID: Invalid value: \"\": must not be empty".to_string()),
        ("r-node", json!({"nodeName": "N_1"}), format!("spec.nodeName: Invalid value: \"N_1\": {}", "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")),
        ("r-short", json!({"maxExpirationSeconds": 60}), "spec.maxExpirationSeconds: Invalid value: 60: must be in the range [3600, 7862400]".to_string()),
        ("r-k8s", json!({"signerName": "kubernetes.io/x", "maxExpirationSeconds": 86401}), "spec.maxExpirationSeconds: Invalid value: 86401: must be in the range [3600, 86400]".to_string()),
        ("r-none", json!({"stubPKCS10Request": null}), "spec: Invalid value: exactly one of (stubPKCS10Request) or (pkixPublicKey, proofOfPossession) must be set".to_string()),
        ("r-junk", json!({"stubPKCS10Request": b64(b"junk")}), "spec.stubPKCS10Request: Invalid value: must be a valid PKCS#10 CSR".to_string()),
        ("r-sig", json!({"stubPKCS10Request": b64(&tampered)}), "spec.stubPKCS10Request: Invalid value: invalid signature".to_string()),
    ];
    for (name, extra, want) in cases {
        let s = status(
            pcrs.create(
                &PostParams::default(),
                &pcr(pcr_json(name, &f, &key, extra)),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            (s.code, s.message.clone()),
            (422, format!("{}{want}", prefix(name)))
        );
    }
}

#[tokio::test]
async fn the_spec_is_immutable_and_the_status_changes_only_through_its_subresource() {
    let (_server, pcrs, f) = pcr_setup(Config::default()).await;
    let key = rcgen::KeyPair::generate().expect("key");
    pcrs.create(
        &PostParams::default(),
        &pcr(pcr_json("r", &f, &key, json!({}))),
    )
    .await
    .expect("create");
    let s = status(
        pcrs.patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"podName": "p2"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    assert!(
        s.message.contains("spec: Invalid value: ") && s.message.ends_with("field is immutable"),
        "{}",
        s.message
    );
    // Labels may change; a status in the main resource is ignored.
    let patched = pcrs
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}},
                "status": {"conditions": [{"type": "Denied", "status": "True", "reason": "No", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await
        .expect("metadata patch");
    assert!(patched.status.and_then(|s| s.conditions).is_none());

    let cond = |ty: &str, status: &str| json!({"type": ty, "status": status, "reason": "Because", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let patch_status = |v: Value| {
        let pcrs = pcrs.clone();
        async move {
            pcrs.patch_status("r", &PatchParams::default(), &Patch::Merge(v))
                .await
        }
    };
    let prefix = "PodCertificateRequest.certificates.k8s.io \"r\" is invalid: ";
    let cases = [
        (
            json!({"status": {"conditions": [cond("Ready", "True")]}}),
            "status.conditions[0].type: Unsupported value: \"Ready\": supported values: \"Issued\", \"Denied\", \"Failed\"",
        ),
        (
            json!({"status": {"conditions": [cond("Denied", "False")]}}),
            "status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\"",
        ),
        (
            json!({"status": {"conditions": [cond("Denied", "True"), cond("Failed", "True")]}}),
            "status.conditions[1].type: Invalid value: \"Failed\": There may be at most one condition with type \"Issued\", \"Denied\", or \"Failed\"",
        ),
        (
            json!({"status": {"conditions": [cond("Denied", "True")], "certificateChain": "x"}}),
            "status: Invalid value: non-condition status fields must be empty when denying or failing the PodCertificateRequest",
        ),
        (
            json!({"status": {"notBefore": "2026-01-01T00:00:00Z"}}),
            "status: Invalid value: status is immutable unless transitioning to \"Issued\", \"Denied\", or \"Failed\"",
        ),
        (
            json!({"status": {"conditions": [cond("Issued", "True")]}}),
            "status.certificateChain: Invalid value: \"\": issued certificate chain must contain at least one certificate",
        ),
    ];
    for (body, want) in cases {
        let s = status(patch_status(body).await.unwrap_err());
        assert_eq!(
            (s.code, s.message.clone()),
            (422, format!("{prefix}{want}"))
        );
    }
    // A spec change through status is dropped; a denial is final.
    let denied = patch_status(
        json!({"spec": {"podName": "p2"}, "status": {"conditions": [cond("Denied", "True")]}}),
    )
    .await
    .expect("deny");
    assert_eq!(denied.spec.pod_name, "p1");
    let s = status(
        patch_status(json!({"status": {"conditions": [cond("Failed", "True")]}}))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        format!(
            "{prefix}status: Invalid value: immutable after PodCertificateRequest is issued, denied, or failed"
        )
    );
}

#[tokio::test]
async fn a_node_creates_requests_and_reads_only_its_own() {
    // No authorizer lag: the node reads its pod's service account right after seeding.
    let config = Config::default()
        .with_auth()
        .node_authorizer_lag(std::time::Duration::ZERO);
    let (server, admin_pcrs, f) = pcr_setup(config).await;
    let node = client_for(&server, &User::node("n1")).await;
    let pcrs: Api<PodCertificateRequest> = Api::namespaced(node.clone(), "ns");
    let key = rcgen::KeyPair::generate().expect("key");
    pcrs.create(
        &PostParams::default(),
        &pcr(pcr_json("mine", &f, &key, json!({}))),
    )
    .await
    .expect("node creates");
    assert!(pcrs.get("mine").await.is_ok());
    let own = pcrs
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("list own");
    assert_eq!(own.items.len(), 1);
    let mut w = pcrs
        .watch(&WatchParams::default().fields("spec.nodeName=n1"), "0")
        .await
        .expect("watch own")
        .boxed();
    let first = tokio::time::timeout(PATIENCE, w.try_next())
        .await
        .expect("in time");
    assert!(matches!(first, Ok(Some(WatchEvent::Added(_)))));

    let s = status(pcrs.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(s.code, 403);
    assert!(
        s.message
            .ends_with("can only list/watch podcertificaterequests with nodeName field selector"),
        "{}",
        s.message
    );
    let s = status(
        pcrs.list(&ListParams::default().fields("spec.nodeName=n2"))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 403);

    // Another node's request (created by an admin) is not readable.
    let mut other = pcr_json("other", &f, &key, json!({"nodeName": "n2"}));
    other["spec"]["nodeName"] = json!("n2");
    admin_pcrs
        .create(&PostParams::default(), &pcr(other))
        .await
        .expect("admin creates");
    let s = status(pcrs.get("other").await.unwrap_err());
    assert_eq!(s.code, 403);
    assert!(
        s.message
            .ends_with("no relationship found between node 'n1' and this object"),
        "{}",
        s.message
    );

    let s = status(
        pcrs.delete("mine", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert!(
        s.message
            .ends_with("nodes may not delete podcertificaterequests"),
        "{}",
        s.message
    );
    let s = status(
        pcrs.patch_status(
            "mine",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        s.message
            .ends_with("nodes may not access the status subresource of PodCertificateRequests"),
        "{}",
        s.message
    );

    // With the gate, a node reads the service accounts its pods run as.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(node, "ns");
    assert!(sas.get("runner").await.is_ok());
}

#[tokio::test]
async fn node_restriction_checks_the_node_pod_and_service_account_named() {
    let (server, _admin, f) = pcr_setup(Config::default().with_auth()).await;
    let h = server.handle();
    h.create(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "other", "namespace": "ns"}}))
        .expect("sa");
    let mut mirror = super::pod_json(
        "ns",
        "mirror",
        json!({"nodeName": "n1", "serviceAccountName": "runner"}),
    );
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    let mirror = h.create(mirror).expect("mirror pod");
    let pcrs: Api<PodCertificateRequest> =
        Api::namespaced(client_for(&server, &User::node("n1")).await, "ns");
    let key = rcgen::KeyPair::generate().expect("key");
    let forbidden = |n: &str, why: &str| {
        format!("podcertificaterequests.certificates.k8s.io \"{n}\" is forbidden: {why}")
    };
    let pod2_uid = h.get("v1", "Pod", Some("ns"), "p2").expect("p2")["metadata"]["uid"].clone();
    let cases = [
        ("a", json!({"nodeName": "n2"}), 403, forbidden("a", "PodCertificateRequest.Spec.NodeName=\"n2\", which is not the requesting node \"n1\"")),
        ("b", json!({"nodeUID": "stale"}), 500, format!("PodCertificateRequest for pod \"ns/p1\" names node UID \"stale\", inconsistent with the running node (\"{}\")", f.node_uid)),
        ("c", json!({"podName": "gone"}), 500, "while retrieving pod \"ns/gone\" named in the PodCertificateRequest: pods \"gone\" not found".to_string()),
        ("d", json!({"podUID": "stale"}), 500, format!("PodCertificateRequest for pod \"ns/p1\" contains pod UID (\"stale\") which differs from running pod \"{}\"", f.pod_uid)),
        ("e", json!({"podName": "p2", "podUID": pod2_uid}), 403, forbidden("e", "pod \"ns/p2\" is not running on node \"n1\" named in the PodCertificateRequest")),
        ("f", json!({"podName": "mirror", "podUID": mirror["metadata"]["uid"]}), 403, forbidden("f", "pod \"ns/mirror\" is a mirror pod")),
        ("g", json!({"serviceAccountName": "other"}), 403, forbidden("g", "PodCertificateRequest for pod \"ns/p1\" contains serviceAccountName (\"other\") that differs from running pod (\"runner\")")),
        ("h", json!({"serviceAccountUID": "stale"}), 500, format!("PodCertificateRequest for pod \"ns/p1\" names service account UID \"stale\", which differs from the running service account (\"{}\")", f.sa_uid)),
    ];
    for (name, extra, code, want) in cases {
        let s = status(
            pcrs.create(
                &PostParams::default(),
                &pcr(pcr_json(name, &f, &key, extra)),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(
            (s.code, s.message.as_str()),
            (code, want.as_str()),
            "{name}"
        );
    }
}

// --- The test signer and issued statuses ------------------------------------------------------

/// Waits until the request `name` has a condition, and returns it.
async fn answered(pcrs: &Api<PodCertificateRequest>, name: &str) -> PodCertificateRequest {
    let wait = async {
        loop {
            if let Ok(r) = pcrs.get(name).await
                && r.status
                    .as_ref()
                    .is_some_and(|s| s.conditions.as_ref().is_some_and(|c| !c.is_empty()))
            {
                return r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .expect("request answered in time")
}

fn condition(r: &PodCertificateRequest) -> (String, String) {
    let c = &r
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()[0];
    (c.type_.clone(), c.reason.clone())
}

#[tokio::test]
async fn the_signer_issues_a_leaf_for_the_requested_key_signed_by_its_published_ca() {
    let (server, pcrs, f) = pcr_setup(Config::default()).await;
    let admin = client_for(&server, &User::admin()).await;
    let signer = PodCertificateSigner::start(admin.clone(), SIGNER)
        .await
        .expect("signer");
    let bundle = signer.publish_trust_bundle().await.expect("publish");
    assert_eq!(
        bundle.metadata.name.as_deref(),
        Some("example.com:test-signer:ca")
    );
    assert_eq!(bundle.spec.trust_bundle, signer.ca_pem());
    assert_eq!(bundle.spec.signer_name.as_deref(), Some(SIGNER));
    // Publishing again updates the same bundle (here: its labels).
    let labels = [("app".to_string(), "x".to_string())].into_iter().collect();
    let again = signer
        .publish_trust_bundle_labeled(&labels)
        .await
        .expect("republish");
    assert_eq!(again.metadata.labels, Some(labels));

    let key = rcgen::KeyPair::generate().expect("key");
    pcrs.create(
        &PostParams::default(),
        &pcr(pcr_json("r", &f, &key, json!({}))),
    )
    .await
    .expect("create");
    let issued = answered(&pcrs, "r").await;
    assert_eq!(
        condition(&issued),
        ("Issued".to_string(), "Issued".to_string())
    );
    let st = issued.status.expect("status");
    let chain = st.certificate_chain.expect("chain");
    let (_, block) = x509_parser::pem::parse_x509_pem(chain.as_bytes()).expect("pem");
    let leaf = block.parse_x509().expect("leaf");
    use rcgen::PublicKeyData as _;
    assert_eq!(
        leaf.public_key().raw,
        key.subject_public_key_info().as_slice()
    );
    let (_, ca_block) =
        x509_parser::pem::parse_x509_pem(signer.ca_pem().as_bytes()).expect("ca pem");
    let ca = ca_block.parse_x509().expect("ca");
    assert!(leaf.verify_signature(Some(ca.public_key())).is_ok());
    let (nb, na, refresh) = (
        st.not_before.expect("notBefore").0,
        st.not_after.expect("notAfter").0,
        st.begin_refresh_at.expect("beginRefreshAt").0,
    );
    assert_eq!(leaf.validity().not_before.timestamp(), nb.as_second());
    assert_eq!(na.as_second() - nb.as_second(), 86_400);
    assert_eq!(refresh.as_second() - nb.as_second(), 43_200);
    assert!(
        matches!(&signer.decisions()[..], [d] if d.name == "r" && matches!(d.outcome, Outcome::Issued(_)))
    );

    // An issued request is final.
    let s = status(
        pcrs.patch_status(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"beginRefreshAt": null}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(s.message.ends_with("status: Invalid value: immutable after PodCertificateRequest is issued, denied, or failed"), "{}", s.message);
}

#[tokio::test]
async fn the_signer_denies_fails_or_holds_as_the_test_says() {
    let (server, pcrs, f) = pcr_setup(Config::default()).await;
    let signer = PodCertificateSigner::start(client_for(&server, &User::admin()).await, SIGNER)
        .await
        .expect("signer");
    let key = rcgen::KeyPair::generate().expect("key");
    signer.set_mode(SignerMode::Hold);
    pcrs.create(
        &PostParams::default(),
        &pcr(pcr_json("held", &f, &key, json!({}))),
    )
    .await
    .expect("create");
    // Held: answered only once the mode changes.
    signer.set_mode(SignerMode::Deny {
        reason: "NotToday".into(),
        message: "no".into(),
    });
    assert_eq!(
        condition(&answered(&pcrs, "held").await),
        ("Denied".into(), "NotToday".into())
    );
    signer.set_mode(SignerMode::Fail {
        reason: "Broken".into(),
        message: "oops".into(),
    });
    pcrs.create(
        &PostParams::default(),
        &pcr(pcr_json("fails", &f, &key, json!({}))),
    )
    .await
    .expect("create");
    assert_eq!(
        condition(&answered(&pcrs, "fails").await),
        ("Failed".into(), "Broken".into())
    );
    let names: Vec<_> = signer.decisions().into_iter().map(|d| d.name).collect();
    assert_eq!(names, vec!["held", "fails"]);
}

#[tokio::test]
async fn an_issued_status_must_fit_the_request_and_the_leaf() {
    let (server, pcrs, f) = pcr_setup(Config::default()).await;
    let admin = client_for(&server, &User::admin()).await;
    let _signer = PodCertificateSigner::start(admin, SIGNER)
        .await
        .expect("signer");
    let key = rcgen::KeyPair::generate().expect("key");
    pcrs.create(
        &PostParams::default(),
        &pcr(pcr_json("good", &f, &key, json!({}))),
    )
    .await
    .expect("create");
    let good = answered(&pcrs, "good").await;
    let good_status = serde_json::to_value(good.status.expect("status")).expect("json");
    // Requests for another signer nobody answers: statuses are written by hand.
    let held = |name: &str, k: &rcgen::KeyPair, extra: Value| {
        let mut body = pcr_json(name, &f, k, extra);
        body["spec"]["signerName"] = json!("example.com/nobody");
        pcr(body)
    };
    let other_key = rcgen::KeyPair::generate().expect("key");
    let prefix =
        |n: &str| format!("PodCertificateRequest.certificates.k8s.io \"{n}\" is invalid: ");
    let write = |name: &'static str, status: Value| {
        let pcrs = pcrs.clone();
        async move {
            pcrs.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        }
    };
    pcrs.create(
        &PostParams::default(),
        &held("other-key", &other_key, json!({})),
    )
    .await
    .expect("create");
    let s = status(write("other-key", good_status.clone()).await.unwrap_err());
    assert!(
        s.message.starts_with(&prefix("other-key"))
            && s.message
                .ends_with("leaf certificate was not issued to the requested public key"),
        "{}",
        s.message
    );

    pcrs.create(
        &PostParams::default(),
        &held("short", &key, json!({"maxExpirationSeconds": 3600})),
    )
    .await
    .expect("create");
    let s = status(write("short", good_status.clone()).await.unwrap_err());
    assert_eq!(
        s.message,
        format!(
            "{}status.certificateChain: Invalid value: 86400000000000: leaf certificate lifetime must be <= spec.maxExpirationSeconds (3600)",
            prefix("short")
        )
    );

    pcrs.create(&PostParams::default(), &held("times", &key, json!({})))
        .await
        .expect("create");
    let mut wrong_nb = good_status.clone();
    wrong_nb["notBefore"] = json!("2020-01-01T00:00:00Z");
    let s = status(write("times", wrong_nb).await.unwrap_err());
    assert_eq!(
        s.message,
        format!(
            "{}status.notBefore: Invalid value: \"2020-01-01T00:00:00Z\": must be set to the NotBefore time encoded in the leaf certificate",
            prefix("times")
        )
    );
    let mut early = good_status.clone();
    early["beginRefreshAt"] = early["notBefore"].clone();
    let s = status(write("times", early).await.unwrap_err());
    assert!(
        s.message
            .ends_with("must be at least 10 minutes after status.notBefore"),
        "{}",
        s.message
    );
    let mut missing = good_status.clone();
    missing["notAfter"] = Value::Null;
    let s = status(write("times", missing).await.unwrap_err());
    assert_eq!(
        s.message,
        format!(
            "{}status.notAfter: Required value: must be present and consistent with the issued certificate",
            prefix("times")
        )
    );
    // The signer's own status, copied, is valid for a request with the same key.
    write("times", good_status)
        .await
        .expect("a valid issued status");
}

#[tokio::test]
async fn manifests_load_both_kinds_when_the_group_is_served() {
    let key = rcgen::KeyPair::generate().expect("key");
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .expect("csr");
    let yaml = format!(
        "apiVersion: {V1BETA1}\nkind: ClusterTrustBundle\nmetadata: {{name: example.com:test-signer:ca}}\n\
         spec:\n  signerName: {SIGNER}\n  trustBundle: |\n{}\
         ---\napiVersion: {V1BETA1}\nkind: PodCertificateRequest\nmetadata: {{name: r, namespace: ns}}\n\
         spec: {{signerName: {SIGNER}, podName: p, podUID: u1, serviceAccountName: default, \
         serviceAccountUID: u2, nodeName: n1, nodeUID: u3, stubPKCS10Request: {}}}\n",
        ca_pem("m")
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>(),
        b64(csr.der()),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("certs.yaml"), &yaml).expect("write");

    let server = start(Config::default().with_certificates()).await;
    let h = server.handle();
    let sync = nodelet_apiserver::ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("sync");
    assert!(sync.errors().is_empty(), "{:?}", sync.errors());
    assert!(
        h.get(
            V1BETA1,
            "ClusterTrustBundle",
            None,
            "example.com:test-signer:ca"
        )
        .is_some()
    );
    let r = h
        .get(V1BETA1, "PodCertificateRequest", Some("ns"), "r")
        .expect("pcr");
    assert_eq!(r["spec"]["maxExpirationSeconds"], 86_400);

    // Not served: each document is reported, nothing is created.
    let server = start(Config::default()).await;
    let sync = nodelet_apiserver::ManifestSync::start(server.handle(), dir.path())
        .await
        .expect("sync");
    let errors: Vec<String> = sync.errors().into_iter().map(|p| p.error).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("is not served"), "{errors:?}");
}

// --- The binary's flags ----------------------------------------------------------------------

#[test]
fn the_binary_takes_runtime_config_and_feature_gates_and_refuses_unknown_gates() {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::process::{Command, Stdio};
    let bin = env!("CARGO_BIN_EXE_nodelet-apiserver");
    for (bad, why) in [
        (
            vec!["--feature-gates", "ClusterTrustBundle=true,Nope=true"],
            "unrecognized feature gate: Nope",
        ),
        (
            vec!["--feature-gates", "ClusterTrustBundle=maybe"],
            "invalid value of ClusterTrustBundle: maybe",
        ),
        (
            vec!["--runtime-config", "certificates.k8s.io/v1beta1"],
            "missing bool value",
        ),
    ] {
        let out = Command::new(bin)
            .args(&bad)
            .output()
            .expect("run nodelet-apiserver");
        assert_eq!(out.status.code(), Some(64), "{bad:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{bad:?}: {stderr}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--plain-http"])
        .args(["--runtime-config", "certificates.k8s.io/v1beta1=true"])
        .args([
            "--feature-gates",
            "ClusterTrustBundle=true",
            "--feature-gates",
            "PodCertificateRequest=true",
        ])
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn nodelet-apiserver");
    let stdout = child.stdout.take().expect("stdout");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(PATIENCE).expect("the serving line");
    let addr = line
        .trim()
        .strip_prefix("serving http://")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(stream, "GET /apis/certificates.k8s.io/v1beta1 HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(
        answer.contains("\"clustertrustbundles\"")
            && answer.contains("\"podcertificaterequests/status\""),
        "{answer}"
    );
}
