//! Parses a request's method, path and query into what is being asked, as upstream's
//! `RequestInfoFactory` does (verb, group, version, resource, subresource, namespace, name).

use std::collections::HashMap;

use crate::objects::selectors::name_from_field_selector;

/// The request, classified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RequestInfo {
    pub(crate) resource_request: bool,
    pub(crate) verb: String,
    pub(crate) api_group: String,
    pub(crate) api_version: String,
    pub(crate) resource: String,
    pub(crate) subresource: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) path: String,
    pub(crate) query: HashMap<String, String>,
}

/// Decodes `a=b&c=d` with percent- and plus-decoding (a repeated key: the last value).
pub(crate) fn parse_query(q: &str) -> HashMap<String, String> {
    query_pairs(q).into_iter().collect()
}

/// Decodes `a=b&c=d` into its pairs in order, repeated keys kept (`command=sh&command=-c`).
pub(crate) fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_true(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true" | "1"))
}

impl RequestInfo {
    /// Classifies `method path?query`.
    pub(crate) fn parse(method: &http::Method, path: &str, query: Option<&str>) -> Self {
        let query = query.map(parse_query).unwrap_or_default();
        let mut info = RequestInfo {
            verb: method.as_str().to_ascii_lowercase(),
            path: path.to_string(),
            query,
            ..Default::default()
        };
        let parts: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        let rest: &[&str] = match parts.as_slice() {
            ["api", version, rest @ ..] => {
                info.api_version = (*version).to_string();
                rest
            }
            ["apis", group, version, rest @ ..] => {
                info.api_group = (*group).to_string();
                info.api_version = (*version).to_string();
                rest
            }
            _ => return info,
        };
        if rest.is_empty() {
            return info;
        }
        info.resource_request = true;
        let mut rest = rest.to_vec();
        let mut legacy_watch = false;
        if rest.first() == Some(&"watch") {
            legacy_watch = true;
            rest.remove(0);
        }
        // namespaces/{ns}/{resource}... (but namespaces/{name} and namespaces/{name}/status
        // address the namespace itself)
        if rest.first() == Some(&"namespaces")
            && rest.len() >= 3
            && !matches!(rest[2], "status" | "finalize")
        {
            info.namespace = Some(rest[1].to_string());
            rest.drain(..2);
        }
        info.resource = rest.first().map(|s| (*s).to_string()).unwrap_or_default();
        info.name = rest.get(1).map(|s| (*s).to_string());
        info.subresource = rest.get(2).map(|s| (*s).to_string());
        info.verb = match (method.as_str(), info.name.is_some()) {
            ("GET" | "HEAD", true) => "get".into(),
            ("GET" | "HEAD", false) => {
                if legacy_watch || is_true(info.query.get("watch")) {
                    "watch".into()
                } else {
                    "list".into()
                }
            }
            ("POST", _) => "create".into(),
            ("PUT", _) => "update".into(),
            ("PATCH", _) => "patch".into(),
            ("DELETE", true) => "delete".into(),
            ("DELETE", false) => "deletecollection".into(),
            (m, _) => m.to_ascii_lowercase(),
        };
        if legacy_watch && info.name.is_some() {
            info.verb = "watch".into();
        }
        if info.name.is_none()
            && matches!(info.verb.as_str(), "list" | "watch")
            && let Some(fs) = info.query.get("fieldSelector")
        {
            info.name = name_from_field_selector(fs);
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn namespaced_paths_split_into_namespace_resource_name_and_subresource() {
        let i = RequestInfo::parse(&Method::PUT, "/api/v1/namespaces/d/pods/p/status", None);
        assert_eq!(
            (
                i.verb.as_str(),
                i.namespace.as_deref(),
                i.resource.as_str(),
                i.name.as_deref(),
                i.subresource.as_deref()
            ),
            ("update", Some("d"), "pods", Some("p"), Some("status"))
        );
    }

    #[test]
    fn a_list_with_watch_true_is_a_watch_and_takes_its_name_from_the_field_selector() {
        let i = RequestInfo::parse(
            &Method::GET,
            "/api/v1/namespaces/d/configmaps",
            Some("watch=true&fieldSelector=metadata.name%3Dx"),
        );
        assert_eq!((i.verb.as_str(), i.name.as_deref()), ("watch", Some("x")));
    }

    #[test]
    fn namespaces_themselves_are_cluster_scoped() {
        let i = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/d", None);
        assert_eq!(
            (i.resource.as_str(), i.name.as_deref(), i.namespace),
            ("namespaces", Some("d"), None)
        );
        let i = RequestInfo::parse(
            &Method::GET,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            None,
        );
        assert_eq!(
            (
                i.api_group.as_str(),
                i.resource.as_str(),
                i.namespace.as_deref()
            ),
            ("coordination.k8s.io", "leases", Some("kube-node-lease"))
        );
        let i = RequestInfo::parse(&Method::GET, "/version", None);
        assert!(!i.resource_request);
    }
}
