//! The prober: startup, liveness and readiness probes as the kubelet runs them (its
//! `pkg/kubelet/prober`, PW-30 … PW-34), for a runtime that runs processes.
//!
//! [`ProbeManager`] is the one handle. The pod worker hands it each pod it syncs
//! ([`ProbeManager::add_pod`]); one worker per probe of each regular container then probes the
//! container's current instance every `periodSeconds` and keeps the standing result per
//! instance. The pod worker asks it what the results make of the containers —
//! [`ProbeManager::container_states`] (`started`, `ready`) for the status,
//! [`ProbeManager::kills`] (liveness or startup failed) before it plans the containers — and
//! stops the workers at termination. Every result change is a [`ProbeUpdate`] on
//! [`ProbeManager::updates`]: the agent publishes the pod's status again at once and syncs the
//! pod.
//!
//! ```text
//! add_pod(pod) ─► Worker per (container, kind) ─► every period: ProbeTarget::statuses
//!     ─► check (exec: ProbeTarget::exec_sync; httpGet, tcpSocket, grpc: to the pod IP)
//!     ─► thresholds ─► result per container instance ─► ProbeUpdate
//! container_states(pod, statuses) ─► started / ready      kills(pod, statuses) ─► ProbeKill
//! stop_liveness_and_startup(uid) at termination; remove_pod(uid) when it is over
//! ```
//!
//! The seam to the runtime is [`ProbeTarget`]: the containers' states and `ExecSync`.
//! Everything else the prober needs is in `nodelet-core` (pods, events) and the runtime's
//! handler runner (`httpGet` requests, ports).

mod grpc;
mod manager;
mod prober;
mod shared;
mod tcp;
mod types;
mod worker;

pub use manager::{ProbeConfig, ProbeManager};
pub use types::{
    ContainerProbeStatus, ProbeKill, ProbeKind, ProbeResult, ProbeTarget, ProbeUpdate,
};
