//! Offline mode's manifest directory: seeding, live edits, malformed files, deletions.

use std::path::Path;

use nodelet_apiserver::{Config, ManifestSync, ServerHandle};
use serde_json::Value;

use super::{eventually, start};

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    // Write beside and rename, as editors and `kubectl`-style tools do: one event burst.
    let tmp = dir.join(format!(".{}.tmp", name.replace('/', "_")));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
}

fn cm_value(h: &ServerHandle, ns: &str, name: &str, key: &str) -> Option<String> {
    h.get("v1", "ConfigMap", Some(ns), name)
        .and_then(|c| c["data"][key].as_str().map(str::to_string))
}

const APP: &str = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: shop}
data: {mode: one}
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: shop}
stringData: {password: hunter2}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  nodeName: dev-1
  containers: [{name: c, image: busybox}]
";

#[tokio::test]
async fn a_directory_seeds_every_object_and_creates_referenced_namespaces() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "app.yaml", APP);
    write(
        dir.path(),
        "nested/node.yml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: dev-1}\n",
    );
    let sync = ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("start");
    assert_eq!(sync.report().passes, 1);
    assert!(sync.errors().is_empty(), "{:?}", sync.errors());
    assert!(h.get("v1", "Namespace", None, "shop").is_some());
    assert_eq!(cm_value(&h, "shop", "app", "mode").as_deref(), Some("one"));
    assert!(h.get("v1", "Secret", Some("shop"), "db").is_some());
    assert!(h.get("v1", "Pod", Some("shop"), "web").is_some());
    assert!(h.get("v1", "Node", None, "dev-1").is_some());
}

#[tokio::test]
async fn editing_a_file_updates_its_objects_in_place() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "app.yaml", APP);
    let _sync = ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("start");
    let uid = |h: &ServerHandle| {
        h.get("v1", "ConfigMap", Some("shop"), "app")
            .map(|c| c["metadata"]["uid"].clone())
            .unwrap_or(Value::Null)
    };
    let before = uid(&h);
    write(
        dir.path(),
        "app.yaml",
        &APP.replace("mode: one", "mode: two"),
    );
    eventually("the edit reaches the store", || {
        cm_value(&h, "shop", "app", "mode").as_deref() == Some("two")
    })
    .await;
    assert_eq!(uid(&h), before, "replaced in place, not recreated");
    // A new file adds objects.
    write(
        dir.path(),
        "more.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {k: v}\n",
    );
    eventually("the new file is loaded", || {
        cm_value(&h, "default", "extra", "k").is_some()
    })
    .await;
}

#[tokio::test]
async fn a_malformed_file_is_reported_with_its_path_and_keeps_the_loaded_objects() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "app.yaml", APP);
    let sync = ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("start");
    let mut reports = sync.subscribe();
    write(
        dir.path(),
        "app.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [oops\n",
    );
    let report = tokio::time::timeout(
        super::PATIENCE,
        reports.wait_for(|r| !r.problems.is_empty()),
    )
    .await
    .expect("a report in time")
    .expect("sync alive")
    .clone();
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].path, dir.path().join("app.yaml"));
    assert_eq!(report.problems[0].document, None);
    assert!(
        report.problems[0].error.starts_with("not YAML: ")
            && report.problems[0].error.contains("line 3"),
        "{}",
        report.problems[0]
    );
    assert_eq!(cm_value(&h, "shop", "app", "mode").as_deref(), Some("one"));
    assert!(h.get("v1", "Pod", Some("shop"), "web").is_some());
    // Fixing the file clears the problem.
    write(dir.path(), "app.yaml", APP);
    tokio::time::timeout(super::PATIENCE, reports.wait_for(|r| r.problems.is_empty()))
        .await
        .expect("a report in time")
        .expect("sync alive");
}

#[tokio::test]
async fn an_object_the_server_rejects_is_reported_with_the_api_message() {
    let server = start(Config::default()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Not_Valid}\n",
    );
    let sync = ManifestSync::start(server.handle(), dir.path())
        .await
        .expect("start");
    let problems = sync.errors();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].document, Some(1));
    assert!(
        problems[0]
            .error
            .contains("ConfigMap \"Not_Valid\" is invalid"),
        "{}",
        problems[0]
    );
}

