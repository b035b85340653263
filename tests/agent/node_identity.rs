//! The agent runs as `system:node:<node>` under the Node authorizer: it registers its Node and
//! Lease and never makes a request the authorizer denies.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;

use crate::support::{NODE, SAFETY, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_identity_registers_its_node_and_lease_and_is_never_denied() {
    let world = World::start_with(|c| c.register_node = true).await;
    let h = world.server.handle();
    // A pod using every reference kind, so every read path is exercised.
    h.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "v"}}))
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"}, "data": {"k": "dg=="}}))
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": NODE, "imagePullSecrets": [{"name": "s"}],
            "containers": [{"name": "c", "image": "x",
                "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                "envFrom": [{"configMapRef": {"name": "cm"}}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}, {"name": "t", "mountPath": "/t"}]}],
            "volumes": [{"name": "v", "configMap": {"name": "cm"}},
                {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}}))
        .unwrap_or_else(|e| panic!("{e}"));
    let env_file = world.root_dir().join("pods");
    let nodes: Api<Node> = Api::all(world.admin.clone());
    let leases: Api<Lease> = Api::namespaced(world.admin.clone(), "kube-node-lease");
    tokio::time::timeout(SAFETY, async {
        loop {
            let env_written = std::fs::read_dir(&env_file)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.path().join("containers/c/env").exists());
            let node = nodes.get_opt(NODE).await.ok().flatten();
            let lease = leases.get_opt(NODE).await.ok().flatten();
            let status = h.get("v1", "Pod", Some("default"), "p");
            let running = status.is_some_and(|p| p["status"]["phase"] == "Running");
            if env_written && node.is_some() && lease.is_some() && running {
                return;
            }
            crate::support::poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("agent did not converge"));

    let node = nodes.get(NODE).await.unwrap_or_else(|e| panic!("{e}"));
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == nodelet::AGENT_TAINT_KEY && t.effect == "NoSchedule")
    );
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(ready);
    let lease = leases.get(NODE).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(NODE)
    );

    let user = format!("system:node:{NODE}");
    let denied: Vec<String> = h
        .requests()
        .into_iter()
        .filter(|r| {
            r.user.as_deref() == Some(user.as_str()) && (r.status == 403 || r.status == 401)
        })
        .map(|r| format!("{r:?}"))
        .collect();
    assert!(denied.is_empty(), "denied requests: {denied:#?}");
    assert!(h.count_by_user(&user) > 0);
    world.stop().await;
}
