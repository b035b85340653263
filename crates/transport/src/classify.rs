//! What a request is: a long-lived watch or a short request (the pool's classes), and its
//! Kubernetes verb (the request counters).

/// Whether a request is a long-lived watch (`watch=true` or `watch=1` in its query).
pub(crate) fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

/// A request's Kubernetes verb, from its method and path (as the API server's request info
/// names it; `deletecollection` counts as `delete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    Other,
}

impl Verb {
    /// How many verbs there are.
    pub(crate) const COUNT: usize = 8;

    /// A distinct index below [`Verb::COUNT`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The verb of a request with `method` to `uri`.
    pub(crate) fn of(method: &http::Method, uri: &http::Uri) -> Verb {
        match *method {
            http::Method::GET | http::Method::HEAD if is_watch(uri) => Verb::Watch,
            http::Method::GET | http::Method::HEAD if is_collection(uri.path()) => Verb::List,
            http::Method::GET | http::Method::HEAD => Verb::Get,
            http::Method::POST => Verb::Create,
            http::Method::PUT => Verb::Update,
            http::Method::PATCH => Verb::Patch,
            http::Method::DELETE => Verb::Delete,
            _ => Verb::Other,
        }
    }
}

/// Whether `path` names a collection of resources (`/api/v1/namespaces/d/configmaps`,
/// `/apis/g/v1/nodes`) rather than one object or a non-resource path.
fn is_collection(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let rest = match parts.first() {
        Some(&"api") => parts.get(2..),
        Some(&"apis") => parts.get(3..),
        _ => None,
    };
    let Some(mut rest) = rest else {
        return false;
    };
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        rest = &rest[2..];
    }
    rest.len() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_requests_are_recognised_by_their_query() {
        let w: http::Uri = "https://h/api/v1/namespaces/d/configmaps?fieldSelector=metadata.name%3Dx&watch=true&timeoutSeconds=290"
            .parse()
            .unwrap_or_default();
        assert!(is_watch(&w));
        let w1: http::Uri = "/api/v1/pods?watch=1".parse().unwrap_or_default();
        assert!(is_watch(&w1));
        let list: http::Uri = "/api/v1/pods?watch=false&limit=1"
            .parse()
            .unwrap_or_default();
        assert!(!is_watch(&list));
        let get: http::Uri = "/api/v1/namespaces/d/configmaps/watch"
            .parse()
            .unwrap_or_default();
        assert!(!is_watch(&get));
    }

    #[test]
    fn verbs_follow_the_method_and_whether_the_path_names_a_collection() {
        let verb = |m: &str, u: &str| {
            let method: http::Method = m.parse().unwrap_or_default();
            let uri: http::Uri = u.parse().unwrap_or_default();
            Verb::of(&method, &uri)
        };
        assert_eq!(verb("GET", "/api/v1/namespaces/d/secrets/s"), Verb::Get);
        assert_eq!(
            verb("GET", "/api/v1/namespaces/d/secrets?limit=1"),
            Verb::List
        );
        assert_eq!(
            verb("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn"),
            Verb::List
        );
        assert_eq!(verb("GET", "/api/v1/namespaces"), Verb::List);
        assert_eq!(verb("GET", "/api/v1/namespaces/d"), Verb::Get);
        assert_eq!(verb("GET", "/api/v1/nodes/n"), Verb::Get);
        assert_eq!(
            verb(
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
            ),
            Verb::List
        );
        assert_eq!(verb("GET", "/api/v1/pods?watch=true"), Verb::Watch);
        assert_eq!(verb("GET", "/version"), Verb::Get);
        assert_eq!(
            verb("PATCH", "/api/v1/namespaces/d/pods/p/status"),
            Verb::Patch
        );
        assert_eq!(verb("POST", "/api/v1/namespaces/d/events"), Verb::Create);
        assert_eq!(
            verb("PUT", "/apis/coordination.k8s.io/v1/namespaces/l/leases/n"),
            Verb::Update
        );
        assert_eq!(verb("DELETE", "/api/v1/namespaces/d/pods/p"), Verb::Delete);
        assert_eq!(verb("OPTIONS", "/api/v1/pods"), Verb::Other);
    }
}
