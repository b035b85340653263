//! The agent as a systemd service (`contrib/systemd/nodelet.service`, `Type=notify`): the
//! `READY=1` and `STOPPING=1` notifications. [`notify_ready`] once the first pod list is
//! handed to the pod workers (every listed pod desired, so volumes found on disk from a
//! previous run are adopted, not torn down), the moment `/readyz` turns 200;
//! [`notify_stopping`] when a stop signal arrives. Without `NOTIFY_SOCKET` (not started by
//! systemd) both do nothing. (The journal's log format is the binary's: `src/main/journal.rs`.)

use sd_notify::NotifyState;
use tracing::warn;

/// `READY=1`, with a `STATUS=` line (`systemctl status` shows it) naming the address of the
/// endpoints, if any.
pub(crate) fn notify_ready(listen: Option<std::net::SocketAddr>) {
    let status = match listen {
        Some(addr) => format!("STATUS=ready; endpoints on http://{addr}"),
        None => "STATUS=ready".to_owned(),
    };
    notify(&[NotifyState::Ready, NotifyState::Custom(status.as_str())]);
}

/// `STOPPING=1`: the agent is shutting down (volumes stay mounted).
pub(crate) fn notify_stopping() {
    notify(&[NotifyState::Stopping]);
}

fn notify(states: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        warn!(%error, "notifying the service manager failed");
    }
}
