//! Offline mode's object source: seeds the store from a directory of YAML manifests and keeps it
//! in sync with edits, creations and deletions of those files ([`ManifestSync`]).
//!
//! # Sync algorithm (one pass; the first runs in [`ManifestSync::start`], later ones ~100 ms
//! after the last file-system event of a burst)
//! 1. List `*.yaml`, `*.yml` and `*.json` files under the directory (recursively, skipping
//!    hidden entries) and read them.
//! 2. Skip files whose bytes are unchanged since the last pass and that had no problem:
//!    objects edited through the API (by kubectl, the agent, tests) are overwritten only when
//!    their file changes.
//! 3. Parse each changed file: multi-document YAML (or JSON), `kind: List` expanded, every
//!    document an object of a served kind with a name. Plain scalars such as `0400` are the
//!    YAML 1.1 octal integers Kubernetes reads (256), not serde_yaml's YAML 1.2 strings. A file that fails is reported with its
//!    path and error ([`ManifestSync::errors`]) and keeps the objects it defined before.
//! 4. Create the namespaces the objects reference but no file defines.
//! 5. Create or replace (unconditionally) the objects of the changed files, namespaces first.
//! 6. Delete the objects that a changed or removed file defined before and that no file defines
//!    now (an object defined by two files survives the deletion of one).
//!
//! ```text
//! manifests/
//!   app.yaml        ConfigMap app + Pod web  (--- separated)
//!   secrets/db.yaml Secret db
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize as _;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::control::TestHandle;
use crate::registry::meta_str;
use crate::resources;

/// Quiet period after a file-system event before a pass runs (editors write in bursts).
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Errors of [`ManifestSync`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Listing the manifest directory failed.
    #[error("reading the manifest directory {path}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Starting the file-system watch failed.
    #[error("watching the manifest directory {path}")]
    Watch {
        /// The directory.
        path: PathBuf,
        /// The notify error.
        #[source]
        source: notify::Error,
    },
}

/// One malformed or rejected manifest file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, e.g. `document 2: missing kind` or the API server's rejection.
    pub error: String,
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

/// What the last pass left: its number and the files it could not apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Passes completed since start (the initial load is pass 1).
    pub passes: u64,
    /// Files currently malformed or rejected.
    pub problems: Vec<FileProblem>,
}

/// Keeps a server's store in sync with a manifest directory until dropped.
#[derive(Debug)]
pub struct ManifestSync {
    report: watch::Receiver<SyncReport>,
    stop: CancellationToken,
    _watcher: notify::RecommendedWatcher,
}

/// An object's identity: resource, namespace (`""` when cluster-scoped) and name.
type ObjKey = (resources::ResourceId, String, String);

/// What the last pass saw of one file.
struct FileState {
    bytes: Vec<u8>,
    objects: Vec<ObjKey>,
}

/// An object's manifest document as last applied.
type Applied = HashMap<ObjKey, Value>;

struct Syncer {
    handle: TestHandle,
    dir: PathBuf,
    files: BTreeMap<PathBuf, FileState>,
    problems: BTreeMap<PathBuf, String>,
    applied: Applied,
    passes: u64,
}

impl ManifestSync {
    /// Loads `dir` into the server behind `handle` (the first pass completes before this
    /// returns), then follows changes in a background task. Must be called inside a Tokio
    /// runtime.
    ///
    /// # Errors
    /// [`ManifestError::ReadDir`] if `dir` cannot be listed, [`ManifestError::Watch`] if it
    /// cannot be watched. Malformed files are not errors: see [`ManifestSync::report`].
    pub async fn start(handle: TestHandle, dir: &Path) -> Result<ManifestSync, ManifestError> {
        let mut syncer = Syncer {
            handle,
            dir: dir.to_path_buf(),
            files: BTreeMap::new(),
            problems: BTreeMap::new(),
            applied: Applied::new(),
            passes: 0,
        };
        std::fs::read_dir(dir).map_err(|source| ManifestError::ReadDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            // Our own reads show up as access events: following them would loop.
            if !matches!(
                res,
                Ok(notify::Event {
                    kind: notify::EventKind::Access(_),
                    ..
                })
            ) {
                let _ = tx.send(());
            }
        })
        .map_err(|source| ManifestError::Watch {
            path: dir.to_path_buf(),
            source,
        })?;
        notify::Watcher::watch(&mut watcher, dir, notify::RecursiveMode::Recursive).map_err(
            |source| ManifestError::Watch {
                path: dir.to_path_buf(),
                source,
            },
        )?;
        let (report_tx, report) = watch::channel(syncer.pass());
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    got = rx.recv() => if got.is_none() { break },
                }
                // Debounce: wait until the burst is over.
                loop {
                    tokio::select! {
                        () = token.cancelled() => return,
                        () = tokio::time::sleep(DEBOUNCE) => break,
                        got = rx.recv() => if got.is_none() { return },
                    }
                }
                let r = syncer.pass();
                let _ = report_tx.send(r);
            }
        });
        Ok(ManifestSync {
            report,
            stop,
            _watcher: watcher,
        })
    }

    /// The latest pass's report.
    pub fn report(&self) -> SyncReport {
        self.report.borrow().clone()
    }

    /// The files the latest pass could not apply.
    pub fn errors(&self) -> Vec<FileProblem> {
        self.report.borrow().problems.clone()
    }

    /// A receiver that changes after every pass (to await a sync instead of polling).
    pub fn subscribe(&self) -> watch::Receiver<SyncReport> {
        self.report.clone()
    }
}

