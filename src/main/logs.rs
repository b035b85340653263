//! `nodelet logs`: a container's log from the agent's log files, printed as `kubectl logs`
//! prints it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use nodelet_runtime::logs::{self, ReadOptions};

use crate::cli::LogsArgs;

/// How often `--follow` looks for a newer instance of the container (a restart).
const RESTART_POLL: Duration = Duration::from_millis(250);

/// Prints the log `cli` names to standard output.
///
/// # Errors
/// No log directory for the pod, an ambiguous or unknown container, no log file, a read error.
pub(crate) async fn print_logs(cli: &LogsArgs) -> anyhow::Result<()> {
    let pod_dir = find_pod_dir(&cli.root_dir, &cli.namespace, &cli.pod)?;
    let container = match &cli.container {
        Some(c) => c.clone(),
        None => only_container(&pod_dir, &cli.pod)?,
    };
    let container_dir = pod_dir.join(&container);
    let instances = logs::instances(&container_dir).unwrap_or_default();
    let Some(&latest) = instances.last() else {
        bail!(
            "container {container:?} of pod {}/{} has no log (directories there: {})",
            cli.namespace,
            cli.pod,
            names(&pod_dir).join(", ")
        );
    };
    let mut instance = if cli.previous {
        match latest.checked_sub(1).filter(|p| instances.contains(p)) {
            Some(p) => p,
            None => bail!(
                "previous terminated container {container:?} in pod {:?} not found",
                cli.pod
            ),
        }
    } else {
        latest
    };
    let mut out = tokio::io::stdout();
    let mut tail = cli.tail;
    loop {
        let path = logs::container_log_path(&pod_dir, &container, instance);
        let options = ReadOptions {
            follow: cli.follow,
            tail_lines: tail,
            timestamps: cli.timestamps,
            ..ReadOptions::default()
        };
        // Without --follow the read ends at the end of the file; with it, when a newer
        // instance (a restart) appears, whose log is followed next.
        let dir = container_dir.clone();
        let superseded = async move {
            loop {
                let newest = logs::instances(&dir).ok().and_then(|i| i.last().copied());
                if newest.is_some_and(|n| n > instance) {
                    return;
                }
                tokio::time::sleep(RESTART_POLL).await;
            }
        };
        logs::read_logs(&path, &options, superseded, &mut out)
            .await
            .with_context(|| format!("reading {}", path.display()))?;
        if !cli.follow {
            return Ok(());
        }
        let newest = logs::instances(&container_dir)
            .ok()
            .and_then(|i| i.last().copied())
            .unwrap_or(instance);
        instance = newest.max(instance + 1);
        tail = None;
    }
}

/// `<root>/logs/pods/<namespace>_<pod>_<uid>`, the newest when several UIDs had that name.
fn find_pod_dir(root: &Path, namespace: &str, pod: &str) -> anyhow::Result<PathBuf> {
    let logs_dir = nodelet_core::PodDirs::new(root).logs();
    let prefix = format!("{namespace}_{pod}_");
    let entries = std::fs::read_dir(&logs_dir)
        .with_context(|| format!("no pod logs under {}", logs_dir.display()))?;
    let newest = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter_map(|e| {
            let modified = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((modified, e.path()))
        })
        .max_by_key(|(modified, _)| *modified);
    match newest {
        Some((_, path)) => Ok(path),
        None => bail!(
            "pod {namespace}/{pod} has no logs under {}",
            logs_dir.display()
        ),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn only_container(pod_dir: &Path, pod: &str) -> anyhow::Result<String> {
    let mut names = names(pod_dir);
    match names.len() {
        1 => Ok(names.remove(0)),
        0 => bail!("pod {pod:?} has no container logs"),
        _ => bail!(
            "a container name must be specified for pod {pod}, choose one of: [{}]",
            names.join(" ")
        ),
    }
}

/// `nodelet logs`: prints the log until it ends (or, following, until Ctrl-C).
pub(crate) fn main(cli: LogsArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nodelet logs: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let printed = runtime.block_on(async {
        tokio::select! {
            r = print_logs(&cli) => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    });
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodelet logs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
