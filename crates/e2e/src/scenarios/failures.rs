//! Non-optional references that cannot be satisfied (E2E-14, E2E-20): the pod's volume is never
//! written, a `FailedMount` event carries the kubelet's text (PL-9), and the pod recovers once
//! the object appears.

use serde_json::json;

use super::volumes::{cm_data, secret_data, spec_with};
use crate::ctx::{Ctx, ensure, wait_for_content};

/// E2E-14: a missing ConfigMap.
pub(crate) async fn missing_configmap(ctx: &Ctx) -> Result<(), String> {
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "configMap": { "name": "cm" } }])),
        )
        .await?;
    // `configmap "cm" not found` (Watch) or `configmaps "cm" not found` (Cache/Get): PL-9.
    let msg = ctx
        .wait_for_event(
            "p",
            "FailedMount",
            "MountVolume.SetUp failed for volume \"v\" : ",
        )
        .await?;
    ensure(msg.contains("\"cm\" not found"), || {
        format!("FailedMount message {msg:?}")
    })?;
    let dir = ctx.volume_dir(&pod, "configmap", "v")?;
    ensure(!dir.join("..data").exists(), || {
        "a volume was written for a missing configmap".into()
    })?;
    ctx.wait_for_condition("p", "PodReadyToStartContainers", "False")
        .await?;
    // The pod recovers when the object appears.
    ctx.create_config_map("cm", cm_data()).await?;
    wait_for_content(&dir.join("data-1"), b"value-1").await
}

/// E2E-14: a missing key named in `items`.
pub(crate) async fn missing_configmap_key(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "configMap": { "name": "cm",
                    "items": [{ "key": "data-4", "path": "path/to/data-4" }] } }])),
        )
        .await?;
    ctx.wait_for_event(
        "p",
        "FailedMount",
        "MountVolume.SetUp failed for volume \"v\" : configmap references non-existent config key: data-4",
    )
    .await?;
    let dir = ctx.volume_dir(&pod, "configmap", "v")?;
    ensure(!dir.join("path/to/data-4").exists(), || {
        "a missing key was written".into()
    })
}

/// E2E-20: a missing Secret, then a missing key `data_4` of an existing one.
pub(crate) async fn missing_secret(ctx: &Ctx) -> Result<(), String> {
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "secret": { "secretName": "s" } }])),
        )
        .await?;
    let msg = ctx
        .wait_for_event(
            "p",
            "FailedMount",
            "MountVolume.SetUp failed for volume \"v\" : ",
        )
        .await?;
    ensure(msg.contains("\"s\" not found"), || {
        format!("FailedMount message {msg:?}")
    })?;
    let dir = ctx.volume_dir(&pod, "secret", "v")?;
    ensure(!dir.join("..data").exists(), || {
        "a volume was written for a missing secret".into()
    })?;

    ctx.create_secret("s2", secret_data()).await?;
    ctx.create_pod(
        "p2",
        spec_with(json!([{ "name": "v", "secret": { "secretName": "s2",
                "items": [{ "key": "data_4", "path": "new-path-data_4" }] } }])),
    )
    .await?;
    ctx.wait_for_event(
        "p2",
        "FailedMount",
        "MountVolume.SetUp failed for volume \"v\" : references non-existent secret key: data_4",
    )
    .await
    .map(|_| ())
}
