//! Token authentication and the Node authorizer, driven by kube-rs with a node's token.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use std::time::Duration;

use nodelet_apiserver::{ApiServer, Config, Restart, ServerHandle, User};
use serde_json::json;

use super::{PATIENCE, client_for, client_with_token, cm_json, pod_json, start, status};

/// Namespace `ns` with configmaps a, b, c and secrets s, t; pod p1 on n1 uses a (volume),
/// s (env) and service account `runner`; pod p2 on n2 uses c.
fn seed(h: &ServerHandle) {
    h.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}))
        .expect("ns");
    for n in ["a", "b", "c"] {
        h.create(cm_json("ns", n, "k", n)).expect("cm");
    }
    for n in ["s", "t"] {
        h.create(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": n, "namespace": "ns"}, "stringData": {"k": n}}))
            .expect("secret");
    }
    h.create(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner", "namespace": "ns"}}))
        .expect("sa");
    h.create(pod_json(
        "ns",
        "p1",
        json!({
            "nodeName": "n1",
            "serviceAccountName": "runner",
            "volumes": [{"name": "v", "configMap": {"name": "a"}}],
            "containers": [{"name": "c", "image": "busybox", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
        }),
    ))
    .expect("p1");
    h.create(pod_json(
        "ns",
        "p2",
        json!({"nodeName": "n2", "volumes": [{"name": "v", "configMap": {"name": "c"}}]}),
    ))
    .expect("p2");
}

/// A server with auth, seeded, and a client for node n1. The Node authorizer's lag is 0, so
/// the seeded pods count at once (the tests of the lag set it themselves).
async fn setup() -> (ApiServer, kube::Client) {
    let server = start(
        Config::default()
            .with_auth()
            .node_authorizer_lag(Duration::ZERO),
    )
    .await;
    seed(&server.handle());
    let node = client_for(&server, &User::node("n1")).await;
    (server, node)
}

#[tokio::test]
async fn requests_without_a_token_or_with_an_unknown_token_are_unauthorized() {
    let server = start(Config::default().with_auth()).await;
    for token in [None, Some("not-a-token")] {
        let api: Api<ConfigMap> = Api::namespaced(client_with_token(&server, token), "default");
        let s = status(api.list(&ListParams::default()).await.unwrap_err());
        assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"));
    }
}

#[tokio::test]
async fn an_admin_may_do_everything_and_auth_is_off_by_default() {
    let server = start(Config::default().with_auth()).await;
    let admin = client_for(&server, &User::admin()).await;
    let api: Api<Secret> = Api::all(admin);
    assert!(api.list(&ListParams::default()).await.is_ok());

    let open = start(Config::default()).await;
    let anyone: Api<Secret> = Api::all(client_with_token(&open, None));
    assert!(anyone.list(&ListParams::default()).await.is_ok());
}

#[tokio::test]
async fn a_node_reads_the_configmaps_and_secrets_its_pods_reference() {
    let (_server, node) = setup().await;
    let cms: Api<ConfigMap> = Api::namespaced(node.clone(), "ns");
    let secrets: Api<Secret> = Api::namespaced(node, "ns");
    assert!(cms.get("a").await.is_ok());
    assert!(secrets.get("s").await.is_ok());
    // A single-object list/watch by metadata.name, as the kubelet's Watch strategy asks.
    let one = cms
        .list(&ListParams::default().fields("metadata.name=a"))
        .await
        .expect("list by name");
    assert_eq!(one.items.len(), 1);
}

#[tokio::test]
async fn a_node_is_denied_objects_no_pod_of_its_own_references_with_the_upstream_message() {
    let (_server, node) = setup().await;
    let cms: Api<ConfigMap> = Api::namespaced(node.clone(), "ns");
    let s = status(cms.get("b").await.unwrap_err());
    assert_eq!(s.code, 403);
    assert_eq!(s.reason, "Forbidden");
    assert_eq!(
        s.message,
        "configmaps \"b\" is forbidden: User \"system:node:n1\" cannot get resource \"configmaps\" \
         in API group \"\" in the namespace \"ns\": no relationship found between node 'n1' and this object"
    );
    let d = s.details.expect("details");
    assert_eq!((d.name.as_str(), d.kind.as_str()), ("b", "configmaps"));
    // Referenced by a pod on another node.
    assert_eq!(status(cms.get("c").await.unwrap_err()).code, 403);
    let secrets: Api<Secret> = Api::namespaced(node.clone(), "ns");
    assert_eq!(status(secrets.get("t").await.unwrap_err()).code, 403);
    // Unnamed lists, cluster-wide lists and writes.
    let s = status(cms.list(&ListParams::default()).await.unwrap_err());
    assert!(
        s.message.ends_with(": No Object name found"),
        "{}",
        s.message
    );
    let all: Api<Secret> = Api::all(node);
    let s = status(all.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        s.message,
        "secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API group \"\" \
         at the cluster scope: can only read namespaced object of this type"
    );
    let patch = Patch::Merge(json!({"data": {"k": "x"}}));
    let s = status(
        cms.patch("a", &PatchParams::default(), &patch)
            .await
            .unwrap_err(),
    );
    assert!(
        s.message
            .ends_with(": can only read resources of this type"),
        "{}",
        s.message
    );
}

#[tokio::test]
async fn with_no_lag_the_relationship_follows_the_store_immediately() {
    let (server, node) = setup().await;
    let h = server.handle();
    let cms: Api<ConfigMap> = Api::namespaced(node, "ns");
    assert_eq!(status(cms.get("b").await.unwrap_err()).code, 403);
    h.create(pod_json(
        "ns",
        "p3",
        json!({"nodeName": "n1", "volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "b"}}]}}]}),
    ))
    .expect("p3");
    assert!(cms.get("b").await.is_ok());
    h.delete_now("v1", "Pod", Some("ns"), "p3").expect("delete");
    assert_eq!(status(cms.get("b").await.unwrap_err()).code, 403);
}

/// Pod p3 on n1, referencing configmap b (which no other pod of n1 references).
fn create_p3(h: &ServerHandle) {
    h.create(pod_json(
        "ns",
        "p3",
        json!({"nodeName": "n1", "volumes": [{"name": "v", "configMap": {"name": "b"}}]}),
    ))
    .expect("p3");
}

/// The denial of `verb` on `resource` `name` in `ns` for node n1, as upstream words it.
fn no_relationship(verb: &str, resource: &str, name: &str) -> String {
    format!(
        "{resource} \"{name}\" is forbidden: User \"system:node:n1\" cannot {verb} resource \"{resource}\" \
         in API group \"\" in the namespace \"ns\": no relationship found between node 'n1' and this object"
    )
}

/// Asks for configmap `name` as node n1 until it is served (within [`PATIENCE`]).
async fn eventually_allowed(cms: &Api<ConfigMap>, name: &str) {
    let allowed = tokio::time::timeout(PATIENCE, async {
        while cms.get(name).await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        allowed.is_ok(),
        "configmap {name} still refused after {PATIENCE:?}"
    );
}

/// As upstream's authorizer, whose graph its informers fill, the stand-in's sees a pod write
/// only after `Config::node_authorizer_lag`: a long lag makes the refusal certain, shortening
/// it re-times the queued write.
#[tokio::test]
async fn a_node_is_refused_a_new_pods_objects_until_the_authorizer_sees_the_pod() {
    let (server, node) = setup().await;
    let h = server.handle();
    h.set_node_authorizer_lag(Duration::from_secs(600));
    create_p3(&h);
    let cms: Api<ConfigMap> = Api::namespaced(node.clone(), "ns");
    let s = status(cms.get("b").await.unwrap_err());
    assert_eq!(
        (s.code, s.reason.as_str(), s.message),
        (403, "Forbidden", no_relationship("get", "configmaps", "b"))
    );
    // A single-object watch (the kubelet's) and the pod itself are refused alike.
    let s = status(
        cms.watch(&WatchParams::default().fields("metadata.name=b"), "0")
            .await
            .err()
            .expect("watch refused"),
    );
    assert_eq!(s.message, no_relationship("watch", "configmaps", "b"));
    let pods: Api<Pod> = Api::namespaced(node.clone(), "ns");
    let s = status(pods.get("p3").await.unwrap_err());
    assert_eq!(s.message, no_relationship("get", "pods", "p3"));
    // A pod list by spec.nodeName is allowed by its selector, not the graph: p3 is in it.
    let mine = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("list by node");
    assert_eq!(mine.items.len(), 2);

    h.set_node_authorizer_lag(Duration::ZERO);
    assert!(cms.get("b").await.is_ok());
    assert!(pods.get("p3").await.is_ok());

    // The default lag, 50 ms: allowed soon, however loaded the machine.
    h.set_node_authorizer_lag(Duration::from_millis(50));
    h.create(pod_json(
        "ns",
        "p4",
        json!({"nodeName": "n1", "containers": [{"name": "c", "image": "busybox", "envFrom": [{"configMapRef": {"name": "c"}}]}]}),
    ))
    .expect("p4");
    eventually_allowed(&cms, "c").await;
}

#[tokio::test]
async fn a_node_keeps_a_deleted_pods_objects_until_the_authorizer_sees_the_delete() {
    let (server, node) = setup().await;
    let h = server.handle();
    let cms: Api<ConfigMap> = Api::namespaced(node, "ns");
    assert!(cms.get("a").await.is_ok());
    h.set_node_authorizer_lag(Duration::from_secs(600));
    h.delete_now("v1", "Pod", Some("ns"), "p1").expect("delete");
    assert!(cms.get("a").await.is_ok(), "allowed within the lag");
    h.set_node_authorizer_lag(Duration::ZERO);
    let s = status(cms.get("a").await.unwrap_err());
    assert_eq!(s.message, no_relationship("get", "configmaps", "a"));
}

/// A restarted kube-apiserver answers from an empty graph until its informers have listed
/// the pods: `Restart::graph_rebuild`.
#[tokio::test]
async fn after_a_restart_a_node_is_refused_until_the_graph_is_rebuilt() {
    let (server, node) = setup().await;
    let h = server.handle();
    let cms: Api<ConfigMap> = Api::namespaced(node.clone(), "ns");
    let pods: Api<Pod> = Api::namespaced(node, "ns");
    h.restart(Restart::default().graph_rebuild(Duration::from_secs(3600)))
        .await
        .expect("restart");
    let s = status(cms.get("a").await.unwrap_err());
    assert_eq!(
        (s.code, s.message),
        (403, no_relationship("get", "configmaps", "a"))
    );
    let s = status(pods.get("p1").await.unwrap_err());
    assert_eq!(s.message, no_relationship("get", "pods", "p1"));
    // A pod written meanwhile waits for the rebuild too.
    create_p3(&h);
    assert_eq!(status(cms.get("b").await.unwrap_err()).code, 403);

    // Rebuilt from the pods stored when it listened again.
    h.restart(Restart::default().graph_rebuild(Duration::from_millis(100)))
        .await
        .expect("restart");
    eventually_allowed(&cms, "a").await;
    assert!(cms.get("b").await.is_ok());
    assert!(pods.get("p1").await.is_ok());

    // `Restart::default()` rebuilds it at once.
    h.restart(Restart::default()).await.expect("restart");
    assert!(cms.get("a").await.is_ok());
}

#[tokio::test]
async fn a_restart_asked_over_http_takes_the_graph_rebuild_time() {
    let (server, node) = setup().await;
    let h = server.handle();
    let admin = client_for(&server, &User::admin()).await;
    let req = http::Request::post("/nodelet/restart?graphRebuild=3600000")
        .body(Vec::new())
        .expect("request");
    admin.request_text(req).await.expect("restart asked");
    let restarted = tokio::time::timeout(PATIENCE, async {
        while h.restarts() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(restarted.is_ok(), "no restart within {PATIENCE:?}");
    let cms: Api<ConfigMap> = Api::namespaced(node, "ns");
    let s = status(cms.get("a").await.unwrap_err());
    assert_eq!(s.message, no_relationship("get", "configmaps", "a"));
}

#[tokio::test]
async fn a_node_lists_pods_only_by_its_node_name_and_touches_only_its_own_pods() {
    let (_server, node) = setup().await;
    let pods: Api<Pod> = Api::all(node.clone());
    let mine = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("scoped list");
    assert_eq!(mine.items.len(), 1);
    let s = status(pods.list(&ListParams::default()).await.unwrap_err());
    assert!(
        s.message
            .ends_with(": can only list/watch pods with spec.nodeName field selector"),
        "{}",
        s.message
    );
    let s = status(
        pods.list(&ListParams::default().fields("spec.nodeName=n2"))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 403);

    let ns: Api<Pod> = Api::namespaced(node, "ns");
    assert!(ns.get("p1").await.is_ok());
    assert_eq!(status(ns.get("p2").await.unwrap_err()).code, 403);
    let st = Patch::Merge(json!({"status": {"phase": "Running"}}));
    assert!(
        ns.patch_status("p1", &PatchParams::default(), &st)
            .await
            .is_ok()
    );
    let s = status(
        ns.patch_status("p2", &PatchParams::default(), &st)
            .await
            .unwrap_err(),
    );
    assert!(
        s.message.ends_with(
            ": node \"n1\" can only update pod status for pods with spec.nodeName set to itself"
        ),
        "{}",
        s.message
    );
    let s = status(ns.delete("p2", &DeleteParams::default()).await.unwrap_err());
    assert_eq!(s.code, 403);
    assert!(ns.delete("p1", &DeleteParams::default()).await.is_ok());
}

#[tokio::test]
async fn a_node_creates_and_updates_only_its_own_node_and_lease() {
    let (server, node) = setup().await;
    server
        .handle()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}))
        .expect("n2");
    let nodes: Api<Node> = Api::all(node.clone());
    let own: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("node");
    nodes
        .create(&PostParams::default(), &own)
        .await
        .expect("create own node");
    assert!(nodes.get("n1").await.is_ok());
    let label = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    assert!(
        nodes
            .patch("n1", &PatchParams::default(), &label)
            .await
            .is_ok()
    );
    let s = status(nodes.get("n2").await.unwrap_err());
    assert!(
        s.message
            .ends_with(": node 'n1' cannot read 'n2', only its own Node object"),
        "{}",
        s.message
    );
    let s = status(
        nodes
            .patch("n2", &PatchParams::default(), &label)
            .await
            .unwrap_err(),
    );
    assert!(
        s.message
            .ends_with(": node \"n1\" is not allowed to modify node \"n2\""),
        "{}",
        s.message
    );

    let leases: Api<Lease> = Api::namespaced(node.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}),
    )
    .expect("lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    assert!(leases.get("n1").await.is_ok());
    let s = status(leases.get("n2").await.unwrap_err());
    assert!(
        s.message
            .ends_with(": can only access node lease with the same name as the requesting node"),
        "{}",
        s.message
    );
    let elsewhere: Api<Lease> = Api::namespaced(node, "default");
    let s = status(elsewhere.get("n1").await.unwrap_err());
    assert!(
        s.message
            .ends_with(": can only access leases in the \"kube-node-lease\" system namespace"),
        "{}",
        s.message
    );
}

/// NodeRestriction on Node objects, as a real cluster refuses a kubelet, with the texts of
/// `plugin/pkg/admission/noderestriction`: taints only at creation, only the labels a kubelet
/// may set, no configSource, and only its own Node.
#[tokio::test]
async fn node_restriction_allows_taints_only_when_a_node_creates_itself() {
    let (server, node) = setup().await;
    server
        .handle()
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}))
        .expect("n2");
    let nodes: Api<Node> = Api::all(node.clone());
    let own: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {
            "kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "nodelet", "x.kubelet.kubernetes.io/y": "z",
            "example.com/free": "yes"}},
        "spec": {"taints": [{"key": "nodelet.io/agent", "value": "true", "effect": "NoSchedule"}]},
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &own)
        .await
        .expect("a node creates itself with taints and kubelet labels");

    let forbidden = |e: kube::Error| {
        let s = status(e);
        assert_eq!(
            (s.code, s.reason.as_str()),
            (403, "Forbidden"),
            "{}",
            s.message
        );
        let d = s.details.expect("details");
        assert_eq!((d.name.as_str(), d.kind.as_str()), ("n1", "nodes"));
        s.message
    };
    let untaint = Patch::Merge(json!({"spec": {"taints": null}}));
    let e = nodes
        .patch("n1", &PatchParams::default(), &untaint)
        .await
        .expect_err("taints after creation");
    assert_eq!(
        forbidden(e),
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"
    );
    let mut current = nodes.get("n1").await.expect("get n1");
    current.spec = Some(Default::default());
    let e = nodes
        .replace("n1", &PostParams::default(), &current)
        .await
        .expect_err("an update dropping the taints");
    assert_eq!(
        forbidden(e),
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"
    );
    let via_status = Patch::Merge(json!({"spec": {"taints": []}, "status": {"phase": "Running"}}));
    let e = nodes
        .patch_status("n1", &PatchParams::default(), &via_status)
        .await
        .expect_err("taints through the status subresource");
    assert_eq!(
        forbidden(e),
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"
    );

    let labels = Patch::Merge(json!({"metadata": {"labels": {
        "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "z1",
        "a.node.kubernetes.io/b": "c", "example.com/free": "changed", "plain": "ok"}}}));
    nodes
        .patch("n1", &PatchParams::default(), &labels)
        .await
        .expect("labels a kubelet may set");
    let bad = Patch::Merge(json!({"metadata": {"labels": {
        "node-role.kubernetes.io/control-plane": "", "node-restriction.kubernetes.io/pool": "a",
        "k8s.io/x": "y", "example.com/fine": "1"}}}));
    let e = nodes
        .patch("n1", &PatchParams::default(), &bad)
        .await
        .expect_err("labels outside the kubelet set");
    assert_eq!(
        forbidden(e),
        "nodes \"n1\" is forbidden: is not allowed to modify labels: k8s.io/x, node-restriction.kubernetes.io/pool, node-role.kubernetes.io/control-plane"
    );
    let drop = Patch::<()>::Json(
        serde_json::from_value(
            json!([{"op": "remove", "path": "/metadata/labels/kubernetes.io~1hostname"}]),
        )
        .expect("json patch"),
    );
    nodes
        .patch("n1", &PatchParams::default(), &drop)
        .await
        .expect("removing a kubelet label");
    let config_source = Patch::Merge(
        json!({"spec": {"configSource": {"configMap": {"name": "c", "namespace": "ns", "kubeletConfigKey": "k"}}}}),
    );
    let e = nodes
        .patch("n1", &PatchParams::default(), &config_source)
        .await
        .expect_err("configSource");
    assert_eq!(
        forbidden(e),
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to update configSource to a new non-nil configSource"
    );
    let heartbeat =
        Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
    nodes
        .patch_status("n1", &PatchParams::default(), &heartbeat)
        .await
        .expect("status");

    let s = status(
        nodes
            .patch("n2", &PatchParams::default(), &heartbeat)
            .await
            .expect_err("another node"),
    );
    assert_eq!(
        s.message,
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
    );
    // Creating a Node: the same rules, judged on the new object.
    server
        .handle()
        .delete("v1", "Node", None, "n1")
        .expect("delete n1");
    let mut labelled = own.clone();
    labelled.metadata.labels =
        Some([("node-role.kubernetes.io/worker".to_owned(), String::new())].into());
    let e = nodes
        .create(&PostParams::default(), &labelled)
        .await
        .expect_err("forbidden label at creation");
    assert_eq!(
        forbidden(e),
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: node-role.kubernetes.io/worker"
    );
    let other: Node = serde_json::from_value(json!({"metadata": {"name": "n3"}})).expect("node");
    let s = status(
        nodes
            .create(&PostParams::default(), &other)
            .await
            .expect_err("creating another node"),
    );
    assert_eq!(
        s.message,
        "nodes \"n3\" is forbidden: node \"n1\" is not allowed to modify node \"n3\""
    );
    // An admin is not a node: NodeRestriction does not apply.
    let admin = client_for(&server, &User::admin()).await;
    let admin_nodes: Api<Node> = Api::all(admin);
    admin_nodes
        .patch("n2", &PatchParams::default(), &untaint)
        .await
        .expect("admins modify taints");
}

