//! The `clusterTrustBundle` projected source (PL-17, PL-20) against `nodelet-apiserver`
//! serving `certificates.k8s.io/v1beta1`, read as `system:node:node-1` (the Node authorizer
//! lets a node get, list and watch ClusterTrustBundles).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::support::*;

const NODE: &str = "node-1";
const SIGNER: &str = "example.com/ca";

/// The stand-in with authentication and (unless `certificates` is false) the certificates
/// group; the volume manager as `system:node:node-1`, gates on (the agent builds a trust bundle
/// manager) unless `gates` is false.
async fn env(certificates: bool, gates: bool) -> Env {
    let mut server = nodelet_apiserver::Config::default().with_auth();
    if certificates {
        server = server.with_certificates();
    }
    Env::start_with(Options {
        server: Some(server),
        node: Some(NODE),
        sources: SourceOptions {
            trust_bundles: gates,
            ..SourceOptions::default()
        },
        ..Options::default()
    })
    .await
}

/// Pod `name` on node-1 mounting one projected volume `ctb` with `source` as its only
/// source, and an optional pod security context.
fn pod(env: &Env, name: &str, source: Value, security: Option<Value>) -> std::sync::Arc<Pod> {
    let mut spec = json!({
        "nodeName": NODE,
        "containers": [{"name": "c", "image": "x",
            "volumeMounts": [{"name": "ctb", "mountPath": "/etc/ca"}]}],
        "volumes": [{"name": "ctb", "projected": {"sources": [{"clusterTrustBundle": source}]}}],
    });
    if let Some(sc) = security {
        spec["securityContext"] = sc;
    }
    env.create_pod_json(PodBuilder::new("default", name).spec(spec).json())
}

/// The certificates of a PEM text, as a set of their (normalized) PEM blocks.
fn certs(pem: &str) -> BTreeSet<String> {
    pem.split_inclusive("-----END CERTIFICATE-----\n")
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .map(str::to_owned)
        .collect()
}

fn set(pems: &[&str]) -> BTreeSet<String> {
    pems.iter().flat_map(|p| certs(p)).collect()
}

fn bundle_file(env: &Env, pod: &Pod) -> String {
    files(&env.dir(pod, PROJECTED, "ctb"))
        .remove("ca.pem")
        .unwrap_or_default()
}

#[tokio::test]
async fn a_bundle_by_name_is_projected_and_its_update_reaches_the_file() {
    let env = env(true, true).await;
    env.create(cluster_trust_bundle("corp-ca", None, &[], TEST_CAS[0]));
    let p = pod(
        &env,
        "p",
        json!({"name": "corp-ca", "path": "ca.pem"}),
        None,
    );
    env.add_and_mount(&p).await;
    assert_eq!(bundle_file(&env, &p), TEST_CAS[0]);
    let dir = env.dir(&p, PROJECTED, "ctb");
    assert_eq!(modes(&dir)["ca.pem"], 0o644);

    // The new CA reaches the file without any pod sync.
    let both = format!("{}{}", TEST_CAS[0], TEST_CAS[1]);
    env.update(cluster_trust_bundle("corp-ca", None, &[], &both));
    env.until("the updated bundle is on disk", || {
        certs(&bundle_file(&env, &p)) == set(&[TEST_CAS[0], TEST_CAS[1]])
    })
    .await;

    // Every request of the node was allowed; ClusterTrustBundles were listed and watched
    // cluster-wide, never one by one.
    let node_user = format!("system:node:{NODE}");
    let records: Vec<_> = env
        .api
        .requests()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(node_user.as_str()))
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r.verb == "watch" && r.resource == "clustertrustbundles")
    );
    for r in &records {
        assert!(r.status < 400, "refused: {r:?}");
        if r.resource == "clustertrustbundles" {
            assert_eq!(
                (r.namespace.as_deref(), r.name.as_deref()),
                (None, None),
                "{r:?}"
            );
        }
    }
}

#[tokio::test]
async fn bundles_of_a_signer_are_selected_by_label_and_a_new_bundle_arrives() {
    let env = env(true, true).await;
    for (name, team, pem) in [
        ("example.com:ca:one", "a", TEST_CAS[0]),
        ("example.com:ca:two", "b", TEST_CAS[1]),
    ] {
        env.create(cluster_trust_bundle(
            name,
            Some(SIGNER),
            &[("team", team)],
            pem,
        ));
    }
    let team_a = pod(
        &env,
        "team-a",
        json!({"signerName": SIGNER, "labelSelector": {"matchLabels": {"team": "a"}}, "path": "ca.pem"}),
        None,
    );
    let all = pod(
        &env,
        "all",
        json!({"signerName": SIGNER, "labelSelector": {}, "path": "ca.pem"}),
        None,
    );
    env.add_and_mount(&team_a).await;
    env.add_and_mount(&all).await;
    assert_eq!(certs(&bundle_file(&env, &team_a)), set(&[TEST_CAS[0]]));
    assert_eq!(
        certs(&bundle_file(&env, &all)),
        set(&[TEST_CAS[0], TEST_CAS[1]])
    );

    // A new bundle of the signer for team a reaches both volumes; the CA it shares with
    // bundle one is written once.
    let three = format!("{}{}", TEST_CAS[2], TEST_CAS[0]);
    env.create(cluster_trust_bundle(
        "example.com:ca:three",
        Some(SIGNER),
        &[("team", "a")],
        &three,
    ));
    env.until("the new bundle is on disk", || {
        certs(&bundle_file(&env, &team_a)) == set(&[TEST_CAS[0], TEST_CAS[2]])
            && certs(&bundle_file(&env, &all)) == set(&TEST_CAS)
    })
    .await;
    let blocks = |pod: &Pod| {
        bundle_file(&env, pod)
            .matches("-----BEGIN CERTIFICATE-----")
            .count()
    };
    assert_eq!((blocks(&team_a), blocks(&all)), (2, 3));
}

