//! Pods: defaulting the kubelet depends on, the `status` and `ephemeralcontainers`
//! subresources, generation, and graceful deletion of bound pods (deletionTimestamp until a
//! delete with gracePeriodSeconds=0).

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::watch::next;
use super::{start, status};

/// A pod `name` (bound to `node`, if any) whose container and volumes exercise the defaulting
/// the kubelet depends on: an env fieldRef and configMap, secret, projected and downwardAPI
/// volumes.
fn pod(name: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({
        "containers": [{"name": "c", "image": "busybox:1.36", "env": [
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        ]}],
        "volumes": [
            {"name": "cm", "configMap": {"name": "cfg", "items": [{"key": "k", "path": "p", "mode": 256}]}},
            {"name": "sec", "secret": {"secretName": "s"}},
            {"name": "proj", "projected": {"sources": [{"configMap": {"name": "cfg"}}]}},
            {"name": "down", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}
        ]
    });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    super::pod(name, spec)
}

#[tokio::test]
async fn a_created_pod_is_defaulted_like_a_real_server_does() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p = pods
        .create(&PostParams::default(), &pod("p", Some("n1")))
        .await
        .expect("create");
    let v = serde_json::to_value(&p).expect("json");
    let spec = &v["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["serviceAccountName"], "default");
    assert!(spec.get("automountServiceAccountToken").is_none());
    let c = &spec["containers"][0];
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
    let vols = &spec["volumes"];
    assert_eq!(vols[0]["configMap"]["defaultMode"], 420);
    assert_eq!(vols[0]["configMap"]["items"][0]["mode"], 256);
    assert_eq!(vols[1]["secret"]["defaultMode"], 420);
    assert_eq!(vols[2]["projected"]["defaultMode"], 420);
    assert_eq!(vols[3]["downwardAPI"]["defaultMode"], 420);
    assert_eq!(
        vols[3]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"],
        "v1"
    );
    assert_eq!(v["status"]["phase"], "Pending");
    assert_eq!(v["metadata"]["generation"], 1);
}

#[tokio::test]
async fn the_status_subresource_changes_only_status_and_spec_updates_bump_generation() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", Some("n1")))
        .await
        .expect("create");
    let st =
        Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"activeDeadlineSeconds": 5}}));
    let p = pods
        .patch_status("p", &PatchParams::default(), &st)
        .await
        .expect("status");
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    assert_eq!(
        p.spec.as_ref().and_then(|s| s.active_deadline_seconds),
        None
    );
    assert_eq!(p.metadata.generation, Some(1));
    let ignored = Patch::Merge(json!({"status": {"phase": "Failed"}}));
    let p = pods
        .patch("p", &PatchParams::default(), &ignored)
        .await
        .expect("patch");
    assert_eq!(
        p.status.and_then(|s| s.phase).as_deref(),
        Some("Running"),
        "status is reset on the main resource"
    );
    let image = Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 60}}));
    let p = pods
        .patch("p", &PatchParams::default(), &image)
        .await
        .expect("patch");
    assert_eq!(p.metadata.generation, Some(2));
    let e = status(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "n2"}})),
        )
        .await
        .expect_err("forbidden change"),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.starts_with(
            "Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than"
        ),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn ephemeral_containers_are_added_only_through_their_subresource_and_never_removed() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", Some("n1")))
        .await
        .expect("create");
    // A strategic merge patch adds one, as `kubectl debug` and the e2e framework do; the
    // rest of the spec and the status cannot change this way.
    let add = Patch::Strategic(json!({"spec": {
        "ephemeralContainers": [{"name": "debugger", "image": "busybox:1.36", "stdin": true, "tty": true}],
        "activeDeadlineSeconds": 5,
    }}));
    let p = pods
        .patch_subresource("ephemeralcontainers", "p", &PatchParams::default(), &add)
        .await
        .expect("add an ephemeral container");
    let v = serde_json::to_value(&p).expect("json");
    assert_eq!(v["metadata"]["generation"], 2);
    assert!(v["spec"].get("activeDeadlineSeconds").is_none());
    let ec = &v["spec"]["ephemeralContainers"][0];
    assert_eq!(ec["name"], "debugger");
    assert_eq!(ec["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(ec["imagePullPolicy"], "IfNotPresent");
    let read = pods
        .get_subresource("ephemeralcontainers", "p")
        .await
        .expect("get the subresource");
    assert_eq!(
        read.spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .map(Vec::len),
        Some(1)
    );
    // A PUT appends a second one.
    let mut two = read.clone();
    if let Some(list) = two
        .spec
        .as_mut()
        .and_then(|s| s.ephemeral_containers.as_mut())
    {
        let mut second = list[0].clone();
        second.name = "debugger2".into();
        list.push(second);
    }
    let p = pods
        .replace_subresource("ephemeralcontainers", "p", &PostParams::default(), &two)
        .await
        .expect("append one");
    assert_eq!(p.metadata.generation, Some(3));
    // Removing one is refused, and so is adding one through the pod itself.
    let mut fewer = p.clone();
    if let Some(list) = fewer
        .spec
        .as_mut()
        .and_then(|s| s.ephemeral_containers.as_mut())
    {
        list.remove(0);
    }
    let e = status(
        pods.replace_subresource("ephemeralcontainers", "p", &PostParams::default(), &fewer)
            .await
            .expect_err("removal refused"),
    );
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed"
    );
    let direct = Patch::Strategic(
        json!({"spec": {"ephemeralContainers": [{"name": "third", "image": "busybox"}]}}),
    );
    let e = status(
        pods.patch("p", &PatchParams::default(), &direct)
            .await
            .expect_err("not through the pod"),
    );
    assert_eq!(e.code, 422);
}

