//! Update propagation: content updates (E2E-9), optional objects created, updated and deleted
//! after the pod started (E2E-11, E2E-18), immutable objects (E2E-13, E2E-19). Update scenarios
//! record the propagation latency of every update.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::volumes::{cm_data, secret_data, spec_with};
use crate::ctx::{Ctx, ensure, wait_for, wait_for_content};

/// How many successive updates the latency scenarios make.
const UPDATES: usize = 10;

/// E2E-9: data-1 value-1 → value-2 → … reaches the file each time.
pub(crate) async fn configmap_update(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "configMap": { "name": "cm" } }])),
        )
        .await?;
    let file = ctx.volume_dir(&pod, "configmap", "v")?.join("data-1");
    wait_for_content(&file, b"value-1").await?;
    for i in 2..UPDATES + 2 {
        let value = format!("value-{i}");
        ctx.measure_update(&file, value.as_bytes(), async {
            ctx.set_config_map_data("cm", json!({ "data-1": value, "data-2": "value-2" }))
                .await
        })
        .await?;
    }
    // A key removed from the object disappears from the volume.
    let gone = ctx.volume_dir(&pod, "configmap", "v")?.join("data-3");
    ctx.wait_for_absent(&gone).await
}

/// E2E-9 for secrets.
pub(crate) async fn secret_update(ctx: &Ctx) -> Result<(), String> {
    ctx.create_secret("s", secret_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "secret": { "secretName": "s" } }])),
        )
        .await?;
    let file = ctx.volume_dir(&pod, "secret", "v")?.join("data-1");
    wait_for_content(&file, b"value-1\n").await?;
    let api = ctx.secrets();
    for i in 2..UPDATES + 2 {
        let value = format!("value-{i}\n");
        ctx.measure_update(&file, value.as_bytes(), async {
            let patch = json!({ "stringData": { "data-1": value } });
            api.patch("s", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| format!("patching secret s: {e}"))
        })
        .await?;
    }
    Ok(())
}

/// E2E-11: three optional configMap volumes — *delete* (object deleted → its file goes),
/// *update* (data-1 removed, data-3 added), *create* (object created after the pod started).
pub(crate) async fn configmap_optional_updates(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm-delete", json!({ "data-1": "value-1" }))
        .await?;
    ctx.create_config_map("cm-update", json!({ "data-1": "value-1" }))
        .await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([
                { "name": "delete", "configMap": { "name": "cm-delete", "optional": true } },
                { "name": "update", "configMap": { "name": "cm-update", "optional": true } },
                { "name": "create", "configMap": { "name": "cm-create", "optional": true } }
            ])),
        )
        .await?;
    let delete = ctx.volume_dir(&pod, "configmap", "delete")?.join("data-1");
    let update = ctx.volume_dir(&pod, "configmap", "update")?;
    let create = ctx.volume_dir(&pod, "configmap", "create")?;
    wait_for_content(&delete, b"value-1").await?;
    wait_for_content(&update.join("data-1"), b"value-1").await?;
    // The missing optional object still gives a (empty) volume: the pod is not blocked.
    wait_for(
        &format!("{} to exist", create.join("..data").display()),
        || async {
            std::fs::symlink_metadata(create.join("..data"))
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await?;

    ctx.config_maps()
        .delete("cm-delete", &DeleteParams::default())
        .await
        .map_err(|e| format!("deleting cm-delete: {e}"))?;
    ctx.set_config_map_data("cm-update", json!({ "data-3": "value-3" }))
        .await?;
    ctx.create_config_map("cm-create", json!({ "data-1": "value-1" }))
        .await?;

    ctx.wait_for_absent(&delete).await?;
    wait_for_content(&update.join("data-3"), b"value-3").await?;
    ctx.wait_for_absent(&update.join("data-1")).await?;
    wait_for_content(&create.join("data-1"), b"value-1").await
}

/// E2E-18: the same three cases for optional secrets.
pub(crate) async fn secret_optional_updates(ctx: &Ctx) -> Result<(), String> {
    ctx.create_secret("s-delete", json!({ "data-1": "value-1\n" }))
        .await?;
    ctx.create_secret("s-update", json!({ "data-1": "value-1\n" }))
        .await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([
                { "name": "delete", "secret": { "secretName": "s-delete", "optional": true } },
                { "name": "update", "secret": { "secretName": "s-update", "optional": true } },
                { "name": "create", "secret": { "secretName": "s-create", "optional": true } }
            ])),
        )
        .await?;
    let delete = ctx.volume_dir(&pod, "secret", "delete")?.join("data-1");
    let update = ctx.volume_dir(&pod, "secret", "update")?;
    let create = ctx.volume_dir(&pod, "secret", "create")?;
    wait_for_content(&delete, b"value-1\n").await?;
    wait_for_content(&update.join("data-1"), b"value-1\n").await?;

    ctx.secrets()
        .delete("s-delete", &DeleteParams::default())
        .await
        .map_err(|e| format!("deleting s-delete: {e}"))?;
    let api = ctx.secrets();
    let mut s: Secret = api
        .get("s-update")
        .await
        .map_err(|e| format!("reading s-update: {e}"))?;
    s.data = Some([("data-3".to_string(), ByteString(b"value-3\n".to_vec()))].into());
    api.replace("s-update", &PostParams::default(), &s)
        .await
        .map_err(|e| format!("updating s-update: {e}"))?;
    ctx.create_secret("s-create", json!({ "data-1": "value-1\n" }))
        .await?;

    ctx.wait_for_absent(&delete).await?;
    wait_for_content(&update.join("data-3"), b"value-3\n").await?;
    ctx.wait_for_absent(&update.join("data-1")).await?;
    wait_for_content(&create.join("data-1"), b"value-1\n").await
}

/// E2E-13: an immutable ConfigMap is projected; data edits and un-setting `immutable` are
/// rejected as Invalid; label edits are allowed; the volume keeps the original data.
pub(crate) async fn immutable_configmap(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map_json(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cm" },
        "data": { "data-1": "value-1" }, "immutable": true
    }))
    .await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "configMap": { "name": "cm" } }])),
        )
        .await?;
    let file = ctx.volume_dir(&pod, "configmap", "v")?.join("data-1");
    wait_for_content(&file, b"value-1").await?;
    let api = ctx.config_maps();
    for (what, patch) in [
        ("a data edit", json!({ "data": { "data-1": "value-2" } })),
        ("un-setting immutable", json!({ "immutable": false })),
    ] {
        match api
            .patch("cm", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 422 && e.reason == "Invalid" => {}
            other => {
                return Err(format!(
                    "{what} of an immutable configmap gave {other:?}, want 422 Invalid"
                ));
            }
        }
    }
    api.patch(
        "cm",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "metadata": { "labels": { "edited": "yes" } } })),
    )
    .await
    .map_err(|e| format!("a label edit of an immutable configmap failed: {e}"))?;
    let content = std::fs::read(&file).map_err(|e| e.to_string())?;
    ensure(content == b"value-1", || {
        "immutable volume content changed".into()
    })
}