// The stand-in's test signer (what a podCertificate signer does) publishes its CA as a
// bundle of its signer: a pod trusting that signer gets it, and a relabelled republish that
// its selector no longer matches leaves the pod with the other bundle only.
#[tokio::test]
async fn a_signers_published_ca_reaches_pods_that_trust_the_signer() {
    let env = env(true, true).await;
    let signer =
        nodelet_apiserver::testing::PodCertificateSigner::start(env.admin(), "example.com/issuer")
            .await
            .unwrap();
    signer
        .publish_trust_bundle_labeled(&[("trust".to_owned(), "yes".to_owned())].into())
        .await
        .unwrap();
    env.create(cluster_trust_bundle(
        "example.com:issuer:previous",
        Some("example.com/issuer"),
        &[("trust", "yes")],
        TEST_CAS[0],
    ));
    let p = pod(
        &env,
        "p",
        json!({"signerName": "example.com/issuer",
            "labelSelector": {"matchLabels": {"trust": "yes"}}, "path": "ca.pem"}),
        None,
    );
    env.add_and_mount(&p).await;
    assert_eq!(
        certs(&bundle_file(&env, &p)),
        set(&[signer.ca_pem(), TEST_CAS[0]])
    );
    signer
        .publish_trust_bundle_labeled(&[("trust".to_owned(), "no".to_owned())].into())
        .await
        .unwrap();
    env.until("the relabelled CA left the file", || {
        certs(&bundle_file(&env, &p)) == set(&[TEST_CAS[0]])
    })
    .await;
}

#[tokio::test]
async fn a_missing_bundle_fails_the_mount_until_created_and_an_optional_one_is_an_empty_file() {
    let env = env(true, true).await;
    let missing = pod(
        &env,
        "missing",
        json!({"name": "late-ca", "path": "ca.pem"}),
        None,
    );
    env.add_pod(&missing);
    let e = env.event(|e| e.reason == "FailedMount").await;
    assert_eq!(
        e.message,
        "MountVolume.SetUp failed for volume \"ctb\" : while getting ClusterTrustBundle: \
         clustertrustbundle.certificates.k8s.io \"late-ca\" not found"
    );
    // The bundle appears: the volume is mounted at once (the change ends the backoff).
    env.create(cluster_trust_bundle("late-ca", None, &[], TEST_CAS[1]));
    within(env.vm.wait_for_attach_and_mount(&admitted(&missing)))
        .await
        .unwrap();
    assert_eq!(bundle_file(&env, &missing), TEST_CAS[1]);

    let optional = pod(
        &env,
        "optional",
        json!({"name": "nope", "path": "ca.pem", "optional": true}),
        None,
    );
    env.add_and_mount(&optional).await;
    assert_eq!(
        files(&env.dir(&optional, PROJECTED, "ctb")),
        text(&[("ca.pem", "")])
    );

    // No selector selects nothing: zero matches.
    let nil = pod(
        &env,
        "nil",
        json!({"signerName": SIGNER, "path": "ca.pem"}),
        None,
    );
    env.add_pod(&nil);
    let e = env
        .event(|e| e.reason == "FailedMount" && e.pod_name == "nil")
        .await;
    assert!(
        e.message.ends_with(
            ": combination of signerName and labelSelector matched zero ClusterTrustBundles"
        ),
        "{}",
        e.message
    );
}

// PL-17: as a token, the file is 0600 with an fsUser or fsGroup; fsGroup adds group read.
#[tokio::test]
async fn with_an_fs_group_the_bundle_file_is_0640() {
    let env = env(true, true).await;
    env.create(cluster_trust_bundle("corp-ca", None, &[], TEST_CAS[0]));
    let gid = nix::unistd::getegid().as_raw();
    let p = pod(
        &env,
        "p",
        json!({"name": "corp-ca", "path": "ca.pem"}),
        Some(json!({"fsGroup": gid})),
    );
    env.add_and_mount(&p).await;
    assert_eq!(modes(&env.dir(&p, PROJECTED, "ctb"))["ca.pem"], 0o640);
}

#[tokio::test]
async fn a_server_without_the_api_fails_the_mount_naming_the_volume_and_the_missing_api() {
    let env = env(false, true).await;
    let p = pod(
        &env,
        "p",
        json!({"name": "corp-ca", "path": "ca.pem"}),
        None,
    );
    env.add_pod(&p);
    let e = env.event(|e| e.reason == "FailedMount").await;
    assert_eq!(
        e.message,
        "MountVolume.SetUp failed for volume \"ctb\" : ClusterTrustBundle projection is not \
         supported by this API server: it serves clustertrustbundles in neither \
         certificates.k8s.io/v1beta1 nor certificates.k8s.io/v1alpha1"
    );
}

#[tokio::test]
async fn with_the_gates_off_the_source_is_unsupported_and_nothing_is_read() {
    let env = env(true, false).await;
    env.create(cluster_trust_bundle("corp-ca", None, &[], TEST_CAS[0]));
    let p = pod(
        &env,
        "p",
        json!({"name": "corp-ca", "path": "ca.pem"}),
        None,
    );
    env.add_pod(&p);
    let e = env.event(|e| e.reason == "FailedMount").await;
    assert_eq!(
        e.message,
        "MountVolume.SetUp failed for volume \"ctb\" : a clusterTrustBundle projection is not \
         supported by nodelet"
    );
    assert!(
        !env.api
            .requests()
            .iter()
            .any(|r| r.path.starts_with("/apis/certificates.k8s.io")),
        "nothing asked of the API"
    );
}
