//! `nodelet-apiserver`: the in-memory API server as a process, for kubectl and other tools.
//!
//! ```text
//! nodelet-apiserver --listen 127.0.0.1:0 --manifests ./examples --kubeconfig-out ./kc
//! serving https://127.0.0.1:41235
//! ```
//!
//! Serves HTTPS with a CA generated at start (`--plain-http` for plain HTTP) and publishes that
//! CA as ConfigMap `kube-root-ca.crt` in every namespace. Prints one line, `serving <url>`, on
//! stdout once the server listens and the manifests are loaded; writes an admin kubeconfig
//! (token and CA, atomically, mode 0600); stops cleanly on SIGINT or
//! SIGTERM. `--node-kubeconfig-out NODE=PATH` also writes a kubeconfig for `system:node:NODE`
//! (with `--auth`, `cargo xtask e2e --embedded` runs the agent with it).
//! `--goaway-chance P`, `--max-requests-inflight N` and `--no-watch-list` turn on the
//! failures a real server shows by itself (GOAWAY on HTTP/2, 429 under load, no streaming
//! lists); all are off by default. `--node-authorizer-lag 50ms` (the default) is how long the
//! Node authorizer takes to see a pod write (`0` for immediately consistent).
//! `--schedule-to NODE` binds every pod that names no node to NODE (offline mode's one-node
//! scheduler).
//! `--like-kube-apiserver-costs` (with `--read-latency`, `--write-latency`,
//! `--cost-concurrency`, `--progress-period` over it) makes answers cost what a real server's
//! do (off by default). `--runtime-config certificates.k8s.io/v1beta1=true` with
//! `--feature-gates ClusterTrustBundle=true,PodCertificateRequest=true` serves the
//! certificates.k8s.io kinds; an unknown gate is refused (`unrecognized feature gate: X`, 64).
//!
//! Exit codes: 0 after a signal, 64 for bad arguments, 1 when startup fails.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use nodelet_apiserver::{ApiServer, Config, CostModel, ManifestSync, User};

