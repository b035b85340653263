//! The runtime hook ([`RuntimeHook`]) that receives configured containers, and its default,
//! [`EnvFileRuntime`], which writes each container's resolved environment to disk.

use async_trait::async_trait;
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Container, Secret};
use nodelet_core::runtime::{
    ContainerLaunch, ContainerState, ContainerStatus, PodSandbox, Termination, is_sidecar,
};
use nodelet_core::{AdmittedPod, PodDirs, PodUid};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::env::ContainerEnv;
use crate::error::RuntimeError;
use crate::workers::TerminatingPod;

/// What runs containers, in the CRI's shape: it starts, stops and reports typed states and
/// typed errors; what to start, stop or restart, and the crash back-off, are decided on the
/// pod worker's side (the config syncer's planner, the kubelet's `computePodActions`). On
/// each sync the config syncer asks the runtime for the pod's sandbox
/// ([`run_pod_sandbox`](Self::run_pod_sandbox)), plans over its
/// [`statuses`](Self::statuses), resolves the environment of each container to start (PW-4
/// last step) and hands it over with its mounts and command line (computed only for a pod
/// with a sandbox); a container instance is never re-created, so its environment never
/// changes (UP-3; unless it follows a change, FC-10: a new instance, or new env files). The
/// sync methods get
/// the [`AdmittedPod`] (its UID validated once, where the pod entered the node); the
/// termination methods get what termination has: the [`PodUid`], or for
/// [`remove_pod`](Self::remove_pod) a [`TerminatingPod`], whose object is absent for a pod
/// known only on disk.
///
/// Two implementations: [`EnvFileRuntime`] (no processes; each container's environment to
/// files) and `nodelet_runtime::ProcessRuntime` (containers as local processes).
#[async_trait]
pub trait RuntimeHook: Send + Sync + 'static {
    /// Makes (idempotently) what `pod`'s containers share before any of them starts (the
    /// CRI's `RunPodSandbox`): `None` for a runtime without sandboxes, whose containers then
    /// get no mounts, host files or command lines, and the pod no addresses.
    ///
    /// # Errors
    /// [`RuntimeError::Sandbox`]: nothing of the pod starts (PW-41, PW-58).
    async fn run_pod_sandbox(&self, pod: &AdmittedPod) -> Result<Option<PodSandbox>, RuntimeError>;

    /// Create and start `container` of `pod` with environment `env` and `launch` (mounts,
    /// command line; empty for a pod without a sandbox);
    /// `pull_secrets` are the image pull secrets that could be read (PW-7).
    ///
    /// # Errors
    /// [`RuntimeError::NotStarted`] when the container cannot start (it waits or ended with
    /// the error's reason); other [`RuntimeError`]s fail the sync, which is retried.
    async fn create_container(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        env: &ContainerEnv,
        launch: &ContainerLaunch,
        pull_secrets: &[Arc<Secret>],
    ) -> Result<(), RuntimeError>;

    /// The runtime's states of pod `uid`'s containers, init containers first; containers it
    /// never created are absent (the CRI's `ListContainers` and `ContainerStatus`).
    fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus>;

    /// Run `command` in the running instance of `container` of pod `uid` and wait for its
    /// end, at most `timeout` (the CRI's `ExecSync`: exec lifecycle hooks and exec probes). A
    /// command that exits non-zero is a result, not an error.
    ///
    /// # Errors
    /// [`RuntimeError::Exec`] (not running, could not start, timed out);
    /// [`RuntimeError::Unsupported`] for a runtime that runs no processes (the default).
    async fn exec_sync(
        &self,
        _uid: &PodUid,
        _container: &str,
        _command: &[String],
        _timeout: Option<Duration>,
    ) -> Result<nodelet_runtime::handlers::ExecResult, RuntimeError> {
        Err(RuntimeError::Unsupported {
            what: "running commands in containers",
        })
    }

    /// Stop the running instance of `container` of pod `uid` (the CRI's `StopContainer`):
    /// SIGTERM, SIGKILL after `grace_period`. Whether it was running (the default: nothing
    /// runs).
    ///
    /// # Errors
    /// [`RuntimeError`] when it would not stop.
    async fn stop_container(
        &self,
        _uid: &PodUid,
        _container: &str,
        _grace_period: Duration,
    ) -> Result<bool, RuntimeError> {
        Ok(false)
    }

    /// FC-12: marks the running instance `container_id` of `container` of pod `uid` as
    /// stopped for a new environment, so that its end shows `ConfigChanged` and the plan
    /// starts it again at once (no back-off, whatever `restartPolicy` says); the caller then
    /// stops it. Whether it did (the default: no instance runs, nothing is marked).
    fn restart_for_new_env(&self, _uid: &PodUid, _container: &str, _container_id: &str) -> bool {
        false
    }

    /// FC-14: gives the created `container` of `pod` its new environment `env` without a
    /// restart. Whether it did (the default: it cannot; the container is restarted instead).
    ///
    /// # Errors
    /// [`RuntimeError`] when it could not.
    async fn update_env(
        &self,
        _pod: &AdmittedPod,
        _container: &Container,
        _env: &ContainerEnv,
    ) -> Result<bool, RuntimeError> {
        Ok(false)
    }

    /// Stop pod `uid`'s containers within `grace_period` (SyncTerminatingPod, PW-5). Returns
    /// the containers it stopped.
    ///
    /// # Errors
    /// [`RuntimeError`]; retried with back-off.
    async fn kill_pod(
        &self,
        uid: &PodUid,
        grace_period: Duration,
    ) -> Result<Vec<String>, RuntimeError>;

    /// Remove everything the runtime keeps for `pod` (SyncTerminatedPod). The log files of a
    /// pod that finished on its own stay until the pod is deleted; a pod known only on disk
    /// (no object) was deleted.
    ///
    /// # Errors
    /// [`RuntimeError`]; retried with back-off.
    async fn remove_pod(&self, pod: TerminatingPod<'_>) -> Result<(), RuntimeError>;
}

