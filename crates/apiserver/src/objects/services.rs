//! Services as the real registry and its controllers keep them, for what a kubelet reads (the
//! service environment of every container): defaulting, a cluster IP allocated from the
//! service range, validation, an immutable `spec.clusterIP`, and the `default/kubernetes`
//! service the API server publishes for itself.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use crate::resources::SERVICES;
use crate::status::{ApiError, FieldError};
use crate::store::Inner;

/// The service range (`--service-cluster-ip-range`), as kind and kubeadm default it.
const SERVICE_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 96, 0, 0), 12);

/// The cluster IP of `default/kubernetes`: the first address of the range, as upstream.
pub(crate) const MASTER_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

/// The service types the API accepts.
const TYPES: &[&str] = &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];

/// `default/kubernetes`, as kube-apiserver's master-service controller writes it: the
/// range's first address, port 443 named `https`, forwarded to the server's own port.
pub(crate) fn master_service(server_port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "clusterIP": MASTER_SERVICE_IP.to_string(),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": server_port}],
            "type": "ClusterIP",
            "sessionAffinity": "None",
        },
    })
}

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_string(), value);
    }
}

/// The type defaulted (`ClusterIP`).
fn service_type(obj: &Value) -> &str {
    obj.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

/// The defaulters' part of a create or update: `type`, `sessionAffinity`, each port's
/// `protocol` and `targetPort`, and for services with a cluster IP `internalTrafficPolicy`,
/// `ipFamilies`, `ipFamilyPolicy` and `clusterIPs`.
pub(crate) fn default(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                set_default(p, "targetPort", port);
            }
        }
    }
    if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
}

/// The allocator's part of a create: a service without `spec.clusterIP` (and not
/// `ExternalName`) gets the lowest free address of the range after the master service's
/// (upstream picks one at random; tests read them more easily in order); `clusterIPs` follows
/// `clusterIP`. A requested address must be in the range and free.
///
/// # Errors
/// 422 Invalid for a requested address outside the range or already allocated; 500 when the
/// range is full.
pub(crate) fn allocate(s: &Inner, ns: &str, obj: &mut Value) -> Result<(), FieldError> {
    if service_type(obj) == "ExternalName" {
        return Ok(());
    }
    let requested = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let master = ns == "default"
        && obj.pointer("/metadata/name").and_then(Value::as_str) == Some("kubernetes");
    let used = used_addresses(s, !master);
    let ip = match requested.as_str() {
        "None" => "None".to_owned(),
        "" => {
            let (base, bits) = SERVICE_RANGE;
            let size = 1u32 << (32 - u32::from(bits));
            // Skip the network address, the master service's and the broadcast address.
            (2..size - 1)
                .map(|i| Ipv4Addr::from(u32::from(base) + i))
                .find(|ip| !used.contains(ip))
                .ok_or_else(|| {
                    FieldError::invalid("spec.clusterIP", "", "range is full".to_owned())
                })?
                .to_string()
        }
        given => {
            let ip: Ipv4Addr = given.parse().map_err(|_| {
                FieldError::invalid(
                    "spec.clusterIP",
                    given,
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                )
            })?;
            if !in_range(ip) {
                return Err(FieldError::invalid(
                    "spec.clusterIPs",
                    given,
                    "failed to allocate IP: the provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12",
                ));
            }
            if used.contains(&ip) {
                return Err(FieldError::invalid(
                    "spec.clusterIPs",
                    given,
                    "failed to allocate IP: provided IP is already allocated",
                ));
            }
            given.to_owned()
        }
    };
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    Ok(())
}

/// An update keeps the cluster IP it does not name (`clusterIP` and `clusterIPs` as stored).
pub(crate) fn keep_cluster_ip(new: &mut Value, old: &Value) {
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for key in ["clusterIP", "clusterIPs"] {
        let unset = spec
            .get(key)
            .is_none_or(|v| v.is_null() || v.as_str() == Some(""));
        if unset && let Some(v) = old.pointer(&format!("/spec/{key}")) {
            spec.insert(key.into(), v.clone());
        }
    }
}

