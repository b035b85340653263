//! Events about pods: [`EventType`], the [`EventSink`] seam the node crates report through (the
//! agent wires it to Kubernetes Events), the [`reasons`] they use, and `RecordingSink` for
//! tests (feature `test-util`).

use crate::AdmittedPod;

/// Kubernetes event type (`Event.type`). The one event-type enum of the node crates: the
/// volume manager and the pod worker emit it, the agent's event recorder keys on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// The `Event.type` text: `Normal` or `Warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Event reasons the node crates emit (volume manager and the sources it reads).
pub mod reasons {
    /// VM-10 / PL-9: a mount or remount failed;
    /// message `MountVolume.SetUp failed for volume "<vol>" : <error>`.
    pub const FAILED_MOUNT: &str = "FailedMount";
    /// Not in the kubelet: a pod volume of a type nodelet has no plugin for (hostPath, PVC,
    /// CSI, ...). Emitted once per pod and volume; the pod's other volumes are not blocked.
    pub const UNSUPPORTED_VOLUME: &str = "UnsupportedVolume";
    /// A volume directory could not be torn down;
    /// message `UnmountVolume.TearDown failed for volume "<vol>" : <error>`.
    pub const FAILED_UNMOUNT: &str = "FailedUnmount";
    /// PL-22: the signer denied a PodCertificateRequest (once per request);
    /// message `PodCertificateRequest <ns>/<name> was denied, reason="…", message="…"`.
    pub const POD_CERTIFICATE_DENIED: &str = "Denied";
    /// PL-22: the signer failed a PodCertificateRequest (once per request).
    pub const POD_CERTIFICATE_FAILED: &str = "Failed";
    /// PL-22: 10 min after its `beginRefreshAt` a pod certificate is still not refreshed.
    pub const CERTIFICATE_OVERDUE_FOR_REFRESH: &str = "CertificateOverdueForRefresh";
    /// PL-22: a projected pod certificate is past its `notAfter`.
    pub const CERTIFICATE_EXPIRED: &str = "CertificateExpired";
}

/// Where the node crates (volume manager, sources, pod workers) report pod events. Implementations must not block (queue the
/// event and return).
pub trait EventSink: Send + Sync + 'static {
    /// Record an event about `pod`.
    fn event(&self, pod: &AdmittedPod, type_: EventType, reason: &str, message: String);
}

/// An [`EventSink`] that drops every event (for users without an event recorder).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn event(&self, _pod: &AdmittedPod, _type: EventType, _reason: &str, _message: String) {}
}

#[cfg(any(test, feature = "test-util"))]
pub use recording::{RecordedEvent, RecordingSink};

#[cfg(any(test, feature = "test-util"))]
mod recording {
    use std::sync::{Arc, Mutex};

    use crate::AdmittedPod;
    use tokio::sync::watch;

    use super::{EventSink, EventType};

    /// One event seen by a [`RecordingSink`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RecordedEvent {
        /// The pod's UID.
        pub pod_uid: String,
        /// The pod's name.
        pub pod_name: String,
        /// Normal or Warning.
        pub type_: EventType,
        /// The reason.
        pub reason: String,
        /// The message.
        pub message: String,
    }

    /// An [`EventSink`] that records events and lets tests await one (feature `test-util`).
    #[derive(Debug, Clone)]
    pub struct RecordingSink {
        events: Arc<Mutex<Vec<RecordedEvent>>>,
        changed: Arc<watch::Sender<usize>>,
    }

    impl Default for RecordingSink {
        fn default() -> Self {
            Self {
                events: Arc::default(),
                changed: Arc::new(watch::channel(0).0),
            }
        }
    }

    impl RecordingSink {
        /// An empty recorder.
        pub fn new() -> Self {
            Self::default()
        }

        /// Every event so far, oldest first.
        pub fn events(&self) -> Vec<RecordedEvent> {
            self.events.lock().map(|e| e.clone()).unwrap_or_default()
        }

        /// Events with this reason.
        pub fn with_reason(&self, reason: &str) -> Vec<RecordedEvent> {
            self.events()
                .into_iter()
                .filter(|e| e.reason == reason)
                .collect()
        }

        /// Waits until an event matching `pred` has been recorded and returns it.
        pub async fn wait_for(&self, pred: impl Fn(&RecordedEvent) -> bool) -> RecordedEvent {
            let mut rx = self.changed.subscribe();
            loop {
                if let Some(e) = self.events().into_iter().find(|e| pred(e)) {
                    return e;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    impl EventSink for RecordingSink {
        fn event(&self, pod: &AdmittedPod, type_: EventType, reason: &str, message: String) {
            let event = RecordedEvent {
                pod_uid: pod.uid().to_string(),
                pod_name: pod.name().to_owned(),
                type_,
                reason: reason.to_owned(),
                message,
            };
            if let Ok(mut events) = self.events.lock() {
                events.push(event);
            }
            self.changed.send_modify(|n| *n += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_are_spelled_as_the_api_spells_them() {
        assert_eq!(EventType::Normal.as_str(), "Normal");
        assert_eq!(EventType::Warning.as_str(), "Warning");
    }
}
