//! TokenReview and (Local/Self)SubjectAccessReview through the real kube client: the server's
//! own token authentication and authorizer, as a kubelet delegating its API's auth asks them.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenReview};
use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, SelfSubjectAccessReview, SubjectAccessReview,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use nodelet_apiserver::{ApiServer, Config, User};
use serde_json::{Value, json};

use super::{client_for, pod_json, start, status};

async fn token_review(client: &kube::Client, token: &str, audiences: Value) -> TokenReview {
    let tr: TokenReview = serde_json::from_value(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": audiences}}),
    )
    .expect("token review");
    Api::all(client.clone())
        .create(&PostParams::default(), &tr)
        .await
        .expect("create token review")
}

fn sar(spec: Value) -> SubjectAccessReview {
    serde_json::from_value(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}))
        .expect("sar")
}

/// `allowed`, `denied` and `reason` of a SubjectAccessReview created by `client`.
async fn access(client: &kube::Client, spec: Value) -> (bool, bool, String) {
    let out = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &sar(spec))
        .await
        .expect("create sar");
    let st = out.status.expect("status");
    (
        st.allowed,
        st.denied.unwrap_or(false),
        st.reason.unwrap_or_default(),
    )
}

fn nodes_proxy(user: &User) -> Value {
    json!({
        "user": user.name, "groups": user.groups,
        "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": "proxy", "name": "n1"},
    })
}

async fn auth_server() -> ApiServer {
    start(Config::default().with_auth()).await
}

#[tokio::test]
async fn a_minted_token_reviews_as_its_user_and_an_unknown_one_does_not() {
    let server = auth_server().await;
    let admin = client_for(&server, &User::admin()).await;
    let token = server.token_for(&User::node("n1"));
    let tr = token_review(&admin, &token, json!(null)).await;
    let st = tr.status.expect("status");
    assert_eq!(st.authenticated, Some(true));
    let user = st.user.expect("user");
    assert_eq!(user.username.as_deref(), Some("system:node:n1"));
    assert_eq!(
        user.groups.unwrap_or_default(),
        ["system:nodes", "system:authenticated"]
    );
    // The API audience: the issuer.
    assert_eq!(
        st.audiences.unwrap_or_default(),
        ["https://kubernetes.default.svc"]
    );
    // A token for another audience only is no good for a token that knows none.
    let st = token_review(&admin, &token, json!(["https://elsewhere"]))
        .await
        .status
        .expect("status");
    assert_ne!(st.authenticated, Some(true));

    let st = token_review(&admin, "not-a-token", json!(null))
        .await
        .status
        .expect("status");
    assert_ne!(st.authenticated, Some(true));
    assert_eq!(st.error.as_deref(), Some("invalid bearer token"));

    let tr: TokenReview =
        serde_json::from_value(json!({"spec": {"token": ""}})).expect("empty token review");
    let s = status(
        Api::<TokenReview>::all(admin)
            .create(&PostParams::default(), &tr)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (400, "token is required for TokenReview in authentication")
    );
}

#[tokio::test]
async fn a_service_account_token_reviews_with_its_uid_pod_and_audience() {
    let server = start(Config::default()).await;
    let h = server.handle();
    h.create(pod_json("default", "web", json!({})))
        .expect("pod");
    let sa = h
        .get("v1", "ServiceAccount", Some("default"), "default")
        .expect("default SA");
    let admin = server.client();
    let req: TokenRequest = serde_json::from_value(json!({"spec": {
        "audiences": ["my-kubelet"],
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"},
    }}))
    .expect("token request");
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create_token_request("default", &PostParams::default(), &req)
        .await
        .expect("token")
        .status
        .and_then(|s| s.token)
        .expect("token");
    // Not for the API's own audience...
    let st = token_review(&admin, &token, json!(null))
        .await
        .status
        .expect("status");
    assert_ne!(st.authenticated, Some(true));
    // ...but for the one it names.
    let st = token_review(&admin, &token, json!(["my-kubelet", "other"]))
        .await
        .status
        .expect("status");
    assert_eq!(st.authenticated, Some(true));
    assert_eq!(st.audiences.unwrap_or_default(), ["my-kubelet"]);
    let user = st.user.expect("user");
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:default")
    );
    assert_eq!(
        user.uid.as_deref(),
        sa["metadata"]["uid"].as_str(),
        "the service account's uid"
    );
    let extra = user.extra.unwrap_or_default();
    assert_eq!(
        extra.get("authentication.kubernetes.io/pod-name"),
        Some(&vec!["web".to_string()])
    );
    assert!(
        extra
            .get("authentication.kubernetes.io/credential-id")
            .is_some_and(|v| v[0].starts_with("JTI=")),
        "{extra:?}"
    );
    // Deleting the pod it is bound to invalidates it.
    h.delete_now("v1", "Pod", Some("default"), "web")
        .expect("delete");
    let st = token_review(&admin, &token, json!(["my-kubelet"]))
        .await
        .status
        .expect("status");
    assert_ne!(st.authenticated, Some(true));
}