/// Validation of the spec (create and update): the type, the ports (at least one unless the
/// service is headless or `ExternalName`; names unique and required when there are several;
/// ports 1-65535; protocols TCP, UDP, SCTP), an `externalName` for `ExternalName`.
pub(crate) fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ty = service_type(obj);
    if !TYPES.contains(&ty) {
        errs.push(FieldError::not_supported("spec.type", ty, TYPES));
    }
    let headless = obj.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let ports = obj
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if ty == "ExternalName" {
        let name = obj.pointer("/spec/externalName").and_then(Value::as_str);
        if name.is_none_or(str::is_empty) {
            errs.push(FieldError::required("spec.externalName", ""));
        }
    } else if ports.is_empty() && !headless {
        errs.push(FieldError::required("spec.ports", ""));
    }
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() && ports.len() > 1 {
            errs.push(FieldError::required(format!("spec.ports[{i}].name"), ""));
        } else if !name.is_empty() && !names.insert(name) {
            errs.push(FieldError {
                kind: crate::status::FieldErrorKind::Duplicate,
                field: format!("spec.ports[{i}].name"),
                value: Some(format!("{name:?}")),
                detail: String::new(),
            });
        }
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            errs.push(FieldError::invalid_raw(
                format!("spec.ports[{i}].port"),
                port.to_string(),
                "must be between 1 and 65535, inclusive",
            ));
        }
        let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if !["TCP", "UDP", "SCTP"].contains(&protocol) {
            errs.push(FieldError::not_supported(
                format!("spec.ports[{i}].protocol"),
                protocol,
                &["SCTP", "TCP", "UDP"],
            ));
        }
    }
    errs
}

/// The cluster IP may not change once set (`field is immutable`).
pub(crate) fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let ip = |o: &Value| {
        o.pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (new_ip, old_ip) = (ip(new), ip(old));
    if !old_ip.is_empty() && new_ip != old_ip {
        return vec![FieldError::invalid(
            "spec.clusterIPs[0]",
            &new_ip,
            "may not change once set",
        )];
    }
    Vec::new()
}

fn in_range(ip: Ipv4Addr) -> bool {
    let (base, bits) = SERVICE_RANGE;
    let mask = u32::MAX << (32 - u32::from(bits));
    u32::from(ip) & mask == u32::from(base)
}

/// Every cluster IP allocated now, with the master service's reserved when `reserve_master`.
fn used_addresses(s: &Inner, reserve_master: bool) -> HashSet<Ipv4Addr> {
    let mut used: HashSet<Ipv4Addr> = s
        .snapshot(SERVICES, None, s.rv)
        .iter()
        .filter_map(|(_, obj)| obj.pointer("/spec/clusterIP")?.as_str()?.parse().ok())
        .collect();
    if reserve_master {
        used.insert(MASTER_SERVICE_IP);
    }
    used
}

/// The 422 a create gets for an allocation error.
pub(crate) fn allocation_error(name: &str, error: FieldError) -> ApiError {
    ApiError::invalid(SERVICES.info(), name, &[error])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_type_affinity_protocol_and_target_port() {
        let mut svc = json!({"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]}});
        default(&mut svc);
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4"]));
    }

    #[test]
    fn the_range_holds_its_own_addresses_only() {
        assert!(in_range(Ipv4Addr::new(10, 96, 0, 1)));
        assert!(in_range(Ipv4Addr::new(10, 111, 255, 254)));
        assert!(!in_range(Ipv4Addr::new(10, 112, 0, 1)));
        assert!(!in_range(Ipv4Addr::new(192, 168, 0, 1)));
    }

    #[test]
    fn several_ports_need_names_and_a_service_needs_a_port_unless_headless() {
        let errs = validate(&json!({"spec": {"ports": [{"port": 80}, {"port": 81}]}}));
        assert!(
            errs.iter().any(|e| e.field == "spec.ports[0].name"),
            "{errs:?}"
        );
        let errs = validate(&json!({"spec": {}}));
        assert!(errs.iter().any(|e| e.field == "spec.ports"), "{errs:?}");
        assert!(validate(&json!({"spec": {"clusterIP": "None"}})).is_empty());
        let errs = validate(&json!({"spec": {"ports": [{"port": 0}]}}));
        assert!(
            errs.iter().any(|e| e.field == "spec.ports[0].port"),
            "{errs:?}"
        );
    }

    #[test]
    fn an_update_keeps_the_cluster_ip_it_leaves_out_and_may_not_change_it() {
        let old = json!({"spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"]}});
        let mut new = json!({"spec": {"ports": [{"port": 80}]}});
        keep_cluster_ip(&mut new, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.10");
        assert!(validate_update(&new, &old).is_empty());
        let changed = json!({"spec": {"clusterIP": "10.96.0.11"}});
        assert_eq!(validate_update(&changed, &old).len(), 1);
    }
}
