//! `/version` and discovery as kube-rs consumes them, plus the namespace lifecycle, other
//! resources (leases, events) and the patch flavours.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use serde_json::json;

use super::{cm, cm_json, cms, start, status};

#[tokio::test]
async fn version_and_discovery_describe_the_served_resources() {
    let (_server, client) = start().await;
    let v = client.apiserver_version().await.expect("version");
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "36"));
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let core: Vec<String> = discovery
        .groups()
        .filter(|g| g.name().is_empty())
        .flat_map(|g| g.recommended_resources().into_iter().map(|(r, _)| r.plural))
        .collect();
    for plural in [
        "configmaps",
        "secrets",
        "pods",
        "nodes",
        "namespaces",
        "events",
        "serviceaccounts",
    ] {
        assert!(core.contains(&plural.to_string()), "{plural} in {core:?}");
    }
    assert!(discovery.has_group("coordination.k8s.io"));
    assert!(discovery.has_group("events.k8s.io"));
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_objects() {
    let (_server, client) = start().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "tmp"}})).expect("ns");
    let created = nss
        .create(&PostParams::default(), &ns)
        .await
        .expect("create");
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("tmp")
    );
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "tmp");
    assert!(
        sas.get_opt("default").await.expect("get").is_some(),
        "default service account"
    );
    let in_tmp: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
    in_tmp
        .create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .expect("create");
    let answered = nss
        .delete("tmp", &Default::default())
        .await
        .expect("delete");
    let shown = answered
        .left()
        .expect("namespace delete answers the namespace");
    assert_eq!(
        shown.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    assert!(in_tmp.get_opt("a").await.expect("get").is_none());
    let e = status(
        in_tmp
            .create(&PostParams::default(), &cm("b", "k", "v"))
            .await
            .expect_err("gone"),
    );
    assert_eq!(e.message, "namespaces \"tmp\" not found");
}

#[tokio::test]
async fn leases_are_created_on_update_and_json_patches_apply() {
    let (_server, client) = start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}})).expect("lease");
    leases
        .replace("n1", &PostParams::default(), &lease)
        .await
        .expect("PUT creates a lease");
    let p = Patch::Json::<()>(
        serde_json::from_value(
            json!([{"op": "replace", "path": "/spec/holderIdentity", "value": "n2"}]),
        )
        .expect("patch"),
    );
    let l = leases
        .patch("n1", &PatchParams::default(), &p)
        .await
        .expect("json patch");
    assert_eq!(
        l.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("n2")
    );
    let api = cms(&client);
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .expect("create");
    let ssa = Patch::Apply(cm_json("", "b", "x", "y"));
    api.patch("b", &PatchParams::apply("test"), &ssa)
        .await
        .expect("apply creates");
    let smp = Patch::Strategic(json!({"data": {"k": "w"}}));
    let c = api
        .patch("a", &PatchParams::default(), &smp)
        .await
        .expect("strategic");
    assert_eq!(
        c.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("w")
    );
}

#[tokio::test]
async fn kube_event_recorders_create_then_patch_an_event_series() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (_server, client) = start().await;
    let recorder = Recorder::new(client.clone(), Reporter::from("nodelet"));
    let pod = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some("p".into()),
        namespace: Some("default".into()),
        uid: Some("u1".into()),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "FailedMount".into(),
        note: Some("MountVolume.SetUp failed".into()),
        action: "Mount".into(),
        secondary: None,
    };
    recorder.publish(&ev, &pod).await.expect("create");
    recorder.publish(&ev, &pod).await.expect("patch series");
    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let list = events.list(&Default::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(list.items[0].reason.as_deref(), Some("FailedMount"));
}

#[tokio::test]
async fn a_watch_older_than_the_history_window_is_expired() {
    let config = nodelet_apiserver::Config::default().history_limit(3);
    let (_server, client) = super::start_with(config).await;
    let api = cms(&client);
    let first = api
        .create(&PostParams::default(), &cm("a", "k", "0"))
        .await
        .expect("create");
    for i in 1..5 {
        let p = Patch::Merge(json!({"data": {"k": i.to_string()}}));
        api.patch("a", &PatchParams::default(), &p)
            .await
            .expect("patch");
    }
    let rv = first.metadata.resource_version.expect("rv");
    let mut w = Box::pin(api.watch(&Default::default(), &rv).await.expect("watch"));
    match super::watch::next(&mut w).await.expect("event") {
        kube::api::WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn every_namespace_can_carry_the_kube_root_ca_configmap() {
    let (_server, client) =
        super::start_with(nodelet_apiserver::Config::default().publish_root_ca(true)).await;
    let root = cms(&client)
        .get("kube-root-ca.crt")
        .await
        .expect("published in default");
    let ca = root
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .expect("ca.crt");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).expect("ns");
    nss.create(&PostParams::default(), &ns)
        .await
        .expect("create");
    let fresh: Api<ConfigMap> = Api::namespaced(client, "fresh");
    assert!(
        fresh
            .get_opt("kube-root-ca.crt")
            .await
            .expect("get")
            .is_some()
    );
}
