//! The `nodelet` binary: parse the command line, set up logging, exit 64 on bad configuration,
//! run the agent until SIGINT/SIGTERM.

use std::process::ExitCode;

use clap::Parser as _;
use nodelet::{Cli, LogFormat};
use tracing_subscriber::EnvFilter;

/// `EX_USAGE`: invalid configuration.
const EXIT_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let settings = match cli.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("nodelet: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match settings.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nodelet: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(nodelet::run(settings, stop_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "nodelet failed");
            ExitCode::FAILURE
        }
    }
}

/// SIGINT or SIGTERM.
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
