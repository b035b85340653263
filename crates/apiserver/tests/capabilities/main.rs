//! The optional capabilities of nodelet-apiserver driven by the real kube client (and kubectl)
//! over real HTTP(S). One harness; modules by topic.

// Bearer tokens, 401s, and what the Node authorizer allows and denies a kubelet.
mod auth;
// certificates.k8s.io/v1beta1: gating, ClusterTrustBundles, PodCertificateRequests, the signer.
mod certificates;
// A fake kubelet (HTTPS, client certificates checked against a CA, WebSocket upgrades) for
// the pods/log and pods/exec tests.
mod fake_kubelet;
// The binary driven by kubectl (skipped with a note when kubectl is absent), and its flags.
mod kubectl;
// Seeding from a manifest directory and following its edits.
mod manifests;
// pods/exec and pods/attach proxied to the node's kubelet as upgrades; kubectl exec.
mod pod_exec;
// pods/log proxied to the node's kubelet: options, containers, errors, follow, kubectl logs.
mod pod_log;
// TokenReview and (Local/Self)SubjectAccessReview: the server's own authn and authz.
mod reviews;
// Offline mode's one-node scheduler: unbound pods bound, with the Scheduled event.
mod scheduler;
// Services: allocator, defaults, default/kubernetes, the kubelet's field selector.
mod services;
// HTTPS with the generated CA, through a written kubeconfig.
mod tls;
// TokenRequest: claims, validation, OIDC keys, service-account authentication.
mod token;

// The fixtures shared with tests/conformance: PATIENCE, pod and ConfigMap builders.
#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use nodelet_apiserver::{ApiServer, Config, User};

pub(crate) use common::{PATIENCE, cm_json, pod_json};

/// A started server.
pub(crate) async fn start(config: Config) -> ApiServer {
    ApiServer::start(config).await.expect("server starts")
}

/// A kube client for `user`, built from the server's kubeconfig (token, and CA under TLS).
pub(crate) async fn client_for(server: &ApiServer, user: &User) -> kube::Client {
    let kc = Kubeconfig::from_yaml(&server.kubeconfig_yaml(user)).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube::Client::try_from(cfg).expect("client")
}

/// A kube client with an arbitrary bearer token (or none).
pub(crate) fn client_with_token(server: &ApiServer, token: Option<&str>) -> kube::Client {
    let mut cfg = kube::Config::new(server.url().parse().expect("url"));
    if let Some(t) = token {
        cfg.auth_info = serde_json::from_value(serde_json::json!({ "token": t })).expect("auth");
    }
    kube::Client::try_from(cfg).expect("client")
}

/// The API status behind a kube error.
pub(crate) fn status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Waits until `cond` holds, checking after each `tick` future resolves (or every 20 ms).
pub(crate) async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let wait = async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .unwrap_or_else(|_| panic!("gave up waiting for: {what}"));
}
