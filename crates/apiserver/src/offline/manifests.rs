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
//!    YAML 1.1 octal integers Kubernetes reads (256); quoted ones stay strings. A file that is
//!    not YAML is reported with its path and error ([`ManifestSync::errors`]); every bad
//!    document is reported with its path, its index in the file and the reason. A file with a
//!    problem keeps the objects it defined before (its good documents are still applied).
//!    A file with a problem is tried again on every pass (an object it needs may come from
//!    another file), but each problem is logged once per content of its file: again only
//!    when the file changes or the problem does, and a file whose problems are gone is logged
//!    as applied.
//! 4. Create the namespaces the objects reference but no file defines.
//! 5. Create or replace (unconditionally) the objects of the changed files, namespaces first,
//!    then service accounts.
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

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::handle::ServerHandle;
use crate::objects::yaml::first_line;
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

/// One malformed manifest file, or one bad document in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    /// The file.
    pub path: PathBuf,
    /// The bad document's index in the file, from 1 (empty documents not counted); `None`
    /// when the file as a whole cannot be read (not UTF-8, not YAML).
    pub document: Option<usize>,
    /// What is wrong, e.g. `missing kind` or the API server's rejection.
    pub error: String,
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.document {
            Some(n) => write!(f, "{}: document {n}: {}", self.path.display(), self.error),
            None => write!(f, "{}: {}", self.path.display(), self.error),
        }
    }
}

/// A problem of one file: the document (from 1) it concerns, if any, and the reason.
type DocProblem = (Option<usize>, String);

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
///
/// Deliberately not the node agent's `nodelet_core::ObjectRef`: a manifest may hold any resource
/// the server serves, including cluster-scoped ones, where `ObjectRef` names only a ConfigMap or
/// Secret in a namespace.
type ObjKey = (resources::ResourceId, String, String);

/// What the last pass saw of one file.
struct FileState {
    bytes: Vec<u8>,
    objects: Vec<ObjKey>,
}

/// An object's manifest document as last applied.
type Applied = HashMap<ObjKey, Value>;

/// The problems of one file as last logged, and a digest of the content they were found in.
struct Logged {
    digest: u64,
    problems: Vec<DocProblem>,
}

