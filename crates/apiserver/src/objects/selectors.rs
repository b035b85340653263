//! Label selectors (equality- and set-based) and field selectors, parsed from query strings and
//! matched against stored JSON objects.

use serde_json::Value;

use crate::resources::ResourceInfo;
use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed label selector; all requirements must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{rest}', expected: '(' in {whole:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub(crate) fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for term in split_top_level(s) {
            let t = term.trim();
            if t.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: found '', expected: identifier in {s:?}"
                )));
            }
            let (key, op) = if let Some(k) = t.strip_prefix('!') {
                (k.trim().to_string(), LabelOp::NotExists)
            } else if let Some((k, v)) = t.split_once("!=") {
                (k.trim().to_string(), LabelOp::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = t.split_once("==") {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = t.split_once('=') {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some(idx) = t.find(" notin ").or_else(|| t.find(" notin(")) {
                (
                    t[..idx].trim().to_string(),
                    LabelOp::NotIn(parse_set(&t[idx + 6..], s)?),
                )
            } else if let Some(idx) = t.find(" in ").or_else(|| t.find(" in(")) {
                (
                    t[..idx].trim().to_string(),
                    LabelOp::In(parse_set(&t[idx + 3..], s)?),
                )
            } else {
                (t.to_string(), LabelOp::Exists)
            };
            if key.is_empty() || key.contains(' ') {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: invalid label key {key:?} in {s:?}"
                )));
            }
            reqs.push((key, op));
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether the selector matches every object.
    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Matches the object's `metadata.labels`.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|(k, op)| match op {
            LabelOp::Eq(v) => get(k) == Some(v.as_str()),
            LabelOp::NotEq(v) => get(k) != Some(v.as_str()),
            LabelOp::In(vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelOp::NotIn(vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelOp::Exists => get(k).is_some(),
            LabelOp::NotExists => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma-joined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// Fields each resource supports beyond `metadata.name` and `metadata.namespace`, with the
/// value used when the field is absent.
fn extra_fields(res: &ResourceInfo) -> Option<&'static [(&'static str, &'static str)]> {
    match (res.group, res.plural) {
        ("", "pods") => Some(&[
            ("spec.nodeName", ""),
            ("spec.restartPolicy", ""),
            ("spec.schedulerName", ""),
            ("spec.serviceAccountName", ""),
            ("spec.hostNetwork", "false"),
            ("status.phase", ""),
            ("status.podIP", ""),
            ("status.nominatedNodeName", ""),
        ]),
        ("", "secrets") => Some(&[("type", "")]),
        // The kubelet's service informer asks for `spec.clusterIP!=None`.
        ("", "services") => Some(&[("spec.clusterIP", ""), ("spec.type", "")]),
        ("", "nodes") => Some(&[("spec.unschedulable", "false")]),
        ("", "namespaces") => Some(&[("status.phase", "")]),
        ("certificates.k8s.io", "clustertrustbundles") => Some(&[("spec.signerName", "")]),
        ("certificates.k8s.io", "podcertificaterequests") => Some(&[
            ("spec.signerName", ""),
            ("spec.podName", ""),
            ("spec.nodeName", ""),
        ]),
        ("", "events") => Some(&[
            ("involvedObject.kind", ""),
            ("involvedObject.namespace", ""),
            ("involvedObject.name", ""),
            ("involvedObject.uid", ""),
            ("involvedObject.apiVersion", ""),
            ("involvedObject.resourceVersion", ""),
            ("involvedObject.fieldPath", ""),
            ("reason", ""),
            ("reportingComponent", ""),
            ("source", ""),
            ("type", ""),
        ]),
        _ => None,
    }
}

fn field_value(res: &ResourceInfo, obj: &Value, field: &str) -> String {
    let default = extra_fields(res)
        .and_then(|f| f.iter().find(|(n, _)| *n == field))
        .map_or("", |(_, d)| *d);
    let path = if res.plural == "events" && res.group.is_empty() && field == "source" {
        "/source/component".to_string()
    } else {
        format!("/{}", field.replace('.', "/"))
    };
    match obj.pointer(&path) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => default.to_string(),
    }
}

impl FieldSelector {
    /// Parses and checks the fields against what `res` supports (400 otherwise, as upstream).
    pub(crate) fn parse(s: &str, res: &ResourceInfo) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            let known = matches!(field, "metadata.name" | "metadata.namespace")
                || extra_fields(res).is_some_and(|f| f.iter().any(|(n, _)| *n == field));
            if !known {
                let msg = if extra_fields(res).is_some() {
                    format!("field label not supported: {field}")
                } else {
                    format!(
                        "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    )
                };
                return Err(ApiError::bad_request(msg));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether the selector matches every object.
    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The name an equality requirement on `metadata.name` asks for, if any: no other object
    /// can match.
    pub(crate) fn exact_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(f, eq, _)| *eq && f == "metadata.name")
            .map(|(_, _, v)| v.as_str())
    }

    /// Matches the object.
    pub(crate) fn matches(&self, res: &ResourceInfo, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(f, eq, v)| (field_value(res, obj, f) == *v) == *eq)
    }
}

/// Extracts `metadata.name=X` from a raw field selector without validating it.
pub(crate) fn name_from_field_selector(s: &str) -> Option<String> {
    s.split(',').find_map(|t| {
        let t = t.trim();
        let v = t
            .strip_prefix("metadata.name==")
            .or_else(|| t.strip_prefix("metadata.name="))?;
        Some(v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{CONFIGMAPS, PODS};
    use serde_json::json;

    #[test]
    fn set_based_label_selectors_match_like_upstream() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier!=be", true),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("tier,!missing", true),
            ("!app", false),
            ("env notin (prod)", true),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).map(|s| s.matches(&o)),
                Ok(want),
                "{sel}"
            );
        }
    }

    #[test]
    fn unknown_field_selectors_are_bad_requests() {
        let e = FieldSelector::parse("spec.foo=x", PODS.info()).err();
        assert_eq!(
            e.map(|e| e.message().to_string()),
            Some("field label not supported: spec.foo".into())
        );
        let e = FieldSelector::parse("data.x=y", CONFIGMAPS.info()).err();
        assert_eq!(e.map(|e| e.code()), Some(400));
    }

    #[test]
    fn pod_node_name_selectors_match_unbound_pods_by_empty_value() {
        let sel = FieldSelector::parse("spec.nodeName=", PODS.info()).ok();
        assert_eq!(
            sel.map(|s| s.matches(PODS.info(), &json!({"spec": {}}))),
            Some(true)
        );
        let sel = FieldSelector::parse("spec.nodeName!=n1,metadata.name=p", PODS.info()).ok();
        let p = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n2"}});
        assert_eq!(sel.as_ref().map(|s| s.matches(PODS.info(), &p)), Some(true));
        assert_eq!(
            name_from_field_selector("spec.nodeName!=n1,metadata.name=p").as_deref(),
            Some("p")
        );
    }
}
