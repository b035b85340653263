//! `limit`/`continue` pagination over a consistent snapshot, list resourceVersion semantics
//! and the 410 for compacted continue tokens and exact reads.

use kube::api::{ListParams, PostParams, VersionMatch};

use super::{cm, cms, start, status};

#[tokio::test]
async fn pages_follow_continue_tokens_and_share_one_resource_version() {
    let (_server, client) = start().await;
    let api = cms(&client);
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "k", "v"))
            .await
            .expect("create");
    }
    let first = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().expect("continue");
    api.create(&PostParams::default(), &cm("c9", "k", "v"))
        .await
        .expect("create after page 1");
    let second = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .expect("page 2");
    let names: Vec<_> = second
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        vec!["c2", "c3", "c4"],
        "a later create is not in the snapshot"
    );
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    assert!(second.metadata.continue_.is_none());
}

#[tokio::test]
async fn a_compacted_continue_token_or_exact_version_is_gone() {
    let (server, client) = start().await;
    let api = cms(&client);
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "k", "v"))
            .await
            .expect("create");
    }
    let first = api
        .list(&ListParams::default().limit(1))
        .await
        .expect("page 1");
    let rv = first.metadata.resource_version.clone().expect("rv");
    let exact = ListParams::default().at(&rv).matching(VersionMatch::Exact);
    assert_eq!(api.list(&exact).await.expect("exact read").items.len(), 3);
    server.handle().compact();
    let token = first.metadata.continue_.expect("continue");
    let e = status(
        api.list(&ListParams::default().continue_token(&token))
            .await
            .expect_err("410"),
    );
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    assert!(
        e.message
            .starts_with("The provided continue parameter is too old")
    );
    let e = status(api.list(&exact).await.expect_err("410"));
    assert_eq!(e.code, 410);
    assert!(
        e.message
            .starts_with(&format!("too old resource version: {rv} (")),
        "{}",
        e.message
    );
    // NotOlderThan (the default for a given version) is still served, from the latest state.
    let latest = api
        .list(&ListParams::default().at(&rv))
        .await
        .expect("not older than");
    assert_eq!(latest.items.len(), 3);
}

#[tokio::test]
async fn pages_across_namespaces_whose_names_prefix_each_other_miss_nothing() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::Api;
    let (_server, client) = start().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in ["a", "a-b"] {
        let obj: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).expect("ns");
        nss.create(&PostParams::default(), &obj)
            .await
            .expect("namespace");
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for name in ["x", "z"] {
            api.create(&PostParams::default(), &cm(name, "k", "v"))
                .await
                .expect("create");
        }
    }
    let all: Api<ConfigMap> = Api::all(client.clone());
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(1);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = all.list(&lp).await.expect("page");
        seen.extend(page.items.iter().map(|c| {
            format!(
                "{}/{}",
                c.metadata.namespace.clone().unwrap_or_default(),
                c.metadata.name.clone().unwrap_or_default()
            )
        }));
        token = page.metadata.continue_.clone();
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen, vec!["a/x", "a/z", "a-b/x", "a-b/z"]);
}
