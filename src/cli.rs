//! The command lines of `nodelet reset`, `nodelet pods` and `nodelet logs` (the agent's own is
//! [`Cli`]), and [`command`]: all of them as one clap `Command` for shell completions and man
//! pages.

use std::path::PathBuf;

use clap::CommandFactory as _;

use crate::config::{Cli, DEFAULT_LISTEN, DEFAULT_ROOT_DIR};

/// `nodelet reset`: undo what the agent left in a root directory (see `nodelet::reset`).
#[derive(Debug, clap::Parser)]
#[command(
    name = "nodelet reset",
    about = "Unmount and remove what nodelet left in its root directory (pods' volumes, admin.kubeconfig, the lock); anything else stays. With --delete-node, also delete the node's Lease and Node from the cluster. Exit codes: 0 done, 1 failed (a mount that would not go, or an API object not deleted), 64 bad usage, 75 an agent is running on the directory."
)]
pub struct ResetCli {
    /// The agent's root directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_ROOT_DIR)]
    pub root_dir: PathBuf,
    /// Say what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete the node's Lease (`kube-node-lease/<node>`) and its Node. A node identity
    /// may delete its Lease but not its Node (the Node authorizer grants no delete): that
    /// refusal is reported and the local cleanup is done all the same.
    #[arg(long, requires = "node_name")]
    pub delete_node: bool,
    /// Kubeconfig file for --delete-node (default: `KUBECONFIG`, in-cluster config,
    /// `~/.kube/config`).
    #[arg(long, value_name = "PATH", requires = "delete_node")]
    pub kubeconfig: Option<PathBuf>,
    /// The node whose Lease and Node --delete-node deletes.
    #[arg(long, value_name = "NAME", requires = "delete_node")]
    pub node_name: Option<String>,
}

/// `nodelet pods`: the running agent's pods, from its `/pods` endpoint.
#[derive(Debug, clap::Parser)]
#[command(
    name = "nodelet pods",
    about = "Show what a running nodelet holds: each pod, its phase, volumes (mounted of all, failed), the objects they project with their resourceVersions, and the last error. Exit codes: 0 shown, 1 no agent answered, 64 bad usage."
)]
pub struct PodsCli {
    /// The agent's --listen address.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,
    /// `table` (default) or `json` (the endpoint's JSON as is).
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value = "table",
          value_parser = ["table", "json"])]
    pub output: String,
}

/// `nodelet logs`: a container's log, read from the agent's log files.
#[derive(Debug, clap::Parser)]
#[command(
    name = "nodelet logs",
    about = "Print a container's log from the agent's log files (<root-dir>/logs/pods/<namespace>_<pod>_<uid>/<container>/<restartCount>.log), as kubectl logs prints it. Exit codes: 0 printed, 1 no such pod, container or log, 64 bad usage."
)]
pub struct LogsCli {
    /// The pod's name.
    #[arg(value_name = "POD")]
    pub pod: String,
    /// The pod's namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// The container (default: the pod's only container).
    #[arg(short = 'c', long, value_name = "CONTAINER")]
    pub container: Option<String>,
    /// Keep printing as the log grows (and across restarts of the container) until Ctrl-C.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous instance's log.
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Prefix each line with its RFC 3339 timestamp.
    #[arg(long)]
    pub timestamps: bool,
    /// The agent's root directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_ROOT_DIR)]
    pub root_dir: PathBuf,
}

/// `nodelet` with its subcommands `reset` and `pods`, built from [`Cli`], [`ResetCli`] and
/// [`PodsCli`] (the binary dispatches on its first argument and parses one of them): what
/// `cargo xtask dist-docs` turns into shell completions and man pages.
pub fn command() -> clap::Command {
    Cli::command()
        .subcommand(ResetCli::command().name("reset"))
        .subcommand(PodsCli::command().name("pods"))
        .subcommand(LogsCli::command().name("logs"))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn the_whole_command_line_is_consistent_and_names_every_subcommand() {
        let cmd = command();
        cmd.clone().debug_assert();
        let names: Vec<&str> = cmd.get_subcommands().map(clap::Command::get_name).collect();
        assert_eq!(names, ["reset", "pods", "logs"]);
    }

    #[test]
    fn reset_defaults_to_the_service_root_dir_and_delete_node_needs_a_node_name() {
        let cli = ResetCli::try_parse_from(["reset"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.root_dir, PathBuf::from("/var/lib/nodelet"));
        assert!(!cli.delete_node);
        let err = ResetCli::try_parse_from(["reset", "--delete-node"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--node-name"), "{err}");
        let err = ResetCli::try_parse_from(["reset", "--kubeconfig", "k"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("--delete-node"), "{err}");
    }
}
