//! The agent's HTTP endpoints: `/healthz`, `/readyz`, `/metrics` (Prometheus text), `/pods`
//! (JSON).
//!
//! # What health and readiness mean
//! - `/healthz`: 200 while the HTTP server runs.
//! - `/readyz`: 200 once the agent has listed its pods for the first time (its loops run and
//!   every listed pod's volumes are desired), 503 before. Like the kubelet's `/healthz`, it
//!   checks the agent itself, not the API server: during an API outage it stays 200, because
//!   the agent keeps its volumes as they are, catches up when the server answers again, and a
//!   restart would not help.
//! - The API connection is reported instead by `/metrics` (`nodelet_api_reachable` 0/1,
//!   `nodelet_watches_failing{resource}`, `nodelet_watch_last_success_timestamp_seconds{resource}`)
//!   and `/pods` (`api.reachable`, and per watch `lastSuccess`, `failingSince`, `failures`,
//!   `lastError`); see `api_health.rs` for what counts as failing.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::state::AgentState;
use crate::views::{metrics_text, pods_view};

/// The process listening on TCP `port` (any address), as `/proc` shows it: its pid and
/// command name. `None` when it cannot be told (another network namespace, no permission).
fn port_holder(port: u16) -> Option<(u32, String)> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    let local_port = cols.get(1)?.rsplit(':').next()?;
                    let listening = cols.get(3)? == &"0A";
                    (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                        .then(|| cols.get(9).map(|i| format!("socket:[{i}]")))
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if inodes.is_empty() {
        return None;
    }
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc_entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let target = std::fs::read_link(fd.path()).unwrap_or_default();
            if inodes.iter().any(|i| target.as_os_str() == i.as_str()) {
                let name = std::fs::read_to_string(proc_entry.path().join("comm"))
                    .map(|c| c.trim().to_owned())
                    .unwrap_or_default();
                return Some((pid, name));
            }
        }
    }
    None
}

/// Binds `addr` and serves until `shutdown`; returns the bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    state: Arc<AgentState>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> anyhow::Result<SocketAddr> {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let holder = port_holder(addr.port())
                .map(|(pid, name)| format!(", held by pid {pid} ({name})"))
                .unwrap_or_default();
            return Err(anyhow::anyhow!(
                "binding --listen {addr}: the address is in use{holder}; pick another with --listen ADDR or --listen none"
            ));
        }
        Err(e) => return Err(e).with_context(|| format!("binding --listen {addr}")),
    };
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/pods", get(pods))
        .with_state(state);
    tracker.spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
        if let Err(error) = server.await {
            tracing::warn!(%error, "HTTP server failed");
        }
    });
    Ok(bound)
}

async fn readyz(State(state): State<Arc<AgentState>>) -> impl IntoResponse {
    if *state.ready.borrow() {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "initial pod list not synced yet",
        )
    }
}

async fn metrics(State(state): State<Arc<AgentState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics_text(&state),
    )
}

async fn pods(State(state): State<Arc<AgentState>>) -> impl IntoResponse {
    axum::Json(pods_view(&state))
}
