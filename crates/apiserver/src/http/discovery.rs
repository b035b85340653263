//! Non-resource endpoints: `/version`, health checks, and plain-JSON discovery (`/api`,
//! `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`). Aggregated discovery is
//! not served: clients asking for it get plain JSON (content type `application/json`) and fall
//! back, as they do against older servers.

use std::sync::Arc;

use serde_json::{Value, json};

use super::response::{self, Body};
use crate::access::reviews::{self, REVIEWS};
use crate::resources::Served;
use crate::state::Shared;
use crate::status::ApiError;

/// `/readyz` during a restart's not-ready window: the verbose check list a failing
/// kube-apiserver prints (storage not ready yet), then the verdict.
const NOT_READY: &str = "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n\
[+]informer-sync ok\n[+]shutdown ok\nreadyz check failed\n";

/// The Kubernetes version this server reports (the API surface it imitates).
const MAJOR: &str = "1";
const MINOR: &str = "36";

pub(crate) fn non_resource(
    shared: &Arc<Shared>,
    path: &str,
) -> Result<http::Response<Body>, ApiError> {
    let path = path.trim_end_matches('/');
    let served = &shared.registry.served;
    let v = match path {
        "/version" => json!({
            "major": MAJOR, "minor": MINOR,
            "emulationMajor": MAJOR, "emulationMinor": MINOR,
            "minCompatibilityMajor": MAJOR, "minCompatibilityMinor": "35",
            "gitVersion": format!("v{MAJOR}.{MINOR}.0-nodelet"),
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "none (nodelet-apiserver, Rust)",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, nodelet_core::go::arch()),
        }),
        "/readyz" if !shared.controls.ready() => return Ok(response::text(500, NOT_READY)),
        "/healthz" | "/livez" | "/readyz" => return Ok(response::text(200, "ok")),
        "/api" => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}],
        }),
        "/apis" => {
            let groups: Vec<Value> = named_groups(served)
                .into_iter()
                .map(|(g, v)| group(g, v))
                .collect();
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        }
        "/api/v1" => resource_list(served, "", "v1"),
        p => {
            let parts: Vec<&str> = p.trim_start_matches('/').split('/').collect();
            match parts.as_slice() {
                ["apis", g] => match named_groups(served).into_iter().find(|(name, _)| name == g) {
                    Some((name, v)) => {
                        let mut d = group(name, v);
                        d["kind"] = json!("APIGroup");
                        d["apiVersion"] = json!("v1");
                        d
                    }
                    None => return Err(ApiError::page_not_found()),
                },
                ["apis", g, v]
                    if served.iter().any(|r| r.group == *g && r.version == *v)
                        || REVIEWS.iter().any(|r| r.group == *g && r.version == *v) =>
                {
                    resource_list(served, g, v)
                }
                _ => return Err(ApiError::page_not_found()),
            }
        }
    };
    Ok(response::json(200, &v))
}

/// The served groups and those of the review APIs (always served), each with its version.
fn named_groups(served: &Served) -> Vec<(&'static str, &'static str)> {
    let mut out = served.named_groups();
    for (g, v) in reviews::groups() {
        if !out.iter().any(|(name, _)| *name == g) {
            out.push((g, v));
        }
    }
    out
}

fn group(name: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{name}/{version}"), "version": version});
    json!({"name": name, "versions": [gv.clone()], "preferredVersion": gv})
}

fn resource_list(served: &Served, g: &str, v: &str) -> Value {
    let mut list = Vec::new();
    for r in served.iter().filter(|r| r.group == g && r.version == v) {
        let mut entry = json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": r.verbs(),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories().is_empty() {
            entry["categories"] = json!(r.categories());
        }
        list.push(entry);
        for (sub, verbs) in r.subresources {
            let kind = match *sub {
                "token" => "TokenRequest",
                "binding" => "Binding",
                _ => r.kind,
            };
            let mut e = json!({"name": format!("{}/{sub}", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
            if *sub == "token" {
                e["group"] = json!("authentication.k8s.io");
                e["version"] = json!("v1");
            }
            list.push(e);
        }
    }
    for r in REVIEWS.iter().filter(|r| r.group == g && r.version == v) {
        list.push(json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": ["create"],
        }));
    }
    let gv = if g.is_empty() {
        v.to_string()
    } else {
        format!("{g}/{v}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
}