struct Syncer {
    handle: ServerHandle,
    dir: PathBuf,
    files: BTreeMap<PathBuf, FileState>,
    problems: BTreeMap<PathBuf, Vec<DocProblem>>,
    /// What was logged of each file with problems (a problem is logged once per content).
    logged: BTreeMap<PathBuf, Logged>,
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
    pub async fn start(handle: ServerHandle, dir: &Path) -> Result<ManifestSync, ManifestError> {
        let mut syncer = Syncer::new(handle, dir);
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
    fn new(handle: ServerHandle, dir: &Path) -> Self {
        Syncer {
            handle,
            dir: dir.to_path_buf(),
            files: BTreeMap::new(),
            problems: BTreeMap::new(),
            logged: BTreeMap::new(),
            applied: Applied::new(),
            passes: 0,
        }
    }

    fn pass(&mut self) -> SyncReport {
        let span = tracing::debug_span!("manifest sync", dir = %self.dir.display());
        let _enter = span.enter();
        // (1)
        let mut now: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
        list_files(&self.dir, &mut now);
        // (2) + (3)
        let mut changed: Vec<(PathBuf, Vec<Document>)> = Vec::new();
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
                Ok(docs) => {
                    self.problems.remove(path);
                    changed.push((path.clone(), docs));
                }
                Err(error) => {
                    self.problems.insert(path.clone(), vec![(None, error)]);
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
        for (path, docs) in &mut changed {
            let bytes = now.get(path.as_path()).cloned().unwrap_or_default();
            self.apply_file(path, docs, bytes);
        }
        // (6)
        self.delete_gone(&old);
        self.log_problems(&now);
        self.passes += 1;
        SyncReport {
            passes: self.passes,
            problems: self
                .problems
                .iter()
                .flat_map(|(p, list)| {
                    list.iter().map(|(document, error)| FileProblem {
                        path: p.clone(),
                        document: *document,
                        error: error.clone(),
                    })
                })
                .collect(),
        }
    }

    /// (4) + (5) Applies the documents of one changed file, namespaces and service accounts
    /// first, and records what the file defines (its content `bytes`) and its problems.
    fn apply_file(&mut self, path: &Path, docs: &mut [Document], bytes: Vec<u8>) {
        // Namespaces, then ServiceAccounts (pods are admitted against them), then the rest.
        docs.sort_by_key(|d| {
            match d
                .object
                .as_ref()
                .ok()
                .and_then(|o| o.get("kind"))
                .and_then(Value::as_str)
            {
                Some("Namespace") => 0,
                Some("ServiceAccount") => 1,
                _ => 2,
            }
        });
        let mut keys = Vec::new();
        let mut failures: Vec<DocProblem> = Vec::new();
        let mut unreadable = false;
        for doc in docs.iter() {
            let result = match &doc.object {
                // Still defined by the file: a rejected update must not delete it.
                Ok(obj) => self
                    .apply(obj)
                    .inspect_err(|_| keys.extend(key_of(&self.handle, obj))),
                Err(e) => {
                    unreadable = true;
                    Err(e.clone())
                }
            };
            match result {
                Ok(k) => keys.push(k),
                Err(error) => failures.push((Some(doc.index), error)),
            }
        }
        if unreadable {
            // A document that no longer says what it defines keeps what it defined.
            if let Some(before) = self.files.get(path) {
                keys.extend(before.objects.iter().cloned());
            }
        }
        if !failures.is_empty() {
            failures.sort_by_key(|(n, _)| *n);
            self.problems.insert(path.to_path_buf(), failures);
        }
        self.files.insert(
            path.to_path_buf(),
            FileState {
                bytes,
                objects: keys,
            },
        );
    }

    /// (6) Deletes the objects that the files named in `old` defined and no file defines any
    /// more.
    fn delete_gone(&mut self, old: &HashMap<PathBuf, Vec<ObjKey>>) {
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
    }

    /// Logs what changed in the files' problems since they were last logged: each problem of a
    /// file whose content changed, each new problem of an unchanged file, and a file whose
    /// problems are gone. A problem seen again in the same content is not logged again.
    fn log_problems(&mut self, now: &BTreeMap<PathBuf, Vec<u8>>) {
        self.logged.retain(|path, _| now.contains_key(path));
        for (path, bytes) in now {
            let problems = self.problems.get(path);
            let digest = digest(bytes);
            let before = self.logged.get(path);
            match problems {
                Some(problems) => {
                    let same_content = before.is_some_and(|b| b.digest == digest);
                    for (document, error) in problems {
                        let seen = same_content
                            && before.is_some_and(|b| {
                                b.problems.iter().any(|(d, e)| d == document && e == error)
                            });
                        if seen {
                            continue;
                        }
                        match document {
                            Some(document) => tracing::warn!(
                                path = %path.display(),
                                document,
                                %error,
                                "manifest document not applied"
                            ),
                            None => tracing::warn!(
                                path = %path.display(),
                                %error,
                                "malformed manifest; keeping its objects"
                            ),
                        }
                    }
                    self.logged.insert(
                        path.clone(),
                        Logged {
                            digest,
                            problems: problems.clone(),
                        },
                    );
                }
                None => {
                    if self.logged.remove(path).is_some() {
                        tracing::info!(path = %path.display(), "manifest applied");
                    }
                }
            }
        }
    }

    /// Creates or replaces one object (creating its namespace if missing); an object whose
    /// document is unchanged since it was last applied, and that still exists, is left alone.
    fn apply(&mut self, obj: &Value) -> Result<ObjKey, String> {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        let res = self.handle.served_kind(av, kind).ok_or_else(|| {
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
            // The server re-applies defaults on update, but create-only admission (the
            // service account, its token volume) and a binding (the node) set fields the
            // manifest leaves out: keep the stored ones, as `kubectl apply` would, so editing
            // e.g. a label or an image is not a forbidden spec change.
            if res == resources::PODS {
                let stored = self.handle.get(av, kind, Some(ns.as_str()), &name);
                carry_admitted(&mut obj, stored.as_ref());
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

/// Copies into a manifest pod what the server set on the stored one and the manifest leaves
/// out, which an update may not take away: its service account (`spec.serviceAccountName`,
/// when the manifest names none), the node a scheduler bound it to, the account's
/// `imagePullSecrets`, and the `kube-api-access-*` token volume with every container's mount
/// of it (ServiceAccount admission). `kubectl apply` keeps them the same way: it changes only
/// the fields its manifest set.
fn carry_admitted(obj: &mut Value, stored: Option<&Value>) {
    let Some(stored) = stored
        .and_then(|p| p.get("spec"))
        .and_then(Value::as_object)
    else {
        return;
    };
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let given = |spec: &serde_json::Map<String, Value>, key: &str| {
        spec.get(key).is_some_and(|v| match v {
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Null => false,
            _ => true,
        })
    };
    let account_named = given(spec, "serviceAccountName") || given(spec, "serviceAccount");
    for key in ["serviceAccountName", "nodeName", "imagePullSecrets"] {
        let skip = given(spec, key) || (key == "serviceAccountName" && account_named);
        if let (false, Some(value)) = (skip, stored.get(key)) {
            spec.insert(key.into(), value.clone());
        }
    }
    let token_volumes: Vec<&Value> = stored
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| name_of(v).is_some_and(|n| n.starts_with("kube-api-access-")))
        .collect();
    for volume in token_volumes {
        let Some(name) = name_of(volume) else {
            continue;
        };
        let volumes = spec
            .entry("volumes")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(volumes) = volumes.as_array_mut()
            && !volumes.iter().any(|v| name_of(v) == Some(name))
        {
            volumes.push(volume.clone());
        }
        for list in ["initContainers", "containers"] {
            let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
                continue;
            };
            for container in containers {
                let Some(before) = stored
                    .get(list)
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| name_of(c) == name_of(container)))
                else {
                    continue;
                };
                let Some(mount) = before
                    .get("volumeMounts")
                    .and_then(Value::as_array)
                    .and_then(|ms| ms.iter().find(|m| name_of(m) == Some(name)))
                else {
                    continue;
                };
                let path = mount.get("mountPath");
                let Some(obj) = container.as_object_mut() else {
                    continue;
                };
                let mounts = obj
                    .entry("volumeMounts")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Some(mounts) = mounts.as_array_mut()
                    && !mounts
                        .iter()
                        .any(|m| name_of(m) == Some(name) || m.get("mountPath") == path)
                {
                    mounts.push(mount.clone());
                }
            }
        }
    }
}

/// The `name` field of a list item (a volume, a container, a mount).
fn name_of(item: &Value) -> Option<&str> {
    item.get("name").and_then(Value::as_str)
}

/// The identity of a manifest object (namespace defaulted to `default`).
fn key_of(handle: &ServerHandle, obj: &Value) -> Option<ObjKey> {
    let av = obj.get("apiVersion").and_then(Value::as_str)?;
    let kind = obj.get("kind").and_then(Value::as_str)?;
    let res = handle.served_kind(av, kind)?;
    let ns = if res.info().namespaced {
        meta_str(obj, "namespace")
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
    } else {
        ""
    };
    Some((res, ns.to_string(), meta_str(obj, "name")?.to_string()))
}

/// A digest of a file's content: tells a new edit from the content a problem was logged for.
fn digest(bytes: &[u8]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(bytes, &mut hasher);
    std::hash::Hasher::finish(&hasher)
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

/// One document of a manifest file (a `kind: List` gives one per item): the object, or why it
/// is not one.
struct Document {
    /// Index of the document in its file, from 1.
    index: usize,
    object: Result<Value, String>,
}

/// (3) The documents of one file, or why the file as a whole cannot be read. Plain scalars
/// with a leading zero (`0644`) are YAML 1.1 octal integers, as Kubernetes (go-yaml) reads them.
fn parse(bytes: &[u8]) -> Result<Vec<Document>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let options = serde_saphyr::options!(legacy_octal_numbers: true);
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(text, options)
        .map_err(|e| format!("not YAML: {}", first_line(&e.to_string())))?;
    let mut out = Vec::new();
    for (i, v) in docs.into_iter().enumerate() {
        let index = i + 1;
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
            out.push(Document {
                index,
                object: check_document(item),
            });
        }
    }
    Ok(out)
}

/// A document is an object with `apiVersion`, `kind` and `metadata.name`.
fn check_document(item: Value) -> Result<Value, String> {
    if !item.is_object() {
        return Err("not an object".into());
    }
    for field in ["apiVersion", "kind"] {
        if item
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(format!("missing {field}"));
        }
    }
    if meta_str(&item, "name").is_none_or(str::is_empty) {
        return Err("missing metadata.name".into());
    }
    Ok(item)
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
        assert_eq!(objs[1].object.as_ref().unwrap()["kind"], "Secret");
        assert_eq!((objs[0].index, objs[1].index), (1, 2));
    }

