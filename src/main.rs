//! The `nodelet` binary: parse the command line, set up logging, exit 64 on bad configuration,
//! run the agent until SIGINT/SIGTERM.

use std::process::ExitCode;

use clap::Parser as _;
use nodelet::{Cli, LogFormat};
use tracing_subscriber::EnvFilter;

/// kube-client logs a whole response body when it cannot decode it (a Secret's data included)
/// and traces bodies of Status responses: its client module is held at `error` unless
/// `RUST_LOG` names `kube_client` explicitly.
const KUBE_CLIENT_BODIES: &str = "kube_client::client=error";

/// `RUST_LOG` (default `info`), with [`KUBE_CLIENT_BODIES`] so secret values never reach logs.
fn log_filter() -> EnvFilter {
    log_filter_from(std::env::var("RUST_LOG").ok())
}

fn log_filter_from(rust_log: Option<String>) -> EnvFilter {
    let spec = rust_log.unwrap_or_else(|| "info".to_owned());
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new("info"));
    if spec.contains("kube_client") {
        return filter;
    }
    match KUBE_CLIENT_BODIES.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

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
    let builder = tracing_subscriber::fmt().with_env_filter(log_filter());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_client_bodies_stay_out_of_logs_unless_asked_for() {
        for spec in [
            None,
            Some("trace".to_owned()),
            Some("debug,nodelet=trace".to_owned()),
        ] {
            let filter = log_filter_from(spec.clone()).to_string();
            assert!(
                filter.contains(KUBE_CLIENT_BODIES),
                "{spec:?} gave {filter}"
            );
        }
        let explicit = log_filter_from(Some("kube_client=trace".to_owned())).to_string();
        assert!(!explicit.contains(KUBE_CLIENT_BODIES), "{explicit}");
    }
}
