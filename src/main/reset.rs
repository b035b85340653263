//! `nodelet reset --root-dir DIR`: undo what the agent left in its root directory, as
//! `kubeadm reset` does for a kubelet. Steps (markers `// (n)`):
//! 1. take the root directory's lock (`nodelet.lock`); while an agent holds it, refuse, naming
//!    its pid (exit 75), and change nothing;
//! 2. unmount every mount whose mount point is inside `DIR/pods` (the secret and token tmpfs
//!    volumes a stopped agent leaves for its successor to adopt), deepest first, never one
//!    outside `DIR`;
//! 3. if no mount is left inside, remove `DIR/pods` (symlinks are removed, never followed),
//!    then the containers' log files (`DIR/logs`) and what the agent wrote at the top of `DIR`
//!    (`admin.kubeconfig`, `kubelet-client-ca.crt`, `nodelet.lock`);
//! 4. leave anything else in `DIR` and name it; remove `DIR` itself only when it is then empty.
//!
//! With `dry_run` nothing is changed and the report says what would be done.
//!
//! `--delete-node` removes the node from the cluster (`nodelet_reporting::delete_node`: its
//! Lease, then its Node, each on its own); a refusal does not stop the local steps above.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use nodelet_config::LOCK_FILE_NAME;
use nodelet_reporting::{Deletion, delete_node};
use nodelet_transport::Protocol;

use crate::cli::ResetArgs;

/// `EX_TEMPFAIL`: `nodelet reset` refused because an agent runs on the directory.
const EXIT_IN_USE: u8 = 75;

/// Files the agent writes at the top of its root directory.
const AGENT_FILES: [&str; 3] = ["admin.kubeconfig", "kubelet-client-ca.crt", LOCK_FILE_NAME];

/// The containers' log files (process runtime), `<root>/logs/pods/...`.
const LOGS_DIR: &str = "logs";

/// Why a reset did not run or did not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResetError {
    /// An agent holds the root directory (step 1).
    #[error("root directory {} is in use by a running nodelet ({holder}): stop it first", root.display())]
    InUse {
        /// The root directory.
        root: PathBuf,
        /// `pid N`, or `pid unknown`.
        holder: String,
    },
    /// Anything else: a mount that would not go, a file that could not be removed.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

/// What a reset did (or, with `dry_run`, would do).
#[derive(Debug, Default)]
pub(crate) struct ResetReport {
    /// Mount points unmounted.
    pub(crate) unmounted: Vec<PathBuf>,
    /// Paths removed.
    pub(crate) removed: Vec<PathBuf>,
    /// Entries of the root directory left in place (not the agent's).
    pub(crate) left: Vec<PathBuf>,
}

