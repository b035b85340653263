//! [`PodActions`]: what one pod sync does to the pod's containers (the kubelet's
//! `podActions`), and [`Restart`], a restart asked for a reason that is not a crash.

/// What a pod sync does now, decided on the pod worker's side of the runtime seam (the
/// kubelet's `computePodActions`, `plan/walk.rs`); the runtime only executes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PodActions {
    /// Containers to create and start now, in the pod's order.
    pub(crate) start: Vec<String>,
    /// Containers waiting for their crash back-off to pass, with the kubelet's message.
    pub(crate) back_off: Vec<(String, String)>,
    /// Running sidecars to stop now, in the pod's order, because every app container ended
    /// for good (PW-63); the syncer stops them as a pod's termination does (PW-62).
    pub(crate) stop: Vec<String>,
    /// Running containers to stop and start again at once (PW-70): no crash back-off, and
    /// whatever `restartPolicy` says.
    pub(crate) restart: Vec<Restart>,
}

/// A running container to restart for a reason that is not a crash (its configuration
/// changed, say): its instance is stopped as a liveness failure stops it (`Killing` with
/// `message`, `preStop`, SIGTERM, SIGKILL after the grace period), and the next one starts in
/// the same sync, without back-off (PW-70).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Restart {
    /// The container's name.
    pub(crate) container: String,
    /// Why, for its `Killing` event.
    pub(crate) message: String,
}
