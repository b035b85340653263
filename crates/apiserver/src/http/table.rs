//! Server-side printing: `get` and `list` answered as a `meta.k8s.io/v1` `Table` when the
//! client's `Accept` asks for one first (kubectl's `get` does), with the columns of upstream's
//! printers (`pkg/printers/internalversion`) for the kinds served: pods (Ready, Status,
//! Restarts), events (Last Seen, Type, Reason, Object, Message), config maps and secrets (Data),
//! namespaces and nodes (Status), service accounts, leases. Ages are kubectl's
//! human durations (`5m10s`, `3h`, `2d4h`).

use serde_json::{Value, json};

/// Whether `Accept` asks for a Table before anything else.
pub(crate) fn wants_table(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next()
        .is_some_and(|first| {
            let params: Vec<&str> = first.split(';').skip(1).map(str::trim).collect();
            params.contains(&"as=Table")
                && params.contains(&"g=meta.k8s.io")
                && (params.contains(&"v=v1") || params.contains(&"v=v1beta1"))
        })
}

/// A Table for a list (or one object) of `kind`; `include` is `includeObject`
/// (`Metadata` default, `Object`, `None`).
pub(crate) fn to_table(body: &Value, include: &str, now: chrono::DateTime<chrono::Utc>) -> Value {
    let (items, meta): (Vec<&Value>, Value) = match body.get("items").and_then(Value::as_array) {
        Some(items) => (
            items.iter().collect(),
            body.get("metadata").cloned().unwrap_or_else(|| json!({})),
        ),
        None => (
            vec![body],
            json!({"resourceVersion": body.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)}),
        ),
    };
    let kind = match body.get("items") {
        Some(_) => body
            .get("kind")
            .and_then(Value::as_str)
            .and_then(|k| k.strip_suffix("List"))
            .unwrap_or(""),
        None => body.get("kind").and_then(Value::as_str).unwrap_or(""),
    };
    let api_version = body
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1");
    let columns = columns(kind, api_version);
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut row = json!({"cells": cells(kind, api_version, item, now)});
            match include {
                "None" => {}
                "Object" => {
                    let mut obj = (*item).clone();
                    if let Some(m) = obj.as_object_mut() {
                        m.entry("apiVersion").or_insert(json!(api_version));
                        m.entry("kind").or_insert(json!(kind));
                    }
                    row["object"] = obj;
                }
                _ => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": item.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    });
                }
            }
            row
        })
        .collect();
    let column_definitions: Vec<Value> = columns
        .iter()
        .map(|(name, ty, priority)| {
            let format = if *name == "Name" { "name" } else { "" };
            json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority})
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
        "columnDefinitions": column_definitions, "rows": rows,
    })
}

