//! [`EventPublisher`]: pod events from the pod workers and the volume manager, queued and
//! published through kube-rs's event recorder (`events.k8s.io/v1`).

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::metrics::Metrics;

/// A non-blocking event sink: `event` queues, a background task publishes. Implements the
/// event seams of both `nodelet-podworker` and `nodelet-volume-manager`.
#[derive(Debug, Clone)]
pub(crate) struct EventPublisher {
    tx: mpsc::UnboundedSender<(ObjectReference, EventType, String, String)>,
}

impl EventPublisher {
    /// A publisher for `node` through `client`; the task ends on `shutdown` (pending events are
    /// dropped).
    pub(crate) fn start(
        client: kube::Client,
        node: &str,
        metrics: Metrics,
        shutdown: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (tx, mut rx) =
            mpsc::unbounded_channel::<(ObjectReference, EventType, String, String)>();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "nodelet".into(),
                instance: Some(node.to_owned()),
            },
        );
        tracker.spawn(async move {
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = rx.recv() => next,
                };
                let Some((reference, type_, reason, note)) = next else {
                    return;
                };
                let event = Event {
                    type_,
                    action: reason.clone(),
                    reason,
                    note: Some(note),
                    secondary: None,
                };
                metrics.api_request("create");
                if let Err(error) = recorder.publish(&event, &reference).await {
                    debug!(%error, "event not published");
                }
            }
        });
        Self { tx }
    }

    fn push(&self, pod: &Pod, type_: EventType, reason: &str, message: String) {
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let _ = self.tx.send((reference, type_, reason.to_owned(), message));
    }
}

impl nodelet_podworker::EventSink for EventPublisher {
    fn event(&self, pod: &Pod, type_: nodelet_podworker::EventType, reason: &str, message: String) {
        let t = match type_ {
            nodelet_podworker::EventType::Normal => EventType::Normal,
            nodelet_podworker::EventType::Warning => EventType::Warning,
        };
        self.push(pod, t, reason, message);
    }
}

impl nodelet_volume_manager::EventSink for EventPublisher {
    fn event(
        &self,
        pod: &Pod,
        type_: nodelet_volume_manager::EventType,
        reason: &str,
        message: String,
    ) {
        let t = match type_ {
            nodelet_volume_manager::EventType::Normal => EventType::Normal,
            nodelet_volume_manager::EventType::Warning => EventType::Warning,
        };
        self.push(pod, t, reason, message);
    }
}
