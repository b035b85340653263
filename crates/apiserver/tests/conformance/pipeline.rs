//! The request pipeline seams: a custom `Authorizer` and `Authenticator` plug into `Config`,
//! denials are 403 with the upstream message, and failed authentication is 401.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use nodelet_apiserver::{
    Attributes, Authenticator, Authorizer, Config, Decision, Headers, Unauthenticated, User,
};

use super::{cms, start_with, status};

/// Denies secrets; allows everything else.
struct NoSecrets;

impl Authorizer for NoSecrets {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        if attrs.resource == "secrets" {
            Decision::Deny("secrets are off limits".into())
        } else {
            Decision::Allow
        }
    }
}

#[tokio::test]
async fn a_denying_authorizer_answers_403_with_the_upstream_message() {
    let (server, client) = start_with(Config::default().authorizer(Arc::new(NoSecrets))).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let e = status(secrets.get("s").await.expect_err("403"));
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "secrets \"s\" is forbidden: User \"system:admin\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": secrets are off limits"
    );
    let all: Api<Secret> = Api::all(client.clone());
    let e = status(all.list(&ListParams::default()).await.expect_err("403"));
    assert_eq!(
        e.message,
        "secrets is forbidden: User \"system:admin\" cannot list resource \"secrets\" in API group \"\" at the cluster scope: secrets are off limits"
    );
    cms(&client)
        .list(&ListParams::default())
        .await
        .expect("configmaps are allowed");
    let denied = server
        .handle()
        .requests()
        .iter()
        .filter(|r| r.status == 403)
        .count();
    assert_eq!(denied, 2);
}

/// The raw JSON body of a GET, whatever its status (kube's typed `Status` cannot tell a missing
/// field from an empty one).
async fn raw_get(client: &kube::Client, path: &str) -> (u16, serde_json::Value) {
    use http_body_util::BodyExt as _;
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect("send");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (code, serde_json::from_slice(&bytes).expect("JSON body"))
}

/// Clients see upstream's Status: `StatusDetails.name` is `omitempty` upstream, so a denied list
/// (no object
/// name) carries `{"kind": "secrets"}`, never `"name": ""`; a named denial keeps its name.
#[tokio::test]
async fn a_forbidden_status_omits_an_empty_name_from_its_details() {
    let (_server, client) = start_with(Config::default().authorizer(Arc::new(NoSecrets))).await;
    let (code, body) = raw_get(&client, "/api/v1/secrets").await;
    assert_eq!(code, 403);
    assert_eq!(body["details"], serde_json::json!({"kind": "secrets"}));
    let (code, body) = raw_get(&client, "/api/v1/namespaces/default/secrets/s").await;
    assert_eq!(code, 403);
    assert_eq!(
        body["details"],
        serde_json::json!({"name": "s", "kind": "secrets"})
    );
}

/// Accepts only requests that carry `Authorization: Bearer let-me-in`.
struct OneToken;

impl Authenticator for OneToken {
    fn authenticate(&self, headers: &Headers) -> Result<User, Unauthenticated> {
        match headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        {
            Some("Bearer let-me-in") => Ok(User {
                name: "alice".into(),
                groups: vec![],
            }),
            _ => Err(Unauthenticated),
        }
    }
}

#[tokio::test]
async fn a_failed_authentication_is_401_and_the_user_is_recorded_otherwise() {
    let (server, client) = start_with(Config::default().authenticator(Arc::new(OneToken))).await;
    let e = status(
        cms(&client)
            .list(&ListParams::default())
            .await
            .expect_err("401"),
    );
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (401, "Unauthorized", "Unauthorized")
    );
    let mut config = kube::Config::new(server.url().parse().expect("url"));
    config.auth_info.token = Some("let-me-in".to_string().into());
    let alice = kube::Client::try_from(config).expect("client");
    cms(&alice)
        .list(&ListParams::default())
        .await
        .expect("authenticated");
    assert_eq!(server.handle().count_by_user("alice"), 1);
    assert_eq!(server.handle().requests()[0].user, None);
}
