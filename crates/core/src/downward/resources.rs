//! `resourceFieldRef` values (PL-13, PW-10): Kubernetes quantities parsed exactly and the
//! kubelet's rounding — CPU in millicores, everything else in units, each rounded up, then
//! `ceil(value / divisor)`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::error::DownwardError;
use crate::NodeAllocatable;

/// The value of a `resourceFieldRef`: the named container's (or, when the selector names
/// none, `default_container`'s) limit or request, divided by the divisor (default and `0`
/// mean `1`) and rounded up. CPU is compared in millicores (`250m` with divisor `1` → `1`,
/// with divisor `1m` → `250`), the other resources in units. A `cpu` or `memory` limit the
/// container does not set is the pod-level limit (`spec.resources.limits`), else the node's
/// `allocatable`; an unset `ephemeral-storage` limit is the node's `allocatable`; an unset
/// request (or hugepages limit) is `0`. Named containers are looked up among the containers,
/// then the init containers.
///
/// Volumes pass `None` for `default_container` (their selectors always name one);
/// environment variables pass the container being configured.
///
/// # Errors
/// [`DownwardError::ContainerNotFound`], [`DownwardError::UnsupportedResource`],
/// [`DownwardError::InvalidQuantity`].
pub fn resource_field_ref_value(
    pod: &Pod,
    selector: &ResourceFieldSelector,
    default_container: Option<&Container>,
    allocatable: &NodeAllocatable,
) -> Result<String, DownwardError> {
    let resource = selector.resource.as_str();
    let container_name = selector.container_name.as_deref().unwrap_or_default();
    // (1) The container: the caller's when none is named, else by name.
    let container = match default_container {
        Some(c) if container_name.is_empty() => c,
        _ => {
            find_container(pod, container_name).ok_or_else(|| DownwardError::ContainerNotFound {
                container: container_name.to_owned(),
            })?
        }
    };
    let invalid = |value: &str| DownwardError::InvalidQuantity {
        resource: resource.to_owned(),
        value: value.to_owned(),
    };
    // (2) The resource: limits.* / requests.* of the supported names.
    let (requests, name) = match resource.split_once('.') {
        Some(("requests", name)) => (true, name),
        Some(("limits", name)) => (false, name),
        _ => return Err(unsupported(resource)),
    };
    if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !name.starts_with("hugepages-") {
        return Err(unsupported(resource));
    }
    // (3) The divisor: absent or zero means 1.
    let divisor = match &selector.divisor {
        Some(Quantity(text)) => parse_quantity(text).ok_or_else(|| invalid(text))?,
        None => Exact::ONE,
    };
    let divisor = if divisor.num == 0 {
        Exact::ONE
    } else {
        divisor
    };
    // (4) The value: set, else (limits) the pod-level limit or the node's allocatable, else zero.
    let resources = container.resources.as_ref();
    let set = if requests {
        resources.and_then(|r| r.requests.as_ref())
    } else {
        resources.and_then(|r| r.limits.as_ref())
    };
    // An unset CPU or memory limit falls back to the pod-level limit (`spec.resources`,
    // PodLevelResources, on by default since 1.34), then to the node's allocatable.
    let pod_limit = (!requests && matches!(name, "cpu" | "memory"))
        .then(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.limits.as_ref())
                .and_then(|m| m.get(name))
        })
        .flatten();
    let value = match set.and_then(|m| m.get(name)).or(pod_limit) {
        Some(Quantity(text)) => parse_quantity(text).ok_or_else(|| invalid(text))?,
        None if requests => Exact::ZERO,
        None => match name {
            "cpu" => Exact {
                num: i128::from(allocatable.cpu_millis),
                den: 1000,
            },
            "memory" => Exact::units(allocatable.memory_bytes),
            "ephemeral-storage" => Exact::units(allocatable.ephemeral_storage_bytes),
            _ => Exact::ZERO,
        },
    };
    // (5) Scale (CPU to millicores), round up, divide, round up.
    let scale = if name == "cpu" { 3 } else { 0 };
    let v = value
        .scaled_ceil(scale)
        .ok_or_else(|| invalid(&value.to_string()))?;
    let d = divisor
        .scaled_ceil(scale)
        .ok_or_else(|| invalid(&divisor.to_string()))?;
    if d == 0 {
        return Err(invalid(&divisor.to_string()));
    }
    Ok(div_ceil(v, d).to_string())
}

