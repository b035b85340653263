//! Starting one container instance (steps 1–6 of the runtime's module docs): image, user,
//! command line, `launch.json`, the init process with its log pipes, its start report on the
//! status socket, and the task that follows it to its end.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Container;
use nodelet_core::runtime::{ContainerLaunch, ContainerState, Termination};
use nodelet_core::{AdmittedPod, PodUid};
use tokio::io::AsyncReadExt;
use tracing::{debug, warn};

use crate::config::RuntimeConfig;
use crate::error::StartError;
use crate::images::ImageEntry;
use crate::logs;
use crate::records::{
    DEFAULT_PATH, Inner, LAUNCH_FILE, SCRATCH_DIR, STATE_FILE, StateFile, start_ticks,
};
use crate::security::Security;
use crate::spec::{LaunchSpec, MountSpec};
use crate::termination::MessageSource;
use crate::users::Identity;

/// Starts `container` of `pod` (module docs of the crate's supervisor, steps 1–6).
pub(crate) async fn start(
    inner: &Arc<Inner>,
    pod: &AdmittedPod,
    container: &Container,
    env: &[(String, Vec<u8>)],
    launch: &ContainerLaunch,
) -> Result<(), StartError> {
    // (1) … (3)
    let resolved = resolve(inner, pod, container, launch)?;
    // (4)
    let dir = inner.dirs.container(pod.uid(), &container.name);
    let scratch = prepare_dirs(inner, pod, &dir)?;
    let message_source =
        MessageSource::prepare(container, &dir).map_err(|source| StartError::Io {
            step: "creating the termination message file in",
            path: dir.clone(),
            source,
        })?;
    let vars = container_env(env, resolved.image, launch);
    let socket_name = format!("nodelet-start-{:016x}", rand::random::<u64>());
    let paths = InstancePaths {
        scratch,
        status_socket: socket_name.clone(),
    };
    let spec = launch_spec(
        inner,
        pod,
        container,
        launch,
        &resolved,
        &message_source,
        paths,
    );
    let spec_path = dir.join(LAUNCH_FILE);
    write_private(
        &spec_path,
        &serde_json::to_vec_pretty(&spec).unwrap_or_default(),
    )?;
    let log_path = instance_log(inner, pod, &container.name);
    let listener = bind_abstract(&socket_name).map_err(|source| StartError::Io {
        step: "binding the status socket of",
        path: dir.clone(),
        source,
    })?;
    let started_at = SystemTime::now();
    let mut child = spawn_init(&inner.config, &spec_path, &vars)?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let log_task = copy_logs(inner, &mut child, log_path.clone());
    // (5)
    let report = start_report(listener, &mut child).await;
    if !report.is_empty() {
        // The init process failed before `execve`: reap it, record a StartError.
        let _ = child.wait().await;
        let _ = log_task.await;
        let termination = Termination {
            exit_code: 128,
            signal: None,
            reason: "StartError".to_owned(),
            message: Some(report.clone()),
            started_at,
            finished_at: SystemTime::now(),
        };
        inner.record_end(pod.uid(), &container.name, termination, true);
        return Err(StartError::Start { message: report });
    }
    // (6)
    let state = record_running(inner, pod, &container.name, pid, started_at);
    if let Err(e) = write_private(
        &dir.join(STATE_FILE),
        &serde_json::to_vec(&state).unwrap_or_default(),
    ) {
        warn!(error = %e, "container state not written; a restarted agent will not find it");
    }
    debug!(container = %container.name, pid, "container started");
    let instance = Instance {
        inner: inner.clone(),
        uid: pod.uid().clone(),
        name: container.name.clone(),
        dir,
        log_path,
        message_source,
        started_at,
    };
    inner.tasks.spawn(instance.follow(child, log_task));
    Ok(())
}

/// What steps 1–3 found for a container: its image entry, user, security settings and
/// command line.
struct Resolved<'a> {
    image: &'a ImageEntry,
    identity: Identity,
    security: Security,
    program: String,
    args: Vec<String>,
}

/// (1) The image in the image table, (2) the container's user and security settings (after
/// the pod's IPC namespace, which its sysctls need), (3) its command line.
fn resolve<'a>(
    inner: &'a Inner,
    pod: &AdmittedPod,
    container: &Container,
    launch: &ContainerLaunch,
) -> Result<Resolved<'a>, StartError> {
    let config = &inner.config;
    // (1)
    let image_ref = container.image.clone().unwrap_or_default();
    let image = config
        .images
        .find(&image_ref)
        .ok_or_else(|| StartError::ImageNotMapped {
            image: image_ref.clone(),
        })?;
    // (2)
    let identity = Identity::resolve(pod, container, image, config.allow_root)?;
    inner.ipc.prepare(pod).map_err(|e| StartError::Start {
        message: e.to_string(),
    })?;
    let security = Security::resolve(pod, container)?;
    // (3)
    let (program, args) = image
        .command_line(launch)
        .ok_or_else(|| StartError::Start {
            message: format!(
                "no command specified: container {} sets no command and image {image_ref:?} \
                 has no entrypoint in the image table",
                container.name
            ),
        })?;
    Ok(Resolved {
        image,
        identity,
        security,
        program,
        args,
    })
}

