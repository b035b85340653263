//! The `podCertificate` projected source (PL-21, PL-22) against `nodelet-apiserver` serving
//! `certificates.k8s.io/v1beta1` PodCertificateRequests, requested as `system:node:node-1`
//! (Node authorizer and NodeRestriction on), answered by the stand-in's test signer.

use k8s_openapi::api::certificates::v1beta1::PodCertificateRequest;
use k8s_openapi::api::core::v1::Pod;
use nodelet_apiserver::testing::{PodCertificateSigner, SignerMode};
use serde_json::{Value, json};
use x509_parser::pem::Pem;

use crate::support::*;

const NODE: &str = "node-1";
const SIGNER: &str = "example.com/pods";
const NOT_ISSUED: &str = "credential bundle is not issued yet";

/// The stand-in with authentication and the certificates group, node `node-1`, the volume
/// manager as `system:node:node-1` (gate on unless `gate` is false: the agent builds a pod
/// certificate manager, without jitter), and a signer.
async fn env(gate: bool) -> (Env, PodCertificateSigner) {
    let server = nodelet_apiserver::Config::default()
        .with_auth()
        .with_certificates();
    let env = Env::start_with(Options {
        server: Some(server),
        node: Some(NODE),
        sources: SourceOptions {
            pod_certificates: gate,
            ..SourceOptions::default()
        },
        ..Options::default()
    })
    .await;
    env.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}));
    let signer = PodCertificateSigner::start(env.server.client(), SIGNER)
        .await
        .unwrap();
    (env, signer)
}

/// Pod `name` on node-1 with projected volume `certs` holding `source` (a podCertificate
/// projection for the test signer, with `keyType` as given) and a security context.
fn pod(env: &Env, name: &str, key_type: &str, security: Option<Value>) -> std::sync::Arc<Pod> {
    let mut spec = json!({
        "nodeName": NODE,
        "containers": [{"name": "c", "image": "x",
            "volumeMounts": [{"name": "certs", "mountPath": "/var/run/certs"}]}],
        "volumes": [{"name": "certs", "projected": {"sources": [
            {"podCertificate": {"signerName": SIGNER, "keyType": key_type,
                "credentialBundlePath": "bundle.pem", "keyPath": "key.pem",
                "certificateChainPath": "chain.pem",
                "userAnnotations": {"example.com/purpose": "test"}}}]}}],
    });
    if let Some(sc) = security {
        spec["securityContext"] = sc;
    }
    env.create_pod_json(PodBuilder::new("default", name).spec(spec).json())
}

async fn requests(env: &Env) -> Vec<PodCertificateRequest> {
    let api: kube::Api<PodCertificateRequest> = kube::Api::all(env.server.client());
    api.list(&Default::default()).await.unwrap().items
}

fn is_failed_mount(e: &nodelet_core::events::RecordedEvent, text: &str) -> bool {
    e.reason == "FailedMount" && e.message.contains(text)
}

