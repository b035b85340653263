//! `cargo xtask dist-docs --out DIR`: shell completions and man pages for `nodelet`, generated
//! from the agent's own clap definitions (`src/main/cli.rs`, `command`), so they never drift from
//! `--help`.
//!
//! Layout under `DIR` (what a package installs where):
//!
//! ```text
//! completions/nodelet.bash   /usr/share/bash-completion/completions/nodelet
//! completions/_nodelet       /usr/share/zsh/vendor-completions/_nodelet
//! completions/nodelet.fish   /usr/share/fish/vendor_completions.d/nodelet.fish
//! man/man1/nodelet.1         /usr/share/man/man1/ (also nodelet-reset.1, nodelet-pods.1, nodelet-logs.1)
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap_complete::Shell;

// The agent binary's command line, compiled here from the binary's own file: the binary's
// modules are not part of the `nodelet` library. Only `command` is used here.
#[allow(dead_code)]
#[path = "../../src/main/cli.rs"]
mod cli;

const USAGE: &str = "\
usage: cargo xtask dist-docs [--out DIR]

Writes shell completions (bash, zsh, fish) and man pages for nodelet and its subcommands
into DIR (default: target/dist-docs).
";

/// Runs the task with its arguments.
pub(crate) fn main(args: Vec<String>) -> anyhow::Result<()> {
    let mut out = PathBuf::from("target/dist-docs");
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => {
                out = args
                    .next()
                    .map(PathBuf::from)
                    .context("--out needs a directory")?;
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument `{other}`\n\n{USAGE}"),
        }
    }
    for path in generate(&out)? {
        println!("{}", path.display());
    }
    Ok(())
}

/// Writes the completions and man pages under `out` (module docs); returns the files written.
pub(crate) fn generate(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let cmd = cli::command();
    let name = cmd.get_name().to_owned();
    let completions = out.join("completions");
    std::fs::create_dir_all(&completions)
        .with_context(|| format!("creating {}", completions.display()))?;
    let mut written = Vec::new();
    let shown = without_hidden_subcommands(&cmd);
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut shown.clone(), &name, &completions)
            .with_context(|| format!("writing the {shell} completion"))?;
        written.push(path);
    }
    let man = out.join("man/man1");
    std::fs::create_dir_all(&man).with_context(|| format!("creating {}", man.display()))?;
    clap_mangen::generate_to(cmd, &man)
        .with_context(|| format!("writing man pages to {}", man.display()))?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&man)
        .with_context(|| format!("reading {}", man.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    pages.sort();
    written.extend(pages);
    Ok(written)
}

/// `cmd` as the completions offer it: its arguments and groups, and only the subcommands not
/// hidden (clap_complete offers hidden subcommands too; `container-init` and `container-exec`
/// are the agent's own, never typed).
fn without_hidden_subcommands(cmd: &clap::Command) -> clap::Command {
    // `Command::new` wants a `'static` name; the agent's is.
    debug_assert_eq!(cmd.get_name(), "nodelet");
    clap::Command::new("nodelet")
        .args(cmd.get_arguments().cloned())
        .groups(cmd.get_groups().cloned())
        .subcommands(cmd.get_subcommands().filter(|c| !c.is_hide_set()).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dist_docs_writes_a_bash_completion_and_man_pages_naming_the_subcommands() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let written = generate(dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
        let read = |rel: &str| {
            let path = dir.path().join(rel);
            assert!(written.contains(&path), "{rel} not reported: {written:?}");
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"))
        };
        let bash = read("completions/nodelet.bash");
        for word in [
            "reset",
            "pods",
            "--delete-node",
            "--manifests",
            "--root-dir",
        ] {
            assert!(bash.contains(word), "bash completion lacks {word}");
        }
        assert!(bash.contains("complete -F"), "a bash completion function");
        let man = read("man/man1/nodelet.1");
        assert!(
            man.starts_with(".ie") || man.contains(".TH nodelet 1"),
            "roff: {man}"
        );
        for word in ["reset", "pods", "manifests"] {
            assert!(man.contains(word), "nodelet.1 lacks {word}");
        }
        let reset = read("man/man1/nodelet-reset.1");
        assert!(reset.contains("delete\\-node"), "{reset}");
        let pods = read("man/man1/nodelet-pods.1");
        assert!(pods.contains("listen"), "{pods}");
        read("man/man1/nodelet-logs.1");
        // The internal subcommands parse, but have no man page.
        assert!(
            !dir.path()
                .join("man/man1/nodelet-container-init.1")
                .exists()
        );
        for file in [
            "completions/nodelet.bash",
            "completions/_nodelet",
            "completions/nodelet.fish",
        ] {
            let text = read(file);
            for hidden in ["container-init", "container-exec"] {
                assert!(!text.contains(hidden), "{file} offers {hidden}");
            }
            assert!(text.contains("reset"), "{file} lacks reset");
        }
    }
}