#[tokio::test]
async fn deleting_a_bound_pod_marks_it_until_a_zero_grace_delete() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", Some("n1")))
        .await
        .expect("create");
    let mut w = Box::pin(
        pods.watch(&WatchParams::default().disable_bookmarks(), "0")
            .await
            .expect("watch"),
    );
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Added(_))));

    let answered = pods
        .delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    let marked = answered.left().expect("pods answer with the object");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    assert_eq!(marked.metadata.generation, Some(2));
    match next(&mut w).await.expect("event") {
        WatchEvent::Modified(p) => assert!(p.metadata.deletion_timestamp.is_some()),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    // A longer grace period changes nothing; a shorter one shortens it.
    let again = pods
        .delete(
            "p",
            &DeleteParams {
                grace_period_seconds: Some(60),
                ..Default::default()
            },
        )
        .await
        .expect("delete");
    assert_eq!(
        again
            .left()
            .and_then(|p| p.metadata.deletion_grace_period_seconds),
        Some(30)
    );
    let shorter = pods
        .delete(
            "p",
            &DeleteParams {
                grace_period_seconds: Some(10),
                ..Default::default()
            },
        )
        .await
        .expect("delete");
    assert_eq!(
        shorter
            .left()
            .and_then(|p| p.metadata.deletion_grace_period_seconds),
        Some(10)
    );
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Modified(_))));
    assert!(pods.get_opt("p").await.expect("get").is_some());

    // What the kubelet sends after cleanup.
    let uid = marked.metadata.uid.clone().expect("uid");
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("p", &dp).await.expect("final delete");
    assert!(matches!(next(&mut w).await, Ok(WatchEvent::Deleted(_))));
    assert!(pods.get_opt("p").await.expect("get").is_none());
}

#[tokio::test]
async fn deleting_an_unbound_pod_removes_it_at_once() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", None))
        .await
        .expect("create");
    let answered = pods
        .delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(answered.is_left());
    assert!(pods.get_opt("p").await.expect("get").is_none());
}

#[tokio::test]
async fn a_delete_with_a_stale_uid_precondition_is_a_conflict() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", None))
        .await
        .expect("create");
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = status(pods.delete("p", &dp).await.expect_err("conflict"));
    assert_eq!(e.code, 409);
    assert!(e.message.starts_with("Operation cannot be fulfilled on pods \"p\": Precondition failed: UID in precondition: other, UID in object meta: "), "{}", e.message);
}