/// The node's allocatable from a resource list of quantity strings, as a Node's
/// `status.allocatable` reads (`{"cpu": "4", "memory": "8Gi", ...}`): CPU rounded up to
/// millicores, memory and ephemeral storage up to bytes; missing entries are zero and other
/// entries are ignored.
///
/// # Errors
/// [`DownwardError::InvalidQuantity`] for a value that is not a quantity or out of range.
pub fn node_allocatable_from_quantities(
    list: &BTreeMap<String, String>,
) -> Result<NodeAllocatable, DownwardError> {
    let get = |name: &str, scale: u32| -> Result<i64, DownwardError> {
        let Some(text) = list.get(name) else {
            return Ok(0);
        };
        parse_quantity(text)
            .and_then(|q| q.scaled_ceil(scale))
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(|| DownwardError::InvalidQuantity {
                resource: name.to_owned(),
                value: text.clone(),
            })
    };
    Ok(NodeAllocatable {
        cpu_millis: get("cpu", 3)?,
        memory_bytes: get("memory", 0)?,
        ephemeral_storage_bytes: get("ephemeral-storage", 0)?,
    })
}

/// A Kubernetes quantity in whole units, rounded up as `Quantity.Value` rounds (`10Mi` →
/// `10485760`, `1.5` → `2`, `500m` → `1`); `None` when `text` is not a quantity or does not
/// fit an `i64`.
pub fn quantity_units(text: &str) -> Option<i64> {
    parse_quantity(text)
        .and_then(|q| q.scaled_ceil(0))
        .and_then(|v| i64::try_from(v).ok())
}

/// An exact quantity `num / den` (`den > 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    num: i128,
    den: i128,
}

impl Exact {
    const ZERO: Exact = Exact { num: 0, den: 1 };
    const ONE: Exact = Exact { num: 1, den: 1 };

    fn units(n: i64) -> Self {
        Exact {
            num: i128::from(n),
            den: 1,
        }
    }

    /// `ceil(self × 10^scale)`, as `Quantity.ScaledValue` rounds (`MilliValue`, `Value`).
    fn scaled_ceil(self, scale: u32) -> Option<i128> {
        let num = self.num.checked_mul(10i128.checked_pow(scale)?)?;
        Some(div_ceil(num, self.den))
    }
}

impl std::fmt::Display for Exact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

/// Parses a Kubernetes quantity (`500m`, `1.5Gi`, `2e3`, `128974848`); `None` if it is not
/// one or does not fit.
fn parse_quantity(text: &str) -> Option<Exact> {
    let s = text.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() || number == "." {
        return None;
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let mut num: i128 = format!("{int}{frac}").parse().ok()?;
    let mut den: i128 = 10i128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let mut pow10 = |e: i32| -> Option<()> {
        let factor = 10i128.checked_pow(e.unsigned_abs())?;
        if e >= 0 {
            num = num.checked_mul(factor)?;
        } else {
            den = den.checked_mul(factor)?;
        }
        Some(())
    };
    let binary = match suffix {
        "" => None,
        "n" => pow10(-9).map(|()| None)?,
        "u" => pow10(-6).map(|()| None)?,
        "m" => pow10(-3).map(|()| None)?,
        "k" => pow10(3).map(|()| None)?,
        "M" => pow10(6).map(|()| None)?,
        "G" => pow10(9).map(|()| None)?,
        "T" => pow10(12).map(|()| None)?,
        "P" => pow10(15).map(|()| None)?,
        "E" => pow10(18).map(|()| None)?,
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        exp => {
            let e: i32 = exp.strip_prefix(['e', 'E'])?.parse().ok()?;
            pow10(e).map(|()| None)?
        }
    };
    if let Some(power) = binary {
        num = num.checked_mul(1i128 << power)?;
    }
    Some(Exact {
        num: if negative { -num } else { num },
        den,
    })
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a > 0) == (b > 0)) {
        q + 1
    } else {
        q
    }
}

/// The container named `name`: containers first, then init containers (`findContainerInPod`).
fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

