//! Conformance tests: nodelet-apiserver driven by the real kube client over real HTTP
//! (STYLE 23). One harness; modules by topic.

// Create, get, list, update, patch, delete and the exact error texts.
mod crud;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use nodelet_apiserver::{ApiServer, Config};

/// A started server and an admin client for it.
pub(crate) async fn start() -> (ApiServer, kube::Client) {
    start_with(Config::default()).await
}

/// A started server with `config` and an admin client for it.
pub(crate) async fn start_with(config: Config) -> (ApiServer, kube::Client) {
    let server = ApiServer::start(config).await.expect("server starts");
    let uri: http::Uri = server.url().parse().expect("valid url");
    let client = kube::Client::try_from(kube::Config::new(uri)).expect("client");
    (server, client)
}

/// A ConfigMap with one data entry.
pub(crate) fn cm(name: &str, key: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {key: value},
    }))
    .expect("valid configmap")
}

/// ConfigMaps in `default`.
pub(crate) fn cms(client: &kube::Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), "default")
}

/// The API status behind a kube error.
pub(crate) fn status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}
