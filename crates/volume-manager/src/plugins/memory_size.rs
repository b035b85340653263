//! PL-32: the size of a `medium: Memory` emptyDir's tmpfs — the node's allocatable memory,
//! lowered to the pod's memory limit, lowered to the volume's `sizeLimit`.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nodelet_core::downward::quantity_units;

/// The tmpfs size of a memory-backed emptyDir of `pod`, in bytes (the kubelet's
/// `calculateEmptyDirMemorySize`):
/// 1. start from the node's allocatable memory (`allocatable_memory`);
/// 2. the pod's memory limit ([`pod_memory_limit`]) replaces it when it is above zero and not
///    above it;
/// 3. the volume's `sizeLimit` replaces that when it is above zero and not above it.
///
/// `0` (nothing known) means no `size=` option: the kernel's default, half the RAM.
pub fn memory_volume_size(
    pod: &Pod,
    size_limit: Option<&Quantity>,
    allocatable_memory: i64,
) -> i64 {
    // (1)
    let mut size = allocatable_memory;
    // (2), (3)
    let lower = [
        pod_memory_limit(pod),
        size_limit.and_then(|q| quantity_units(&q.0)),
    ];
    for candidate in lower.into_iter().flatten() {
        if candidate > 0 && candidate <= size {
            size = candidate;
        }
    }
    size
}

/// The pod's memory limit as the kubelet sizes its pod cgroup (`ResourceConfigForPod`): the
/// pod-level `spec.resources.limits.memory` when set; otherwise, when every regular container
/// sets a memory limit, their sum (with restartable init containers' added) or the largest
/// init container's (each with the restartable ones started before it), whichever is larger,
/// plus `spec.overhead.memory`. `None`: the pod has no memory limit.
pub fn pod_memory_limit(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let limit_of = |c: &Container| -> Option<i64> {
        c.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("memory")
            .and_then(|q| quantity_units(&q.0))
    };
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get("memory"))
        .and_then(|q| quantity_units(&q.0))
        .unwrap_or(0);
    if let Some(pod_level) = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .and_then(|q| quantity_units(&q.0))
    {
        return Some(pod_level.saturating_add(overhead));
    }
    let mut sum: i64 = 0;
    for c in &spec.containers {
        match limit_of(c) {
            Some(l) if l > 0 => sum = sum.saturating_add(l),
            _ => return None,
        }
    }
    let mut sidecars: i64 = 0;
    let mut init_max: i64 = 0;
    for c in spec.init_containers.iter().flatten() {
        let own = limit_of(c).unwrap_or(0);
        let during = if c.restart_policy.as_deref() == Some("Always") {
            sum = sum.saturating_add(own);
            sidecars = sidecars.saturating_add(own);
            sidecars
        } else {
            own.saturating_add(sidecars)
        };
        init_max = init_max.max(during);
    }
    Some(sum.max(init_max).saturating_add(overhead))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const MI: i64 = 1024 * 1024;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn container(name: &str, memory: Option<&str>) -> serde_json::Value {
        match memory {
            Some(m) => json!({"name": name, "resources": {"limits": {"memory": m}}}),
            None => json!({"name": name}),
        }
    }

    #[test]
    fn without_limits_the_size_is_the_nodes_allocatable_memory() {
        let p = pod(json!({"containers": [container("c", None)]}));
        assert_eq!(pod_memory_limit(&p), None);
        assert_eq!(memory_volume_size(&p, None, 1000 * MI), 1000 * MI);
    }

    #[test]
    fn the_size_limit_wins_when_below_the_pod_limit_and_the_pod_limit_when_below_allocatable() {
        let p = pod(
            json!({"containers": [container("a", Some("64Mi")), container("b", Some("64Mi"))]}),
        );
        assert_eq!(pod_memory_limit(&p), Some(128 * MI));
        assert_eq!(memory_volume_size(&p, None, 1000 * MI), 128 * MI);
        let ten = Quantity("10Mi".into());
        assert_eq!(memory_volume_size(&p, Some(&ten), 1000 * MI), 10 * MI);
        // A sizeLimit above what the pod may use is ignored.
        let big = Quantity("1Gi".into());
        assert_eq!(memory_volume_size(&p, Some(&big), 1000 * MI), 128 * MI);
        // A pod limit above the node's allocatable is ignored, a zero sizeLimit too.
        let zero = Quantity("0".into());
        assert_eq!(memory_volume_size(&p, Some(&zero), 100 * MI), 100 * MI);
    }

    #[test]
    fn one_container_without_a_limit_means_no_pod_limit() {
        let p = pod(json!({"containers": [container("a", Some("64Mi")), container("b", None)]}));
        assert_eq!(pod_memory_limit(&p), None);
    }

    #[test]
    fn init_containers_count_as_the_kubelet_counts_them_and_overhead_is_added() {
        let p = pod(json!({
            "initContainers": [
                container("init-big", Some("500Mi")),
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"memory": "10Mi"}}},
            ],
            "containers": [container("a", Some("100Mi"))],
            "overhead": {"memory": "1Mi"},
        }));
        // max(100 + 10, 500) + 1
        assert_eq!(pod_memory_limit(&p), Some(501 * MI));
        let pod_level = pod(json!({
            "containers": [container("a", None)],
            "resources": {"limits": {"memory": "200Mi"}},
        }));
        assert_eq!(pod_memory_limit(&pod_level), Some(200 * MI));
    }

    #[test]
    fn nothing_known_gives_no_size() {
        let p = pod(json!({"containers": [container("c", None)]}));
        assert_eq!(memory_volume_size(&p, None, 0), 0);
        // As the kubelet: nothing may exceed an allocatable of zero.
        let ten = Quantity("10Mi".into());
        assert_eq!(memory_volume_size(&p, Some(&ten), 0), 0);
    }
}