/// File name of the `NAME=value` environment file.
pub const ENV_FILE: &str = "env";
/// File name of the JSON environment file.
pub const ENV_JSON_FILE: &str = "env.json";

/// The default runtime: no processes; each container's resolved environment is written to
/// `<root>/pods/<uid>/containers/<name>/env` and `env.json`.
///
/// ```text
/// <root>/pods/<uid>/containers/          0700
/// └── <name>/                            0700
///     ├── env                            0600  NAME=value lines
///     └── env.json                       0600  [{"name": …, "value": …}]
/// ```
///
/// Each file is written whole under a temporary name, synced and renamed into place,
/// `env.json` first and `env` last, then the directory is synced: a reader (or a crash) sees
/// each file complete or absent, and `env` only once `env.json` is there. A container's
/// environment is written when it is created; one whose environment follows a change
/// (FC-14) has both files replaced again the same way, `env.json` first: a reader of one
/// file sees the old environment or the new one, never a mix, but a reader of both may for
/// a moment see `env.json` new and `env` old (no `..data` indirection: three inodes per
/// container where an atomic-writer target takes seven).
///
/// `env` holds one `NAME=value` line per variable, sorted by name. In the value, `\` is written
/// `\\`, newline `\n`, carriage return `\r`, tab `\t`, and any other control byte (below 0x20
/// and 0x7f) or byte that is not part of valid UTF-8 as `\xHH`; everything else is verbatim.
/// `env.json` is an array of `{"name", "value"}` objects; a value that is not UTF-8 is given as
/// `"valueBase64"` instead of `"value"`.
///
/// A container counts as created once its `env` file exists, so a restarted agent adopts the
/// files without rewriting them (in `run_pod_sandbox`, before the pod's first plan). It
/// reports a created init container as completed, any other (a sidecar too) as running. `kill_pod` has nothing to stop; `remove_pod` deletes the
/// `containers` directory.
#[derive(Debug, Clone)]
pub struct EnvFileRuntime {
    dirs: PodDirs,
    /// Serialises the blocking filesystem work of writes and removals of one pod. A write
    /// runs on the blocking pool and outlives a cancelled sync; without this, the removal at
    /// termination could race it (`remove_dir_all` fails on a directory that is being
    /// filled). Per pod: different pods' writes (each with its fsyncs) run side by side.
    fs_locks: Arc<Mutex<HashMap<PodUid, Arc<Mutex<()>>>>>,
    /// The states it reports per pod: a created init container has completed, any other
    /// runs, since its creation (the `env` file's time for one an earlier run created).
    states: Arc<Mutex<HashMap<PodUid, Vec<ContainerStatus>>>>,
}

impl EnvFileRuntime {
    /// A runtime writing under `root_dir` (the agent's `--root-dir`).
    pub fn new(root_dir: &Path) -> Self {
        Self {
            dirs: PodDirs::new(root_dir),
            fs_locks: Arc::default(),
            states: Arc::default(),
        }
    }