impl Drop for ManifestSync {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Syncer {
    fn pass(&mut self) -> SyncReport {
        let span = tracing::debug_span!("manifest sync", dir = %self.dir.display());
        let _enter = span.enter();
        // (1)
        let mut now: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
        list_files(&self.dir, &mut now);
        // (2) + (3)
        let mut changed: Vec<(PathBuf, Vec<Value>)> = Vec::new();
        let mut removed: Vec<PathBuf> = Vec::new();
        for path in self.files.keys() {
            if !now.contains_key(path) {
                removed.push(path.clone());
            }
        }
        for (path, bytes) in &now {
            let unchanged = self.files.get(path).is_some_and(|f| &f.bytes == bytes);
            if unchanged && !self.problems.contains_key(path) {
                continue;
            }
            match parse(bytes) {
                Ok(objs) => {
                    self.problems.remove(path);
                    changed.push((path.clone(), objs));
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "malformed manifest; keeping its objects");
                    self.problems.insert(path.clone(), error);
                }
            }
        }
        for path in &removed {
            self.problems.remove(path);
        }
        let old: HashMap<PathBuf, Vec<ObjKey>> = changed
            .iter()
            .map(|(p, _)| p)
            .chain(removed.iter())
            .filter_map(|p| self.files.get(p).map(|f| (p.clone(), f.objects.clone())))
            .collect();
        for p in &removed {
            self.files.remove(p);
        }
        // (4) + (5)
        for (path, objs) in &mut changed {
            objs.sort_by_key(|o| o.get("kind").and_then(Value::as_str) != Some("Namespace"));
            let mut keys = Vec::new();
            let mut failure = None;
            for obj in objs.iter() {
                match self.apply(obj) {
                    Ok(k) => keys.push(k),
                    Err(e) => {
                        // Still defined by the file: a rejected update must not delete it.
                        keys.extend(key_of(obj));
                        failure = Some(e);
                    }
                }
            }
            if let Some(error) = failure {
                tracing::warn!(path = %path.display(), %error, "manifest rejected");
                self.problems.insert(path.clone(), error);
            }
            let bytes = now.get(path.as_path()).cloned().unwrap_or_default();
            self.files.insert(
                path.clone(),
                FileState {
                    bytes,
                    objects: keys,
                },
            );
        }
        // (6)
        let defined: BTreeSet<&ObjKey> = self.files.values().flat_map(|f| &f.objects).collect();
        let gone: BTreeSet<ObjKey> = old
            .values()
            .flatten()
            .filter(|k| !defined.contains(k))
            .cloned()
            .collect();
        for key in gone {
            self.applied.remove(&key);
            let (res, ns, name) = key;
            let info = res.info();
            let ns = (!ns.is_empty()).then_some(ns.as_str());
            if let Err(error) = self
                .handle
                .delete(&info.api_version(), info.kind, ns, &name)
            {
                tracing::debug!(%error, name, "deleting an object whose manifest is gone");
            }
        }
        self.passes += 1;
        SyncReport {
            passes: self.passes,
            problems: self
                .problems
                .iter()
                .map(|(p, e)| FileProblem {
                    path: p.clone(),
                    error: e.clone(),
                })
                .collect(),
        }
    }