/// A user must see every mistake in a file at once: a file with an unserved Deployment, a good
/// ConfigMap and a Secret with
/// bad base64 reported only the Secret; every bad document is reported, with file, document
/// index and reason, and the good one is applied.
#[tokio::test]
async fn every_bad_document_of_a_file_is_reported_with_its_index_and_reason() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "mixed.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\ndata: {k: v}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ndata: {password: \"not base64!\"}\n---\n\
         apiVersion: v1\nmetadata: {name: kindless}\n",
    );
    let sync = ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("start");
    let problems = sync.errors();
    let path = dir.path().join("mixed.yaml");
    let got: Vec<(Option<usize>, &str)> = problems
        .iter()
        .map(|p| {
            assert_eq!(p.path, path);
            (p.document, p.error.as_str())
        })
        .collect();
    assert_eq!(got.len(), 3, "{problems:#?}");
    assert_eq!(got[0].0, Some(1));
    assert!(
        got[0].1.contains("kind \"Deployment\" is not served"),
        "{}",
        got[0].1
    );
    assert_eq!(got[1].0, Some(3));
    assert!(got[1].1.starts_with("Secret \"creds\""), "{}", got[1].1);
    assert!(
        !got[1].1.contains("not base64!"),
        "the value leaked: {}",
        got[1].1
    );
    assert_eq!(got[2], (Some(4), "missing kind"));
    assert_eq!(
        problems[0].to_string(),
        format!("{}: document 1: {}", path.display(), got[0].1)
    );
    assert_eq!(cm_value(&h, "default", "good", "k").as_deref(), Some("v"));
}

#[tokio::test]
async fn deleting_a_file_deletes_the_objects_it_alone_defined() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: both}\ndata: {k: v}\n";
    write(
        dir.path(),
        "one.yaml",
        &format!("{shared}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: only-one}}\n"),
    );
    write(dir.path(), "two.yaml", shared);
    let _sync = ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("start");
    assert!(
        h.get("v1", "ConfigMap", Some("default"), "only-one")
            .is_some()
    );
    std::fs::remove_file(dir.path().join("one.yaml")).expect("rm");
    eventually("only-one is deleted", || {
        h.get("v1", "ConfigMap", Some("default"), "only-one")
            .is_none()
    })
    .await;
    assert!(h.get("v1", "ConfigMap", Some("default"), "both").is_some());
}

#[tokio::test]
async fn editing_a_pod_manifest_label_updates_the_pod() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "app.yaml", APP);
    let sync = ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("start");
    write(
        dir.path(),
        "app.yaml",
        &APP.replace(
            "metadata: {name: web, namespace: shop}",
            "metadata: {name: web, namespace: shop, labels: {tier: fe}}",
        ),
    );
    eventually("the label reaches the pod", || {
        h.get("v1", "Pod", Some("shop"), "web")
            .is_some_and(|p| p["metadata"]["labels"]["tier"] == "fe")
            || !sync.errors().is_empty()
    })
    .await;
    assert!(sync.errors().is_empty(), "{:?}", sync.errors());
}

const MODES: &str = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: modes}
data: {k: v}
---
apiVersion: v1
kind: Pod
metadata: {name: modes}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - name: v
    configMap: {name: modes, defaultMode: 0400}
";

/// Manifests are YAML 1.1 to Kubernetes: a plain `0400` is the octal integer 256; a quoted
/// `\"0400\"` is a string, which the typed decoder refuses (400) for that file only.
#[tokio::test]
async fn a_plain_octal_default_mode_is_256_and_a_quoted_one_is_reported_for_its_file() {
    let server = start(Config::default()).await;
    let h = server.handle();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "modes.yaml", MODES);
    write(dir.path(), "app.yaml", APP);
    let sync = ManifestSync::start(h.clone(), dir.path())
        .await
        .expect("start");
    assert!(sync.errors().is_empty(), "{:?}", sync.errors());
    let mode = |h: &ServerHandle| {
        h.get("v1", "Pod", Some("default"), "modes")
            .map(|p| p["spec"]["volumes"][0]["configMap"]["defaultMode"].clone())
    };
    assert_eq!(mode(&h), Some(Value::from(256)));
    let mut reports = sync.subscribe();
    write(
        dir.path(),
        "modes.yaml",
        &MODES.replace("defaultMode: 0400", "defaultMode: \"0400\""),
    );
    let report = tokio::time::timeout(
        super::PATIENCE,
        reports.wait_for(|r| !r.problems.is_empty()),
    )
    .await
    .expect("a report in time")
    .expect("sync alive")
    .clone();
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].path, dir.path().join("modes.yaml"));
    assert!(
        report.problems[0].error.starts_with(
            "Pod \"modes\": Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field Pod.spec.volumes[0].configMap.defaultMode"
        ),
        "{}",
        report.problems[0]
    );
    // The objects loaded before stay: the pod as it was, the other file's objects untouched.
    assert_eq!(mode(&h), Some(Value::from(256)));
    assert_eq!(cm_value(&h, "default", "modes", "k").as_deref(), Some("v"));
    assert!(h.get("v1", "Pod", Some("shop"), "web").is_some());
}