/// `kubectl auth whoami` (a SelfSubjectReview) answers with the caller's identity, so tools
/// (`cargo xtask e2e`) can tell which node a kubeconfig stands for.
#[tokio::test]
async fn a_self_subject_review_names_the_caller() {
    let (_server, node) = setup().await;
    let req = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
            )
            .expect("body"),
        )
        .expect("request");
    let review: serde_json::Value = node.request(req).await.expect("whoami");
    assert_eq!(review["kind"], "SelfSubjectReview");
    assert_eq!(review["status"]["userInfo"]["username"], "system:node:n1");
    assert!(
        review["status"]["userInfo"]["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "system:nodes"))
    );
}

#[tokio::test]
async fn a_node_records_events_in_both_event_apis() {
    let (_server, node) = setup().await;
    let core: Api<Event> = Api::namespaced(node.clone(), "ns");
    let ev: Event = serde_json::from_value(json!({
        "metadata": {"name": "p1.1"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p1"},
        "reason": "FailedMount", "message": "m", "type": "Warning",
    }))
    .expect("event");
    core.create(&PostParams::default(), &ev)
        .await
        .expect("core event");
    let patch = Patch::Merge(json!({"count": 2}));
    assert!(
        core.patch("p1.1", &PatchParams::default(), &patch)
            .await
            .is_ok()
    );
    let new: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(node.clone(), "ns");
    let ev2: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "p1.2"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "nodelet", "reportingInstance": "n1",
        "action": "Mount", "reason": "FailedMount", "type": "Warning",
        "regarding": {"kind": "Pod", "namespace": "ns", "name": "p1"},
    }))
    .expect("event");
    new.create(&PostParams::default(), &ev2)
        .await
        .expect("events.k8s.io event");
    // Reading events is not a kubelet's business.
    assert_eq!(status(core.get("p1.1").await.unwrap_err()).code, 403);
}