/// (4) The container's private directories, and an empty scratch directory (the previous
/// instance's removed). Returns the scratch directory.
fn prepare_dirs(inner: &Inner, pod: &AdmittedPod, dir: &Path) -> Result<PathBuf, StartError> {
    let scratch = dir.join(SCRATCH_DIR);
    make_private_dir(&inner.dirs.containers(pod.uid()))?;
    make_private_dir(dir)?;
    match fs::remove_dir(&scratch) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(StartError::Io {
                step: "removing the previous scratch directory",
                path: scratch,
                source,
            });
        }
    }
    make_private_dir(&scratch)?;
    Ok(scratch)
}

/// The process's environment: the container's, with the image's `PATH` directories before
/// its `PATH` (or the default one) and `HOSTNAME` unless it sets one.
fn container_env(
    env: &[(String, Vec<u8>)],
    image: &ImageEntry,
    launch: &ContainerLaunch,
) -> Vec<(String, Vec<u8>)> {
    let mut vars: Vec<(String, Vec<u8>)> = env.to_vec();
    let mut path = image
        .path
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
        .into_bytes();
    let existing = vars.iter().position(|(n, _)| n == "PATH");
    let base = existing
        .map(|i| vars[i].1.clone())
        .unwrap_or_else(|| DEFAULT_PATH.as_bytes().to_vec());
    if !path.is_empty() {
        path.push(b':');
    }
    path.extend_from_slice(&base);
    match existing {
        Some(i) => vars[i].1 = path,
        None => vars.push(("PATH".to_owned(), path)),
    }
    if !vars.iter().any(|(n, _)| n == "HOSTNAME") {
        vars.push(("HOSTNAME".to_owned(), launch.hostname.clone().into_bytes()));
    }
    vars
}

/// Where one instance's init process builds its root and reports its start.
struct InstancePaths {
    /// The scratch directory (empty).
    scratch: PathBuf,
    /// The abstract socket's name.
    status_socket: String,
}

/// The init process's spec (`launch.json`): program, user, working directory, mounts (the
/// image's files, the volumes, the termination message file), security settings.
fn launch_spec(
    inner: &Inner,
    pod: &AdmittedPod,
    container: &Container,
    launch: &ContainerLaunch,
    resolved: &Resolved<'_>,
    message_source: &MessageSource,
    paths: InstancePaths,
) -> LaunchSpec {
    let config = &inner.config;
    let image = resolved.image;
    let mut masked = config.masked.clone();
    masked.push(fs::canonicalize(&config.root_dir).unwrap_or_else(|_| config.root_dir.clone()));
    let message_target = PathBuf::from(
        container
            .termination_message_path
            .as_deref()
            .unwrap_or_default(),
    );
    let mounts = image
        .files
        .iter()
        .map(|(target, source)| MountSpec {
            source: source.clone(),
            target: target.clone(),
            read_only: true,
        })
        .chain(launch.mounts.iter().map(|m| MountSpec {
            source: m.host_path.clone(),
            target: m.container_path.clone(),
            read_only: m.read_only,
        }))
        .chain(message_source.file.iter().map(|file| MountSpec {
            source: file.clone(),
            target: message_target.clone(),
            read_only: false,
        }))
        .collect();
    let security = &resolved.security;
    LaunchSpec {
        program: resolved.program.clone(),
        args: resolved.args.clone(),
        uid: resolved.identity.uid,
        gid: resolved.identity.gid,
        groups: resolved.identity.groups.clone(),
        working_dir: container
            .working_dir
            .clone()
            .map(PathBuf::from)
            .or_else(|| image.working_dir.clone())
            .unwrap_or_else(|| PathBuf::from("/")),
        hostname: launch.hostname.clone(),
        mounts,
        scratch: paths.scratch,
        masked,
        status_socket: paths.status_socket,
        privileged: security.privileged,
        capabilities: security.capabilities.clone(),
        no_new_privs: security.no_new_privs,
        read_only_root: security.read_only_root,
        seccomp_runtime_default: security.seccomp_runtime_default,
        ipc_namespace: inner.ipc.path(pod),
    }
}

/// The log file of the instance about to start (`<starts>.log`); older instances' files but
/// the last are pruned.
fn instance_log(inner: &Inner, pod: &AdmittedPod, name: &str) -> PathBuf {
    let starts = inner.with_record(pod.uid(), name, |r| r.starts);
    let log_dir = inner.dirs.pod_logs(
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.uid(),
    );
    if starts > 0
        && let Err(error) = logs::prune_instances(&log_dir.join(name), starts - 1)
    {
        warn!(%error, "log files of older instances not removed");
    }
    logs::container_log_path(&log_dir, name, starts)
}

