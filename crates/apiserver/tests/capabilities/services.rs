//! Services: the allocator and defaults, `default/kubernetes`, the `spec.clusterIP` field
//! selector the kubelet's service watch uses, and a node's right to read them.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use nodelet_apiserver::{Config, User};
use serde_json::json;

use super::{client_for, start, status};

fn service(name: &str, spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("service")
}

fn cluster_ip(s: &Service) -> String {
    s.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_cluster_like_server_publishes_default_kubernetes_for_its_own_port() {
    let server = start(Config::default().like_a_cluster()).await;
    let admin = client_for(&server, &User::admin()).await;
    let svc = Api::<Service>::namespaced(admin, "default")
        .get("kubernetes")
        .await
        .expect("default/kubernetes");
    assert_eq!(cluster_ip(&svc), "10.96.0.1");
    let port = &svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .expect("ports")[0];
    assert_eq!(port.name.as_deref(), Some("https"));
    assert_eq!(port.port, 443);
    assert_eq!(
        port.target_port,
        Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::from(
                server.addr().port()
            ))
        )
    );
}

#[tokio::test]
async fn created_services_get_defaults_and_distinct_addresses_of_the_range() {
    let server = start(Config::default().like_a_cluster()).await;
    let admin = client_for(&server, &User::admin()).await;
    let api = Api::<Service>::namespaced(admin, "default");
    let pp = PostParams::default();
    let a = api
        .create(&pp, &service("a", json!({"ports": [{"port": 80}]})))
        .await
        .expect("a");
    let b = api
        .create(&pp, &service("b", json!({"ports": [{"port": 81}]})))
        .await
        .expect("b");
    assert_ne!(cluster_ip(&a), cluster_ip(&b));
    for ip in [cluster_ip(&a), cluster_ip(&b)] {
        assert!(ip.starts_with("10.9"), "{ip} not in 10.96.0.0/12");
        assert_ne!(ip, "10.96.0.1", "the master service's address is taken");
    }
    let a_ip = cluster_ip(&a);
    let spec = a.spec.expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.cluster_ips, Some(vec![a_ip]));
    let port = &spec.ports.expect("ports")[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));

    // A taken address is refused; a patch that leaves the address out keeps it, one that
    // changes it is refused.
    let taken = api
        .create(
            &pp,
            &service(
                "c",
                json!({"clusterIP": cluster_ip(&b), "ports": [{"port": 80}]}),
            ),
        )
        .await
        .expect_err("taken");
    assert_eq!(status(taken).code, 422);
    let patched = api
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"port": 82}]}})),
        )
        .await
        .expect("patch");
    assert_eq!(cluster_ip(&patched), cluster_ip(&b));
    let moved = api
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterIP": "10.96.0.200"}})),
        )
        .await
        .expect_err("immutable");
    assert_eq!(status(moved).code, 422);
}

#[tokio::test]
async fn a_node_lists_the_services_with_a_cluster_ip_the_way_the_kubelet_asks() {
    let server = start(Config::default().like_a_cluster().with_auth()).await;
    let admin = client_for(&server, &User::admin()).await;
    let pp = PostParams::default();
    let api = Api::<Service>::namespaced(admin, "default");
    api.create(&pp, &service("web", json!({"ports": [{"port": 80}]})))
        .await
        .expect("web");
    api.create(
        &pp,
        &service(
            "headless",
            json!({"clusterIP": "None", "ports": [{"port": 80}]}),
        ),
    )
    .await
    .expect("headless");
    let node = client_for(&server, &User::node("n1")).await;
    let listed = Api::<Service>::all(node)
        .list(&ListParams::default().fields("spec.clusterIP!=None"))
        .await
        .expect("a node lists services");
    let mut names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["kubernetes", "web"]);
}

#[tokio::test]
async fn a_service_account_of_a_cluster_like_server_reads_its_own_namespace_only() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let server = start(Config::default().like_a_cluster().with_auth()).await;
    let sa = client_for(&server, &User::service_account("default", "default")).await;
    let own = Api::<ConfigMap>::namespaced(sa.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("its own namespace");
    assert!(
        own.items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("kube-root-ca.crt"))
    );
    let other = Api::<ConfigMap>::namespaced(sa, "kube-system")
        .list(&ListParams::default())
        .await
        .expect_err("another namespace");
    assert_eq!(status(other).code, 403);

    // Without the option, nothing.
    let server = start(Config::default().with_auth()).await;
    let sa = client_for(&server, &User::service_account("default", "default")).await;
    let refused = Api::<ConfigMap>::namespaced(sa, "default")
        .list(&ListParams::default())
        .await
        .expect_err("no access");
    assert_eq!(status(refused).code, 403);
}
