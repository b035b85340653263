//! Service variables (spec PW-15 … PW-17): which services, which variables, precedence and
//! `$(VAR)` references, the master service pointed elsewhere, and a watch not yet listed.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use nodelet_object_manager::{ServiceLister, ServiceListerConfig, Strategy};
use nodelet_podworker::{ContainerEnv, EnvError, EnvOptions, ServiceEndpoint, resolve_env};
use serde_json::{Value, json};

use crate::support::{api, first_container, pod_with};

fn service(ns: &str, name: &str, ip: &str, ports: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"namespace": ns, "name": name},
        "spec": {"clusterIP": ip, "ports": ports}}))
    .expect("service")
}

/// `default/kubernetes`, `ns/web` (two ports, the second named and UDP), `ns/db-main`,
/// `other/x` and a headless `ns/headless`.
fn cluster() -> Vec<Service> {
    vec![
        service(
            "default",
            "kubernetes",
            "10.96.0.1",
            json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
        ),
        service(
            "ns",
            "web",
            "10.96.0.10",
            json!([{"name": "http", "port": 80}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}]),
        ),
        service("ns", "db-main", "10.96.0.11", json!([{"port": 5432}])),
        service("other", "x", "10.96.0.12", json!([{"port": 1}])),
        service("ns", "headless", "None", json!([{"port": 1}])),
    ]
}

async fn resolve_in(
    services: Option<ServiceLister>,
    spec: Value,
    container: Value,
    options: &EnvOptions,
) -> Result<ContainerEnv, EnvError> {
    let mut api = api(Strategy::Watch);
    api.sources.services = services;
    let p = pod_with(spec, container);
    api.register(&p);
    resolve_env(&p, &first_container(&p), &api.sources, options).await
}

async fn resolve(spec: Value, container: Value) -> ContainerEnv {
    resolve_in(
        Some(ServiceLister::fixed(&cluster())),
        spec,
        container,
        &EnvOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("resolve: {e}"))
}

