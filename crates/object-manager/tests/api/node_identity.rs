//! What a node identity may do: every request of every strategy is allowed for
//! `system:node:<name>` by nodelet-apiserver's Node authorizer, and names a single object.

use k8s_openapi::api::core::v1::Secret;
use nodelet_apiserver::User;
use nodelet_object_manager::{Error, SecretManager, Strategy};

use super::*;

const NODE: &str = "n1";

/// A server with authentication and the Node authorizer, a node `n1` with TTL annotation 0
/// and a pod bound to it referencing `a` and `frozen` (configmaps and secrets) and `missing`.
async fn secured() -> (ApiServer, ServerHandle, Pod) {
    let server = ApiServer::start(Config::default().with_auth())
        .await
        .unwrap_or_else(|e| panic!("start apiserver: {e}"));
    let handle = server.handle();
    create(
        &handle,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": NODE, "annotations": {"node.alpha.kubernetes.io/ttl": "0"}}}),
    );
    create(&handle, config_map("a", "v1", false));
    create(&handle, config_map("frozen", "v1", true));
    create(&handle, config_map("unrelated", "v1", false));
    for (name, immutable) in [("a", false), ("frozen", true)] {
        let secret = SecretBuilder::new("default", name).string_data("k", "v1");
        create(
            &handle,
            if immutable {
                secret.immutable()
            } else {
                secret
            }
            .json(),
        );
    }
    let pod = PodBuilder::new("default", "p")
        .node(NODE)
        .container(json!({"name": "c", "image": "busybox",
            "envFrom": [{"secretRef": {"name": "a"}}]}))
        .image_pull_secret("frozen")
        .image_pull_secret("missing")
        .config_map_volume("a", "a")
        .volume(json!({"name": "f", "projected": {"sources": [{"configMap": {"name": "frozen"}}]}}))
        .volume(json!({"name": "m", "configMap": {"name": "missing", "optional": true}}))
        .json();
    let stored = handle
        .create(pod)
        .unwrap_or_else(|e| panic!("create pod: {e}"));
    let pod: Pod = serde_json::from_value(stored).unwrap_or_else(|e| panic!("pod: {e}"));
    (server, handle, pod)
}

fn node_client(server: &ApiServer) -> kube::Client {
    let mut config = server.kube_config();
    let token = server.token_for(&User::node(NODE));
    config.auth_info =
        serde_json::from_value(json!({ "token": token })).unwrap_or_else(|e| panic!("{e}"));
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
}

fn node_config(strategy: Strategy) -> ManagerConfig {
    config(strategy).with_node_name(NODE)
}

#[tokio::test]
async fn every_request_of_every_strategy_is_allowed_for_the_node_identity() {
    let (server, handle, pod) = secured().await;
    let client = node_client(&server);
    for strategy in [Strategy::Watch, Strategy::Cache, Strategy::Get] {
        let cms = ConfigMapManager::new(client.clone(), node_config(strategy))
            .unwrap_or_else(|e| panic!("{e}"));
        let secrets = SecretManager::new(client.clone(), node_config(strategy))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut changes = cms.subscribe();
        cms.register_pod(&nodelet_core::AdmittedPod::new(pod.clone()).unwrap());
        secrets.register_pod(&nodelet_core::AdmittedPod::new(pod.clone()).unwrap());
        for name in ["a", "frozen"] {
            assert_eq!(
                read(&cms, name).await.as_deref(),
                Ok("v1"),
                "{strategy} configmap {name}"
            );
            let s: Result<std::sync::Arc<Secret>, Error> = secrets.get("default", name).await;
            assert!(s.is_ok(), "{strategy} secret {name}: {s:?}");
        }
        let missing = cms.get("default", "missing").await.err();
        assert!(
            missing.as_ref().is_some_and(Error::is_not_found),
            "{strategy}: {missing:?}"
        );
        if strategy == Strategy::Watch {
            update(&handle, config_map("a", "v2", false));
            changed(&mut changes, "a").await;
            assert_eq!(read(&cms, "a").await.as_deref(), Ok("v2"));
            update(&handle, config_map("a", "v1", false));
            changed(&mut changes, "a").await;
        }
        cms.unregister_pod(nodelet_core::AdmittedPod::new(pod.clone()).unwrap().uid());
        secrets.unregister_pod(nodelet_core::AdmittedPod::new(pod.clone()).unwrap().uid());
        cms.shutdown().await;
        secrets.shutdown().await;
    }

    let node_user = format!("system:node:{NODE}");
    let records: Vec<_> = handle
        .requests()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(&node_user))
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r.verb == "watch" && r.resource == "configmaps")
    );
    assert!(
        records
            .iter()
            .any(|r| r.verb == "watch" && r.resource == "secrets")
    );
    assert!(
        records
            .iter()
            .any(|r| r.verb == "get" && r.resource == "configmaps")
    );
    for r in &records {
        assert!(r.status != 401 && r.status != 403, "denied: {r:?}");
        assert!(matches!(r.verb.as_str(), "get" | "list" | "watch"), "{r:?}");
        if r.resource == "configmaps" || r.resource == "secrets" {
            assert_eq!(r.namespace.as_deref(), Some("default"), "{r:?}");
            assert!(
                r.name.as_deref().is_some_and(|n| !n.is_empty()),
                "unnamed: {r:?}"
            );
        }
        if r.resource == "nodes" {
            assert_eq!(r.name.as_deref(), Some(NODE), "{r:?}");
        }
    }
}

#[tokio::test]
async fn the_node_authorizer_is_really_on_an_unreferenced_object_is_forbidden() {
    let (server, _handle, _pod) = secured().await;
    let m = ConfigMapManager::new(node_client(&server), node_config(Strategy::Get))
        .unwrap_or_else(|e| panic!("{e}"));
    let err = m.get("default", "unrelated").await.err();
    assert!(matches!(err, Some(Error::Api { code: 403, .. })), "{err:?}");
}

#[tokio::test]
async fn every_request_of_the_admin_identity_names_a_single_object_too() {
    let (server, handle) = server().await;
    create(&handle, config_map("a", "v1", false));
    create(&handle, config_map("frozen", "v1", true));
    for strategy in [Strategy::Watch, Strategy::Cache, Strategy::Get] {
        let m = manager(&server, config(strategy));
        let p = pod(&format!("p-{strategy}"), &["a", "frozen", "missing"]);
        m.register_pod(&nodelet_core::AdmittedPod::new(p.clone()).unwrap());
        for name in ["a", "frozen", "missing"] {
            let _ = m.get("default", name).await;
        }
        m.unregister_pod(nodelet_core::AdmittedPod::new(p.clone()).unwrap().uid());
        m.shutdown().await;
    }
    let records = handle.requests();
    assert!(!records.is_empty());
    for r in records.iter().filter(|r| r.resource == "configmaps") {
        assert!(matches!(r.verb.as_str(), "get" | "list" | "watch"), "{r:?}");
        assert_eq!(r.namespace.as_deref(), Some("default"), "{r:?}");
        assert!(
            r.name.as_deref().is_some_and(|n| !n.is_empty()),
            "unnamed request: {r:?}"
        );
    }
}
