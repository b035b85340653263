//! Authorization of kubelet API requests, as the kubelet's `Webhook` mode does it: one
//! `SubjectAccessReview` (authorization.k8s.io/v1) per candidate subresource of `nodes/<node>`,
//! created with the node's client, the first allowed one letting the request through.
//!
//! | path               | subresources, in order |
//! |--------------------|------------------------|
//! | `/pods`, `/pods/…`, `/runningpods/…` | `pods`, `proxy` |
//! | `/healthz`, `/healthz/…` | `healthz`, `proxy` |
//! | `/configz`         | `configz`, `proxy`     |
//! | `/stats/…`         | `stats`                |
//! | `/metrics`, `/metrics/…` | `metrics`        |
//! | `/logs/…`          | `log`                  |
//! | `/checkpoint/…`    | `checkpoint`           |
//! | `/statusz`         | `statusz`              |
//! | `/flagz`           | `configz`              |
//! | anything else (`/containerLogs/…`, `/exec/…`, `/run/…`) | `proxy` |
//!
//! (`KubeletFineGrainedAuthz`, GA and locked on in v1.36, adds the first entry of the first
//! three rows.) The verb comes from the method: `GET` get, `POST` create, `PUT` update, `PATCH`
//! patch, `DELETE` delete, others none. Answers are kept: allowed ones for the kubelet's
//! `authorization.webhook.cacheAuthorizedTTL` (5 min), others for `cacheUnauthorizedTTL`
//! (30 s); a failed review is not kept and answers `500` with the kubelet's text.

use std::time::Duration;

use axum::http::Method;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

use super::authn::UserInfo;
use super::cache::TtlCache;

/// What a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Let it through.
    Allowed,
    /// `403` with this text.
    Forbidden(String),
    /// A review failed: `500` with this text.
    Failed(String),
}

/// Decides with SubjectAccessReviews (module docs).
pub(super) struct Authorizer {
    client: kube::Client,
    node_name: String,
    /// Review answers by the JSON of the review's spec.
    answers: TtlCache<String, Answer>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
}

/// A review's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Allow,
    Deny,
    NoOpinion,
    /// Allowed and denied at once: an error, as in the kubelet.
    Both,
}

impl Authorizer {
    /// Reviews access to `nodes/<node_name>` with `client`, keeping allowed answers for
    /// `allowed_ttl` and others for `denied_ttl`.
    pub(super) fn new(
        client: kube::Client,
        node_name: &str,
        allowed_ttl: Duration,
        denied_ttl: Duration,
    ) -> Self {
        Self {
            client,
            node_name: node_name.to_owned(),
            answers: TtlCache::new(),
            allowed_ttl,
            denied_ttl,
        }
    }

    /// Whether `user` may make a `method` request for `path`.
    pub(super) async fn authorize(&self, user: &UserInfo, method: &Method, path: &str) -> Decision {
        let verb = verb(method);
        let subresources = subresources(path);
        for subresource in &subresources {
            let spec = self.spec(user, verb, subresource);
            let answer = match self.review(spec).await {
                Ok(Answer::Both) => Err(
                    "webhook subject access review returned both allow and deny response"
                        .to_owned(),
                ),
                Ok(answer) => Ok(answer),
                Err(error) => Err(error.to_string()),
            };
            match answer {
                Ok(Answer::Allow) => return Decision::Allowed,
                Ok(_) => {}
                Err(error) => {
                    warn!(user = %user.name, verb, subresource, %error, "authorization error");
                    return Decision::Failed(format!(
                        "Authorization error (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                        user.name
                    ));
                }
            }
        }
        debug!(user = %user.name, verb, ?subresources, "forbidden");
        Decision::Forbidden(format!(
            "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
            user.name,
            subresources.join(" ")
        ))
    }

    fn spec(&self, user: &UserInfo, verb: &str, subresource: &str) -> SubjectAccessReviewSpec {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        SubjectAccessReviewSpec {
            user: some(&user.name),
            uid: some(&user.uid),
            groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: some(verb),
                version: Some("v1".to_owned()),
                resource: Some("nodes".to_owned()),
                subresource: Some(subresource.to_owned()),
                name: some(&self.node_name),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        }
    }

    async fn review(&self, spec: SubjectAccessReviewSpec) -> Result<Answer, kube::Error> {
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(answer) = self.answers.get(&key) {
            return Ok(answer);
        }
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let answer = match (status.allowed, status.denied.unwrap_or(false)) {
            (true, true) => Answer::Both,
            (true, false) => Answer::Allow,
            (false, true) => Answer::Deny,
            (false, false) => Answer::NoOpinion,
        };
        let ttl = if answer == Answer::Allow {
            self.allowed_ttl
        } else {
            self.denied_ttl
        };
        self.answers.insert(key, answer, ttl);
        Ok(answer)
    }
}

/// The API verb of an HTTP method; empty for methods without one.
pub(super) fn verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// The subresources of `nodes` a request for `path` is authorized as, in order (module docs).
pub(super) fn subresources(path: &str) -> Vec<&'static str> {
    let mut out = Vec::with_capacity(2);
    if is_subpath(path, "/pods") || is_subpath(path, "/runningpods/") {
        out.push("pods");
    } else if is_subpath(path, "/healthz") {
        out.push("healthz");
    } else if is_subpath(path, "/configz") {
        out.push("configz");
    }
    let last = [
        ("/stats/", "stats"),
        ("/metrics", "metrics"),
        ("/logs/", "log"),
        ("/checkpoint/", "checkpoint"),
        ("/statusz", "statusz"),
        ("/flagz", "configz"),
    ]
    .into_iter()
    .find(|(prefix, _)| is_subpath(path, prefix))
    .map_or("proxy", |(_, subresource)| subresource);
    out.push(last);
    out
}

/// Whether `path` is `base` (without its trailing `/`) or below it.
fn is_subpath(path: &str, base: &str) -> bool {
    let base = base.strip_suffix('/').unwrap_or(base);
    path.strip_prefix(base)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        let cases: &[(&str, &[&str])] = &[
            ("/pods", &["pods", "proxy"]),
            ("/pods/", &["pods", "proxy"]),
            ("/podsx", &["proxy"]),
            ("/runningpods/", &["pods", "proxy"]),
            ("/healthz", &["healthz", "proxy"]),
            ("/healthz/ping", &["healthz", "proxy"]),
            ("/configz", &["configz", "proxy"]),
            ("/stats/summary", &["stats"]),
            ("/stats", &["stats"]),
            ("/metrics", &["metrics"]),
            ("/metrics/cadvisor", &["metrics"]),
            ("/logs/syslog", &["log"]),
            ("/checkpoint/ns/pod/c", &["checkpoint"]),
            ("/statusz", &["statusz"]),
            ("/flagz", &["configz"]),
            ("/containerLogs/ns/pod/c", &["proxy"]),
            ("/exec/ns/pod/c", &["proxy"]),
            ("/run/ns/pod/c", &["proxy"]),
            ("/", &["proxy"]),
        ];
        for (path, expected) in cases {
            assert_eq!(subresources(path), *expected, "{path}");
        }
    }

    #[test]
    fn methods_map_to_api_verbs() {
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::POST), "create");
        assert_eq!(verb(&Method::PUT), "update");
        assert_eq!(verb(&Method::PATCH), "patch");
        assert_eq!(verb(&Method::DELETE), "delete");
        assert_eq!(verb(&Method::HEAD), "");
    }
}
