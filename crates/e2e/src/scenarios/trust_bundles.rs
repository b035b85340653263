//! The `clusterTrustBundle` projected source (PL-17, PL-20): a bundle by name and the
//! bundles of a signer selected by label are projected into a pod's volume, and a change of
//! either reaches the files. Skipped ([`Ctx::skip`]) when discovery shows no
//! ClusterTrustBundle API; the agent must run with the `ClusterTrustBundle` and
//! `ClusterTrustBundleProjection` gates on.

use std::collections::BTreeSet;

use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

use super::volumes::spec_with;
use crate::ctx::{Ctx, ensure, mode_of, wait_for};

/// Three self-signed CA certificates (an API server accepts only CA certificates in a bundle).
const CAS: [&str; 3] = [
    r"-----BEGIN CERTIFICATE-----
MIIBnzCCAUWgAwIBAgIUAXZoAjbb+7tIxMYm13M2cr1FFGAwCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRbm9kZWxldC10ZXN0LWNhLTEwIBcNMjYxMTI0MjMyNTE2WhgP
MjEyNjEwMzEyMzI1MTZaMBwxGjAYBgNVBAMMEW5vZGVsZXQtdGVzdC1jYS0xMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAExXXcpx12g/uSrMQUwbyspaVXblv0glCB
7LEKlhlgCfBf4B7ZMcWFdRjhtXb4sotkbf4tNf/V9p/58cvMXCuSb6NjMGEwHQYD
VR0OBBYEFL/MrZi3MJq12i+zeoEos+rqCy7SMB8GA1UdIwQYMBaAFL/MrZi3MJq1
2i+zeoEos+rqCy7SMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG
CCqGSM49BAMCA0gAMEUCIAqZtuYR2IbzpPZ6QQo/bd6QmMGI8SqDgg6uxzfxB2v0
AiEAk0vxmZIiNWuJzof9iKeFbJCaNhuguOVpq6Rsh6uBRaE=
-----END CERTIFICATE-----
",
    r"-----BEGIN CERTIFICATE-----
MIIBnzCCAUWgAwIBAgIUaItGLvRXEIGrYKjs/RhxqkzprWcwCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRbm9kZWxldC10ZXN0LWNhLTIwIBcNMjYxMTI0MjMyNTE2WhgP
MjEyNjEwMzEyMzI1MTZaMBwxGjAYBgNVBAMMEW5vZGVsZXQtdGVzdC1jYS0yMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEXeXK+ZjRwFaC+4Q+jZxo3Eu/jDQPoKft
sxJt4tOWi1ZuPaOkVZqRACm93A1CjPYKomNF2SPC/xipEWDxXVCpdKNjMGEwHQYD
VR0OBBYEFPUTdMuh9dBrgLCwYu0JP1+LKjfEMB8GA1UdIwQYMBaAFPUTdMuh9dBr
gLCwYu0JP1+LKjfEMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG
CCqGSM49BAMCA0gAMEUCIQCErAqj5bZN5R7yJtZef+LQnszpz2xLwA0x655ty4cC
4gIgJDQ7NJuduPyjsPZ5lrVa6Ek6z40LU35hKDox6Xjw+tM=
-----END CERTIFICATE-----
",
    r"-----BEGIN CERTIFICATE-----
MIIBnzCCAUWgAwIBAgIUIrLq/3bbfKFEteVTqOylpjt6Ih0wCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRbm9kZWxldC10ZXN0LWNhLTMwIBcNMjYxMTI0MjMyNTE2WhgP
MjEyNjEwMzEyMzI1MTZaMBwxGjAYBgNVBAMMEW5vZGVsZXQtdGVzdC1jYS0zMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEdglg7uc0zkZ29649tXKBSZ8bRhrzHChg
Mzl5f/Hc/Nd/bE4wPyf94TXx/tqHbl1jVZDt3T7a3UG7L7mqWYmQHqNjMGEwHQYD
VR0OBBYEFD+zAthI2kW74owzUA3QUopuhsQ/MB8GA1UdIwQYMBaAFD+zAthI2kW7
4owzUA3QUopuhsQ/MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG
CCqGSM49BAMCA0gAMEUCIAQxUviB1ywNablqVQvUMceHtx71BmeVMaS7lHdH85fr
AiEAgk00Cv1LPXH8m/zjuwlSzYJY5dMURPGIawOgzrHQjQg=
-----END CERTIFICATE-----
",
];

/// The versions the kubelet looks for, in its order.
const VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];

