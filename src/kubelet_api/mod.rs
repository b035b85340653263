//! The kubelet's API server (port 10250), as the v1.36 kubelet serves it to the API server
//! (`kubectl logs`), to metrics collectors and to cluster admins: over TLS, every request
//! authenticated and authorized with the cluster.
//!
//! # Principal types
//!
//! * [`KubeletApiConfig`]: address, serving certificate and key files (else one made at start
//!   for the node's name and IPs), client CA file, node name, review cache TTLs.
//! * [`NodePods`]: what the server reads of the agent — its pods, the process runtime's
//!   container statuses and when a container instance has ended.
//! * [`serve`]: binds and serves until the agent's shutdown token is cancelled.
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
//! * Tokens are never logged nor kept as they are (the cache holds their SHA-256).
//! * A followed log ends once its container instance has ended and the log is read to its end,
//!   or when the client goes away, or when the agent stops.
//!
//! # Not served (yet)
//!
//! `/attach`, `/portForward`, `/run`, `/stats`, `/metrics`, `/configz`, `/logs`,
//! `/checkpoint`, `/runningpods`: `404` after authorization, as for any unknown path. `/exec`
//! over SPDY and with a terminal (`tty=1`).

mod authn;
mod authz;
mod cache;
mod exec;
mod logs;
mod pods;
mod server;
mod state;
mod tls;

#[cfg(test)]
mod tests;

pub(crate) use pods::NodePods;
pub(crate) use server::{DEFAULT_PORT, KubeletApiConfig, serve};