#[tokio::test]
async fn nodes_proxy_is_allowed_for_an_admin_and_nobody_else_without_a_reason() {
    let server = auth_server().await;
    let admin = client_for(&server, &User::admin()).await;
    assert_eq!(
        access(&admin, nodes_proxy(&User::admin())).await,
        (true, false, String::new())
    );
    // Neither an admin nor a node: RBAC finds no rule and gives no reason.
    let sa = User::service_account("default", "default");
    assert_eq!(
        access(&admin, nodes_proxy(&sa)).await,
        (false, false, String::new())
    );
    let someone = User {
        name: "jane".into(),
        groups: vec!["system:authenticated".into()],
    };
    assert_eq!(
        access(&admin, nodes_proxy(&someone)).await,
        (false, false, String::new())
    );
    // A node is no more allowed its own proxy subresource.
    assert_eq!(
        access(&admin, nodes_proxy(&User::node("n1"))).await,
        (false, false, String::new())
    );
    // The Node authorizer's reason reaches the status.
    let (allowed, _, reason) = access(
        &admin,
        json!({
            "user": "system:node:n1", "groups": ["system:nodes"],
            "resourceAttributes": {"verb": "get", "resource": "configmaps", "namespace": "default", "name": "x"},
        }),
    )
    .await;
    assert!(!allowed);
    assert_eq!(
        reason,
        "no relationship found between node 'n1' and this object"
    );
    // Non-resource attributes: discovery is for everyone.
    let (allowed, _, _) = access(
        &admin,
        json!({"user": "jane", "nonResourceAttributes": {"verb": "get", "path": "/version"}}),
    )
    .await;
    assert!(allowed);
}

#[tokio::test]
async fn a_node_may_review_tokens_and_access_and_a_service_account_may_not() {
    let server = auth_server().await;
    let node = client_for(&server, &User::node("n1")).await;
    let token = server.token_for(&User::admin());
    let st = token_review(&node, &token, json!(null))
        .await
        .status
        .expect("status");
    assert_eq!(st.authenticated, Some(true));
    assert_eq!(
        access(&node, nodes_proxy(&User::admin())).await,
        (true, false, String::new())
    );
    let lsar: LocalSubjectAccessReview = serde_json::from_value(json!({
        "metadata": {"namespace": "default"},
        "spec": {"user": "jane", "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}},
    }))
    .expect("lsar");
    let out = Api::<LocalSubjectAccessReview>::namespaced(node.clone(), "default")
        .create(&PostParams::default(), &lsar)
        .await
        .expect("local review");
    assert!(!out.status.expect("status").allowed);

    let sa = client_for(&server, &User::service_account("default", "default")).await;
    let tr: TokenReview =
        serde_json::from_value(json!({"spec": {"token": token}})).expect("token review");
    let s = status(
        Api::<TokenReview>::all(sa.clone())
            .create(&PostParams::default(), &tr)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "tokenreviews.authentication.k8s.io is forbidden: User \"system:serviceaccount:default:default\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope"
        )
    );
    let s = status(
        Api::<SubjectAccessReview>::all(sa.clone())
            .create(&PostParams::default(), &sar(nodes_proxy(&User::admin())))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 403);
    // Everyone may ask what it may do itself.
    let ssar: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": "proxy"}},
    }))
    .expect("ssar");
    let out = Api::<SelfSubjectAccessReview>::all(sa)
        .create(&PostParams::default(), &ssar)
        .await
        .expect("self review");
    assert!(!out.status.expect("status").allowed);
}

#[tokio::test]
async fn an_access_review_without_attributes_or_subject_is_invalid_with_upstreams_texts() {
    let server = auth_server().await;
    let admin = client_for(&server, &User::admin()).await;
    let s = status(
        Api::<SubjectAccessReview>::all(admin.clone())
            .create(&PostParams::default(), &sar(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (
            422,
            "Invalid",
            ".authorization.k8s.io \"\" is invalid: [spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: \"\": at least one of user or group must be specified]"
        )
    );
    let lsar: LocalSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": "jane", "resourceAttributes": {"namespace": "other", "verb": "get", "resource": "pods"}},
    }))
    .expect("lsar");
    let s = status(
        Api::<LocalSubjectAccessReview>::namespaced(admin, "default")
            .create(&PostParams::default(), &lsar)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            422,
            ".authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: \"other\": must match metadata.namespace"
        )
    );
}

#[tokio::test]
async fn discovery_lists_the_review_kinds_and_pods_log() {
    let server = start(Config::default()).await;
    let client = server.client();
    let get = |path: &'static str| {
        let client = client.clone();
        async move {
            let req = http::Request::get(path).body(Vec::new()).expect("request");
            client.request::<Value>(req).await.expect("GET")
        }
    };
    let names = |list: &Value| -> Vec<String> {
        list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(String::from))
            .collect()
    };
    let authn = get("/apis/authentication.k8s.io/v1").await;
    assert_eq!(names(&authn), ["selfsubjectreviews", "tokenreviews"]);
    let authz = get("/apis/authorization.k8s.io/v1").await;
    assert_eq!(
        names(&authz),
        [
            "localsubjectaccessreviews",
            "selfsubjectaccessreviews",
            "subjectaccessreviews"
        ]
    );
    let core = get("/api/v1").await;
    let log = core["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "pods/log"))
        .expect("pods/log");
    assert_eq!(
        (&log["kind"], &log["verbs"]),
        (&json!("Pod"), &json!(["get"]))
    );
    let groups = get("/apis").await;
    let listed: Vec<&str> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(
        listed.contains(&"authentication.k8s.io") && listed.contains(&"authorization.k8s.io"),
        "{listed:?}"
    );
}