/// (name, type, priority) per column; priority 1 columns show with `-o wide`.
fn columns(kind: &str, api_version: &str) -> Vec<(&'static str, &'static str, u8)> {
    match (kind, api_version) {
        ("Pod", _) => vec![
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
        ],
        ("Event", "v1") => vec![
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
            ("Source", "string", 1),
            ("Count", "integer", 1),
            ("Name", "string", 1),
        ],
        ("ConfigMap", _) => vec![
            ("Name", "string", 0),
            ("Data", "integer", 0),
            ("Age", "string", 0),
        ],
        ("Secret", _) => vec![
            ("Name", "string", 0),
            ("Type", "string", 0),
            ("Data", "integer", 0),
            ("Age", "string", 0),
        ],
        ("Service", _) => vec![
            ("Name", "string", 0),
            ("Type", "string", 0),
            ("Cluster-IP", "string", 0),
            ("External-IP", "string", 0),
            ("Port(s)", "string", 0),
            ("Age", "string", 0),
            ("Selector", "string", 1),
        ],
        ("Namespace", _) => vec![
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Age", "string", 0),
        ],
        ("Node", _) => vec![
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
        ],
        ("ServiceAccount", _) => vec![
            ("Name", "string", 0),
            ("Secrets", "string", 0),
            ("Age", "string", 0),
        ],
        ("Lease", _) => vec![
            ("Name", "string", 0),
            ("Holder", "string", 0),
            ("Age", "string", 0),
        ],
        _ => vec![("Name", "string", 0), ("Age", "string", 0)],
    }
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn len(v: &Value, pointer: &str) -> usize {
    match v.pointer(pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn cells(kind: &str, api_version: &str, o: &Value, now: chrono::DateTime<chrono::Utc>) -> Value {
    let name = s(o, "/metadata/name");
    let age = since(s(o, "/metadata/creationTimestamp"), now);
    match (kind, api_version) {
        ("Pod", _) => {
            let total = len(o, "/spec/containers");
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ready = statuses
                .iter()
                .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum();
            json!([
                name,
                format!("{ready}/{total}"),
                pod_status(o, &statuses),
                restarts,
                age,
                none_if_empty(s(o, "/status/podIP")),
                none_if_empty(s(o, "/spec/nodeName"))
            ])
        }
        ("Event", "v1") => {
            let first = first_non_empty(&[
                s(o, "/firstTimestamp"),
                s(o, "/eventTime"),
                s(o, "/metadata/creationTimestamp"),
            ]);
            let last = first_non_empty(&[
                s(o, "/series/lastObservedTime"),
                s(o, "/lastTimestamp"),
                first,
            ]);
            let count = o.get("count").and_then(Value::as_i64).unwrap_or(1);
            let last_seen = if count > 1 {
                format!("{} (x{count} over {})", since(last, now), since(first, now))
            } else {
                since(last, now)
            };
            let object = format!(
                "{}/{}",
                s(o, "/involvedObject/kind").to_ascii_lowercase(),
                s(o, "/involvedObject/name")
            );
            let source = match (s(o, "/source/component"), s(o, "/source/host")) {
                ("", _) => s(o, "/reportingComponent").to_string(),
                (c, "") => c.to_string(),
                (c, h) => format!("{c}, {h}"),
            };
            json!([
                last_seen,
                s(o, "/type"),
                s(o, "/reason"),
                object,
                s(o, "/message").trim(),
                source,
                count,
                name
            ])
        }
        ("ConfigMap", _) => json!([name, len(o, "/data") + len(o, "/binaryData"), age]),
        ("Secret", _) => json!([name, s(o, "/type"), len(o, "/data"), age]),
        ("Service", _) => json!([
            name,
            s(o, "/spec/type"),
            s(o, "/spec/clusterIP"),
            "<none>",
            service_ports(o),
            age,
            service_selector(o)
        ]),
        ("Namespace", _) => json!([name, s(o, "/status/phase"), age]),
        ("Node", _) => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map_or("Unknown", |c| {
                    if c["status"] == "True" {
                        "Ready"
                    } else {
                        "NotReady"
                    }
                });
            let roles: Vec<&str> = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .collect()
                })
                .unwrap_or_default();
            let roles = if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            };
            json!([
                name,
                ready,
                roles,
                age,
                s(o, "/status/nodeInfo/kubeletVersion")
            ])
        }
        ("ServiceAccount", _) => json!([name, len(o, "/secrets").to_string(), age]),
        ("Lease", _) => json!([name, s(o, "/spec/holderIdentity"), age]),
        _ => json!([name, age]),
    }
}

fn none_if_empty(v: &str) -> &str {
    if v.is_empty() { "<none>" } else { v }
}

fn first_non_empty<'a>(values: &[&'a str]) -> &'a str {
    values.iter().copied().find(|v| !v.is_empty()).unwrap_or("")
}

