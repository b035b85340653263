//! The `podCertificate` projected source through the agent (PL-21, PL-22): the
//! `PodCertificateRequest` gate comes from a KubeletConfiguration file read as `--config`
//! reads it; the agent (as `system:node:<node>`) requests the pod's certificate and the pod's
//! containers only get their env once the stand-in's test signer has issued it. With the gate
//! off the source is unsupported. The source needs the agent's cargo feature
//! `pod-certificates`; without it a podCertificate volume fails to mount, named in the error.

use k8s_openapi::api::certificates::v1beta1::PodCertificateRequest;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
#[cfg(feature = "pod-certificates")]
use nodelet_apiserver::testing::{PodCertificateSigner, SignerMode};
use serde_json::{Value, json};

use nodelet_testutil::PodBuilder;

#[cfg(feature = "pod-certificates")]
use crate::support::wait_for_env_var;
use crate::support::{NODE, PATIENCE, World, gates_from_config_file, poll_pause};

const SIGNER: &str = "example.com/workloads";

/// The stand-in serving PodCertificateRequests, the test node's Node, and the agent with the
/// gate as the config file says.
async fn world(gate: bool) -> World {
    let gates = gates_from_config_file(&[("PodCertificateRequest", gate)]);
    World::start_on(
        nodelet_apiserver::Config::default().with_certificates(),
        |h| {
            h.create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}))
                .unwrap_or_else(|e| panic!("{e}"));
        },
        |c| c.feature_gates = gates,
    )
    .await
}

/// Pod `p` on the test node: container `c` with env `GREETING=hello`, volume `certs` with the
/// pod's certificate.
fn pod() -> Value {
    PodBuilder::new("default", "p")
        .node(NODE)
        .container(json!({"name": "c", "image": "x",
            "env": [{"name": "GREETING", "value": "hello"}],
            "volumeMounts": [{"name": "certs", "mountPath": "/var/run/certs"}]}))
        .volume(
            json!({"name": "certs", "projected": {"sources": [{"podCertificate": {
            "signerName": SIGNER, "keyType": "ECDSAP256",
            "credentialBundlePath": "credential.pem"}}]}}),
        )
        .json()
}

/// Waits until a FailedMount event of pod `p` contains `text`; on a timeout the panic lists the
/// events there were.
async fn wait_for_failed_mount(admin: &kube::Client, text: &str) {
    let api: Api<Event> = Api::namespaced(admin.clone(), "default");
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let events = api.list(&Default::default()).await.map(|l| l.items);
            if events.unwrap_or_default().iter().any(|e| {
                e.involved_object.name.as_deref() == Some("p")
                    && e.reason.as_deref() == Some("FailedMount")
                    && e.message.as_deref().is_some_and(|m| m.contains(text))
            }) {
                return;
            }
            poll_pause().await;
        }
    })
    .await;
    if found.is_err() {
        let listed = tokio::time::timeout(PATIENCE, api.list(&Default::default())).await;
        let seen: Vec<String> = listed
            .ok()
            .and_then(Result::ok)
            .map(|l| l.items)
            .unwrap_or_default()
            .iter()
            .map(|e| {
                format!(
                    "{:?} {:?}: {:?}",
                    e.involved_object.name, e.reason, e.message
                )
            })
            .collect();
        panic!("no FailedMount event with {text:?}; the events: {seen:?}");
    }
}

async fn requests(admin: &kube::Client) -> Vec<PodCertificateRequest> {
    let api: Api<PodCertificateRequest> = Api::all(admin.clone());
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(feature = "pod-certificates")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_starts_only_after_the_signer_issues_its_certificate() {
    let world = world(true).await;
    let signer = PodCertificateSigner::start(world.admin.clone(), SIGNER)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    signer.set_mode(SignerMode::Hold);
    let pod = world
        .server
        .handle()
        .create(pod())
        .unwrap_or_else(|e| panic!("{e}"));
    let pod_dir = world.pod_dir(&pod);

    // The node asked, the signer holds: the volume waits and the container has no env yet.
    wait_for_failed_mount(&world.admin, "credential bundle is not issued yet").await;
    let asked = requests(&world.admin).await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].spec.node_name, NODE);
    assert_eq!(asked[0].spec.pod_name, "p");
    let env = pod_dir.join("containers/c/env.json");
    assert!(
        !env.exists(),
        "the container came up before its certificate"
    );

    signer.set_mode(SignerMode::Issue);
    assert_eq!(wait_for_env_var(&pod_dir, "c", "GREETING").await, "hello");
    let bundle = std::fs::read_to_string(
        pod_dir.join("volumes/kubernetes.io~projected/certs/credential.pem"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let key_end = bundle
        .find("-----END PRIVATE KEY-----\n")
        .unwrap_or_else(|| panic!("no key first in {bundle:?}"));
    assert!(bundle.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    assert!(bundle[key_end..].contains("-----BEGIN CERTIFICATE-----\n"));
    assert_eq!(requests(&world.admin).await.len(), 1);
    drop(signer);
    world.stop().await;
}

#[cfg(feature = "pod-certificates")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gate_off_the_pod_fails_as_unsupported_and_nothing_is_requested() {
    let world = world(false).await;
    let pod = world
        .server
        .handle()
        .create(pod())
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for_failed_mount(
        &world.admin,
        "a podCertificate projection is not supported by nodelet",
    )
    .await;
    assert!(requests(&world.admin).await.is_empty());
    assert!(!world.pod_dir(&pod).join("containers/c/env.json").exists());
    world.stop().await;
}

// Built without the `pod-certificates` feature (no aws-lc linked), the gate on: the volume
// fails to mount with an error naming it and the missing feature; nothing is requested.
#[cfg(not(feature = "pod-certificates"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_built_without_pod_certificates_fails_the_mount_naming_the_volume() {
    let world = world(true).await;
    let pod = world
        .server
        .handle()
        .create(pod())
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for_failed_mount(
        &world.admin,
        "the podCertificate projection of volume \"certs\" cannot be served: this agent was \
         built without pod certificates (cargo feature `pod-certificates`)",
    )
    .await;
    assert!(requests(&world.admin).await.is_empty());
    assert!(!world.pod_dir(&pod).join("containers/c/env.json").exists());
    world.stop().await;
}
