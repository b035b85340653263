//! Volume content, modes and mappings: configMap (E2E-1 … E2E-12), secret (E2E-15 … E2E-17),
//! projected (E2E-21, E2E-22, plus the service-account token every real pod gets) and
//! downwardAPI (PL-13).

use base64::Engine as _;
use serde_json::{Value, json};

use crate::ctx::{Ctx, ensure, mode_of, read, wait_for, wait_for_content};

/// The upstream ConfigMap fixture.
pub(crate) fn cm_data() -> Value {
    json!({ "data-1": "value-1", "data-2": "value-2", "data-3": "value-3" })
}

/// The upstream Secret fixture (values end in a newline).
pub(crate) fn secret_data() -> Value {
    json!({ "data-1": "value-1\n", "data-2": "value-2\n", "data-3": "value-3\n" })
}

/// A container mounting each of `volumes` at `/etc/<volume>`.
pub(crate) fn container(volumes: &[&str]) -> Value {
    let mounts: Vec<Value> = volumes
        .iter()
        .map(|v| json!({ "name": v, "mountPath": format!("/etc/{v}"), "readOnly": true }))
        .collect();
    json!({ "name": "c", "volumeMounts": mounts })
}

/// A pod spec with `volumes` (a JSON array) and one container `c` mounting each of them at
/// `/etc/<volume>` (a volume no container mounts is never set up, VM-4).
pub(crate) fn spec_with(volumes: Value) -> Value {
    let names: Vec<&str> = volumes
        .as_array()
        .map(|vs| vs.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    json!({ "containers": [container(&names)], "volumes": volumes })
}

/// E2E-1, E2E-2: default mode 0644; defaultMode 0400.
pub(crate) async fn configmap_volume(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([
                { "name": "plain", "configMap": { "name": "cm" } },
                { "name": "ro", "configMap": { "name": "cm", "defaultMode": 0o400 } }
            ])),
        )
        .await?;
    let plain = ctx.volume_dir(&pod, "configmap", "plain")?;
    wait_for_content(&plain.join("data-1"), b"value-1").await?;
    // Top-level names appear one by one just after the `..data` swap (AW-5 step 10): wait for
    // each rather than reading siblings at once.
    wait_for_content(&plain.join("data-2"), b"value-2").await?;
    wait_for_content(&plain.join("data-3"), b"value-3").await?;
    ensure(mode_of(&plain.join("data-1"))? == 0o644, || {
        format!(
            "data-1 mode {:o}, want 644 (E2E-1)",
            mode_of(&plain.join("data-1")).unwrap_or(0)
        )
    })?;
    let ro = ctx.volume_dir(&pod, "configmap", "ro")?;
    wait_for_content(&ro.join("data-1"), b"value-1").await?;
    let mode = mode_of(&ro.join("data-1"))?;
    ensure(mode == 0o400, || {
        format!("defaultMode 0400 gave mode {mode:o} (E2E-2)")
    })?;
    // The kubelet layout: ..data and a visible symlink per key (AW-9, AW-11).
    let data_link = std::fs::read_link(plain.join("..data")).map_err(|e| e.to_string())?;
    ensure(data_link.to_string_lossy().starts_with(".."), || {
        format!("..data points to {}", data_link.display())
    })?;
    let visible = std::fs::read_link(plain.join("data-1")).map_err(|e| e.to_string())?;
    ensure(visible.to_string_lossy() == "..data/data-1", || {
        format!("data-1 links to {}", visible.display())
    })
}

/// E2E-6, E2E-7: item data-2 → path/to/data-2 (0644), and with item mode 0400.
pub(crate) async fn configmap_volume_mappings(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([
                { "name": "mapped", "configMap": { "name": "cm",
                    "items": [{ "key": "data-2", "path": "path/to/data-2" }] } },
                { "name": "moded", "configMap": { "name": "cm",
                    "items": [{ "key": "data-2", "path": "path/to/data-2", "mode": 0o400 }] } }
            ])),
        )
        .await?;
    let mapped = ctx.volume_dir(&pod, "configmap", "mapped")?;
    wait_for_content(&mapped.join("path/to/data-2"), b"value-2").await?;
    ensure(!mapped.join("data-1").exists(), || {
        "unmapped key data-1 was projected".into()
    })?;
    let mode = mode_of(&mapped.join("path/to/data-2"))?;
    ensure(mode == 0o644, || {
        format!("mapped file mode {mode:o}, want 644 (E2E-6)")
    })?;
    let moded = ctx.volume_dir(&pod, "configmap", "moded")?;
    wait_for_content(&moded.join("path/to/data-2"), b"value-2").await?;
    let mode = mode_of(&moded.join("path/to/data-2"))?;
    ensure(mode == 0o400, || {
        format!("item mode 0400 gave {mode:o} (E2E-7)")
    })
}

/// E2E-10: binaryData is projected byte-exact next to text data.
pub(crate) async fn configmap_binary_data(ctx: &Ctx) -> Result<(), String> {
    let bytes = [0xde, 0xca, 0xfe, 0xba, 0xd0, 0xfe, 0xff];
    ctx.create_config_map_json(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cm" },
        "data": { "data-1": "value-1" },
        "binaryData": { "dump.bin": base64::engine::general_purpose::STANDARD.encode(bytes) }
    }))
    .await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "configMap": { "name": "cm" } }])),
        )
        .await?;
    let dir = ctx.volume_dir(&pod, "configmap", "v")?;
    wait_for_content(&dir.join("data-1"), b"value-1").await?;
    wait_for_content(&dir.join("dump.bin"), &bytes).await
}

