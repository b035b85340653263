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
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Container;
use nodelet_core::AdmittedPod;
use nodelet_core::runtime::{ContainerLaunch, ContainerState, Termination};
use tokio::io::AsyncReadExt;
use tracing::{debug, warn};

use crate::error::StartError;
use crate::logs;
use crate::records::{
    DEFAULT_PATH, Inner, LAUNCH_FILE, Record, SCRATCH_DIR, STATE_FILE, StateFile, start_ticks,
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
    let config = &inner.config;
    let uid = pod.uid();
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
    // (4)
    let dir = inner.dirs.container(uid, &container.name);
    let scratch = dir.join(SCRATCH_DIR);
    make_private_dir(&inner.dirs.containers(uid))?;
    make_private_dir(&dir)?;
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
    let message_source =
        MessageSource::prepare(container, &dir).map_err(|source| StartError::Io {
            step: "creating the termination message file in",
            path: dir.clone(),
            source,
        })?;
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
    let socket_name = format!("nodelet-start-{:016x}", rand::random::<u64>());
    let mut masked = config.masked.clone();
    masked.push(fs::canonicalize(&config.root_dir).unwrap_or_else(|_| config.root_dir.clone()));
    let spec = LaunchSpec {
        program,
        args,
        uid: identity.uid,
        gid: identity.gid,
        groups: identity.groups.clone(),
        working_dir: container
            .working_dir
            .clone()
            .map(PathBuf::from)
            .or_else(|| image.working_dir.clone())
            .unwrap_or_else(|| PathBuf::from("/")),
        hostname: launch.hostname.clone(),
        mounts: image
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
            .chain(message_source.file.iter().map(|file| {
                MountSpec {
                    source: file.clone(),
                    target: PathBuf::from(
                        container
                            .termination_message_path
                            .as_deref()
                            .unwrap_or_default(),
                    ),
                    read_only: false,
                }
            }))
            .collect(),
        scratch: scratch.clone(),
        masked,
        status_socket: socket_name.clone(),
        privileged: security.privileged,
        capabilities: security.capabilities,
        no_new_privs: security.no_new_privs,
        read_only_root: security.read_only_root,
        seccomp_runtime_default: security.seccomp_runtime_default,
        ipc_namespace: inner.ipc.path(pod),
    };
    let spec_path = dir.join(LAUNCH_FILE);
    write_private(
        &spec_path,
        &serde_json::to_vec_pretty(&spec).unwrap_or_default(),
    )?;
    let (starts, log_dir) = {
        let mut pods = inner.pods.lock();
        let r = pods
            .entry(uid.clone())
            .or_default()
            .entry(container.name.clone())
            .or_insert_with(Record::new);
        let log_dir = inner.dirs.pod_logs(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            uid,
        );
        (r.starts, log_dir)
    };
    let log_path = logs::container_log_path(&log_dir, &container.name, starts);
    if starts > 0
        && let Err(error) = logs::prune_instances(&log_dir.join(&container.name), starts - 1)
    {
        warn!(%error, "log files of older instances not removed");
    }
    let listener = bind_abstract(&socket_name).map_err(|source| StartError::Io {
        step: "binding the status socket of",
        path: dir.clone(),
        source,
    })?;
    let mut command =
        tokio::process::Command::new(config.init_command.first().cloned().unwrap_or_default());
    command
        .args(config.init_command.iter().skip(1))
        .arg(&spec_path)
        .env_clear()
        .envs(vars.iter().map(|(n, v)| {
            use std::os::unix::ffi::OsStringExt;
            (OsString::from(n), OsString::from_vec(v.clone()))
        }))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started_at = SystemTime::now();
    let started_instant = Instant::now();
    let mut child = command.spawn().map_err(|e| StartError::Start {
        message: format!(
            "starting the container's init process {:?}: {e}",
            config.init_command.first()
        ),
    })?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let log_config = config.logs.clone();
    let instance_log = log_path.clone();
    let log_task = tokio::spawn(async move {
        match (stdout, stderr) {
            (Some(out), Some(err)) => {
                if let Err(error) = logs::copy_streams(out, err, log_path, log_config).await {
                    warn!(%error, "container log not written");
                }
            }
            _ => warn!("container output not captured"),
        }
    });
    // (5)
    // Biased: a program that ends at once leaves both branches ready; its init connected
    // first, so the socket's answer is the one that counts.
    let report = tokio::select! {
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
    };
    drop(listener);
    if !report.is_empty() {
        // The init process failed before `execve`: reap it, record a StartError.
        let _ = child.wait().await;
        let _ = log_task.await;
        inner.record_end(
            uid,
            &container.name,
            Termination {
                exit_code: 128,
                signal: None,
                reason: "StartError".to_owned(),
                message: Some(report.clone()),
                started_at,
                finished_at: SystemTime::now(),
            },
            Duration::ZERO,
            true,
        );
        return Err(StartError::Start { message: report });
    }
    // (6)
    let container_id = format!("nodelet://{:032x}", rand::random::<u128>());
    let (ended_rx, starts) = {
        let mut pods = inner.pods.lock();
        let r = pods
            .entry(uid.clone())
            .or_default()
            .entry(container.name.clone())
            .or_insert_with(Record::new);
        match &r.state {
            ContainerState::Terminated(t) => r.last_state = Some(t.clone()),
            ContainerState::Waiting { .. } | ContainerState::Running { .. } => {}
        }
        r.starts += 1;
        r.state = ContainerState::Running { started_at };
        r.container_id = container_id.clone();
        r.pgid = Some(pid);
        r.not_before = None;
        r.ended.send_replace(false);
        (r.ended.subscribe(), r.starts)
    };
    drop(ended_rx);
    let state = StateFile {
        pid,
        start_ticks: start_ticks(pid).unwrap_or(0),
        starts,
        container_id,
        started_at,
    };
    if let Err(e) = write_private(
        &dir.join(STATE_FILE),
        &serde_json::to_vec(&state).unwrap_or_default(),
    ) {
        warn!(error = %e, "container state not written; a restarted agent will not find it");
    }
    debug!(container = %container.name, pid, "container started");
    let runtime = inner.clone();
    let uid = uid.clone();
    let name = container.name.clone();
    tokio::spawn(async move {
        let status = child.wait().await;
        let _ = log_task.await;
        let finished_at = SystemTime::now();
        let (exit_code, signal) = exit_code(status.ok());
        // (PW-24, PW-25)
        let message = message_source.read(exit_code, &instance_log).await;
        let termination = Termination {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_owned(),
            message,
            started_at,
            finished_at,
        };
        let _ = fs::remove_file(dir.join(STATE_FILE));
        runtime.record_end(&uid, &name, termination, started_instant.elapsed(), false);
    });
    Ok(())
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