fn text(env: &ContainerEnv, name: &str) -> Option<String> {
    env.get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

#[tokio::test]
async fn pw16_the_master_service_gives_the_variables_in_cluster_clients_read() {
    let env = resolve(json!({}), json!({})).await;
    for (name, value) in [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
        ("KUBERNETES_PORT_443_TCP_PORT", "443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
    ] {
        assert_eq!(text(&env, name).as_deref(), Some(value), "{name}");
    }
}

#[tokio::test]
async fn pw16_every_service_of_the_namespace_gives_host_port_and_link_variables() {
    let env = resolve(json!({}), json!({})).await;
    for (name, value) in [
        ("WEB_SERVICE_HOST", "10.96.0.10"),
        ("WEB_SERVICE_PORT", "80"),
        ("WEB_SERVICE_PORT_HTTP", "80"),
        ("WEB_SERVICE_PORT_DNS_UDP", "53"),
        ("WEB_PORT", "tcp://10.96.0.10:80"),
        ("WEB_PORT_53_UDP", "udp://10.96.0.10:53"),
        ("WEB_PORT_53_UDP_PROTO", "udp"),
        ("DB_MAIN_SERVICE_HOST", "10.96.0.11"),
        ("DB_MAIN_SERVICE_PORT", "5432"),
        ("DB_MAIN_PORT_5432_TCP_ADDR", "10.96.0.11"),
    ] {
        assert_eq!(text(&env, name).as_deref(), Some(value), "{name}");
    }
    // An unnamed port has no `_SERVICE_PORT_<NAME>`; other namespaces and headless services
    // give nothing.
    assert!(
        env.vars
            .iter()
            .all(|v| !v.name.starts_with("X_") && !v.name.starts_with("HEADLESS_")),
        "{:?}",
        env.vars
    );
    assert_eq!(
        env.vars
            .iter()
            .filter(|v| v.name.starts_with("DB_MAIN_SERVICE_PORT"))
            .count(),
        1
    );
}

#[tokio::test]
async fn pw15_without_service_links_only_the_master_service_is_there() {
    let env = resolve(json!({"enableServiceLinks": false}), json!({})).await;
    assert_eq!(
        text(&env, "KUBERNETES_SERVICE_HOST").as_deref(),
        Some("10.96.0.1")
    );
    assert!(text(&env, "WEB_SERVICE_HOST").is_none());
}

#[tokio::test]
async fn pw15_a_namespace_service_called_kubernetes_takes_the_master_services_place() {
    let mut services = cluster();
    services.push(service(
        "ns",
        "kubernetes",
        "10.96.0.99",
        json!([{"port": 8443}]),
    ));
    let env = resolve_in(
        Some(ServiceLister::fixed(&services)),
        json!({}),
        json!({}),
        &EnvOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        text(&env, "KUBERNETES_SERVICE_HOST").as_deref(),
        Some("10.96.0.99")
    );
    assert_eq!(
        text(&env, "KUBERNETES_SERVICE_PORT").as_deref(),
        Some("8443")
    );
}

#[tokio::test]
async fn pw17_the_containers_own_variables_win_and_references_fall_back_to_services() {
    let env = resolve(
        json!({}),
        json!({"env": [
            {"name": "WEB_SERVICE_HOST", "value": "mine"},
            {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
            {"name": "SELF", "value": "$(WEB_SERVICE_HOST)"}
        ]}),
    )
    .await;
    assert_eq!(text(&env, "WEB_SERVICE_HOST").as_deref(), Some("mine"));
    assert_eq!(text(&env, "API").as_deref(), Some("https://10.96.0.1:443"));
    assert_eq!(text(&env, "SELF").as_deref(), Some("mine"));
}

#[tokio::test]
async fn the_master_service_can_point_at_the_agents_own_api_server_address() {
    let mut options = EnvOptions::default();
    options.kubernetes_service = Some(ServiceEndpoint {
        host: "127.0.0.1".to_owned(),
        port: 6443,
    });
    let env = resolve_in(
        Some(ServiceLister::fixed(&cluster())),
        json!({}),
        json!({}),
        &options,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        text(&env, "KUBERNETES_SERVICE_HOST").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        text(&env, "KUBERNETES_SERVICE_PORT").as_deref(),
        Some("6443")
    );
    assert_eq!(
        text(&env, "KUBERNETES_PORT_6443_TCP").as_deref(),
        Some("tcp://127.0.0.1:6443")
    );
    assert!(text(&env, "KUBERNETES_PORT_443_TCP").is_none());
    // The namespace's services are unchanged.
    assert_eq!(
        text(&env, "WEB_SERVICE_HOST").as_deref(),
        Some("10.96.0.10")
    );
}

#[tokio::test]
async fn an_ipv6_cluster_ip_is_bracketed_in_urls_and_bare_in_addresses() {
    let services = [service(
        "default",
        "kubernetes",
        "fd00::1",
        json!([{"name": "https", "port": 443}]),
    )];
    let env = resolve_in(
        Some(ServiceLister::fixed(&services)),
        json!({}),
        json!({}),
        &EnvOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        text(&env, "KUBERNETES_PORT").as_deref(),
        Some("tcp://[fd00::1]:443")
    );
    assert_eq!(
        text(&env, "KUBERNETES_PORT_443_TCP_ADDR").as_deref(),
        Some("fd00::1")
    );
}

#[tokio::test(start_paused = true)]
async fn pw15_a_service_watch_that_never_listed_fails_with_the_kubelets_text() {
    let mut config = ServiceListerConfig::default();
    config.first_list_wait = Duration::from_secs(3);
    let err = resolve_in(
        Some(ServiceLister::never_synced(config)),
        json!({}),
        json!({}),
        &EnvOptions::default(),
    )
    .await
    .expect_err("not synced");
    assert_eq!(
        err.to_string(),
        "services have not yet been read at least once, cannot construct envvars"
    );
}

#[tokio::test]
async fn without_a_service_lister_there_are_no_service_variables() {
    let env = resolve_in(None, json!({}), json!({}), &EnvOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(text(&env, "KUBERNETES_SERVICE_HOST").is_none());
}
