//! HTTPS with the CA generated at start, reached through a written kubeconfig.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use nodelet_apiserver::{Config, User};
use serde_json::json;

use super::start;

#[tokio::test]
async fn a_client_built_from_the_written_kubeconfig_trusts_the_generated_ca() {
    let server = start(Config::default().with_tls().with_auth()).await;
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    server
        .write_kubeconfig(&path, &User::admin())
        .expect("write");
    let kc = Kubeconfig::read_from(&path).expect("read kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    let client = kube::Client::try_from(cfg).expect("client");
    let nss = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list over TLS");
    assert!(
        nss.items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("cm");
    Api::<ConfigMap>::namespaced(client, "default")
        .create(&PostParams::default(), &cm)
        .await
        .expect("create over TLS");
}

#[tokio::test]
async fn a_client_without_the_ca_is_refused() {
    let server = start(Config::default().with_tls()).await;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().expect("url")))
        .expect("client");
    let err = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "expected a TLS failure, got {err:?}"
    );
    assert!(
        server
            .ca_pem()
            .is_some_and(|p| p.starts_with("-----BEGIN CERTIFICATE-----"))
    );
}
