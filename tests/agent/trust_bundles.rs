//! The `clusterTrustBundle` projected source through the agent (PL-17, PL-20): the gates are
//! turned on by a KubeletConfiguration file read as `--config` reads it, the agent (as
//! `system:node:<node>`) projects a ClusterTrustBundle into a pod's volume, and an update of
//! the bundle reaches the file without any pod change.

use serde_json::json;

use nodelet_testutil::{PodBuilder, TEST_CAS, cluster_trust_bundle};

use crate::support::{NODE, PATIENCE, World, gates_from_config_file, poll_pause};

/// The CERTIFICATE blocks of a PEM text, sorted.
fn blocks(pem: &str) -> Vec<String> {
    let mut b: Vec<String> = pem
        .split_inclusive("-----END CERTIFICATE-----\n")
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .map(str::to_owned)
        .collect();
    b.sort();
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gets_its_trust_bundle_and_an_update_reaches_the_file() {
    let gates = gates_from_config_file(&[
        ("ClusterTrustBundle", true),
        ("ClusterTrustBundleProjection", true),
    ]);
    let world = World::start_on(
        nodelet_apiserver::Config::default().with_certificates(),
        |h| {
            h.create(cluster_trust_bundle(
                "example.com:corp:root",
                Some("example.com/corp"),
                &[("trust", "corp")],
                TEST_CAS[0],
            ))
            .unwrap_or_else(|e| panic!("{e}"));
        },
        |c| c.feature_gates = gates,
    )
    .await;
    let h = world.server.handle();
    let pod = h
        .create(
            PodBuilder::new("default", "p")
                .node(NODE)
                .container(json!({"name": "c", "image": "x",
                    "volumeMounts": [{"name": "trust", "mountPath": "/etc/trust"}]}))
                .volume(
                    json!({"name": "trust", "projected": {"sources": [{"clusterTrustBundle": {
                    "signerName": "example.com/corp",
                    "labelSelector": {"matchLabels": {"trust": "corp"}},
                    "path": "ca-bundle.pem"}}]}}),
                )
                .json(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let file = world
        .pod_dir(&pod)
        .join("volumes/kubernetes.io~projected/trust/ca-bundle.pem");
    let read = || std::fs::read_to_string(&file).unwrap_or_default();
    let wait_for = |want: Vec<String>, what: &'static str| {
        let read = &read;
        async move {
            tokio::time::timeout(PATIENCE, async {
                while blocks(&read()) != want {
                    poll_pause().await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{what}: {:?}", read()));
        }
    };
    wait_for(blocks(TEST_CAS[0]), "the bundle was never projected").await;

    // A second bundle of the signer with the same label: both CAs, with no pod change.
    h.create(cluster_trust_bundle(
        "example.com:corp:next",
        Some("example.com/corp"),
        &[("trust", "corp")],
        TEST_CAS[1],
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut both = blocks(TEST_CAS[0]);
    both.extend(blocks(TEST_CAS[1]));
    both.sort();
    wait_for(both, "the new bundle never reached the file").await;

    // The old root is replaced: only the new CA is left.
    h.update(cluster_trust_bundle(
        "example.com:corp:root",
        Some("example.com/corp"),
        &[("trust", "retired")],
        TEST_CAS[0],
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    wait_for(
        blocks(TEST_CAS[1]),
        "the relabelled bundle never left the file",
    )
    .await;
    world.stop().await;
}
