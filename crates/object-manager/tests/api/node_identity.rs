//! What a node identity may do: every request of every strategy is allowed for
//! `system:node:<name>` by nodelet-apiserver's Node authorizer, and names a single object.

use k8s_openapi::api::core::v1::Secret;
use nodelet_apiserver::User;
use nodelet_object_manager::{Error, SecretManager, Strategy};

use super::*;

const NODE: &str = "n1";

/// A server with authentication and the Node authorizer, a node `n1` with TTL annotation 0
/// and a pod bound to it referencing `a` and `frozen` (configmaps and secrets) and `missing`.
/// The authorizer's graph has no lag: a refusal is one it would never lift.
async fn secured() -> (ApiServer, ServerHandle, Pod) {
    let server = ApiServer::start(
        Config::default()
            .with_auth()
            .node_authorizer_lag(std::time::Duration::ZERO),
    )
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

/// The WARN events logged while installed on this thread (a `#[tokio::test]` runs every task
/// on it), as `message: fields` lines.
#[derive(Clone, Default)]
struct Warnings(std::sync::Arc<parking_lot::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut text = Text(String::new());
            event.record(&mut text);
            self.0.lock().push(text.0);
        }
    }
}

impl Warnings {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    fn about(&self, needle: &str) -> Vec<String> {
        self.0
            .lock()
            .iter()
            .filter(|w| w.contains(needle))
            .cloned()
            .collect()
    }
}

/// The health of the watch of `default/<name>`.
fn health_of(m: &ConfigMapManager, name: &str) -> Option<nodelet_object_manager::WatchHealth> {
    m.watch_health().into_iter().find(|h| h.object.name == name)
}

/// Refusals (403) of the node's requests for configmap `name`.
fn refusals(handle: &ServerHandle, name: &str) -> usize {
    handle
        .requests()
        .iter()
        .filter(|r| r.resource == "configmaps" && r.name.as_deref() == Some(name))
        .filter(|r| r.status == 403)
        .count()
}

/// The real authorizer links a new pod to its objects a moment after the pod is written; until
/// then the node's watch is refused with "no relationship found". Issue: the reflector took
/// that for a denial and backed off (800 ms doubling), so the lag became seconds. Now it asks
/// again within 50 ms, doubling to 1 s: with a 2 s lag that is at least five refusals (the
/// back-off made at most three), then the watch, with the reflector's back-off untouched.
#[tokio::test]
async fn a_watch_refused_while_the_authorizer_lags_is_asked_again_soon_until_allowed() {
    let (server, handle, _) = secured().await;
    handle.set_node_authorizer_lag(Duration::from_secs(2));
    let pod = PodBuilder::new("default", "late")
        .node(NODE)
        .container(json!({"name": "c", "image": "x"}))
        .config_map_volume("v", "unrelated")
        .json();
    let pod: Pod = serde_json::from_value(handle.create(pod).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    // The kubelet's back-off (800 ms doubling to 30 s), not the tests' fast one.
    let m = ConfigMapManager::new(
        node_client(&server),
        ManagerConfig::new(Strategy::Watch).with_node_name(NODE),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    m.register_pod(&nodelet_core::AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}")));
    let got = tokio::time::timeout(PATIENCE, async {
        loop {
            match m.get("default", "unrelated").await {
                Ok(cm) => return cm,
                Err(Error::SyncTimeout { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never allowed"));
    assert_eq!(
        got.data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str),
        Some("v1")
    );
    let refused = refusals(&handle, "unrelated");
    assert!(refused >= 5, "{refused} refusals in the 2 s lag");
    let health = health_of(&m, "unrelated");
    assert!(
        health.as_ref().is_some_and(|h| h.last_error.is_none()),
        "{health:?}"
    );
    m.shutdown().await;
}

/// A refusal that does not pass is reported once, with the server's text, after the grace
/// period — not on every retry — and the retries then slow down to the back-off.
#[tokio::test]
async fn a_refusal_that_lasts_past_the_grace_period_is_reported_once_with_the_servers_text() {
    let warnings = Warnings::default();
    let _guard = warnings.install();
    let (server, handle, _) = secured().await;
    // The authorizer never links the pod while the test runs.
    handle.set_node_authorizer_lag(Duration::from_secs(3600));
    let pod = PodBuilder::new("default", "never")
        .node(NODE)
        .container(json!({"name": "c", "image": "x"}))
        .config_map_volume("v", "unrelated")
        .json();
    let pod: Pod = serde_json::from_value(handle.create(pod).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = ManagerConfig::new(Strategy::Watch).with_node_name(NODE);
    config.relationship_grace = Duration::from_millis(300);
    let m = ConfigMapManager::new(node_client(&server), config).unwrap_or_else(|e| panic!("{e}"));
    m.register_pod(&nodelet_core::AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}")));
    let text = "no relationship found between node 'n1' and this object";
    let reported = tokio::time::timeout(PATIENCE, async {
        loop {
            let found = warnings.about("default/unrelated");
            if !found.is_empty() {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never reported"));
    assert!(reported[0].contains(text), "{reported:?}");
    // Two more refusals after the report, each after a back-off step.
    let at_report = refusals(&handle, "unrelated");
    tokio::time::timeout(PATIENCE, async {
        while refusals(&handle, "unrelated") < at_report + 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no retry after the report"));
    assert_eq!(
        warnings.about("default/unrelated").len(),
        1,
        "reported once"
    );
    let health = health_of(&m, "unrelated");
    assert!(
        health
            .as_ref()
            .and_then(|h| h.last_error.as_deref())
            .is_some_and(|e| e.contains(text)),
        "{health:?}"
    );
    m.shutdown().await;
}
