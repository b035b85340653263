//! `cargo xtask`: project automation for nodelet.
//!
//! One binary with subcommands; every task fails loudly, naming what is missing.
//! Tasks are added by the issues that need them (`e2e`, `bench`).

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <task> [args...]

tasks:
  help        print this message
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        None | Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("xtask: unknown task `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
