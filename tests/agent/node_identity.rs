//! The agent runs as `system:node:<node>` under the Node authorizer and NodeRestriction: it
//! registers its Node and Lease and never makes a request the authorizer denies; a Node that
//! already exists is reconciled only where a node may change it.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
use serde_json::json;

use crate::support::{NODE, PATIENCE, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_identity_registers_its_node_and_lease_and_is_never_denied() {
    // An authorizer graph without lag: a refusal here is a request the Node authorizer never
    // allows, not one that came before the graph linked the pod (tests/agent/api_failures.rs
    // covers those).
    let world = World::start_on(
        nodelet_apiserver::Config::default().node_authorizer_lag(std::time::Duration::ZERO),
        |_| {},
        |c| c.register_node = true,
    )
    .await;
    let h = world.server.handle();
    // A pod using every reference kind, so every read path is exercised.
    h.create(ConfigMapBuilder::new("default", "cm").data("k", "v").json())
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(SecretBuilder::new("default", "s").data("k", "v").json())
        .unwrap_or_else(|e| panic!("{e}"));
    h.create(
        PodBuilder::new("default", "p")
            .node(NODE)
            .image_pull_secret("s")
            .container(json!({"name": "c", "image": "x",
                "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                "envFrom": [{"configMapRef": {"name": "cm"}}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}, {"name": "t", "mountPath": "/t"}]}))
            .config_map_volume("v", "cm")
            .volume(json!({"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}))
            .json(),
    )
        .unwrap_or_else(|e| panic!("{e}"));
    let env_file = world.root_dir().join("pods");
    let nodes: Api<Node> = Api::all(world.admin.clone());
    let leases: Api<Lease> = Api::namespaced(world.admin.clone(), "kube-node-lease");
    tokio::time::timeout(PATIENCE, async {
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
            .any(|t| t.key == nodelet_reporting::AGENT_TAINT_KEY && t.effect == "NoSchedule")
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
    // The agent names itself in its User-Agent, so the server records it as the manager of
    // what it wrote (the kubelet: `kubelet`). (The pod was created through the server's handle,
    // without managedFields, and a server keeps none for such an object.)
    let managers = |obj: Option<serde_json::Value>| -> Vec<String> {
        obj.and_then(|o| o["metadata"]["managedFields"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m["manager"].as_str().map(str::to_owned))
            .collect()
    };
    let node_managers = managers(h.get("v1", "Node", None, NODE));
    assert!(
        node_managers.iter().any(|m| m == "nodelet"),
        "node written by {node_managers:?}"
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

/// A Node that exists already must not lock the agent out: one created earlier without nodelet's
/// taint (by a previous kubelet, by
/// hand). NodeRestriction lets a node set taints only when it creates itself, so an agent that
/// patches `spec.taints` is refused forever and never renews its Lease. The agent must leave the
/// taints alone, reconcile its labels and status, keep the Ready condition's
/// `lastTransitionTime` while its status stays `True`, and renew its Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_node_without_the_agent_taint_is_reconciled_without_touching_taints() {
    const SINCE: &str = "2020-01-01T00:00:00Z";
    let world = World::start_seeded(
        |h| {
            h.create(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "team": "a"}},
                "spec": {"taints": [{"key": "other", "value": "x", "effect": "PreferNoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": SINCE, "lastTransitionTime": SINCE}]}}))
                .unwrap_or_else(|e| panic!("{e}"));
        },
        |c| c.register_node = true,
    )
    .await;
    let h = world.server.handle();
    let nodes: Api<Node> = Api::all(world.admin.clone());
    let leases: Api<Lease> = Api::namespaced(world.admin.clone(), "kube-node-lease");
    let ready = |node: &Node| {
        node.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
    };
    let node = tokio::time::timeout(PATIENCE, async {
        loop {
            let lease = leases.get_opt(NODE).await.ok().flatten();
            let node = nodes.get_opt(NODE).await.ok().flatten();
            if let (Some(_), Some(node)) = (lease, node) {
                let beat = ready(&node).and_then(|c| c.last_heartbeat_time);
                if beat.is_some_and(|t| t.0.to_string() != SINCE) {
                    return node;
                }
            }
            crate::support::poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no Lease or Ready heartbeat from the agent; its requests: {:#?}",
            h.requests()
        )
    });

    let taints = node.spec.clone().and_then(|s| s.taints).unwrap_or_default();
    assert_eq!(
        taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
        ["other"],
        "the agent must not touch an existing Node's taints"
    );
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get(nodelet_reporting::AGENT_TAINT_KEY)
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("kubernetes.io/os").map(String::as_str),
        Some(std::env::consts::OS)
    );
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    let condition = ready(&node).unwrap_or_else(|| panic!("no Ready condition"));
    assert_eq!(condition.status, "True");
    assert_eq!(
        condition
            .last_transition_time
            .map(|t| t.0.to_string())
            .as_deref(),
        Some(SINCE),
        "Ready stayed True: its lastTransitionTime must stay"
    );

    let user = format!("system:node:{NODE}");
    let denied: Vec<String> = h
        .requests()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(user.as_str()) && r.status >= 400 && r.status != 404)
        .map(|r| format!("{r:?}"))
        .collect();
    assert!(denied.is_empty(), "refused requests: {denied:#?}");
    world.stop().await;
}