    /// `<root>/pods/<uid>/containers`.
    pub fn containers_dir(&self, pod_uid: &PodUid) -> PathBuf {
        self.dirs.containers(pod_uid)
    }

    /// The lock of pod `uid`'s files (see `fs_locks`).
    fn fs_lock(&self, uid: &PodUid) -> Arc<Mutex<()>> {
        self.fs_locks.lock().entry(uid.clone()).or_default().clone()
    }

    fn write(
        &self,
        pod_uid: &PodUid,
        container: &str,
        env: &ContainerEnv,
    ) -> Result<(), RuntimeError> {
        let lock = self.fs_lock(pod_uid);
        let _guard = lock.lock();
        let containers = self.containers_dir(pod_uid);
        let dir = containers.join(container);
        private_dir(&containers)?;
        private_dir(&dir)?;
        let write_err = |source| RuntimeError::WriteEnv {
            container: container.to_owned(),
            path: dir.clone(),
            source,
        };
        write_durably(&dir, ENV_JSON_FILE, &env_json(env)).map_err(write_err)?;
        write_durably(&dir, ENV_FILE, &env_file(env)).map_err(write_err)?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(write_err)
    }
}

/// Writes `bytes` to `dir/name` (mode 0600) whole: to `.name.tmp` first, synced, then renamed.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    drop(file);
    fs::rename(&tmp, dir.join(name))
}

#[async_trait]
impl RuntimeHook for EnvFileRuntime {
    /// No sandbox: nothing runs, so containers share nothing. The containers an earlier run
    /// of the agent created (their `env` files exist) are adopted: reported created since
    /// their file's time.
    ///
    /// The directory is read only while no container of the pod is recorded: an earlier run's
    /// are all adopted at the pod's first sync, and this run records its own as it creates
    /// them, so every later sync (several per pod at a node's start) would read it for nothing.
    async fn run_pod_sandbox(&self, pod: &AdmittedPod) -> Result<Option<PodSandbox>, RuntimeError> {
        if self
            .states
            .lock()
            .get(pod.uid())
            .is_some_and(|s| !s.is_empty())
        {
            return Ok(None);
        }
        for name in &self.created_containers(pod)? {
            let time = fs::metadata(self.containers_dir(pod.uid()).join(name).join(ENV_FILE))
                .and_then(|m| m.modified())
                .unwrap_or_else(|_| SystemTime::now());
            self.record_created(pod, name, time);
        }
        Ok(None)
    }

    async fn create_container(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        env: &ContainerEnv,
        _launch: &ContainerLaunch,
        _pull_secrets: &[Arc<Secret>],
    ) -> Result<(), RuntimeError> {
        let uid = pod.uid().clone();
        let name = container.name.clone();
        let env = env.clone();
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.write(&uid, &name, &env))
            .await
            .map_err(|source| RuntimeError::Task {
                what: "env writer",
                source,
            })??;
        self.record_created(pod, &container.name, SystemTime::now());
        Ok(())
    }

    fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        self.states.lock().get(uid).cloned().unwrap_or_default()
    }

    /// FC-14: the container's env files are replaced, each whole (`env.json`, then `env`).
    async fn update_env(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        env: &ContainerEnv,
    ) -> Result<bool, RuntimeError> {
        let uid = pod.uid().clone();
        let name = container.name.clone();
        let env = env.clone();
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.write(&uid, &name, &env))
            .await
            .map_err(|source| RuntimeError::Task {
                what: "env writer",
                source,
            })??;
        Ok(true)
    }

    async fn kill_pod(
        &self,
        _uid: &PodUid,
        _grace_period: Duration,
    ) -> Result<Vec<String>, RuntimeError> {
        Ok(Vec::new())
    }

    async fn remove_pod(&self, pod: TerminatingPod<'_>) -> Result<(), RuntimeError> {
        self.remove(pod.uid()).await
    }
}

impl EnvFileRuntime {
    /// Names of `pod`'s containers whose environment was written (by an earlier sync or an
    /// earlier run of the agent).
    fn created_containers(&self, pod: &AdmittedPod) -> Result<BTreeSet<String>, RuntimeError> {
        let dir = self.containers_dir(pod.uid());
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(source) => {
                return Err(RuntimeError::Io {
                    step: "reading directory",
                    path: dir,
                    source,
                });
            }
        };
        Ok(entries
            .filter_map(Result::ok)
            .filter(|e| e.path().join(ENV_FILE).exists())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
    }