#[tokio::test]
async fn a_node_requests_tokens_only_for_service_accounts_its_pods_run_as() {
    let (server, node) = setup().await;
    let uid = |name: &str| {
        server
            .handle()
            .get("v1", "Pod", Some("ns"), name)
            .expect("pod")["metadata"]["uid"]
            .clone()
    };
    let bound = |name: &str| -> TokenRequest {
        serde_json::from_value(json!({
            "spec": {"audiences": [], "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": name, "uid": uid(name)}},
        }))
        .expect("tr")
    };
    let sas: Api<ServiceAccount> = Api::namespaced(node, "ns");
    let tr = bound("p1");
    let got = sas
        .create_token_request("runner", &PostParams::default(), &tr)
        .await
        .expect("token for runner");
    assert!(
        got.status
            .and_then(|s| s.token)
            .is_some_and(|t| !t.is_empty())
    );
    let s = status(
        sas.create_token_request("default", &PostParams::default(), &tr)
            .await
            .unwrap_err(),
    );
    assert!(
        s.message
            .ends_with(": no relationship found between node 'n1' and this object"),
        "{}",
        s.message
    );
    let s = status(sas.get("runner").await.unwrap_err());
    assert!(
        s.message
            .ends_with(": can only create tokens for individual service accounts"),
        "{}",
        s.message
    );
    // NodeRestriction: bound, with a uid, to a pod scheduled on this node.
    let unbound: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": []}})).expect("tr");
    let s = status(
        sas.create_token_request("runner", &PostParams::default(), &unbound)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "serviceaccounts \"runner\" is forbidden: node requested token not bound to a pod"
        )
    );
    let s = status(
        sas.create_token_request("runner", &PostParams::default(), &bound("p2"))
            .await
            .unwrap_err(),
    );
    assert!(
        s.message
            .ends_with(": node requested token bound to a pod scheduled on a different node"),
        "{}",
        s.message
    );
}

