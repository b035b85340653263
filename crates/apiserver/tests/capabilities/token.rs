//! TokenRequest: the JWT's claims and signature, validation texts, OIDC discovery, and the
//! `default` service account created with each namespace.

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use nodelet_apiserver::{Config, User};
use serde_json::{Value, json};

use super::{client_for, pod_json, start, status};

fn decode(part: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .expect("base64url")
}

fn request(spec: Value) -> TokenRequest {
    serde_json::from_value(json!({ "spec": spec })).expect("token request")
}

async fn get_json(client: &kube::Client, path: &str) -> Value {
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    client.request::<Value>(req).await.expect("GET")
}

#[tokio::test]
async fn a_bound_token_carries_the_upstream_claims_and_verifies_with_the_published_key() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let pod = h
        .create(pod_json("default", "web", json!({})))
        .expect("pod");
    let sa = h
        .get("v1", "ServiceAccount", Some("default"), "default")
        .expect("default SA");
    let client = client_for(&server, &User::admin()).await;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let tr = api
        .create_token_request(
            "default",
            &PostParams::default(),
            &request(json!({"audiences": [], "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}})),
        )
        .await
        .expect("token request");
    let st = tr.status.expect("status");
    let token = st.token.clone().expect("token");
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: Value = serde_json::from_slice(&decode(parts[0])).expect("header");
    let claims: Value = serde_json::from_slice(&decode(parts[1])).expect("claims");
    assert_eq!(header["alg"], "ES256");
    assert_eq!(claims["iss"], "https://kubernetes.default.svc");
    assert_eq!(claims["sub"], "system:serviceaccount:default:default");
    assert_eq!(claims["aud"], json!(["https://kubernetes.default.svc"]));
    let iat = claims["iat"].as_i64().expect("iat");
    assert_eq!(claims["exp"].as_i64().expect("exp") - iat, 3600);
    assert_eq!(claims["nbf"].as_i64(), Some(iat));
    let k = &claims["kubernetes.io"];
    assert_eq!(k["namespace"], "default");
    assert_eq!(k["serviceaccount"]["name"], "default");
    assert_eq!(k["serviceaccount"]["uid"], sa["metadata"]["uid"]);
    assert_eq!(k["pod"]["name"], "web");
    assert_eq!(k["pod"]["uid"], pod["metadata"]["uid"]);
    assert_eq!(
        st.expiration_timestamp.expect("expiration").0.as_second(),
        claims["exp"].as_i64().expect("exp")
    );

    // The signature verifies with the key published at /openid/v1/jwks.
    let jwks = get_json(&client, "/openid/v1/jwks").await;
    let key = jwks["keys"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["kid"] == header["kid"]))
        .expect("key with the token's kid");
    let mut point = vec![4u8];
    point.extend(decode(key["x"].as_str().expect("x")));
    point.extend(decode(key["y"].as_str().expect("y")));
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
        .verify(
            format!("{}.{}", parts[0], parts[1]).as_bytes(),
            &decode(parts[2]),
        )
        .expect("signature verifies");
    let oidc = get_json(&client, "/.well-known/openid-configuration").await;
    assert_eq!(oidc["issuer"], "https://kubernetes.default.svc");
}

#[tokio::test]
async fn requested_audiences_and_lifetime_are_honoured() {
    let server = start(Config::default()).await;
    let api: Api<ServiceAccount> =
        Api::namespaced(client_for(&server, &User::admin()).await, "default");
    let tr = api
        .create_token_request(
            "default",
            &PostParams::default(),
            &request(json!({"audiences": ["vault"], "expirationSeconds": 600})),
        )
        .await
        .expect("token request");
    let token = tr.status.and_then(|s| s.token).expect("token");
    let claims: Value =
        serde_json::from_slice(&decode(token.split('.').nth(1).expect("claims"))).expect("json");
    assert_eq!(claims["aud"], json!(["vault"]));
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        600
    );
    assert!(claims["kubernetes.io"].get("pod").is_none());
}

#[tokio::test]
async fn a_lifetime_under_ten_minutes_is_invalid_with_the_upstream_message() {
    let server = start(Config::default()).await;
    let api: Api<ServiceAccount> =
        Api::namespaced(client_for(&server, &User::admin()).await, "default");
    let s = status(
        api.create_token_request(
            "default",
            &PostParams::default(),
            &request(json!({"audiences": [], "expirationSeconds": 10})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 10: may not specify a duration less than 10 minutes"
    );
}

#[tokio::test]
async fn a_token_for_a_missing_service_account_or_pod_is_not_found() {
    let server = start(Config::default()).await;
    let api: Api<ServiceAccount> =
        Api::namespaced(client_for(&server, &User::admin()).await, "default");
    let s = status(
        api.create_token_request(
            "nope",
            &PostParams::default(),
            &request(json!({"audiences": []})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "serviceaccounts \"nope\" not found")
    );
    let s = status(
        api.create_token_request(
            "default",
            &PostParams::default(),
            &request(json!({"audiences": [], "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "gone"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "pods \"gone\" not found")
    );
}

#[tokio::test]
async fn every_new_namespace_gets_a_default_service_account_unless_turned_off() {
    let server = start(Config::default()).await;
    let client = client_for(&server, &User::admin()).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    assert!(
        Api::<ServiceAccount>::namespaced(client, "team")
            .get("default")
            .await
            .is_ok()
    );

    let mut config = Config::default();
    config.auto_service_accounts = false;
    let bare = start(config).await;
    assert!(
        bare.handle()
            .get("v1", "ServiceAccount", Some("default"), "default")
            .is_none()
    );
}