    /// Records container `name` of `pod` created at `time` (once): a regular init container
    /// as completed, any other (a sidecar too: it would run on) as running.
    fn record_created(&self, pod: &AdmittedPod, name: &str, time: SystemTime) {
        let mut states = self.states.lock();
        let states = states.entry(pod.uid().clone()).or_default();
        if states.iter().any(|s| s.name == name) {
            return;
        }
        let init = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .any(|c| c.name == name && !is_sidecar(c));
        let state = if init {
            ContainerState::Terminated(Termination {
                exit_code: 0,
                signal: None,
                reason: "Completed".to_owned(),
                message: None,
                started_at: time,
                finished_at: time,
            })
        } else {
            ContainerState::Running { started_at: time }
        };
        states.push(ContainerStatus {
            name: name.to_owned(),
            state,
            last_state: None,
            restart_count: 0,
            container_id: String::new(),
        });
    }

    async fn remove(&self, uid: &PodUid) -> Result<(), RuntimeError> {
        self.states.lock().remove(uid);
        let dir = self.containers_dir(uid);
        let (uid, locks) = (uid.clone(), self.fs_locks.clone());
        let lock = self.fs_lock(&uid);
        tokio::task::spawn_blocking(move || {
            // Waits for a write still running from a cancelled sync.
            let _guard = lock.lock();
            let removed = match fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(RuntimeError::Io {
                    step: "removing directory",
                    path: dir,
                    source,
                }),
            };
            if removed.is_ok() {
                locks.lock().remove(&uid);
            }
            removed
        })
        .await
        .map_err(|source| RuntimeError::Task {
            what: "env removal",
            source,
        })?
    }
}

fn private_dir(dir: &Path) -> Result<(), RuntimeError> {
    let io_err = |step, source| RuntimeError::Io {
        step,
        path: dir.to_path_buf(),
        source,
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io_err("creating directory", e))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| io_err("setting mode of", e))
}

/// The `NAME=value` form (see [`EnvFileRuntime`] for the escaping).
pub fn env_file(env: &ContainerEnv) -> Vec<u8> {
    let mut out = Vec::new();
    for var in &env.vars {
        out.extend_from_slice(var.name.as_bytes());
        out.push(b'=');
        escape_into(&var.value, &mut out);
        out.push(b'\n');
    }
    out
}

fn escape_into(value: &[u8], out: &mut Vec<u8>) {
    let mut rest = value;
    while !rest.is_empty() {
        let (valid, invalid) = match std::str::from_utf8(rest) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (v, i) = rest.split_at(e.valid_up_to());
                let bad = e.error_len().unwrap_or(i.len());
                (std::str::from_utf8(v).unwrap_or_default(), &i[..bad])
            }
        };
        for c in valid.chars() {
            match c {
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    out.extend_from_slice(format!("\\x{:02x}", c as u32).as_bytes());
                }
                c => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        for b in invalid {
            out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        }
        rest = &rest[valid.len() + invalid.len()..];
    }
}