/// An in-memory Kubernetes API server (core/v1 subset) seeded from YAML manifests.
#[derive(Debug, Parser)]
#[command(name = "nodelet-apiserver", version)]
struct Cli {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Directory of YAML manifests to load and follow (edits, creations, deletions).
    #[arg(long, value_name = "DIR")]
    manifests: Option<PathBuf>,
    /// Serve HTTPS with a CA generated at start (the default; kept for existing scripts).
    #[arg(long, conflicts_with = "plain_http")]
    tls: bool,
    /// Serve plain HTTP instead of HTTPS. kubectl and client-go send no bearer token to an
    /// `http://` server, so this suits only unauthenticated use.
    #[arg(long)]
    plain_http: bool,
    /// Require bearer tokens and apply the Node authorizer.
    #[arg(long)]
    auth: bool,
    /// Where to write an admin kubeconfig. Default: `nodelet-apiserver.kubeconfig` in the
    /// system temporary directory.
    #[arg(long, value_name = "PATH")]
    kubeconfig_out: Option<PathBuf>,
    /// Also write a kubeconfig for the node identity `system:node:NODE` (meaningful with
    /// `--auth`, where the Node authorizer limits it as it limits a kubelet). Repeatable.
    #[arg(long, value_name = "NODE=PATH", value_parser = parse_node_kubeconfig)]
    node_kubeconfig_out: Vec<(String, PathBuf)>,
    /// HTTP/2 streams (concurrent requests, watches included) one client connection may have
    /// open, as kube-apiserver's flag of the same name.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    http2_max_streams_per_connection: u32,
    /// Probability of sending GOAWAY on an HTTP/2 connection after each response on it (the
    /// client reconnects), as kube-apiserver's `--goaway-chance`. kube-apiserver accepts 0 to
    /// 0.02; 0 to 1 is accepted here for testing. Default 0 (off).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_chance)]
    goaway_chance: f64,
    /// Requests handled at once before the server answers 429 TooManyRequests (Retry-After: 1),
    /// as API Priority and Fairness under load. 0 (the default) means unlimited.
    #[arg(long = "max-requests-inflight", value_name = "N", default_value_t = 0)]
    max_requests_inflight: usize,
    /// Refuse streaming lists (watches with sendInitialEvents) with 422, as a server without
    /// the WatchList feature does.
    #[arg(long)]
    no_watch_list: bool,
    /// Group/versions to switch on or off, as kube-apiserver's flag:
    /// `certificates.k8s.io/v1beta1=true` (with the `ClusterTrustBundle` and
    /// `PodCertificateRequest` gates) serves ClusterTrustBundles and PodCertificateRequests.
    /// Comma-separated or repeated.
    #[arg(long, value_name = "GV=BOOL", value_delimiter = ',', value_parser = parse_switch)]
    runtime_config: Vec<(String, bool)>,
    /// Feature gates, as kube-apiserver's flag: `ClusterTrustBundle`,
    /// `ClusterTrustBundleProjection`, `PodCertificateRequest` (all off by default).
    /// Comma-separated or repeated; an unknown name is an error.
    #[arg(long, value_name = "NAME=BOOL", value_delimiter = ',', value_parser = parse_switch)]
    feature_gates: Vec<(String, bool)>,
    /// How long after a pod write the Node authorizer sees it (with `--auth`): a node is
    /// refused a new pod's objects, and still allowed a deleted pod's, for that long, as a real
    /// kube-apiserver's authorizer lags behind its store. A Go duration (`50ms`, `1s`, `1m30s`)
    /// or milliseconds (`50`); `0` is immediately consistent. Default 50ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    node_authorizer_lag: Option<Duration>,
    /// Bind every pod that names no node to NODE, with the `Scheduled` event, as
    /// kube-scheduler would on a one-node cluster (what the agent's offline mode does). Default:
    /// off, a pod stays unbound until a client binds it.
    #[arg(long, value_name = "NODE")]
    schedule_to: Option<String>,
    /// Make answers cost what they cost a measured v1.36.2 kube-apiserver + etcd
    /// (`CostModel::like_kube_apiserver`: 16 ms on one of 74 places before a GET, LIST or
    /// watch-list answers, a consistent read's wait for a progress notification every 100 ms
    /// after other writes, 2 ms before a write's answer). Off by default.
    #[arg(long)]
    like_kube_apiserver_costs: bool,
    /// The cost model's wait before a GET, LIST or watch-list answers (a Go duration or
    /// milliseconds); overrides the preset's.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    read_latency: Option<Duration>,
    /// The cost model's wait before a write answers; overrides the preset's.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    write_latency: Option<Duration>,
    /// Requests that may be paying a read or write latency at once (0: unlimited); overrides
    /// the preset's.
    #[arg(long, value_name = "N")]
    cost_concurrency: Option<usize>,
    /// How often the cost model's watch caches get a progress notification while consistent
    /// reads wait for one (`0`: they never wait); overrides the preset's.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    progress_period: Option<Duration>,
}

/// The cost model of `cli`: the preset, if asked, with the single knobs over it.
fn cost_model(cli: &Cli) -> CostModel {
    let mut model = if cli.like_kube_apiserver_costs {
        CostModel::like_kube_apiserver()
    } else {
        CostModel::default()
    };
    if let Some(d) = cli.read_latency {
        model = model.read_latency(d);
    }
    if let Some(d) = cli.write_latency {
        model = model.write_latency(d);
    }
    if let Some(n) = cli.cost_concurrency {
        model = model.concurrency(n);
    }
    if let Some(d) = cli.progress_period {
        model = model.progress_period(d);
    }
    model
}

/// `config` with the `--runtime-config` and `--feature-gates` switches of `cli`.
fn switches(mut config: Config, cli: &Cli) -> Config {
    for (gv, on) in &cli.runtime_config {
        config = config.runtime_config(gv, *on);
    }
    for (gate, on) in &cli.feature_gates {
        config = config.feature_gate(gate, *on);
    }
    config
}

/// Parses `KEY=BOOL` (`true`/`false`, as Go's `strconv.ParseBool` also `1`, `t`, `T`, `TRUE`,
/// `True`, `0`, `f`, `F`, `FALSE`, `False`).
fn parse_switch(arg: &str) -> Result<(String, bool), String> {
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("missing bool value for {arg}"))?;
    let on = match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
        "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
        other => return Err(format!("invalid value of {key}: {other}")),
    };
    Ok((key.trim().to_string(), on))
}