/// PL-17 / PL-20 end to end.
pub(crate) async fn cluster_trust_bundle(ctx: &Ctx) -> Result<(), String> {
    let Some(version) = served_version(ctx).await? else {
        ctx.skip(
            "the cluster serves no clustertrustbundles in certificates.k8s.io/v1beta1 or \
             v1alpha1 (a kube-apiserver serves them with \
             --runtime-config=certificates.k8s.io/v1beta1/clustertrustbundles=true and \
             --feature-gates=ClusterTrustBundle=true)",
        );
        return Ok(());
    };
    let resource = ApiResource {
        group: "certificates.k8s.io".into(),
        version: version.into(),
        api_version: format!("certificates.k8s.io/{version}"),
        kind: "ClusterTrustBundle".into(),
        plural: "clustertrustbundles".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    // Cluster-scoped: named after the scenario's namespace, deleted here whatever happens.
    let named = format!("{}-ca", ctx.namespace);
    let signer = format!("nodelet.example.com/{}", ctx.namespace);
    let by_signer = format!("nodelet.example.com:{}:one", ctx.namespace);
    let later = format!("nodelet.example.com:{}:two", ctx.namespace);
    let names = [named.as_str(), by_signer.as_str(), later.as_str()];
    let result = run(ctx, &api, &resource, &named, &signer, &by_signer, &later).await;
    for name in names {
        // Absent already is fine.
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn run(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    named: &str,
    signer: &str,
    by_signer: &str,
    later: &str,
) -> Result<(), String> {
    let label = ctx.namespace.as_str();
    create(api, resource, named, None, label, CAS[0]).await?;
    create(api, resource, by_signer, Some(signer), label, CAS[1]).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "trust", "projected": { "sources": [
                { "clusterTrustBundle": { "name": named, "path": "named.pem" } },
                { "clusterTrustBundle": { "signerName": signer,
                    "labelSelector": { "matchLabels": { "e2e": label } }, "path": "signer.pem" } }
            ] } }])),
        )
        .await?;
    let kept = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.first())
        .and_then(|v| v.projected.as_ref())
        .and_then(|p| p.sources.as_ref())
        .is_some_and(|s| s.iter().all(|s| s.cluster_trust_bundle.is_some()));
    ensure(kept, || {
        "the API server dropped the pod's clusterTrustBundle sources (its \
         ClusterTrustBundleProjection gate is off)"
            .into()
    })?;
    let dir = ctx.volume_dir(&pod, "projected", "trust")?;
    let (named_file, signer_file) = (dir.join("named.pem"), dir.join("signer.pem"));
    wait_for_certs(&named_file, &[CAS[0]]).await?;
    wait_for_certs(&signer_file, &[CAS[1]]).await?;
    let mode = mode_of(&named_file)?;
    ensure(mode == 0o644, || {
        format!("named.pem has mode {mode:o}, not 644")
    })?;

    // The named bundle gains a CA; a second bundle of the signer appears: both files follow.
    replace(
        api,
        resource,
        named,
        None,
        label,
        &format!("{}{}", CAS[0], CAS[2]),
    )
    .await?;
    wait_for_certs(&named_file, &[CAS[0], CAS[2]]).await?;
    create(api, resource, later, Some(signer), label, CAS[2]).await?;
    wait_for_certs(&signer_file, &[CAS[1], CAS[2]]).await?;

    // The pod goes before its bundles (a remount failing on a deleted bundle would hold the
    // teardown in its backoff, VM-9): the volume is torn down.
    ctx.delete_pod("p").await?;
    ctx.wait_for_absent(&dir).await
}

/// The served version of the API, v1beta1 first, as the kubelet picks it.
async fn served_version(ctx: &Ctx) -> Result<Option<&'static str>, String> {
    for version in VERSIONS {
        let gv = format!("certificates.k8s.io/{version}");
        match ctx.client.list_api_group_resources(&gv).await {
            Ok(list)
                if list
                    .resources
                    .iter()
                    .any(|r| r.name == "clustertrustbundles") =>
            {
                return Ok(Some(version));
            }
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(format!("discovery of {gv}: {e}")),
        }
    }
    Ok(None)
}

fn manifest(
    resource: &ApiResource,
    name: &str,
    signer: Option<&str>,
    label: &str,
    pem: &str,
) -> Result<DynamicObject, String> {
    let mut spec = json!({ "trustBundle": pem });
    if let Some(s) = signer {
        spec["signerName"] = json!(s);
    }
    let value: Value = json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": { "name": name, "labels": { "e2e": label } },
        "spec": spec,
    });
    serde_json::from_value(value).map_err(|e| format!("building bundle {name}: {e}"))
}

async fn create(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
    signer: Option<&str>,
    label: &str,
    pem: &str,
) -> Result<(), String> {
    let object = manifest(resource, name, signer, label, pem)?;
    api.create(&PostParams::default(), &object)
        .await
        .map(drop)
        .map_err(|e| format!("creating ClusterTrustBundle {name}: {e}"))
}

async fn replace(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
    signer: Option<&str>,
    label: &str,
    pem: &str,
) -> Result<(), String> {
    let current = api
        .get(name)
        .await
        .map_err(|e| format!("reading ClusterTrustBundle {name}: {e}"))?;
    let mut object = manifest(resource, name, signer, label, pem)?;
    object.metadata.resource_version = current.metadata.resource_version;
    api.replace(name, &PostParams::default(), &object)
        .await
        .map(drop)
        .map_err(|e| format!("updating ClusterTrustBundle {name}: {e}"))
}

/// The CERTIFICATE blocks of a PEM text (the agent writes them in a random order).
fn blocks(pem: &str) -> BTreeSet<String> {
    pem.split_inclusive("-----END CERTIFICATE-----\n")
        .filter(|b| b.contains("-----BEGIN CERTIFICATE-----"))
        .map(|b| b.trim_start().to_owned())
        .collect()
}

async fn wait_for_certs(path: &std::path::Path, expected: &[&str]) -> Result<(), String> {
    let want: BTreeSet<String> = expected.iter().flat_map(|p| blocks(p)).collect();
    let count = want.len();
    wait_for(
        &format!("{} to hold {count} certificates", path.display()),
        || async {
            match std::fs::read_to_string(path) {
                Ok(text) if blocks(&text) == want && text.matches("BEGIN").count() == count => {
                    Ok(())
                }
                Ok(text) => Err(format!("{} blocks", text.matches("BEGIN").count())),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}