/// The init program with `spec_path`, exactly the container's environment `vars`, and its
/// output piped.
fn spawn_init(
    config: &RuntimeConfig,
    spec_path: &Path,
    vars: &[(String, Vec<u8>)],
) -> Result<tokio::process::Child, StartError> {
    let mut command =
        tokio::process::Command::new(config.init_command.first().cloned().unwrap_or_default());
    command
        .args(config.init_command.iter().skip(1))
        .arg(spec_path)
        .env_clear()
        .envs(vars.iter().map(|(n, v)| {
            use std::os::unix::ffi::OsStringExt;
            (OsString::from(n), OsString::from_vec(v.clone()))
        }))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.spawn().map_err(|e| StartError::Start {
        message: format!(
            "starting the container's init process {:?}: {e}",
            config.init_command.first()
        ),
    })
}

/// A task (the agent's) copying `child`'s output into the instance's log file.
fn copy_logs(
    inner: &Inner,
    child: &mut tokio::process::Child,
    log_path: PathBuf,
) -> tokio::task::JoinHandle<()> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let log_config = inner.config.logs.clone();
    inner.tasks.spawn(async move {
        match (stdout, stderr) {
            (Some(out), Some(err)) => {
                if let Err(error) = logs::copy_streams(out, err, log_path, log_config).await {
                    warn!(%error, "container log not written");
                }
            }
            _ => warn!("container output not captured"),
        }
    })
}

/// (5) What the init process reports on the status socket: empty once its `execve` closed
/// the socket, else the error (or that it ended first).
async fn start_report(
    listener: tokio::net::UnixListener,
    child: &mut tokio::process::Child,
) -> String {
    // Biased: a program that ends at once leaves both branches ready; its init connected
    // first, so the socket's answer is the one that counts.
    tokio::select! {
        biased;
        accepted = listener.accept() => match accepted {
            Ok((mut stream, _)) => {
                let mut text = String::new();
                let _ = stream.read_to_string(&mut text).await;
                text.trim().to_owned()
            }
            Err(e) => format!("status socket: {e}"),
        },
        status = child.wait() => {
            let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
            format!("the container's init process ended before it started the program ({status})")
        }
    }
}

/// (6) Records the instance running (a new container ID, its process group) and returns
/// what its `state.json` holds.
fn record_running(
    inner: &Inner,
    pod: &AdmittedPod,
    name: &str,
    pid: i32,
    started_at: SystemTime,
) -> StateFile {
    let container_id = format!("nodelet://{:032x}", rand::random::<u128>());
    let starts = inner.with_record(pod.uid(), name, |r| {
        if let ContainerState::Terminated(t) = &r.state {
            r.last_state = Some(t.clone());
        }
        r.starts += 1;
        r.state = ContainerState::Running { started_at };
        r.container_id = container_id.clone();
        r.pgid = Some(pid);
        r.ended.send_replace(false);
        r.starts
    });
    StateFile {
        pid,
        start_ticks: start_ticks(pid).unwrap_or(0),
        starts,
        container_id,
        started_at,
    }
}

/// A running instance, followed to its end by [`Instance::follow`].
struct Instance {
    inner: Arc<Inner>,
    uid: PodUid,
    name: String,
    dir: PathBuf,
    log_path: PathBuf,
    message_source: MessageSource,
    started_at: SystemTime,
}

impl Instance {
    /// Waits for the instance's end (and its log's), then records its termination with the
    /// termination message (PW-24, PW-25).
    async fn follow(self, mut child: tokio::process::Child, log_task: tokio::task::JoinHandle<()>) {
        let status = child.wait().await;
        let _ = log_task.await;
        let finished_at = SystemTime::now();
        let (exit_code, signal) = exit_code(status.ok());
        let message = self.message_source.read(exit_code, &self.log_path).await;
        let termination = Termination {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_owned(),
            message,
            started_at: self.started_at,
            finished_at,
        };
        let _ = fs::remove_file(self.dir.join(STATE_FILE));
        self.inner
            .record_end(&self.uid, &self.name, termination, false);
    }
}

/// Exit code and signal as the kubelet reports them (128 + signal for a signalled process).
fn exit_code(status: Option<ExitStatus>) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => (code, None),
            (None, Some(sig)) => (128 + sig, Some(sig)),
            (None, None) => (255, None),
        },
        None => (255, None),
    }
}

fn bind_abstract(name: &str) -> io::Result<tokio::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
}

fn make_private_dir(dir: &Path) -> Result<(), StartError> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(source) => Err(StartError::Io {
            step: "creating directory",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StartError> {
    use std::io::Write as _;
    let err = |source| StartError::Io {
        step: "writing",
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    file.write_all(bytes).map_err(err)
}
