//! [`AnnotationCheck`]: a pod's bad `nodelet.io/` follow annotations (FC-1) as Warning events
//! `InvalidFollowAnnotation`, under either runtime: the env-file runtime follows environments
//! too (FC-14), so it checks the same annotations.

use std::collections::HashMap;
use std::sync::Arc;

use nodelet_core::events::{EventSink, EventType};
use nodelet_core::{AdmittedPod, PodUid};
use parking_lot::Mutex;

use super::options::{AnnotationError, FollowDefaults, pod_follow};

/// The reason of the events (`follow::reasons::INVALID_ANNOTATION`).
pub(crate) const REASON: &str = "InvalidFollowAnnotation";

/// Checks each pod's follow annotations when the agent sees it; each bad value is reported
/// once (again only once the value changed).
pub struct AnnotationCheck {
    events: Arc<dyn EventSink>,
    defaults: FollowDefaults,
    /// The bad annotations already reported, by pod.
    reported: Mutex<HashMap<PodUid, Vec<AnnotationError>>>,
}

impl std::fmt::Debug for AnnotationCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnnotationCheck")
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

impl AnnotationCheck {
    /// Reports to `events`; `defaults` are the node's (FC-2).
    pub fn new(events: Arc<dyn EventSink>, defaults: FollowDefaults) -> Self {
        Self {
            events,
            defaults,
            reported: Mutex::default(),
        }
    }

    /// Checks `pod`'s annotations: each bad value not reported for it yet gets one Warning
    /// event naming the annotation and the value.
    pub fn pod_seen(&self, pod: &AdmittedPod) {
        let (_, errors) = pod_follow(pod, &self.defaults);
        let mut reported = self.reported.lock();
        let before = reported.get(pod.uid());
        let new: Vec<&AnnotationError> = errors
            .iter()
            .filter(|e| before.is_none_or(|b| !b.contains(e)))
            .collect();
        for e in new {
            tracing::warn!(
                pod.namespace = pod.namespace(),
                pod.name = pod.name(),
                annotation = %e.annotation,
                value = %e.value,
                reason = %e.reason,
                "invalid nodelet.io annotation"
            );
            self.events.event(
                pod,
                EventType::Warning,
                REASON,
                format!("Pod {}/{}: {e}", pod.namespace(), pod.name()),
            );
        }
        if errors.is_empty() {
            reported.remove(pod.uid());
        } else {
            reported.insert(pod.uid().clone(), errors);
        }
    }

    /// Forgets what was reported for pod `uid` (it is gone).
    pub fn forget_pod(&self, uid: &PodUid) {
        self.reported.lock().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<(EventType, String, String)>>>);

    impl EventSink for Recorded {
        fn event(&self, _pod: &AdmittedPod, type_: EventType, reason: &str, message: String) {
            self.0.lock().push((type_, reason.to_owned(), message));
        }
    }

    fn pod(annotations: serde_json::Value) -> AdmittedPod {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1", "annotations": annotations},
            "spec": {"containers": [{"name": "app"}]},
        }))
        .unwrap();
        AdmittedPod::new(pod).unwrap()
    }

    #[test]
    fn a_bad_value_is_one_warning_again_only_once_it_changed_or_the_pod_was_forgotten() {
        let recorded = Recorded::default();
        let check = AnnotationCheck::new(Arc::new(recorded.clone()), FollowDefaults::default());
        let bad = pod(json!({"nodelet.io/follow-env": "maybe"}));
        check.pod_seen(&bad);
        check.pod_seen(&bad);
        assert_eq!(
            *recorded.0.lock(),
            [(
                EventType::Warning,
                "InvalidFollowAnnotation".to_owned(),
                "Pod ns/web: annotation nodelet.io/follow-env: invalid value \"maybe\": must be \
                 true or false"
                    .to_owned()
            )]
        );
        check.pod_seen(&pod(json!({"nodelet.io/follow-env": "perhaps"})));
        assert_eq!(recorded.0.lock().len(), 2, "a new value is reported");
        check.pod_seen(&pod(json!({})));
        check.pod_seen(&pod(json!({"nodelet.io/follow-env": "perhaps"})));
        assert_eq!(recorded.0.lock().len(), 3, "fixed, then bad again");
        check.forget_pod(bad.uid());
        check.pod_seen(&pod(json!({"nodelet.io/follow-env": "perhaps"})));
        assert_eq!(
            recorded.0.lock().len(),
            4,
            "a forgotten pod is checked afresh"
        );
    }
}