/// The JSON form (see [`EnvFileRuntime`]).
pub fn env_json(env: &ContainerEnv) -> Vec<u8> {
    let items: Vec<serde_json::Value> = env
        .vars
        .iter()
        .map(|v| match std::str::from_utf8(&v.value) {
            Ok(s) => serde_json::json!({"name": v.name, "value": s}),
            Err(_) => serde_json::json!({
                "name": v.name,
                "valueBase64": base64::engine::general_purpose::STANDARD.encode(&v.value),
            }),
        })
        .collect();
    let mut out = serde_json::to_vec_pretty(&items).unwrap_or_default();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use nodelet_testutil::PodBuilder;

    use super::*;
    use crate::env::EnvValue;

    fn env(pairs: &[(&str, &[u8])]) -> ContainerEnv {
        ContainerEnv {
            vars: pairs
                .iter()
                .map(|(n, v)| EnvValue {
                    name: (*n).to_owned(),
                    value: v.to_vec(),
                })
                .collect(),
            ..ContainerEnv::default()
        }
    }

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            ..Container::default()
        }
    }

    #[test]
    fn env_file_escapes_backslashes_newlines_controls_and_invalid_utf8() {
        let e = env(&[
            ("A", b"plain value"),
            ("B", b"line1\nline2\\x\t\r"),
            ("C", b"\x01\x7f\xff\xfeok"),
            ("D", "héllo".as_bytes()),
            ("E", b""),
        ]);
        let text = String::from_utf8(env_file(&e)).unwrap_or_default();
        assert_eq!(
            text,
            "A=plain value\nB=line1\\nline2\\\\x\\t\\r\nC=\\x01\\x7f\\xff\\xfeok\nD=héllo\nE=\n"
        );
    }

    #[test]
    fn env_json_gives_non_utf8_values_in_base64() {
        let e = env(&[("A", b"v\n"), ("B", b"\xff")]);
        let v: serde_json::Value =
            serde_json::from_slice(&env_json(&e)).unwrap_or(serde_json::Value::Null);
        assert_eq!(v[0], serde_json::json!({"name": "A", "value": "v\n"}));
        assert_eq!(
            v[1],
            serde_json::json!({"name": "B", "valueBase64": "/w=="})
        );
    }

    #[tokio::test]
    async fn env_files_are_0600_in_0700_directories_and_removed_with_the_pod() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let rt = EnvFileRuntime::new(root.path());
        let p = AdmittedPod::new(PodBuilder::new("ns", "p").uid("u1").build())
            .unwrap_or_else(|e| panic!("{e}"));
        let created = rt.created_containers(&p).unwrap_or_default();
        assert!(created.is_empty());
        let r = rt
            .create_container(
                &p,
                &container("c"),
                &env(&[("K", b"v")]),
                &ContainerLaunch::default(),
                &[],
            )
            .await;
        assert!(r.is_ok(), "{r:?}");
        let dir = root.path().join("pods/u1/containers/c");
        let mode = |p: &Path| fs::metadata(p).map(|m| m.mode() & 0o777).unwrap_or(0);
        assert_eq!(mode(&root.path().join("pods/u1/containers")), 0o700);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("env")), 0o600);
        assert_eq!(mode(&dir.join("env.json")), 0o600);
        assert_eq!(fs::read(dir.join("env")).unwrap_or_default(), b"K=v\n");
        // Two regular files and nothing else: no temporary name left, no `..data` indirection.
        let mut names: Vec<_> = fs::read_dir(&dir)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        names.sort();
        assert_eq!(names, ["env", "env.json"]);
        assert!(fs::symlink_metadata(dir.join("env")).is_ok_and(|m| m.is_file()));
        assert_eq!(rt.fs_locks.lock().len(), 1);
        let created = rt.created_containers(&p).unwrap_or_default();
        assert_eq!(
            created.into_iter().collect::<Vec<_>>(),
            vec!["c".to_owned()]
        );
        assert!(rt.remove_pod(TerminatingPod::from(&p)).await.is_ok());
        assert!(!root.path().join("pods/u1/containers").exists());
        assert!(rt.fs_locks.lock().is_empty(), "the pod's lock goes with it");
        assert!(
            rt.remove_pod(TerminatingPod::on_disk(p.uid()))
                .await
                .is_ok(),
            "idempotent, also by UID alone"
        );
    }

    // An earlier run's containers are adopted at the pod's first sandbox; once the pod has
    // recorded containers, later sandboxes read nothing (a file appearing now is no earlier
    // run's), and a pod recreated after its removal reads the directory again.
    #[tokio::test]
    async fn the_containers_directory_is_read_until_the_pod_has_recorded_containers() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let rt = EnvFileRuntime::new(root.path());
        let p = AdmittedPod::new(PodBuilder::new("ns", "p").uid("u1").build())
            .unwrap_or_else(|e| panic!("{e}"));
        let plant = |name: &str| {
            let dir = root.path().join("pods/u1/containers").join(name);
            fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
            fs::write(dir.join("env"), b"").unwrap_or_else(|e| panic!("{e}"));
        };
        let names = |rt: &EnvFileRuntime| -> Vec<String> {
            rt.statuses(p.uid()).into_iter().map(|s| s.name).collect()
        };
        assert!(rt.run_pod_sandbox(&p).await.is_ok());
        assert!(names(&rt).is_empty());
        plant("earlier");
        assert!(rt.run_pod_sandbox(&p).await.is_ok());
        assert_eq!(names(&rt), ["earlier"], "adopted while none was recorded");
        plant("later");
        assert!(rt.run_pod_sandbox(&p).await.is_ok());
        assert_eq!(names(&rt), ["earlier"], "not read again");
        assert!(rt.remove_pod(TerminatingPod::from(&p)).await.is_ok());
        plant("again");
        assert!(rt.run_pod_sandbox(&p).await.is_ok());
        assert_eq!(
            names(&rt),
            ["again"],
            "read again after the pod was removed"
        );
    }
}