    /// Creates or replaces one object (creating its namespace if missing); an object whose
    /// document is unchanged since it was last applied, and that still exists, is left alone.
    fn apply(&mut self, obj: &Value) -> Result<ObjKey, String> {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        let res = resources::by_kind(av, kind).ok_or_else(|| {
            format!("{kind} {name:?}: apiVersion {av:?} kind {kind:?} is not served")
        })?;
        let info = res.info();
        let ns = if info.namespaced {
            meta_str(obj, "namespace")
                .filter(|n| !n.is_empty())
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        if info.namespaced && self.handle.get("v1", "Namespace", None, &ns).is_none() {
            let created = self
                .handle
                .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
            if let Err(e) = created
                && self.handle.get("v1", "Namespace", None, &ns).is_none()
            {
                return Err(format!("creating namespace {ns:?}: {e}"));
            }
        }
        let key = (res, ns.clone(), name.clone());
        let exists = self
            .handle
            .get(av, kind, Some(ns.as_str()), &name)
            .is_some();
        if exists && self.applied.get(&key) == Some(obj) {
            return Ok(key);
        }
        let doc = obj.clone();
        let mut obj = obj.clone();
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("uid");
            if info.namespaced {
                m.insert("namespace".into(), json!(ns));
            }
        }
        let result = if exists {
            // The server re-applies defaults on update, but the service account is set by
            // create-only admission (as upstream): keep the stored one when the manifest leaves
            // it out, as `kubectl apply` would, so editing e.g. an image is not a forbidden
            // spec change.
            if res == resources::PODS {
                let stored = self.handle.get(av, kind, Some(ns.as_str()), &name);
                carry_service_account(&mut obj, stored.as_ref());
            }
            self.handle.update(obj)
        } else {
            self.handle.create(obj)
        };
        result.map_err(|e| match e.api_error() {
            Some(api) => format!("{kind} {name:?}: {}", api.message()),
            None => format!("{kind} {name:?}: {e}"),
        })?;
        self.applied.insert(key.clone(), doc);
        Ok(key)
    }
}

/// Copies `spec.serviceAccountName` (and its alias `serviceAccount`) from the stored pod into a
/// manifest pod that names neither.
fn carry_service_account(obj: &mut Value, stored: Option<&Value>) {
    let named = |o: &Value| {
        ["serviceAccountName", "serviceAccount"].iter().any(|k| {
            o.pointer(&format!("/spec/{k}"))
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        })
    };
    if named(obj) {
        return;
    }
    let Some(sa) = stored
        .and_then(|p| p.pointer("/spec/serviceAccountName"))
        .cloned()
    else {
        return;
    };
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("serviceAccountName".into(), sa);
    }
}

/// The identity of a manifest object (namespace defaulted to `default`).
fn key_of(obj: &Value) -> Option<ObjKey> {
    let av = obj.get("apiVersion").and_then(Value::as_str)?;
    let kind = obj.get("kind").and_then(Value::as_str)?;
    let res = resources::by_kind(av, kind)?;
    let ns = if res.info().namespaced {
        meta_str(obj, "namespace")
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
    } else {
        ""
    };
    Some((res, ns.to_string(), meta_str(obj, "name")?.to_string()))
}

/// (1) Manifest files under `dir`, recursively, hidden entries skipped; unreadable ones too.
fn list_files(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let hidden = e.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => list_files(&path, out),
            Ok(_) => {
                let ext = path.extension().and_then(|x| x.to_str()).unwrap_or("");
                if matches!(ext, "yaml" | "yml" | "json")
                    && let Ok(bytes) = std::fs::read(&path)
                {
                    out.insert(path, bytes);
                }
            }
            Err(_) => {}
        }
    }
}

/// (3) The objects of one file, or why it is malformed.
fn parse(bytes: &[u8]) -> Result<Vec<Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let n = i + 1;
        docs.push(Value::deserialize(doc).map_err(|e| format!("document {n}: {e}"))?);
    }
    let docs = with_yaml11_octals(text, docs);
    let mut out = Vec::new();
    for (i, v) in docs.into_iter().enumerate() {
        let n = i + 1;
        if v.is_null() {
            continue;
        }
        let items = match v.get("kind").and_then(Value::as_str) {
            Some("List") => v
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => vec![v],
        };
        for item in items {
            if !item.is_object() {
                return Err(format!("document {n}: not an object"));
            }
            for field in ["apiVersion", "kind"] {
                if item
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(format!("document {n}: missing {field}"));
                }
            }
            if meta_str(&item, "name").is_none_or(str::is_empty) {
                return Err(format!("document {n}: missing metadata.name"));
            }
            out.push(item);
        }
    }
    Ok(out)
}

/// Whether `token` is a YAML 1.1 octal integer as Kubernetes (go-yaml) reads it: `^0[0-7]+$`.
fn yaml11_octal(token: &str) -> Option<i64> {
    let digits = token.strip_prefix('0')?;
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    i64::from_str_radix(digits, 8).ok()
}