// PL-21: the pod waits (FailedMount "not issued yet", nothing on disk) until the signer issues;
// then the bundle is the key followed by the chain, the chain verifies against the signer's CA
// and certifies the projected key; the request is filled as the kubelet fills it.
#[tokio::test]
async fn the_volume_waits_for_the_signer_then_holds_the_key_and_a_chain_from_its_ca() {
    let (env, signer) = env(true).await;
    signer.set_mode(SignerMode::Hold);
    let p = pod(&env, "p", "ED25519", None);
    env.add_pod(&p);
    env.event(|e| is_failed_mount(e, NOT_ISSUED)).await;
    let dir = env.dir(&p, PROJECTED, "certs");
    assert!(
        files(&dir).is_empty(),
        "nothing is projected before issuance"
    );

    signer.set_mode(SignerMode::Issue);
    within(env.vm.wait_for_attach_and_mount(&admitted(&p)))
        .await
        .unwrap();
    let seen = files(&dir);
    let (key, chain) = (&seen["key.pem"], &seen["chain.pem"]);
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    assert_eq!(seen["bundle.pem"], format!("{key}{chain}"));
    assert_eq!(modes(&dir)["bundle.pem"], 0o644);

    let leaf = Pem::iter_from_buffer(chain.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let leaf = leaf.parse_x509().unwrap();
    let ca = Pem::iter_from_buffer(signer.ca_pem().as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let ca = ca.parse_x509().unwrap();
    leaf.verify_signature(Some(ca.public_key())).unwrap();
    let projected_key = rcgen::KeyPair::from_pem(key).unwrap();
    assert_eq!(
        leaf.public_key().raw,
        rcgen::PublicKeyData::subject_public_key_info(&projected_key).as_slice()
    );

    let all = requests(&env).await;
    assert_eq!(all.len(), 1);
    let r = &all[0];
    assert!(r.metadata.name.as_deref().unwrap().starts_with("req-"));
    let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((&*owner.api_version, &*owner.kind), ("v1", "Pod"));
    assert_eq!(owner.uid, p.metadata.uid.clone().unwrap());
    assert_eq!(
        (&*r.spec.node_name, &*r.spec.service_account_name),
        (NODE, "default")
    );
    assert!(!r.spec.node_uid.is_empty() && !r.spec.service_account_uid.is_empty());
    assert_eq!(
        r.spec.unverified_user_annotations.as_ref().unwrap()["example.com/purpose"],
        "test"
    );
}

// PL-21, PL-11: with fsGroup (and a run-as user) every certificate file is 0600 before fsGroup
// adds group read: 0640, owned by the user.
#[tokio::test]
async fn with_fs_group_the_certificate_files_are_0640_and_owned_by_the_user() {
    use std::os::unix::fs::MetadataExt;
    let (env, _signer) = env(true).await;
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let p = pod(
        &env,
        "p",
        "ECDSAP384",
        Some(json!({"fsGroup": gid, "runAsUser": uid})),
    );
    env.add_and_mount(&p).await;
    let dir = env.dir(&p, PROJECTED, "certs");
    let m = modes(&dir);
    assert_eq!(
        (m["bundle.pem"], m["key.pem"], m["chain.pem"]),
        (0o640, 0o640, 0o640)
    );
    let meta = std::fs::metadata(dir.join("key.pem")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (uid, gid));
}

// PL-22: a denied request is terminal: one `Denied` Warning event, every later SetUp fails
// with the kubelet's text, and no second request is made.
#[tokio::test]
async fn a_denied_request_gives_one_warning_event_and_no_second_request() {
    let (env, signer) = env(true).await;
    signer.set_mode(SignerMode::Deny {
        reason: "NotAllowed".into(),
        message: "not for you".into(),
    });
    let p = pod(&env, "p", "ED25519", None);
    env.add_pod(&p);
    let denied = "PodCertificateRequest was permanently denied: \
                  reason=\"NotAllowed\" message=\"not for you\"";
    env.event(|e| is_failed_mount(e, denied)).await;
    // Retries after the denial: still denied, still one request.
    env.until("the denial is reported again", || {
        env.events
            .with_reason("FailedMount")
            .iter()
            .filter(|e| e.message.contains(denied))
            .count()
            >= 2
    })
    .await;
    let warnings = env.events.with_reason("Denied");
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].type_, nodelet_core::EventType::Warning);
    let all = requests(&env).await;
    assert_eq!(all.len(), 1);
    assert_eq!(
        warnings[0].message,
        format!(
            "PodCertificateRequest default/{} was denied, reason=\"NotAllowed\", \
             message=\"not for you\"",
            all[0].metadata.name.as_deref().unwrap()
        )
    );
    assert!(files(&env.dir(&p, PROJECTED, "certs")).is_empty());
}

// PL-21: with the gate off the source is unsupported and no request is made.
#[tokio::test]
async fn with_the_gate_off_the_source_is_unsupported_and_nothing_is_requested() {
    let (env, _signer) = env(false).await;
    let p = pod(&env, "p", "ED25519", None);
    env.add_pod(&p);
    env.event(|e| is_failed_mount(e, "a podCertificate projection is not supported by nodelet"))
        .await;
    assert!(requests(&env).await.is_empty());
}
