//! The `nodelet` binary: parse the command line (`cli::Cli`, one clap definition), set up
//! logging, exit 64 on bad configuration, run the agent until SIGINT/SIGTERM; or run one of its
//! subcommands: `reset`, `pods`, `logs`, and the internal `container-init` (a container's first
//! process) and `container-exec` (a command in a running container).

use std::process::ExitCode;

// The binary's own modules (the library never compiles them): the global allocator, the
// command line, the subcommands and the journal's log format.
#[path = "main/allocator.rs"]
mod allocator;
#[path = "main/cli.rs"]
mod cli;
#[path = "main/inspect.rs"]
mod inspect;
#[path = "main/journal.rs"]
mod journal;
#[path = "main/logs.rs"]
mod logs;
#[path = "main/reset.rs"]
mod reset;

use nodelet_config::{LogFormat, RunArgs};
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

/// The allocator the cargo features select (`allocator`): the system's by default.
#[global_allocator]
static GLOBAL: allocator::Global = allocator::GLOBAL;

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

/// Parses the command line; `--help`/`--version` exit 0, bad usage exits 64, both after
/// printing.
fn parse() -> Result<Cli, ExitCode> {
    <Cli as clap::Parser>::try_parse().map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(EXIT_CONFIG)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// The most threads the runtime starts for blocking work (volume writes, env files, the
/// restart scan). Each write is short, so a burst (a node's first thousand volumes) queues
/// instead of starting hundreds of threads that each keep a stack and an allocator arena
/// after the burst; tokio's default is 512.
const BLOCKING_THREADS: usize = 32;

/// How long a blocking thread waits idle for more work before it exits (tokio's default is
/// 10 s). After a burst of volume writes, a thread that lingers keeps its stack and the chunks
/// its allocator cache holds; on a fresh ext4 disk a node's first thousand volumes kept 35
/// threads and 2.5 MiB more heap alive 2 s after the last write. At a steady 50 updates/s
/// the threads stay busy; an idle node starts one per write (tens of microseconds).
const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match cli.command {
        // A container's first process (the process runtime starts it): nothing else runs here.
        Some(Command::ContainerInit(sandbox)) => {
            let code = nodelet_runtime::sandbox::init_main(sandbox.args);
            ExitCode::from(u8::try_from(code).unwrap_or(128))
        }
        // A command in a running container (`kubectl exec`; the kubelet API starts it).
        Some(Command::ContainerExec(sandbox)) => {
            let code = nodelet_runtime::sandbox::exec_main(sandbox.args);
            ExitCode::from(u8::try_from(code).unwrap_or(126))
        }
        Some(Command::Reset(args)) => reset::main(args),
        Some(Command::Pods(args)) => inspect::main(args),
        Some(Command::Logs(args)) => logs::main(args),
        None => agent_main(&cli.run),
    }
}

/// `nodelet [FLAGS]`: the agent, until SIGINT or SIGTERM.
fn agent_main(run: &RunArgs) -> ExitCode {
    // First of all (glibc: its tunables are read only when a program starts, so this may run
    // the agent again), then before any thread exists (glibc: one arena per CPU).
    let thread_caches = allocator::tune_process();
    let arenas = allocator::configure();
    let mut settings = match run.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("nodelet: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let builder = tracing_subscriber::fmt().with_env_filter(log_filter());
    match settings.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Journal => journal(builder),
        LogFormat::Auto if journal::stdout_is_journal() => journal(builder),
        // Colours only for a terminal: a log redirected to a file stays plain text.
        LogFormat::Text | LogFormat::Auto => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
    }
    tracing::info!(
        allocator = allocator::NAME,
        arenas = ?arenas,
        thread_caches = %thread_caches,
        "memory allocator"
    );
    settings.agent.allocator = Some(allocator::hooks());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nodelet: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The handlers are installed now, before the agent starts: a signal during the start stops
    // it cleanly (volumes unmounted with --cleanup-on-exit) instead of killing it.
    let stop = {
        let _runtime = runtime.enter();
        stop_signal()
    };
    #[cfg(feature = "dhat-heap")]
    let stop = {
        let profiler = heap_profiler();
        async move {
            stop.await;
            // Written now, before the agent tears down: the profile's end is its steady state.
            drop(profiler);
            tracing::info!("heap profile written");
        }
    };
    match runtime.block_on(nodelet::run(settings, stop)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "nodelet failed");
            ExitCode::FAILURE
        }
    }
}

/// Logs for the systemd journal (`journal::JournalFormat`).
fn journal(
    builder: tracing_subscriber::fmt::SubscriberBuilder<
        tracing_subscriber::fmt::format::DefaultFields,
        tracing_subscriber::fmt::format::Format,
        EnvFilter,
    >,
) {
    builder
        .with_ansi(false)
        .event_format(journal::JournalFormat::default())
        .init();
}

/// Frames kept per allocation site in the heap profile (dhat's default is 10): enough to reach
/// the crate that asked for the memory through hyper's, h2's and tokio's inner layers.
#[cfg(feature = "dhat-heap")]
const DHAT_FRAMES: usize = 24;

/// `dhat-heap`: profiles every allocation from here on; the profile is written to
/// `$NODELET_DHAT_FILE` (default `dhat-heap.json` in the working directory) when the returned
/// profiler drops: at the stop signal, or when the agent fails.
#[cfg(feature = "dhat-heap")]
fn heap_profiler() -> dhat::Profiler {
    let file = std::env::var_os("NODELET_DHAT_FILE").unwrap_or_else(|| "dhat-heap.json".into());
    tracing::info!(file = %std::path::Path::new(&file).display(), "heap profiling");
    dhat::Profiler::builder()
        .file_name(file)
        .trim_backtraces(Some(DHAT_FRAMES))
        .build()
}

/// Completes at the first SIGINT or SIGTERM after this call (the handlers are installed here;
/// call it inside the runtime). A signal whose handler cannot be installed is not waited for.
fn stop_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async fn received(signal: std::io::Result<Signal>) {
        match signal {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    }
    async move {
        tokio::select! {
            () = received(interrupt) => {}
            () = received(terminate) => {}
        }
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
