//! Tests of the public API of nodelet-podworker against in-memory object sources.

// One owner of "this pod is desired": update_pod registers and adds, syncs never.
mod desired;
// Environment resolution (PW-8 … PW-11, E2E-23/24/26/27).
mod env;
// Environments that follow a change, under paused time (FC-10 … FC-13).
mod env_follow;
// Service variables (PW-15 … PW-17).
mod services;
// Sidecar containers: started sidecars handed to the plan, stop order, phase (PW-60 … PW-64).
mod sidecars;
// ConfigSyncer: SyncPod / SyncTerminatedPod order, events, status, env files (PW-4 … PW-14).
mod sync;
// Fixtures shared by the modules above.
mod support;