fn unsupported(resource: &str) -> DownwardError {
    DownwardError::UnsupportedResource {
        resource: resource.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    //! PL-13 / PW-10 `resourceFieldRef`: the unit tests of the former volume-plugin
    //! `resources.rs` and podworker `quantity.rs` / `downward.rs`, merged.
    use super::*;

    const NANO: i128 = 1_000_000_000;

    /// Pod `p`: container `c` with limits and requests, container `bare` without, and init
    /// container `init` with a CPU limit.
    fn pod() -> Pod {
        nodelet_testutil::PodBuilder::new("", "p")
            .container(serde_json::json!({"name": "c", "resources": {
                "limits": {"cpu": "1250m", "memory": "64Mi", "hugepages-2Mi": "4Mi"},
                "requests": {"cpu": "250m", "memory": "32Mi"}
            }}))
            .container(serde_json::json!({"name": "bare"}))
            .init_container(
                serde_json::json!({"name": "init", "resources": {"limits": {"cpu": "3"}}}),
            )
            .build()
    }

    fn alloc() -> NodeAllocatable {
        NodeAllocatable {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
        }
    }

    fn selector(container: &str, resource: &str, divisor: Option<&str>) -> ResourceFieldSelector {
        ResourceFieldSelector {
            container_name: Some(container.into()),
            resource: resource.into(),
            divisor: divisor.map(|d| Quantity(d.into())),
        }
    }

    fn value(container: &str, resource: &str, divisor: Option<&str>) -> Result<String, String> {
        resource_field_ref_value(
            &pod(),
            &selector(container, resource, divisor),
            None,
            &alloc(),
        )
        .map_err(|e| e.to_string())
    }

    /// A quantity in nano-units, for exact comparisons.
    fn nanos(s: &str) -> Option<i128> {
        parse_quantity(s).and_then(|q| q.scaled_ceil(9))
    }

    #[test]
    fn quantities_parse_exactly_with_decimal_binary_and_exponent_suffixes() {
        assert_eq!(
            parse_quantity("500m"),
            Some(Exact {
                num: 500,
                den: 1000
            })
        );
        assert_eq!(nanos("1"), Some(NANO));
        assert_eq!(nanos("500m"), Some(NANO / 2));
        assert_eq!(nanos("0.5"), Some(NANO / 2));
        assert_eq!(nanos("+1k"), Some(1000 * NANO));
        assert_eq!(nanos("1Ki"), Some(1024 * NANO));
        assert_eq!(nanos("64Mi"), Some(64 * (1 << 20) * NANO));
        assert_eq!(nanos("2e3"), Some(2000 * NANO));
        assert_eq!(nanos("5E-1"), Some(NANO / 2));
        assert_eq!(nanos("-1"), Some(-NANO));
        assert_eq!(nanos("1Ei"), Some((1i128 << 60) * NANO));
        assert_eq!(
            parse_quantity("1.5Gi").and_then(|q| q.scaled_ceil(0)),
            Some(1_610_612_736)
        );
    }

    #[test]
    fn quantities_in_units_round_up_and_refuse_garbage() {
        assert_eq!(quantity_units("10Mi"), Some(10 * 1024 * 1024));
        assert_eq!(quantity_units("1.5"), Some(2));
        assert_eq!(quantity_units("500m"), Some(1));
        assert_eq!(quantity_units("2e3"), Some(2000));
        assert_eq!(quantity_units("lots"), None);
        assert_eq!(quantity_units("9Ei"), None);
    }

    #[test]
    fn garbage_is_not_a_quantity() {
        for bad in ["", "x", "abc", "1Xi", ".", "1.2.3", "e3"] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    // PL-13 / PW-10: values are rounded up after dividing; CPU is compared in millicores.
    #[test]
    fn resource_values_are_divided_and_rounded_up() {
        assert_eq!(value("c", "limits.cpu", None).unwrap(), "2");
        assert_eq!(value("c", "limits.cpu", Some("1m")).unwrap(), "1250");
        assert_eq!(value("c", "requests.cpu", Some("100m")).unwrap(), "3");
        assert_eq!(value("c", "requests.cpu", Some("1")).unwrap(), "1");
        assert_eq!(value("c", "limits.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(value("c", "requests.memory", None).unwrap(), "33554432");
        assert_eq!(
            value("c", "limits.hugepages-2Mi", Some("1Mi")).unwrap(),
            "4"
        );
    }

    // The kubelet scales the divisor before dividing: 0.5m of CPU is 1 millicore.
    #[test]
    fn divisors_are_rounded_up_to_the_unit_first_and_zero_means_one() {
        assert_eq!(value("c", "limits.cpu", Some("0.5m")).unwrap(), "1250");
        assert_eq!(
            value("c", "limits.memory", Some("500m")).unwrap(),
            "67108864"
        );
        assert_eq!(value("c", "limits.cpu", Some("0")).unwrap(), "2");
    }

    #[test]
    fn unset_limits_default_to_node_allocatable_and_unset_requests_to_zero() {
        assert_eq!(value("bare", "limits.cpu", None).unwrap(), "4");
        assert_eq!(value("bare", "limits.memory", Some("1Gi")).unwrap(), "8");
        assert_eq!(
            value("bare", "limits.ephemeral-storage", Some("1Gi")).unwrap(),
            "100"
        );
        assert_eq!(value("bare", "requests.memory", None).unwrap(), "0");
        assert_eq!(value("bare", "limits.hugepages-1Gi", None).unwrap(), "0");
    }

    #[test]
    fn init_containers_are_found_by_name_and_an_unnamed_selector_uses_the_default_container() {
        assert_eq!(value("init", "limits.cpu", None).unwrap(), "3");
        let p = pod();
        let bare = &p.spec.as_ref().unwrap().containers[1];
        let unnamed = ResourceFieldSelector {
            resource: "limits.cpu".into(),
            ..ResourceFieldSelector::default()
        };
        assert_eq!(
            resource_field_ref_value(&p, &unnamed, Some(bare), &alloc()).unwrap(),
            "4"
        );
        assert_eq!(
            resource_field_ref_value(&p, &unnamed, None, &alloc())
                .unwrap_err()
                .to_string(),
            "container  not found"
        );
    }

    #[test]
    fn unknown_containers_and_resources_are_errors_with_the_kubelet_text() {
        assert_eq!(
            value("nope", "limits.cpu", None).unwrap_err(),
            "container nope not found"
        );
        assert_eq!(
            value("c", "limits.gpu", None).unwrap_err(),
            "unsupported container resource : limits.gpu"
        );
        assert_eq!(
            value("c", "cpu", None).unwrap_err(),
            "unsupported container resource : cpu"
        );
        assert_eq!(
            value("c", "limits.cpu", Some("lots")).unwrap_err(),
            "invalid quantity \"lots\" for resource limits.cpu"
        );
    }

    #[test]
    fn an_unset_cpu_or_memory_limit_is_the_pod_level_limit_before_node_allocatable() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "resources": {"limits": {"cpu": "1500m", "memory": "2Gi", "ephemeral-storage": "1Gi"}},
                "containers": [
                    {"name": "bare"},
                    {"name": "own", "resources": {"limits": {"cpu": "250m"}}}
                ]
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let alloc = NodeAllocatable {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
        };
        let v = |c: &str, r: &str| {
            let sel = ResourceFieldSelector {
                container_name: Some(c.into()),
                resource: r.into(),
                divisor: None,
            };
            resource_field_ref_value(&pod, &sel, None, &alloc).unwrap_or_default()
        };
        assert_eq!(v("bare", "limits.cpu"), "2");
        assert_eq!(v("bare", "limits.memory"), (2u64 << 30).to_string());
        assert_eq!(v("own", "limits.cpu"), "1");
        // Pod-level resources cover CPU and memory only.
        assert_eq!(
            v("bare", "limits.ephemeral-storage"),
            (100u64 << 30).to_string()
        );
        assert_eq!(v("bare", "requests.cpu"), "0");
    }

    #[test]
    fn node_allocatable_reads_a_resource_list_and_rejects_garbage() {
        let list: BTreeMap<String, String> = [
            ("cpu", "3500m"),
            ("memory", "8Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "1k"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(
            node_allocatable_from_quantities(&list).unwrap(),
            NodeAllocatable {
                cpu_millis: 3500,
                memory_bytes: 8 << 30,
                ephemeral_storage_bytes: 1000,
            }
        );
        let empty = node_allocatable_from_quantities(&BTreeMap::new()).unwrap();
        assert_eq!(empty.cpu_millis + empty.memory_bytes, 0);
        let bad: BTreeMap<String, String> = [("memory".to_owned(), "much".to_owned())].into();
        assert_eq!(
            node_allocatable_from_quantities(&bad)
                .unwrap_err()
                .to_string(),
            "invalid quantity \"much\" for resource memory"
        );
    }
}