/// Parses a probability in 0..=1.
fn parse_chance(arg: &str) -> Result<f64, String> {
    match arg.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("expected a probability from 0 to 1, got {arg:?}")),
    }
}

/// Parses a Go duration (`50ms`, `1.5s`, `1m30s`; units `ns`, `us`, `µs`, `ms`, `s`, `m`,
/// `h`) or a bare number of milliseconds (`0`, `250`).
fn parse_duration(arg: &str) -> Result<Duration, String> {
    let s = arg.trim();
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    nodelet_core::go::parse_duration(s).ok_or_else(|| {
        format!("expected a duration such as 50ms, 1s or 250 (milliseconds), got {arg:?}")
    })
}

/// Parses `NODE=PATH`.
fn parse_node_kubeconfig(arg: &str) -> Result<(String, PathBuf), String> {
    match arg.split_once('=') {
        Some((node, path)) if !node.is_empty() && !path.is_empty() => {
            Ok((node.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!("expected NODE=PATH, got {arg:?}")),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            return if usage {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Err(e) = switches(Config::default(), &cli).check() {
        eprintln!("error: {e}");
        return ExitCode::from(64);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&*e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::default()
        .listen(cli.listen)
        .http2_max_streams_per_connection(cli.http2_max_streams_per_connection)
        .goaway_chance(cli.goaway_chance)
        .max_requests_in_flight(cli.max_requests_inflight)
        .watch_list(!cli.no_watch_list)
        .cost_model(cost_model(&cli));
    if let Some(node) = &cli.schedule_to {
        config = config.schedule_to(node);
    }
    if let Some(lag) = cli.node_authorizer_lag {
        config = config.node_authorizer_lag(lag);
    }
    config = switches(config, &cli);
    if !cli.plain_http {
        config = config.with_tls();
    }
    config = config.like_a_cluster();
    if cli.auth {
        config = config.with_auth();
    }
    let server = ApiServer::start(config).await?;
    let sync = match &cli.manifests {
        Some(dir) => {
            let sync = ManifestSync::start(server.handle(), dir).await?;
            for p in sync.errors() {
                tracing::warn!(path = %p.path.display(), error = %p.error, "manifest not loaded");
            }
            Some(sync)
        }
        None => None,
    };
    let kubeconfig = cli
        .kubeconfig_out
        .unwrap_or_else(|| std::env::temp_dir().join("nodelet-apiserver.kubeconfig"));
    server.write_kubeconfig(&kubeconfig, &User::admin())?;
    eprintln!("kubeconfig written to {}", kubeconfig.display());
    for (node, path) in &cli.node_kubeconfig_out {
        server.write_kubeconfig(path, &User::node(node))?;
        eprintln!(
            "kubeconfig for system:node:{node} written to {}",
            path.display()
        );
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "serving {}", server.url())?;
    out.flush()?;
    drop(out);
    wait_for_signal().await?;
    tracing::info!("signal received, shutting down");
    drop(sync);
    server.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_flags_start_from_the_preset_and_override_it() {
        let cli = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("nodelet-apiserver").chain(args.iter().copied()))
                .map(|c| cost_model(&c))
        };
        assert_eq!(cli(&[]).ok(), Some(CostModel::default()));
        assert_eq!(
            cli(&["--like-kube-apiserver-costs"]).ok(),
            Some(CostModel::like_kube_apiserver())
        );
        assert_eq!(
            cli(&[
                "--like-kube-apiserver-costs",
                "--read-latency",
                "30ms",
                "--cost-concurrency",
                "4",
                "--progress-period",
                "0"
            ])
            .ok(),
            Some(
                CostModel::like_kube_apiserver()
                    .read_latency(Duration::from_millis(30))
                    .concurrency(4)
                    .progress_period(Duration::ZERO)
            )
        );
        assert!(cli(&["--write-latency", "soon"]).is_err());
    }

    #[test]
    fn a_duration_is_a_go_duration_or_milliseconds() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("50ms"), Ok(ms(50)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("250"), Ok(ms(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "soon", "5 days", "1x", "ms", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
