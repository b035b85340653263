//! Pod and agent lifecycle: deleting a pod removes what the agent created for it; a restarted
//! agent adopts existing volumes without rewriting them and keeps them current.

use kube::api::Api;
use serde_json::json;

use super::volumes::{cm_data, spec_with};
use crate::ctx::{Ctx, ensure, wait_for, wait_for_content};

/// PL-14, PW-6: after a pod is deleted, its directories are gone and the agent finishes the
/// deletion (the pod object disappears).
pub(crate) async fn pod_deletion_cleanup(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    ctx.create_secret("s", json!({ "k": "v" })).await?;
    let pod = ctx
        .create_pod(
            "p",
            json!({
                "containers": [{ "name": "c", "volumeMounts": [
                    { "name": "cm", "mountPath": "/etc/cm" },
                    { "name": "s", "mountPath": "/etc/s" }
                ], "env": [{ "name": "K", "valueFrom": { "secretKeyRef": { "name": "s", "key": "k" } } }] }],
                "volumes": [
                    { "name": "cm", "configMap": { "name": "cm" } },
                    { "name": "s", "secret": { "secretName": "s" } }
                ]
            }),
        )
        .await?;
    wait_for_content(
        &ctx.volume_dir(&pod, "configmap", "cm")?.join("data-1"),
        b"value-1",
    )
    .await?;
    wait_for_content(&ctx.volume_dir(&pod, "secret", "s")?.join("k"), b"v").await?;
    ctx.wait_for_env(&pod, "c").await?;
    ctx.delete_pod("p").await?;
    ctx.wait_for_absent(&ctx.pod_dir(&pod)?).await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ctx.pods();
    wait_for("the pod object to be deleted", || async {
        match pods.get_opt("p").await {
            Ok(None) => Ok(()),
            Ok(Some(p)) => Err(format!(
                "still present (deletionTimestamp {:?})",
                p.metadata.deletion_timestamp
            )),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// A restarted agent adopts a mounted volume without rewriting unchanged content (the `..data`
/// target stays the same), and later updates still reach it.
pub(crate) async fn agent_restart_adoption(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    let spec = spec_with(json!([{ "name": "v", "configMap": { "name": "cm" } }]));
    let pod = ctx.create_pod("p", spec.clone()).await?;
    let dir = ctx.volume_dir(&pod, "configmap", "v")?;
    wait_for_content(&dir.join("data-1"), b"value-1").await?;
    let before = std::fs::read_link(dir.join("..data")).map_err(|e| e.to_string())?;

    ctx.restart_agent().await?;

    // A pod created after the restart proves the new agent is syncing...
    let probe = ctx.create_pod("probe", spec).await?;
    wait_for_content(
        &ctx.volume_dir(&probe, "configmap", "v")?.join("data-1"),
        b"value-1",
    )
    .await?;
    // ...and by then it has seen the first pod too: its data directory was not rewritten.
    let after = std::fs::read_link(dir.join("..data")).map_err(|e| e.to_string())?;
    ensure(before == after, || {
        format!(
            "the adopted volume was rewritten (..data {} → {})",
            before.display(),
            after.display()
        )
    })?;
    // The adopted volume is still kept current.
    let file = dir.join("data-1");
    ctx.measure_update(&file, b"value-after-restart", async {
        ctx.set_config_map_data("cm", json!({ "data-1": "value-after-restart" }))
            .await
    })
    .await
    .map(|_| ())
}
