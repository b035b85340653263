//! Feeds the `nodelet_propagation_latency_seconds` histogram from the volume manager's
//! [`VolumeUpdate`](nodelet_volume_manager::VolumeUpdate)s: one sample per volume set up again
//! after a ConfigMap/Secret change, from the moment the volume manager received the object
//! manager's change notification to the moment the new content was on disk. No polling, no
//! reads of the objects.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::state::AgentState;

pub(crate) async fn track(state: Arc<AgentState>, shutdown: CancellationToken) {
    let mut updates = state.volumes.subscribe_updates();
    loop {
        let update = tokio::select! {
            () = shutdown.cancelled() => return,
            u = updates.recv() => u,
        };
        match update {
            // A remount that took in no change notification measures nothing.
            Ok(u) => {
                if let Some(seen) = u.change_seen {
                    let latency = u.at.duration_since(seen).as_secs_f64();
                    state.metrics.observe_propagation(latency);
                }
            }
            // Samples lost to a burst; the histogram stays an estimate.
            Err(RecvError::Lagged(missed)) => {
                tracing::debug!(missed, "propagation samples dropped");
            }
            Err(RecvError::Closed) => return,
        }
    }
}
