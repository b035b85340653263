//! `--manifests` mode: the embedded API server is seeded from a directory, the agent runs
//! against it over HTTP with a node identity, and editing a file changes the projected file.

use std::path::Path;

use nodelet::Agent;

use nodelet_e2e::{wait_for, wait_for_content};

use crate::support::{NODE, PATIENCE, agent_config};

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
}

fn config_map(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: default\ndata:\n  greeting: {value}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_manifest_file_updates_the_projected_file() {
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(manifests.path(), "cm.yaml", &config_map("hello"));
    write(
        manifests.path(),
        "pod.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\nspec:\n  nodeName: {NODE}\n  containers:\n  - name: c\n    image: x\n    volumeMounts: [{{name: v, mountPath: /v}}]\n  volumes:\n  - name: v\n    configMap: {{name: app}}\n"
        ),
    );
    let embedded = nodelet::start_embedded(manifests.path(), NODE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let agent = Agent::start(agent_config(root.path()), embedded.node_client.clone())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let uid = embedded
        .server
        .handle()
        .get("v1", "Pod", Some("default"), "p")
        .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("pod not loaded from the manifests"));
    let file = root.path().join(format!(
        "pods/{uid}/volumes/kubernetes.io~configmap/v/greeting"
    ));
    wait_for_content(&file, b"hello")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    write(manifests.path(), "cm.yaml", &config_map("edited"));
    wait_for_content(&file, b"edited")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    agent.shutdown().await;
    drop(embedded.sync);
    embedded.server.shutdown().await;
}

