//! The command line, spelled once: [`Cli`] parses every invocation of the `nodelet` binary —
//! the agent's flags ([`RunArgs`]) or one [`Command`] — and [`command`] is the same clap
//! `Command`, which `cargo xtask dist-docs` turns into shell completions and man pages.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::CommandFactory as _;

use nodelet_config::{DEFAULT_LISTEN, DEFAULT_ROOT_DIR, RunArgs};

/// `nodelet [FLAGS]` runs the agent; `nodelet SUBCOMMAND ...` does one thing else. The agent's
/// flags and a subcommand exclude each other.
#[derive(Debug, clap::Parser)]
#[command(
    name = "nodelet",
    version,
    about = "Materializes pods' ConfigMaps and Secrets as files and environment variables, as a kubelet does.",
    after_help = "Under systemd (`Type=notify`) the agent sends READY=1 once its first pod list is synced.",
    args_conflicts_with_subcommands = true
)]
pub(crate) struct Cli {
    /// The agent's flags, used when no subcommand is given.
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// What to do instead of running the agent.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// `nodelet reset`: undo what the agent left in a root directory (see `src/main/reset.rs`).
    #[command(
        about = "Unmount and remove what nodelet left in its root directory",
        long_about = "Unmount and remove what nodelet left in its root directory (pods' volumes, admin.kubeconfig, the lock); anything else stays. With --delete-node, also delete the node's Lease and Node from the cluster. Exit codes: 0 done, 1 failed (a mount that would not go, or an API object not deleted), 64 bad usage, 75 an agent is running on the directory."
    )]
    Reset(ResetArgs),
    /// `nodelet pods`: the running agent's pods, from its `/pods` endpoint.
    #[command(
        about = "Show what a running nodelet holds",
        long_about = "Show what a running nodelet holds: each pod, its phase, volumes (mounted of all, failed), the objects they project with their resourceVersions, and the last error. Exit codes: 0 shown, 1 no agent answered, 64 bad usage."
    )]
    Pods(PodsArgs),
    /// `nodelet logs`: a container's log, read from the agent's log files.
    #[command(
        about = "Print a container's log from the agent's log files",
        long_about = "Print a container's log from the agent's log files (<root-dir>/logs/pods/<namespace>_<pod>_<uid>/<container>/<restartCount>.log), as kubectl logs prints it. Exit codes: 0 printed, 1 no such pod, container or log, 64 bad usage."
    )]
    Logs(LogsArgs),
    /// `nodelet container-init SPEC`: a container's first process, started by the process
    /// runtime (internal: `nodelet_runtime::sandbox::init_main`).
    #[command(hide = true, disable_help_flag = true)]
    ContainerInit(SandboxArgs),
    /// `nodelet container-exec PID SPEC -- CMD...`: a command in a running container's
    /// namespaces, started by the kubelet API for `kubectl exec` (internal:
    /// `nodelet_runtime::sandbox::exec_main`).
    #[command(hide = true, disable_help_flag = true)]
    ContainerExec(SandboxArgs),
}

/// `nodelet reset`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ResetArgs {
    /// The agent's root directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_ROOT_DIR)]
    pub(crate) root_dir: PathBuf,
    /// Say what would be done; change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Also delete the node's Lease (`kube-node-lease/<node>`) and its Node. A node identity
    /// may delete its Lease but not its Node (the Node authorizer grants no delete): that
    /// refusal is reported and the local cleanup is done all the same.
    #[arg(long, requires = "node_name")]
    pub(crate) delete_node: bool,
    /// Kubeconfig file for --delete-node (default: `KUBECONFIG`, in-cluster config,
    /// `~/.kube/config`).
    #[arg(long, value_name = "PATH", requires = "delete_node")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The node whose Lease and Node --delete-node deletes.
    #[arg(long, value_name = "NAME", requires = "delete_node")]
    pub(crate) node_name: Option<String>,
}

/// `nodelet pods`' flags.
#[derive(Debug, clap::Args)]
pub(crate) struct PodsArgs {
    /// The agent's --listen address.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub(crate) listen: std::net::SocketAddr,
    /// `table` (default) or `json` (the endpoint's JSON as is).
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value = "table",
          value_parser = ["table", "json"])]
    pub(crate) output: String,
}

