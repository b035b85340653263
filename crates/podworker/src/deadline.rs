//! `activeDeadlineSeconds` (PW-26): the kubelet's active deadline handler. A pod that has been
//! active on the node longer than its deadline is failed and its containers are killed.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

/// The pod's `status.reason` and the event's reason once its deadline passed.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// The pod's `status.message` and the event's message.
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// Why a pod is failed by the node (the kubelet's eviction by a pod sync handler): its
/// `status.reason` and `status.message`; its phase is `Failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEviction {
    /// `status.reason`.
    pub reason: String,
    /// `status.message`.
    pub message: String,
}

/// Whether `pod` has been active longer than `spec.activeDeadlineSeconds` at `now`, counted
/// from `status.startTime` (when the node first reported it): a pod without either has no
/// deadline yet.
pub fn past_active_deadline(pod: &Pod, now: SystemTime) -> bool {
    let Some(seconds) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = pod.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return false;
    };
    let start = SystemTime::from(start.0);
    let deadline = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    now.duration_since(start)
        .is_ok_and(|active| active >= deadline)
}

/// The eviction of a pod past its deadline.
pub(crate) fn deadline_eviction() -> PodEviction {
    PodEviction {
        reason: DEADLINE_EXCEEDED.to_owned(),
        message: DEADLINE_EXCEEDED_MESSAGE.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(deadline: Option<i64>, start: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "spec": {"containers": [], "activeDeadlineSeconds": deadline},
            "status": {"startTime": start},
        }))
        .unwrap()
    }

    #[test]
    fn the_deadline_counts_from_the_start_time() {
        let start = "2025-01-01T00:00:00Z";
        let at = |s: u64| {
            SystemTime::from(
                chrono::DateTime::parse_from_rfc3339(start)
                    .unwrap()
                    .with_timezone(&chrono::Utc),
            ) + Duration::from_secs(s)
        };
        assert!(!past_active_deadline(&pod(Some(5), Some(start)), at(4)));
        assert!(past_active_deadline(&pod(Some(5), Some(start)), at(5)));
        assert!(!past_active_deadline(&pod(None, Some(start)), at(500)));
        assert!(!past_active_deadline(&pod(Some(5), None), at(500)));
    }
}