/// Reads plain scalars such as `defaultMode: 0400` as the YAML 1.1 octal integers Kubernetes
/// sees (256), where serde_yaml (YAML 1.2) reads the string `"0400"`.
///
/// serde_yaml does not say whether a scalar was quoted, so: (a) every token that looks like a
/// YAML 1.1 octal is rewritten to the YAML 1.2 form `0o400`; (b) the rewritten text is parsed
/// again; (c) a string of `docs` is replaced only where the re-parse found exactly that octal as
/// an integer — which only a plain scalar can give. Quoted strings, block scalars and comments
/// that contained the token re-parse as different strings (or not at all) and are kept as read.
fn with_yaml11_octals(text: &str, docs: Vec<Value>) -> Vec<Value> {
    // (a)
    let mut rewritten = String::with_capacity(text.len() + 16);
    let mut any = false;
    let mut token = String::new();
    let flush = |token: &mut String, out: &mut String, any: &mut bool| {
        if yaml11_octal(token).is_some() {
            out.push_str("0o");
            out.push_str(&token[1..]);
            *any = true;
        } else {
            out.push_str(token);
        }
        token.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() || matches!(c, ',' | '[' | ']' | '{' | '}') {
            flush(&mut token, &mut rewritten, &mut any);
            rewritten.push(c);
        } else {
            token.push(c);
        }
    }
    flush(&mut token, &mut rewritten, &mut any);
    if !any {
        return docs;
    }
    // (b)
    let reparsed: Result<Vec<Value>, _> = serde_yaml::Deserializer::from_str(&rewritten)
        .map(Value::deserialize)
        .collect();
    match reparsed {
        Ok(again) if again.len() == docs.len() => docs
            .into_iter()
            .zip(&again)
            .map(|(doc, again)| take_octals(doc, again))
            .collect(),
        _ => docs,
    }
}

/// (c) `read`, with each string that `again` holds as its YAML 1.1 octal integer replaced.
fn take_octals(read: Value, again: &Value) -> Value {
    match (read, again) {
        (Value::String(s), Value::Number(n))
            if yaml11_octal(&s).is_some_and(|o| n.as_i64() == Some(o)) =>
        {
            Value::Number(n.clone())
        }
        (Value::Object(map), Value::Object(again)) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = match again.get(&k) {
                        Some(a) => take_octals(v, a),
                        None => v,
                    };
                    (k, v)
                })
                .collect(),
        ),
        (Value::Array(items), Value::Array(again)) if items.len() == again.len() => Value::Array(
            items
                .into_iter()
                .zip(again)
                .map(|(v, a)| take_octals(v, a))
                .collect(),
        ),
        (read, _) => read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_document_file_yields_every_object_and_expands_lists() {
        let objs = parse(
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: s}}\n",
        )
        .unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1]["kind"], "Secret");
    }

    #[test]
    fn a_document_without_a_kind_or_name_makes_the_file_malformed() {
        let e = parse(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n").unwrap_err();
        assert_eq!(e, "document 2: missing kind");
        let e = parse(b"apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert_eq!(e, "document 1: missing metadata.name");
        assert!(
            parse(b"a: [unclosed")
                .unwrap_err()
                .starts_with("document 1:")
        );
    }

    #[test]
    fn plain_yaml_1_1_octals_are_integers_and_quoted_ones_stay_strings() {
        let objs = parse(
            br#"apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {note: "0400", other: '0755', text: "mode 0400"}}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - name: a
    configMap: {name: cm, defaultMode: 0400}
  - name: b
    secret:
      secretName: s
      defaultMode: 0755 # rwxr-xr-x
      items: [{key: k, path: p, mode: 0600}, {key: k2, path: "0400", mode: 420}]
  - name: c
    configMap: {name: "0644", defaultMode: 0644}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data:
  script: |
    chmod 0400 file
    mode: 0400
  zero: "0"
  nine: "0400"
"#,
        )
        .unwrap();
        let vols = &objs[0]["spec"]["volumes"];
        assert_eq!(vols[0]["configMap"]["defaultMode"], json!(256));
        assert_eq!(vols[1]["secret"]["defaultMode"], json!(493));
        assert_eq!(vols[1]["secret"]["items"][0]["mode"], json!(384));
        assert_eq!(vols[1]["secret"]["items"][1]["path"], json!("0400"));
        assert_eq!(vols[1]["secret"]["items"][1]["mode"], json!(420));
        assert_eq!(
            vols[2]["configMap"],
            json!({"name": "0644", "defaultMode": 420})
        );
        assert_eq!(
            objs[0]["metadata"]["annotations"],
            json!({"note": "0400", "other": "0755", "text": "mode 0400"})
        );
        assert_eq!(
            objs[1]["data"],
            json!({"script": "chmod 0400 file\nmode: 0400\n", "zero": "0", "nine": "0400"})
        );
    }

    #[test]
    fn serde_yaml_alone_reads_a_plain_leading_zero_number_as_a_string() {
        // Why `with_yaml11_octals` exists (YAML 1.2 core schema as serde_yaml implements it).
        let v: Value = serde_yaml::from_str("m: 0400").unwrap();
        assert_eq!(v["m"], json!("0400"));
        let v: Value = serde_yaml::from_str("m: 0o400").unwrap();
        assert_eq!(v["m"], json!(256));
    }
}
