//! The kubelet's API server (port 10250), as the v1.36 kubelet serves it to the API server
//! (`kubectl logs`), to metrics collectors and to cluster admins: over TLS, every request
//! authenticated and authorized with the cluster.
//!
//! # Principal types
//!
//! * [`KubeletApiConfig`]: address, serving certificate and key files (else one made at start
//!   for the node's name and IPs), client CA file, node name, review cache TTLs, the root
//!   directory the containers' logs are under, the `container-exec` command.
//! * [`Host`]: what the server reads of the node agent (the kubelet's `server.HostInterface`)
//!   — its pods, its runtime's container statuses and their changes, where a running
//!   container's process is ([`ExecTarget`]).
//! * [`serve`]: binds and serves until the shutdown token is cancelled; [`Error`] says why it
//!   could not start.
//!
//! ```text
//! TLS (tls.rs) ─► authn.rs: client certificate (client CA) │ bearer token (TokenReview)
//!              ─► authz.rs: SubjectAccessReview on nodes/<node>/<subresource>
//!              ─► /healthz │ /pods (pods.rs) │ /containerLogs/… (logs.rs → read_logs)
//!                 │ /exec/… (exec.rs: WebSocket ─► `nodelet container-exec`)
//! ```
//!
//! # Invariants
//!
//! * No request reaches a route unauthenticated (`401 Unauthorized`) or unauthorized (`403`
//!   with the kubelet's text); anonymous requests are refused, as kubeadm configures kubelets.
//! * Reviews are made with the node's own client: the cluster decides who may read the node.
//! * The server reads the agent only through its [`Host`]: no pod map, runtime or state of
//!   the agent's own.
//! * Tokens are never logged nor kept as they are (the cache holds their SHA-256).
//! * A followed log ends once its container instance has ended and the log is read to its end,
//!   or when the client goes away, or when the agent stops.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use nodelet_core::AdmittedPod;
//! use nodelet_kubelet_api::{Host, KubeletApiConfig, serve};
//! use tokio_util::sync::CancellationToken;
//! use tokio_util::task::TaskTracker;
//!
//! /// A node without a container runtime and without pods.
//! struct NoPods;
//!
//! impl Host for NoPods {
//!     fn pods(&self) -> Vec<AdmittedPod> {
//!         Vec::new()
//!     }
//! }
//!
//! # async fn demo(node_client: kube::Client) -> Result<(), nodelet_kubelet_api::Error> {
//! let config = KubeletApiConfig::new(([0, 0, 0, 0], 10250).into(), "dev-1", "/var/lib/nodelet");
//! let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
//! let addr = serve(config, node_client, Arc::new(NoPods), shutdown.clone(), &tracker).await?;
//! println!("serving on {addr}");
//! shutdown.cancel();
//! tracker.close();
//! tracker.wait().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Not served (yet)
//!
//! `/attach`, `/portForward`, `/run`, `/stats`, `/metrics`, `/configz`, `/logs`,
//! `/checkpoint`, `/runningpods`: `404` after authorization, as for any unknown path. `/exec`
//! over SPDY and with a terminal (`tty=1`).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod authn;
mod authz;
mod cache;
mod error;
mod exec;
mod host;
mod logs;
mod pods;
mod server;
mod state;
mod tls;

#[cfg(test)]
mod tests;

pub use error::Error;
pub use host::{ExecTarget, Host};
pub use server::{DEFAULT_PORT, KubeletApiConfig, serve};