/// A pod's STATUS column: the phase, or the pod's reason, or the first waiting or terminated
/// container's reason; `Terminating` once deletion started.
fn pod_status(o: &Value, statuses: &[Value]) -> String {
    if !s(o, "/metadata/deletionTimestamp").is_empty() {
        return "Terminating".into();
    }
    let mut reason = match s(o, "/status/reason") {
        "" => s(o, "/status/phase").to_string(),
        r => r.to_string(),
    };
    for c in statuses {
        let waiting = c.pointer("/state/waiting/reason").and_then(Value::as_str);
        let terminated = c
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str);
        if let Some(r) = waiting.or(terminated).filter(|r| !r.is_empty()) {
            reason = r.to_string();
            break;
        }
    }
    if reason.is_empty() {
        "Unknown".into()
    } else {
        reason
    }
}

/// kubectl's `translateTimestampSince`: `<unknown>` without a time, else the human duration.
fn since(rfc3339: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    match chrono::DateTime::parse_from_rfc3339(rfc3339) {
        Ok(t) => human_duration(now.signed_duration_since(t)),
        Err(_) => "<unknown>".into(),
    }
}

/// Kubernetes' `duration.HumanDuration`.
fn human_duration(d: chrono::TimeDelta) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `80/TCP,443/TCP` (`<none>` without ports), as kubectl's printer shows a service's ports.
fn service_ports(o: &Value) -> String {
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            format!(
                "{}/{protocol}",
                p.get("port").and_then(Value::as_i64).unwrap_or(0)
            )
        })
        .collect();
    if ports.is_empty() {
        "<none>".to_owned()
    } else {
        ports.join(",")
    }
}

/// `k=v,k2=v2` sorted, or `<none>`.
fn service_selector(o: &Value) -> String {
    let Some(sel) = o.pointer("/spec/selector").and_then(Value::as_object) else {
        return "<none>".to_owned();
    };
    if sel.is_empty() {
        return "<none>".to_owned();
    }
    let mut pairs: Vec<String> = sel
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    pairs.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&chrono::Utc)
    }

    #[test]
    fn human_durations_read_as_kubectl_prints_them() {
        let d = chrono::TimeDelta::seconds;
        for (secs, want) in [
            (0, "0s"),
            (119, "119s"),
            (130, "2m10s"),
            (600, "10m"),
            (3 * 3600 + 300, "3h5m"),
            (10 * 3600, "10h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (30 * 86400, "30d"),
            (-5, "<invalid>"),
        ] {
            assert_eq!(human_duration(d(secs)), want, "{secs}");
        }
    }

    #[test]
    fn an_event_list_prints_last_seen_type_reason_object_and_message() {
        let list = json!({"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
            "items": [{"metadata": {"name": "pd.1", "namespace": "foo"},
                "involvedObject": {"kind": "Pod", "name": "pd"}, "reason": "FailedMount", "type": "Warning",
                "message": "boom\n", "count": 3, "source": {"component": "kubelet", "host": "n1"},
                "firstTimestamp": "2026-11-23T01:00:00Z", "lastTimestamp": "2026-11-23T01:04:00Z"}]});
        let t = to_table(&list, "Metadata", at("2026-11-23T01:05:00Z"));
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["metadata"]["resourceVersion"], "9");
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "60s (x3 over 5m)",
                "Warning",
                "FailedMount",
                "pod/pd",
                "boom",
                "kubelet, n1",
                3,
                "pd.1"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "foo");
        assert_eq!(t["columnDefinitions"][0]["name"], "Last Seen");
    }

    #[test]
    fn a_pod_prints_ready_status_from_its_containers_and_restarts() {
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "creationTimestamp": "2026-11-23T01:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 2, "state": {"waiting": {"reason": "CreateContainerConfigError"}}}]}});
        let t = to_table(&pod, "None", at("2026-11-23T01:00:30Z"));
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "p",
                "1/2",
                "CreateContainerConfigError",
                3,
                "30s",
                "<none>",
                "n1"
            ])
        );
        assert!(t["rows"][0].get("object").is_none());
    }

    #[test]
    fn only_a_table_asked_for_first_is_a_table() {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            ),
        );
        assert!(wants_table(&h));
        h.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/json, */*"),
        );
        assert!(!wants_table(&h));
    }
}