#[tokio::test]
async fn a_service_account_token_authenticates_until_its_pod_is_gone() {
    let (server, _node) = setup().await;
    let admin = client_for(&server, &User::admin()).await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin, "ns");
    let tr: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [], "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p1"}},
    }))
    .expect("tr");
    let token = sas
        .create_token_request("runner", &PostParams::default(), &tr)
        .await
        .expect("token")
        .status
        .and_then(|s| s.token)
        .expect("token");
    let as_sa: Api<ConfigMap> = Api::namespaced(client_with_token(&server, Some(&token)), "ns");
    let s = status(as_sa.get("a").await.unwrap_err());
    assert_eq!(s.code, 403, "authenticated, then denied: {}", s.message);
    assert!(
        s.message
            .contains("User \"system:serviceaccount:ns:runner\" cannot get"),
        "{}",
        s.message
    );
    server
        .handle()
        .delete_now("v1", "Pod", Some("ns"), "p1")
        .expect("delete");
    let s = status(as_sa.get("a").await.unwrap_err());
    assert_eq!(s.code, 401);
}

#[tokio::test]
async fn a_node_watches_a_referenced_object_by_name_and_no_other() {
    use futures::{StreamExt as _, TryStreamExt as _};
    use kube::api::WatchEvent;
    let (_server, node) = setup().await;
    let cms: Api<ConfigMap> = Api::namespaced(node, "ns");
    let mut events = cms
        .watch(&WatchParams::default().fields("metadata.name=a"), "0")
        .await
        .expect("watch allowed")
        .boxed();
    let first = tokio::time::timeout(super::PATIENCE, events.try_next())
        .await
        .expect("an event in time")
        .expect("no stream error")
        .expect("stream open");
    match first {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("a")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    let denied = cms
        .watch(&WatchParams::default().fields("metadata.name=b"), "0")
        .await
        .err()
        .expect("watch of an unrelated object refused");
    assert_eq!(status(denied).code, 403);
}
