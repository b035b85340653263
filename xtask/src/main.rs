//! `cargo xtask`: project automation for nodelet (`e2e`, `dist-docs`, `heap-profile`).
//!
//! One binary with subcommands; every task fails loudly, naming what is missing.

mod dist_docs;
mod e2e;
mod heap_profile;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <task> [args...]

tasks:
  e2e         run the end-to-end scenarios against kind (default), --kubeconfig PATH, or
              --embedded; `cargo xtask e2e --help` for the options
  dist-docs   shell completions and man pages for nodelet: `--out DIR` (default
              target/dist-docs)
  heap-profile
              where the heap goes, per watched object, from a dhat-heap.json of the agent
              built with `--features dhat-heap`; `cargo xtask heap-profile --help`
  help        print this message
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let task = args.next();
    let rest: Vec<String> = args.collect();
    match task.as_deref() {
        None | Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("e2e") => match e2e::main(rest) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(err) => {
                eprintln!("xtask e2e: {err:#}");
                ExitCode::FAILURE
            }
        },
        Some("dist-docs") => match dist_docs::main(rest) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("xtask dist-docs: {err:#}");
                ExitCode::FAILURE
            }
        },
        Some("heap-profile") => match heap_profile::main(rest) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("xtask heap-profile: {err:#}");
                ExitCode::FAILURE
            }
        },
        Some(other) => {
            eprintln!("xtask: unknown task `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