/// Resets `root` (module docs, steps (1)–(4)).
///
/// # Errors
/// [`ResetError::InUse`] while an agent holds the directory; [`ResetError::Failed`] when a
/// mount or a file could not be removed (what was done before is in the message).
pub(crate) fn reset(root: &Path, dry_run: bool) -> Result<ResetReport, ResetError> {
    let mut report = ResetReport::default();
    if !root.exists() {
        return Ok(report);
    }
    let root = root
        .canonicalize()
        .with_context(|| format!("resolving {}", root.display()))?;
    // (1)
    let _lock = lock(&root)?;
    // (2), (3)
    let pods = nodelet_volume_manager::remove_pods(&root, dry_run).map_err(anyhow::Error::from)?;
    report.unmounted = pods.unmounted;
    report.removed.extend(pods.removed);
    let logs = root.join(LOGS_DIR);
    if logs.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        if !dry_run {
            std::fs::remove_dir_all(&logs)
                .with_context(|| format!("removing {}", logs.display()))?;
        }
        report.removed.push(logs);
    }
    for name in AGENT_FILES {
        let path = root.join(name);
        if path.symlink_metadata().is_ok() {
            if !dry_run {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
            report.removed.push(path);
        }
    }
    // (4)
    let mut left: Vec<PathBuf> = std::fs::read_dir(&root)
        .with_context(|| format!("reading {}", root.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| !report.removed.contains(p))
        .collect();
    left.sort();
    if left.is_empty() {
        if !dry_run {
            std::fs::remove_dir(&root).with_context(|| format!("removing {}", root.display()))?;
        }
        report.removed.push(root);
    }
    report.left = left;
    Ok(report)
}

/// The root directory's lock, if no agent holds it (1).
fn lock(root: &Path) -> Result<Option<Flock<std::fs::File>>, ResetError> {
    let path = root.join(LOCK_FILE_NAME);
    let Ok(file) = std::fs::File::open(&path) else {
        return Ok(None);
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => Ok(Some(locked)),
        Err((_, Errno::EWOULDBLOCK)) => {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = match pid.trim() {
                "" => "pid unknown".to_owned(),
                pid => format!("pid {pid}"),
            };
            Err(ResetError::InUse {
                root: root.to_path_buf(),
                holder,
            })
        }
        Err((_, errno)) => Err(anyhow::Error::from(errno)
            .context(format!("locking {}", path.display()))
            .into()),
    }
}

/// `nodelet reset`: prints what it did (or would do); the exit code says how it went.
pub(crate) fn main(cli: ResetArgs) -> ExitCode {
    let would = if cli.dry_run { "would " } else { "" };
    let mut code = match reset(&cli.root_dir, cli.dry_run) {
        Ok(report) => {
            for m in &report.unmounted {
                println!("{would}unmount {}", m.display());
            }
            for p in &report.removed {
                println!("{would}remove {}", p.display());
            }
            for p in &report.left {
                println!("{would}leave {} (not nodelet's)", p.display());
            }
            if report.unmounted.is_empty() && report.removed.is_empty() {
                println!("nothing of nodelet's in {}", cli.root_dir.display());
            }
            ExitCode::SUCCESS
        }
        // A running agent would register its Node and Lease again: nothing is deleted.
        Err(e @ ResetError::InUse { .. }) => {
            eprintln!("nodelet reset: {e}");
            return ExitCode::from(EXIT_IN_USE);
        }
        Err(e) => {
            eprintln!("nodelet reset: {e:#}");
            ExitCode::FAILURE
        }
    };
    if let (true, Some(node)) = (cli.delete_node, cli.node_name.as_deref())
        && !delete_node_main(cli.kubeconfig.as_deref(), node, cli.dry_run)
    {
        code = ExitCode::FAILURE;
    }
    code
}

/// `--delete-node`: prints what happened to the node's Lease and Node; `false` if either may
/// still exist.
fn delete_node_main(kubeconfig: Option<&std::path::Path>, node: &str, dry_run: bool) -> bool {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nodelet reset: starting the runtime: {e}");
            return false;
        }
    };
    let outcomes = runtime.block_on(async {
        let (client, _url) = nodelet::cluster_client(kubeconfig, Protocol::Auto).await?;
        anyhow::Ok(delete_node(client.client, node, dry_run).await)
    });
    let outcomes = match outcomes {
        Ok(o) => o,
        Err(e) => {
            eprintln!("nodelet reset: --delete-node: {e:#}");
            return false;
        }
    };
    for object in &outcomes {
        let what = &object.what;
        match &object.outcome {
            Deletion::Deleted => println!("delete {what}"),
            Deletion::WouldDelete => println!("would delete {what}"),
            Deletion::NotFound => println!("{what} not found"),
            Deletion::Forbidden(message) => {
                eprintln!("nodelet reset: {what} not deleted: forbidden: {message}");
            }
            Deletion::Failed(message) => eprintln!("nodelet reset: {what} not deleted: {message}"),
        }
    }
    !outcomes.iter().any(|o| o.outcome.is_failure())
}
