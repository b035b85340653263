//! Minimal OpenAPI v3 documents (`/openapi/v3`, `/openapi/v3/api/v1`, ...): just enough for
//! kubectl to see that the server validates fields itself (`fieldValidation` on each PATCH
//! operation tagged with `x-kubernetes-group-version-kind`), so it skips client-side schema
//! validation — which needs full schemas this server does not publish. The review kinds
//! (`reviews.rs`) are listed with their `create` (and such a PATCH). `kubectl explain` and
//! schema-driven client features therefore do not work.

use serde_json::{Map, Value, json};

use crate::access::reviews::REVIEWS;
use crate::resources::{ResourceInfo, Served};
use crate::status::ApiError;

/// Answers `/openapi/v3` and `/openapi/v3/{api/v1 | apis/group/version}`.
pub(crate) fn v3(served: &Served, path: &str) -> Result<Value, ApiError> {
    let rest = path
        .trim_start_matches("/openapi/v3")
        .trim_start_matches('/');
    if rest.is_empty() {
        let mut paths = Map::new();
        let gvs = served.iter().map(gv_path).chain(
            REVIEWS
                .iter()
                .map(|r| format!("apis/{}/{}", r.group, r.version)),
        );
        for gv in gvs {
            paths.insert(
                gv.clone(),
                json!({ "serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", hash(&gv)) }),
            );
        }
        return Ok(json!({ "paths": paths }));
    }
    let mut paths = Map::new();
    // The review kinds: `create` only. kubectl looks for `fieldValidation` on a PATCH of the
    // kind (without one it falls back to `/openapi/v2` schemas, which this server lacks), so
    // the stub names one too; the path answers 405 to it.
    for r in REVIEWS
        .iter()
        .filter(|r| format!("apis/{}/{}", r.group, r.version) == rest)
    {
        let base = if r.namespaced {
            format!("/{rest}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("/{rest}/{}", r.plural)
        };
        let gvk = json!({ "group": r.group, "version": r.version, "kind": r.kind });
        paths.insert(
            base,
            json!({ "post": operation("create", r.kind, &gvk), "patch": operation("patch", r.kind, &gvk) }),
        );
    }
    for r in served.iter().filter(|r| gv_path(r) == rest) {
        let gvk = json!({ "group": r.group, "version": r.version, "kind": r.kind });
        let op = |verb: &str| operation(verb, r.kind, &gvk);
        let base = if r.namespaced {
            format!("/{rest}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("/{rest}/{}", r.plural)
        };
        paths.insert(base.clone(), json!({ "post": op("create") }));
        paths.insert(
            format!("{base}/{{name}}"),
            json!({ "put": op("replace"), "patch": op("patch") }),
        );
    }
    if paths.is_empty() {
        return Err(ApiError::page_not_found());
    }
    Ok(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.0-nodelet"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

/// One operation on `kind`: its group/version/kind and the query parameters that tell kubectl
/// the server validates fields itself.
fn operation(verb: &str, kind: &str, gvk: &Value) -> Value {
    json!({
        "operationId": format!("{verb}{kind}"),
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ],
        "responses": {"200": {"description": "OK"}},
    })
}

fn gv_path(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        format!("api/{}", r.version)
    } else {
        format!("apis/{}/{}", r.group, r.version)
    }
}

/// A stable cache key for a document (the document only changes with the binary).
fn hash(s: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02X}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_lists_every_served_group_version_and_unknown_ones_are_not_found() {
        let served = Served::default();
        let root = v3(&served, "/openapi/v3").unwrap();
        assert!(
            root["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/api/v1?hash=")
        );
        assert!(root["paths"].get("apis/coordination.k8s.io/v1").is_some());
        let doc = v3(&served, "/openapi/v3/api/v1").unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert!(v3(&served, "/openapi/v3/apis/apps/v1").is_err());
        assert!(v3(&served, "/openapi/v3/apis/certificates.k8s.io/v1beta1").is_err());
    }
}