    #[test]
    fn every_document_without_a_kind_or_name_is_reported_with_its_index() {
        let docs = parse(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n---\napiVersion: v1\nkind: ConfigMap\n").unwrap();
        let bad: Vec<(usize, String)> = docs
            .iter()
            .filter_map(|d| d.object.as_ref().err().map(|e| (d.index, e.clone())))
            .collect();
        assert_eq!(
            bad,
            [
                (2, "missing kind".to_string()),
                (3, "missing metadata.name".to_string())
            ]
        );
        assert!(docs[0].object.is_ok());
        let Err(e) = parse(b"a: [unclosed") else {
            panic!("an unclosed bracket parsed")
        };
        assert!(e.starts_with("not YAML: ") && e.contains("line 1"), "{e}");
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
        let objs: Vec<Value> = objs.into_iter().map(|d| d.object.unwrap()).collect();
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
    fn an_edited_pod_manifest_keeps_what_admission_and_a_binding_set() {
        let stored = json!({"spec": {
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": "n1",
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [{"name": "v", "configMap": {"name": "c"}},
                        {"name": "kube-api-access-abcde", "projected": {"sources": []}}],
            "initContainers": [{"name": "i", "volumeMounts": [
                {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
            "containers": [{"name": "c", "image": "old", "volumeMounts": [
                {"name": "v", "mountPath": "/v"},
                {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
        }});
        let mut edited = json!({"spec": {
            "volumes": [{"name": "v", "configMap": {"name": "c"}}],
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "c", "image": "new", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
        }});
        carry_admitted(&mut edited, Some(&stored));
        let mut expected = stored.clone();
        expected["spec"]["containers"][0]["image"] = json!("new");
        expected["spec"]
            .as_object_mut()
            .unwrap()
            .remove("serviceAccount");
        assert_eq!(edited, expected);
        // What the manifest says itself wins (an update then refuses a changed node).
        let mut own = json!({"spec": {"serviceAccount": "robot", "nodeName": "n2",
                                      "containers": [{"name": "c"}]}});
        carry_admitted(&mut own, Some(&stored));
        assert_eq!(own["spec"]["serviceAccount"], "robot");
        assert!(own["spec"].get("serviceAccountName").is_none());
        assert_eq!(own["spec"]["nodeName"], "n2");
        assert_eq!(
            own["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": "kube-api-access-abcde",
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
        );
    }

    /// What `tracing` logged while it was the default writer, as plain text.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        /// Lines that contain `needle`.
        fn count(&self, needle: &str) -> usize {
            String::from_utf8_lossy(&self.0.lock())
                .lines()
                .filter(|l| l.contains(needle))
                .count()
        }
    }

    fn config_map(key: &str) -> String {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{\"{key}\": v}}\n")
    }

    /// The regression: a file with a bad document was reported on every pass, and a pass
    /// follows every file-system event in the directory (383 lines in 40 s).
    #[tokio::test]
    async fn a_bad_document_is_logged_once_per_content_of_its_file_and_its_fix_as_applied() {
        let server = crate::ApiServer::start(crate::Config::default())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cm.yaml");
        let broken = dir.path().join("broken.yaml");
        std::fs::write(&file, config_map("bad key!")).unwrap();
        std::fs::write(&broken, "a: [unclosed").unwrap();
        let mut syncer = Syncer::new(server.handle(), dir.path());
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let not_applied = "manifest document not applied";
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..3 {
                let report = syncer.pass();
                assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
            }
            assert_eq!(logs.count(not_applied), 1);
            assert_eq!(logs.count("a valid config key must consist of"), 1);
            assert_eq!(logs.count("malformed manifest"), 1);
            // Written again with the same content: nothing new to say.
            std::fs::write(&file, config_map("bad key!")).unwrap();
            syncer.pass();
            assert_eq!(logs.count(not_applied), 1);
            // A new edit that is still bad is reported again, once.
            std::fs::write(&file, config_map("still bad!")).unwrap();
            syncer.pass();
            syncer.pass();
            assert_eq!(logs.count(not_applied), 2);
            assert_eq!(logs.count("still bad!"), 1);
            // Fixed: reported as applied, once, and the object is there.
            std::fs::write(&file, config_map("good")).unwrap();
            syncer.pass();
            syncer.pass();
            assert_eq!(logs.count("manifest applied"), 1);
            assert_eq!(logs.count(not_applied), 2);
            // Broken again, with the content it had before the fix: reported again.
            std::fs::write(&file, config_map("still bad!")).unwrap();
            syncer.pass();
            assert_eq!(logs.count(not_applied), 3);
            assert_eq!(logs.count("malformed manifest"), 1);
        });
        assert!(
            server
                .handle()
                .get("v1", "ConfigMap", Some("default"), "c")
                .is_some_and(|c| c["data"]["good"] == "v")
        );
    }

    #[test]
    fn default_mode_0644_is_420_as_kubectl_reads_it() {
        let docs = parse(b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  volumes:\n  - {name: v, configMap: {name: c, defaultMode: 0644}}\n  - {name: w, secret: {secretName: s, defaultMode: 0o600}}\n").unwrap();
        let pod = docs[0].object.as_ref().unwrap();
        assert_eq!(
            pod["spec"]["volumes"][0]["configMap"]["defaultMode"],
            json!(420)
        );
        assert_eq!(
            pod["spec"]["volumes"][1]["secret"]["defaultMode"],
            json!(384)
        );
        // Without the YAML 1.1 option, YAML 1.2 reads 0644 as the decimal 644.
        let plain: Value = serde_saphyr::from_str("m: 0644").unwrap();
        assert_ne!(plain["m"], json!(420));
    }
}
