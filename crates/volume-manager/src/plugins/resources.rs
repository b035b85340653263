//! `resourceFieldRef` values for the downward API (PL-13): quantity parsing and the kubelet's
//! rounding (`ceil(value / divisor)`, CPU in millicores).

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::NodeAllocatable;

/// An exact quantity `num / den`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    num: i128,
    den: i128,
}

/// Parses a Kubernetes quantity (`500m`, `1.5Gi`, `2e3`, `128974848`).
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
    let digits = format!("{int}{frac}");
    let mut num: i128 = digits.parse().ok()?;
    let mut den: i128 = 10i128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let pow10 = |e: i32, num: &mut i128, den: &mut i128| -> Option<()> {
        let factor = 10i128.checked_pow(e.unsigned_abs())?;
        if e >= 0 {
            *num = num.checked_mul(factor)?;
        } else {
            *den = den.checked_mul(factor)?;
        }
        Some(())
    };
    match suffix {
        "" => {}
        "n" => pow10(-9, &mut num, &mut den)?,
        "u" => pow10(-6, &mut num, &mut den)?,
        "m" => pow10(-3, &mut num, &mut den)?,
        "k" => pow10(3, &mut num, &mut den)?,
        "M" => pow10(6, &mut num, &mut den)?,
        "G" => pow10(9, &mut num, &mut den)?,
        "T" => pow10(12, &mut num, &mut den)?,
        "P" => pow10(15, &mut num, &mut den)?,
        "E" => pow10(18, &mut num, &mut den)?,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = match suffix {
                "Ki" => 10,
                "Mi" => 20,
                "Gi" => 30,
                "Ti" => 40,
                "Pi" => 50,
                _ => 60,
            };
            num = num.checked_mul(1i128 << power)?;
        }
        exp => {
            let e: i32 = exp.strip_prefix(['e', 'E'])?.parse().ok()?;
            pow10(e, &mut num, &mut den)?;
        }
    }
    Some(Exact {
        num: if negative { -num } else { num },
        den,
    })
}

impl Exact {
    /// `ceil(self × 10^scale)`, as `Quantity.ScaledValue` rounds.
    fn scaled_ceil(self, scale: u32) -> Option<i128> {
        let num = self.num.checked_mul(10i128.checked_pow(scale)?)?;
        Some(div_ceil(num, self.den))
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a > 0) == (b > 0)) {
        q + 1
    } else {
        q
    }
}

/// The container named in the selector (containers, then init containers).
fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// PL-13 `resourceFieldRef`: the container's resource value divided by the divisor, rounded
/// up; unset limits default to the node's allocatable.
///
/// # Errors
/// The kubelet's texts: `container <name> not found`,
/// `unsupported container resource : <resource>`, or a quantity that does not parse.
pub(crate) fn resource_value(
    pod: &Pod,
    selector: &ResourceFieldSelector,
    allocatable: &NodeAllocatable,
) -> Result<String, String> {
    let container_name = selector.container_name.as_deref().unwrap_or_default();
    let container = find_container(pod, container_name)
        .ok_or_else(|| format!("container {container_name} not found"))?;
    let divisor = match &selector.divisor {
        Some(q) => parse_quantity(&q.0).ok_or_else(|| format!("invalid divisor {:?}", q.0))?,
        None => Exact { num: 1, den: 1 },
    };
    let divisor = if divisor.num == 0 {
        Exact { num: 1, den: 1 }
    } else {
        divisor
    };
    let resources = container.resources.as_ref();
    let lookup = |requests: bool, name: &str| -> Option<&Quantity> {
        let map = if requests {
            resources.and_then(|r| r.requests.as_ref())
        } else {
            resources.and_then(|r| r.limits.as_ref())
        };
        map.and_then(|m| m.get(name))
    };
    let (requests, name) = match selector.resource.split_once('.') {
        Some(("requests", name)) => (true, name),
        Some(("limits", name)) => (false, name),
        _ => return Err(unsupported(&selector.resource)),
    };
    let is_cpu = name == "cpu";
    if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !name.starts_with("hugepages-") {
        return Err(unsupported(&selector.resource));
    }
    let value = match lookup(requests, name) {
        Some(q) => parse_quantity(&q.0).ok_or_else(|| format!("invalid quantity {:?}", q.0))?,
        None if requests => Exact { num: 0, den: 1 },
        None => match name {
            "cpu" => Exact {
                num: i128::from(allocatable.cpu_millis),
                den: 1000,
            },
            "memory" => Exact {
                num: i128::from(allocatable.memory_bytes),
                den: 1,
            },
            "ephemeral-storage" => Exact {
                num: i128::from(allocatable.ephemeral_storage_bytes),
                den: 1,
            },
            _ => Exact { num: 0, den: 1 },
        },
    };
    let scale = if is_cpu { 3 } else { 0 };
    let overflow = || format!("quantity out of range for {}", selector.resource);
    let v = value.scaled_ceil(scale).ok_or_else(overflow)?;
    let d = divisor.scaled_ceil(scale).ok_or_else(overflow)?;
    if d == 0 {
        return Err(format!("invalid divisor for {}", selector.resource));
    }
    Ok(div_ceil(v, d).to_string())
}

fn unsupported(resource: &str) -> String {
    format!("unsupported container resource : {resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {
                "limits": {"cpu": "1250m", "memory": "64Mi"},
                "requests": {"cpu": "250m", "memory": "32Mi"}
            }}, {"name": "bare"}]}
        }))
        .unwrap()
    }

    fn value(container: &str, resource: &str, divisor: Option<&str>) -> Result<String, String> {
        let selector = ResourceFieldSelector {
            container_name: Some(container.into()),
            resource: resource.into(),
            divisor: divisor.map(|d| Quantity(d.into())),
        };
        let alloc = NodeAllocatable {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
        };
        resource_value(&pod(), &selector, &alloc)
    }

    #[test]
    fn quantities_parse_with_decimal_binary_and_exponent_suffixes() {
        assert_eq!(
            parse_quantity("500m"),
            Some(Exact {
                num: 500,
                den: 1000
            })
        );
        assert_eq!(
            parse_quantity("1.5Gi").and_then(|q| q.scaled_ceil(0)),
            Some(1_610_612_736)
        );
        assert_eq!(
            parse_quantity("2e3").and_then(|q| q.scaled_ceil(0)),
            Some(2000)
        );
        assert_eq!(parse_quantity("x"), None);
    }

    // PL-13: values are rounded up after dividing; CPU is compared in millicores.
    #[test]
    fn resource_values_are_divided_and_rounded_up() {
        assert_eq!(value("c", "limits.cpu", None).unwrap(), "2");
        assert_eq!(value("c", "limits.cpu", Some("1m")).unwrap(), "1250");
        assert_eq!(value("c", "requests.cpu", Some("100m")).unwrap(), "3");
        assert_eq!(value("c", "limits.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(value("c", "requests.memory", None).unwrap(), "33554432");
    }

    #[test]
    fn unset_limits_default_to_node_allocatable_and_unset_requests_to_zero() {
        assert_eq!(value("bare", "limits.cpu", None).unwrap(), "4");
        assert_eq!(value("bare", "limits.memory", Some("1Gi")).unwrap(), "8");
        assert_eq!(value("bare", "requests.memory", None).unwrap(), "0");
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
    }
}