/// E2E-12: one ConfigMap mounted twice in a pod gives two volumes with the same content.
pub(crate) async fn configmap_multiple_volumes(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([
                { "name": "one", "configMap": { "name": "cm" } },
                { "name": "two", "configMap": { "name": "cm" } }
            ])),
        )
        .await?;
    for vol in ["one", "two"] {
        let dir = ctx.volume_dir(&pod, "configmap", vol)?;
        wait_for_content(&dir.join("data-1"), b"value-1").await?;
    }
    Ok(())
}

/// E2E-15, E2E-17: secret content, defaultMode 0400, mapping data-1 → new-path-data-1, and two
/// volumes of one secret.
pub(crate) async fn secret_volume(ctx: &Ctx) -> Result<(), String> {
    ctx.create_secret("s", secret_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([
                { "name": "plain", "secret": { "secretName": "s" } },
                { "name": "ro", "secret": { "secretName": "s", "defaultMode": 0o400 } },
                { "name": "mapped", "secret": { "secretName": "s",
                    "items": [{ "key": "data-1", "path": "new-path-data-1", "mode": 0o400 }] } }
            ])),
        )
        .await?;
    let plain = ctx.volume_dir(&pod, "secret", "plain")?;
    wait_for_content(&plain.join("data-1"), b"value-1\n").await?;
    let mode = mode_of(&plain.join("data-1"))?;
    ensure(mode == 0o644, || {
        format!("secret default mode {mode:o}, want 644")
    })?;
    let ro = ctx.volume_dir(&pod, "secret", "ro")?;
    wait_for_content(&ro.join("data-3"), b"value-3\n").await?;
    let mode = mode_of(&ro.join("data-3"))?;
    ensure(mode == 0o400, || {
        format!("secret defaultMode 0400 gave {mode:o}")
    })?;
    let mapped = ctx.volume_dir(&pod, "secret", "mapped")?;
    wait_for_content(&mapped.join("new-path-data-1"), b"value-1\n").await?;
    ensure(!mapped.join("data-1").exists(), || {
        "unmapped secret key projected".into()
    })
}

/// E2E-16: a same-name secret in another namespace does not leak into the pod's volume.
pub(crate) async fn secret_same_name_other_namespace(ctx: &Ctx) -> Result<(), String> {
    let other = ctx.extra_namespace("other").await?;
    ctx.create_secret_in(&other, "s", json!({ "data-1": "other-namespace\n" }))
        .await?;
    ctx.create_secret("s", secret_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "v", "secret": { "secretName": "s" } }])),
        )
        .await?;
    let dir = ctx.volume_dir(&pod, "secret", "v")?;
    wait_for_content(&dir.join("data-1"), b"value-1\n").await
}

/// E2E-21, E2E-22 and PL-10: a projected volume merging a configMap (mapped), a secret, a
/// downwardAPI item and a service-account token; defaultMode applies to all sources.
pub(crate) async fn projected_volume(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    ctx.create_secret("s", secret_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "all", "projected": {
                    "defaultMode": 0o440,
                    "sources": [
                        { "configMap": { "name": "cm",
                            "items": [{ "key": "data-2", "path": "path/to/data-2" }] } },
                        { "secret": { "name": "s",
                            "items": [{ "key": "data-1", "path": "new-path-data-1" }] } },
                        { "downwardAPI": { "items": [
                            { "path": "podname", "fieldRef": { "fieldPath": "metadata.name" } }
                        ] } },
                        { "serviceAccountToken": { "path": "token", "expirationSeconds": 3600 } }
                    ]
                } }])),
        )
        .await?;
    let dir = ctx.volume_dir(&pod, "projected", "all")?;
    wait_for_content(&dir.join("path/to/data-2"), b"value-2").await?;
    wait_for_content(&dir.join("new-path-data-1"), b"value-1\n").await?;
    wait_for_content(&dir.join("podname"), b"p").await?;
    let token_path = dir.join("token");
    let token = wait_for(&format!("{} to exist", token_path.display()), || async {
        read(&token_path)
    })
    .await?;
    let parts = token.split(|b| *b == b'.').count();
    ensure(parts == 3, || {
        format!("token is not a JWT ({parts} dot-separated parts)")
    })?;
    for file in ["path/to/data-2", "new-path-data-1", "podname"] {
        let mode = mode_of(&dir.join(file))?;
        ensure(mode == 0o440, || {
            format!("{file} mode {mode:o}, want the defaultMode 440")
        })?;
    }
    Ok(())
}

/// PL-13: downwardAPI files for name, namespace, uid, labels (rendered `k="v"` lines sorted by
/// key, no trailing newline) and a subscripted annotation.
pub(crate) async fn downward_api_volume(ctx: &Ctx) -> Result<(), String> {
    let pod = ctx
        .create_pod(
            "p",
            spec_with(json!([{ "name": "info", "downwardAPI": { "items": [
                    { "path": "name", "fieldRef": { "fieldPath": "metadata.name" } },
                    { "path": "namespace", "fieldRef": { "fieldPath": "metadata.namespace" } },
                    { "path": "uid", "fieldRef": { "fieldPath": "metadata.uid" } },
                    { "path": "labels", "fieldRef": { "fieldPath": "metadata.labels" } },
                    { "path": "app", "fieldRef": { "fieldPath": "metadata.labels['app']" } }
                ] } }])),
        )
        .await?;
    let dir = ctx.volume_dir(&pod, "downward-api", "info")?;
    wait_for_content(&dir.join("name"), b"p").await?;
    wait_for_content(&dir.join("namespace"), ctx.namespace.as_bytes()).await?;
    wait_for_content(&dir.join("uid"), Ctx::uid(&pod)?.as_bytes()).await?;
    wait_for_content(&dir.join("labels"), b"app=\"p\"").await?;
    wait_for_content(&dir.join("app"), b"p").await
}