/// `nodelet logs`' arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    /// The pod's name.
    #[arg(value_name = "POD")]
    pub(crate) pod: String,
    /// The pod's namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE", default_value = "default")]
    pub(crate) namespace: String,
    /// The container (default: the pod's only container).
    #[arg(short = 'c', long, value_name = "CONTAINER")]
    pub(crate) container: Option<String>,
    /// Keep printing as the log grows (and across restarts of the container) until Ctrl-C.
    #[arg(short = 'f', long)]
    pub(crate) follow: bool,
    /// The previous instance's log.
    #[arg(short = 'p', long)]
    pub(crate) previous: bool,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub(crate) tail: Option<usize>,
    /// Prefix each line with its RFC 3339 timestamp.
    #[arg(long)]
    pub(crate) timestamps: bool,
    /// The agent's root directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_ROOT_DIR)]
    pub(crate) root_dir: PathBuf,
}

/// The arguments of `container-init` and `container-exec`, as the agent passed them: their
/// format belongs to `nodelet_runtime::sandbox`, which writes and reads it (and answers a bad
/// one with its own exit code).
#[derive(Debug, clap::Args)]
pub(crate) struct SandboxArgs {
    /// Everything after the subcommand's name, `--` included.
    #[arg(value_name = "ARGS", num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) args: Vec<OsString>,
}

/// [`Cli`] as a clap `Command`: what `cargo xtask dist-docs` turns into shell completions and
/// man pages (the hidden subcommands are left out of both). xtask compiles this file for it;
/// the binary itself parses with [`Cli`].
#[allow(dead_code)]
pub(crate) fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("nodelet").chain(args.iter().copied()))
    }

    fn parsed(args: &[&str]) -> Cli {
        parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn the_whole_command_line_is_consistent_and_names_every_subcommand() {
        let cmd = command();
        cmd.clone().debug_assert();
        let names: Vec<&str> = cmd.get_subcommands().map(clap::Command::get_name).collect();
        assert_eq!(
            names,
            ["reset", "pods", "logs", "container-init", "container-exec"]
        );
        let shown: Vec<&str> = cmd
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(clap::Command::get_name)
            .collect();
        assert_eq!(shown, ["reset", "pods", "logs"]);
    }

    #[test]
    fn without_a_subcommand_the_agent_flags_are_parsed() {
        let cli = parsed(&["--node-name", "n1", "--register-node=false"]);
        assert!(cli.command.is_none());
        assert_eq!(cli.run.node_name.as_deref(), Some("n1"));
        assert_eq!(cli.run.register_node, Some(Some(false)));
    }

    #[test]
    fn agent_flags_and_a_subcommand_exclude_each_other() {
        let err = parse(&["--node-name", "n1", "pods"])
            .err()
            .map(|e| e.kind());
        assert_eq!(err, Some(clap::error::ErrorKind::ArgumentConflict));
    }

    #[test]
    fn reset_defaults_to_the_service_root_dir_and_delete_node_needs_a_node_name() {
        let Some(Command::Reset(reset)) = parsed(&["reset"]).command else {
            panic!("not reset");
        };
        assert_eq!(reset.root_dir, PathBuf::from("/var/lib/nodelet"));
        assert!(!reset.delete_node);
        let err = parse(&["reset", "--delete-node"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--node-name"), "{err}");
        let err = parse(&["reset", "--kubeconfig", "k"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--delete-node"), "{err}");
    }

    #[test]
    fn pods_and_logs_keep_their_defaults() {
        let Some(Command::Pods(pods)) = parsed(&["pods"]).command else {
            panic!("not pods");
        };
        assert_eq!(pods.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(pods.output, "table");
        assert!(parse(&["pods", "-o", "yaml"]).is_err());
        let Some(Command::Logs(logs)) = parsed(&["logs", "web", "-f", "--tail", "3"]).command
        else {
            panic!("not logs");
        };
        assert_eq!(
            (logs.pod.as_str(), logs.namespace.as_str(), logs.follow),
            ("web", "default", true)
        );
        assert_eq!(logs.tail, Some(3));
        assert_eq!(logs.root_dir, PathBuf::from(DEFAULT_ROOT_DIR));
    }

    // The sandbox reads its own arguments: clap hands them over untouched, `--` and flags
    // of the container's command included.
    #[test]
    fn the_internal_subcommands_pass_their_arguments_through_as_given() {
        let Some(Command::ContainerExec(exec)) = parsed(&[
            "container-exec",
            "42",
            "/s.json",
            "--",
            "sh",
            "-c",
            "--help",
        ])
        .command
        else {
            panic!("not container-exec");
        };
        assert_eq!(exec.args, ["42", "/s.json", "--", "sh", "-c", "--help"]);
        let Some(Command::ContainerInit(init)) = parsed(&["container-init", "/s.json"]).command
        else {
            panic!("not container-init");
        };
        assert_eq!(init.args, ["/s.json"]);
        let Some(Command::ContainerInit(init)) = parsed(&["container-init", "--help"]).command
        else {
            panic!("not container-init");
        };
        assert_eq!(init.args, ["--help"]);
    }
}