#[tokio::test]
async fn a_binding_assigns_an_unbound_pod_to_a_node_once() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", None))
        .await
        .expect("create");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    let answered: kube::core::Status = pods
        .create_subresource("binding", "p", &PostParams::default(), &binding)
        .await
        .expect("bind");
    assert_eq!(answered.code, 201);
    let p = pods.get("p").await.expect("get");
    assert_eq!(p.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
    let e = status(
        pods.create_subresource::<_, kube::core::Status>(
            "binding",
            "p",
            &PostParams::default(),
            &binding,
        )
        .await
        .expect_err("already bound"),
    );
    assert_eq!(e.code, 409);
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on pods \"p\": pod p is already assigned to node \"n1\""
    );
    assert!(server.handle().bind_pod("default", "p", "n2").is_err());
}

#[tokio::test]
async fn a_strategic_merge_patch_merges_conditions_by_type_and_containers_by_name() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", Some("n1")))
        .await
        .expect("create");
    let two = Patch::Strategic(json!({"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}
    ]}}));
    pods.patch_status("p", &PatchParams::default(), &two)
        .await
        .expect("status");
    let one =
        Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
    let p = pods
        .patch_status("p", &PatchParams::default(), &one)
        .await
        .expect("status");
    let conditions: Vec<(String, String)> = p
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conditions,
        vec![
            ("Ready".into(), "True".into()),
            ("Initialized".into(), "True".into())
        ]
    );
    let image =
        Patch::Strategic(json!({"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}));
    let p = pods
        .patch("p", &PatchParams::default(), &image)
        .await
        .expect("image");
    let c = &p.spec.expect("spec").containers[0];
    assert_eq!(c.image.as_deref(), Some("busybox:1.37"));
    assert!(c.env.is_some(), "other container fields are kept");
}

/// Regression: `kubectl replace -f` (PUT) of an unchanged pod manifest was 422 because the
/// defaults were not re-applied on update; upstream decodes (and defaults) every body, so the
/// replace succeeds and is a no-op. The service account is defaulted by create-only admission
/// upstream, so a manifest that leaves it out still reads as a spec change (422), as upstream.
#[tokio::test]
async fn replacing_a_pod_with_its_original_manifest_changes_nothing() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut manifest = pod("p", Some("n1"));
    if let Some(spec) = manifest.spec.as_mut() {
        spec.service_account_name = Some("default".into());
    }
    let created = pods
        .create(&PostParams::default(), &manifest)
        .await
        .expect("create");
    let mut again = manifest.clone();
    again.metadata.resource_version = created.metadata.resource_version.clone();
    let replaced = pods
        .replace("p", &PostParams::default(), &again)
        .await
        .expect("an unchanged manifest replaces cleanly");
    assert_eq!(replaced, created);
    // A real change on top of the bare manifest (an image) goes through, defaults intact.
    if let Some(spec) = again.spec.as_mut() {
        spec.containers[0].image = Some("busybox:1.37".into());
    }
    let changed = pods
        .replace("p", &PostParams::default(), &again)
        .await
        .expect("image change");
    let (old, new) = (
        serde_json::to_value(&created).expect("json"),
        serde_json::to_value(&changed).expect("json"),
    );
    assert_eq!(new["spec"]["containers"][0]["image"], "busybox:1.37");
    assert_eq!(new["spec"]["volumes"], old["spec"]["volumes"]);
    assert_eq!(new["spec"]["tolerations"], old["spec"]["tolerations"]);
    assert_eq!(new["spec"]["priority"], 0);
    assert_eq!(new["status"], old["status"]);
    assert_eq!(new["metadata"]["generation"], 2);
    // The same through a JSON merge patch that drops defaulted fields: they come back.
    let patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"dnsPolicy": null, "volumes": [
                {"name": "cm", "configMap": {"name": "cfg", "items": [{"key": "k", "path": "p", "mode": 256}]}},
                {"name": "sec", "secret": {"secretName": "s"}},
                {"name": "proj", "projected": {"sources": [{"configMap": {"name": "cfg"}}]}},
                {"name": "down", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}
            ]}})),
        )
        .await
        .expect("patch re-defaulted");
    assert_eq!(patched, changed);
    // Without the service account the manifest differs from the stored spec, as upstream.
    let mut bare = pod("p", Some("n1"));
    bare.metadata.resource_version = changed.metadata.resource_version.clone();
    let e = status(
        pods.replace("p", &PostParams::default(), &bare)
            .await
            .expect_err("422"),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let _ = server;
}