/// Offline pods must look like a cluster's: they get what ServiceAccount admission gives them, and
/// the
/// agent mounts it: the `kube-api-access-*` projected volume with a token from the TokenRequest
/// endpoint, the server's CA from `kube-root-ca.crt` and the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_pod_mounts_the_kube_api_access_volume_a_cluster_gives_it() {
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(
        manifests.path(),
        "pod.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: shop\nspec:\n  nodeName: {NODE}\n  containers:\n  - name: c\n    image: x\n"
        ),
    );
    let embedded = nodelet::start_embedded(manifests.path(), NODE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(embedded.server.url().starts_with("https://"));
    let agent = Agent::start(agent_config(root.path()), embedded.node_client.clone())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let pod = embedded
        .server
        .handle()
        .get("v1", "Pod", Some("shop"), "p")
        .unwrap_or_else(|| panic!("pod not loaded from the manifests"));
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let volume = pod["spec"]["volumes"][0]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(volume.starts_with("kube-api-access-"), "{pod}");
    let dir = root.path().join(format!(
        "pods/{uid}/volumes/kubernetes.io~projected/{volume}"
    ));
    let ca = embedded.server.ca_pem().unwrap_or_default();
    wait_for_content(&dir.join("ca.crt"), ca.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for_content(&dir.join("namespace"), b"shop")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Read as a consumer would: through `token -> ..data/token`, retried, for a remount that
    // swaps `..data` (a token requested again while the pod's first updates arrive) can remove
    // the directory a read resolved a moment before.
    let path = dir.join("token");
    let token = wait_for("the projected token", || async {
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        token.split('.').count(),
        3,
        "a JWT ({} bytes, {} dots)",
        token.len(),
        token.matches('.').count()
    );
    agent.shutdown().await;
    drop(embedded.sync);
    embedded.server.shutdown().await;
}

/// Offline there is one node, so a manifest pod that names none is bound to the agent's node
/// as a scheduler would bind it (with the `Scheduled` event) and the agent materializes it; a
/// pod bound to another node stays there; editing the scheduled pod's manifest keeps its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_pod_without_a_node_is_scheduled_to_the_agent_and_mounted_there() {
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(manifests.path(), "cm.yaml", &config_map("hello"));
    let pod = |labels: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n  labels: {{{labels}}}\nspec:\n  containers:\n  - name: c\n    image: x\n    volumeMounts: [{{name: v, mountPath: /v}}]\n  volumes:\n  - name: v\n    configMap: {{name: app}}\n"
        )
    };
    write(manifests.path(), "pod.yaml", &pod("app: p"));
    write(
        manifests.path(),
        "elsewhere.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: q\n  namespace: default\nspec:\n  nodeName: other-node\n  containers:\n  - name: c\n    image: x\n",
    );
    let embedded = nodelet::start_embedded(manifests.path(), NODE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let agent = Agent::start(agent_config(root.path()), embedded.node_client.clone())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let handle = embedded.server.handle();
    let get = |name: &str| {
        handle
            .get("v1", "Pod", Some("default"), name)
            .unwrap_or_else(|| panic!("pod {name} not loaded from the manifests"))
    };
    let uid = get("p")["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let file = root.path().join(format!(
        "pods/{uid}/volumes/kubernetes.io~configmap/v/greeting"
    ));
    wait_for_content(&file, b"hello")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(get("p")["spec"]["nodeName"], NODE);
    assert_eq!(get("q")["spec"]["nodeName"], "other-node");
    let scheduled: Vec<serde_json::Value> = handle
        .list("v1", "Event", Some("default"))
        .into_iter()
        .filter(|e| e["reason"] == "Scheduled")
        .collect();
    assert_eq!(scheduled.len(), 1, "{scheduled:?}");
    assert_eq!(
        scheduled[0]["message"],
        format!("Successfully assigned default/p to {NODE}")
    );
    assert_eq!(scheduled[0]["type"], "Normal");
    assert_eq!(scheduled[0]["reportingComponent"], "default-scheduler");
    assert_eq!(scheduled[0]["involvedObject"]["uid"], uid.as_str());

    write(manifests.path(), "pod.yaml", &pod("app: p, edited: 'yes'"));
    let edited = wait_for("the edited label", || async {
        let p = get("p");
        if p["metadata"]["labels"]["edited"] == "yes" {
            Ok(p)
        } else {
            Err(format!(
                "labels {}; problems {:?}",
                p["metadata"]["labels"],
                embedded.sync.errors()
            ))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(edited["spec"]["nodeName"], NODE, "the edit keeps the node");
    assert_eq!(edited["metadata"]["uid"], uid.as_str(), "updated in place");
    agent.shutdown().await;
    drop(embedded.sync);
    embedded.server.shutdown().await;
}

/// `nodelet --manifests`: the admin kubeconfig carries the CA and a token, is readable only by
/// its owner, and reaches the embedded server over HTTPS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_mode_writes_an_https_admin_kubeconfig_only_its_owner_can_read() {
    use clap::Parser as _;
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(manifests.path(), "cm.yaml", &config_map("hello"));
    let cli = nodelet::RunArgs::try_parse_from([
        "nodelet",
        "--manifests",
        manifests.path().to_str().unwrap_or_default(),
        "--root-dir",
        root.path().to_str().unwrap_or_default(),
        "--listen",
        "none",
        "--register-node=false",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let settings = cli.settings().unwrap_or_else(|e| panic!("{e}"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(nodelet::run(settings, async {
        let _ = stop_rx.await;
    }));
    let kc = root.path().join("admin.kubeconfig");
    let text = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(t) = std::fs::read_to_string(&kc) {
                break t;
            }
            crate::support::poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no admin.kubeconfig"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&kc)
            .map(|m| m.permissions().mode())
            .unwrap_or_default();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");
    assert!(text.contains("certificate-authority-data"), "{text}");
    let (client, _) = nodelet::cluster_client(Some(&kc), nodelet_transport::Protocol::Auto)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.client, "default");
    let cm = cms.get("app").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cm.data.and_then(|d| d.get("greeting").cloned()).as_deref(),
        Some("hello")
    );
    let _ = stop_tx.send(());
    run.await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// A self-signed CA certificate (P-256, valid until 2126) for trust-bundle manifests.
const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBijCCATGgAwIBAgIUQ/ywB4LrcEXajPzErPdcbqTwxQ4wCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPbm9kZWxldC10ZXN0LWNhMCAXDTI2MTEyNDIzNDQyOFoYDzIx
MjYxMDMxMjM0NDI4WjAaMRgwFgYDVQQDDA9ub2RlbGV0LXRlc3QtY2EwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAATQOd17lb831fg0p1X0GQx8FUYInGwKshMzF6ED
dRw5JgcMDs757o766CjEzLGSYOydlGKFL0unBKcv2peuFqhVo1MwUTAdBgNVHQ4E
FgQU5zIE8T08H87PJwKek4wa0eB0MCAwHwYDVR0jBBgwFoAU5zIE8T08H87PJwKe
k4wa0eB0MCAwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiBWH2/I
UMbD5HSwPTrY2FPI2ORqjZgyrMEOdd6kfzU4IAIgH+y6jXp39Y2c3QE97TiSgoaz
/TIVxVYX1U/Ob2Pycwg=
-----END CERTIFICATE-----
";

/// Offline mode serves certificates.k8s.io: a ClusterTrustBundle manifest is loaded, and the
/// node identity may read it (what a `clusterTrustBundle` volume source needs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_server_loads_cluster_trust_bundles_the_node_may_read() {
    use k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle;
    let manifests = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let indented: String = TEST_CA.lines().map(|l| format!("    {l}\n")).collect();
    write(
        manifests.path(),
        "bundle.yaml",
        &format!(
            "apiVersion: certificates.k8s.io/v1beta1\nkind: ClusterTrustBundle\nmetadata: {{name: example.com:signer:ca, labels: {{app: x}}}}\nspec:\n  signerName: example.com/signer\n  trustBundle: |\n{indented}"
        ),
    );
    let embedded = nodelet::start_embedded(manifests.path(), NODE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        embedded.sync.errors().is_empty(),
        "{:?}",
        embedded.sync.errors()
    );
    let bundles: kube::Api<ClusterTrustBundle> =
        kube::Api::all(embedded.node_client.client.clone());
    let read = bundles
        .get("example.com:signer:ca")
        .await
        .unwrap_or_else(|e| panic!("the node reads the bundle: {e}"));
    assert_eq!(read.spec.trust_bundle, TEST_CA);
    drop(embedded.sync);
    embedded.server.shutdown().await;
}
