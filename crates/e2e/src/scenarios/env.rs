//! Environment variables and image pull secrets as the agent resolves them into each container's
//! env file: configMapKeyRef / secretKeyRef (E2E-23, E2E-26), envFrom with a prefix (E2E-24,
//! E2E-27), a missing key (PW-12), a missing pull secret (PW-7), and nodelet's own environment
//! that follows a change (FC-10, FC-14).

use std::time::Instant;

use serde_json::{Value, json};

use super::volumes::{cm_data, secret_data};
use crate::ctx::{Ctx, ensure};

fn expect_var(env: &serde_json::Map<String, Value>, name: &str, value: &str) -> Result<(), String> {
    ensure(env.get(name).and_then(Value::as_str) == Some(value), || {
        format!("env {name} = {:?}, want {value:?}", env.get(name))
    })
}

/// E2E-23, E2E-26 and `$(VAR)` expansion (PW-10).
pub(crate) async fn env_from_keys(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    ctx.create_secret("s", secret_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            json!({ "containers": [{ "name": "c", "env": [
                { "name": "CONFIG_DATA_1", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "data-1" } } },
                { "name": "SECRET_DATA", "valueFrom": { "secretKeyRef": { "name": "s", "key": "data-1" } } },
                { "name": "OPTIONAL_MISSING", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "nope", "optional": true } } },
                { "name": "COMPOSED", "value": "$(CONFIG_DATA_1)-$$(CONFIG_DATA_1)" }
            ] }] }),
        )
        .await?;
    let env = ctx.wait_for_env(&pod, "c").await?;
    expect_var(&env, "CONFIG_DATA_1", "value-1")?;
    expect_var(&env, "SECRET_DATA", "value-1\n")?;
    expect_var(&env, "COMPOSED", "value-1-$(CONFIG_DATA_1)")?;
    ensure(!env.contains_key("OPTIONAL_MISSING"), || {
        "an optional missing key produced a variable".into()
    })
}

/// E2E-24, E2E-27: envFrom twice, the second with prefix `p-`, for a ConfigMap and a Secret.
pub(crate) async fn env_from_sources(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    ctx.create_secret("s", secret_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            json!({ "containers": [
                { "name": "cms", "envFrom": [
                    { "configMapRef": { "name": "cm" } },
                    { "prefix": "p-", "configMapRef": { "name": "cm" } },
                    { "configMapRef": { "name": "absent", "optional": true } }
                ] },
                { "name": "secrets", "envFrom": [
                    { "secretRef": { "name": "s" } },
                    { "prefix": "p-", "secretRef": { "name": "s" } }
                ] }
            ] }),
        )
        .await?;
    let env = ctx.wait_for_env(&pod, "cms").await?;
    for i in 1..=3 {
        expect_var(&env, &format!("data-{i}"), &format!("value-{i}"))?;
        expect_var(&env, &format!("p-data-{i}"), &format!("value-{i}"))?;
    }
    let env = ctx.wait_for_env(&pod, "secrets").await?;
    for i in 1..=3 {
        expect_var(&env, &format!("data-{i}"), &format!("value-{i}\n"))?;
        expect_var(&env, &format!("p-data-{i}"), &format!("value-{i}\n"))?;
    }
    Ok(())
}

/// PW-10, PW-12: a missing non-optional key leaves the container waiting with
/// `CreateContainerConfigError` and a `Failed` event `Error: couldn't find key …`; the env file
/// appears once the key exists.
pub(crate) async fn env_missing_key(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", cm_data()).await?;
    let pod = ctx
        .create_pod(
            "p",
            json!({ "containers": [{ "name": "c", "env": [
                { "name": "V", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "data-4" } } }
            ] }] }),
        )
        .await?;
    let want = format!(
        "Error: couldn't find key data-4 in ConfigMap {}/cm",
        ctx.namespace
    );
    ctx.wait_for_event("p", "Failed", &want).await?;
    ctx.wait_for_waiting_reason("p", "CreateContainerConfigError")
        .await?;
    ctx.set_config_map_data("cm", json!({ "data-4": "value-4" }))
        .await?;
    let env = ctx.wait_for_env(&pod, "c").await?;
    expect_var(&env, "V", "value-4")
}

/// PW-7: a missing image pull secret gives one `FailedToRetrieveImagePullSecret` warning with
/// the kubelet's text; the pod is not blocked (its env file is still written).
pub(crate) async fn image_pull_secret_missing(ctx: &Ctx) -> Result<(), String> {
    ctx.create_secret("present", json!({ ".dockerconfigjson": "{\"auths\":{}}" }))
        .await?;
    let pod = ctx
        .create_pod(
            "p",
            json!({
                "imagePullSecrets": [{ "name": "present" }, { "name": "absent" }],
                "containers": [{ "name": "c", "env": [{ "name": "A", "value": "1" }] }]
            }),
        )
        .await?;
    ctx.wait_for_event(
        "p",
        "FailedToRetrieveImagePullSecret",
        "Unable to retrieve some image pull secrets (absent); attempting to pull the image may not succeed.",
    )
    .await?;
    let env = ctx.wait_for_env(&pod, "c").await?;
    expect_var(&env, "A", "1")
}

/// PW-10 `fileKeyRef` (Kubernetes' `EnvFiles`, on by default since 1.35): a variable read from an
/// env file in the pod's emptyDir. Until the file exists the container waits with
/// `CreateContainerConfigError`; once something writes it (on a kubelet node an init container;
/// here the suite, through the agent's root directory) and the pod is synced again (a pod
/// update, so the scenario does not wait out the sync back-off), the variable is set.
pub(crate) async fn env_file_key_ref(ctx: &Ctx) -> Result<(), String> {
    let pod = ctx
        .create_pod(
            "p",
            json!({
                "volumes": [{ "name": "envfiles", "emptyDir": {} }],
                "containers": [{ "name": "c",
                    "volumeMounts": [{ "name": "envfiles", "mountPath": "/envfiles" }],
                    "env": [
                        { "name": "DB_HOST", "valueFrom": { "fileKeyRef":
                            { "volumeName": "envfiles", "path": "vars.env", "key": "DB" } } },
                        { "name": "MOTD", "valueFrom": { "fileKeyRef":
                            { "volumeName": "envfiles", "path": "vars.env", "key": "MOTD" } } },
                        { "name": "ABSENT", "valueFrom": { "fileKeyRef":
                            { "volumeName": "envfiles", "path": "vars.env", "key": "ABSENT",
                              "optional": true } } }
                    ] }]
            }),
        )
        .await?;
    ctx.wait_for_waiting_reason("p", "CreateContainerConfigError")
        .await?;
    let file = ctx
        .volume_dir(&pod, "empty-dir", "envfiles")?
        .join("vars.env");
    std::fs::write(
        &file,
        "# written by an init container\nDB='db.internal'\nMOTD='two\nlines' # note\n",
    )
    .map_err(|e| format!("writing {}: {e}", file.display()))?;
    ctx.pods()
        .patch(
            "p",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                &json!({ "metadata": { "annotations": { "env-file": "written" } } }),
            ),
        )
        .await
        .map_err(|e| format!("annotating the pod: {e}"))?;
    let env = ctx.wait_for_env(&pod, "c").await?;
    expect_var(&env, "DB_HOST", "db.internal")?;
    expect_var(&env, "MOTD", "two\nlines")?;
    ensure(!env.contains_key("ABSENT"), || {
        "an optional key the file does not set produced a variable".into()
    })
}

/// FC-10, FC-14 (nodelet's own, beyond the kubelet): a container whose pod asks
/// `nodelet.io/follow-env` has its env file follow a change of a key it reads (`EnvUpdated`,
/// naming the object and the key); one whose pod does not keeps the environment it was created
/// with, as the kubelet's. Measures patch returned → the new value in the env file.
pub(crate) async fn env_follow(ctx: &Ctx) -> Result<(), String> {
    ctx.create_config_map("cm", json!({ "mode": "a", "other": "1" }))
        .await?;
    let container = json!({ "name": "c",
        "env": [{ "name": "MODE", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "mode" } } }],
        "envFrom": [{ "prefix": "CM_", "configMapRef": { "name": "cm" } }] });
    let follows = ctx
        .create_annotated_pod(
            "follows",
            json!({ "nodelet.io/follow-env": "true" }),
            json!({ "containers": [container.clone()] }),
        )
        .await?;
    let kept = ctx
        .create_pod("kept", json!({ "containers": [container] }))
        .await?;
    for pod in [&follows, &kept] {
        let env = ctx.wait_for_env(pod, "c").await?;
        expect_var(&env, "MODE", "a")?;
    }
    let patched = Instant::now();
    ctx.set_config_map_data("cm", json!({ "mode": "b", "other": "1" }))
        .await?;
    let path = ctx.pod_dir(&follows)?.join("containers/c/env.json");
    crate::wait_for(&format!("MODE=b in {}", path.display()), || async {
        let env = ctx.wait_for_env(&follows, "c").await?;
        expect_var(&env, "MODE", "b")?;
        expect_var(&env, "CM_mode", "b")
    })
    .await?;
    ctx.record_latency(patched.elapsed());
    let what = format!("(ConfigMap {}/cm: mode)", ctx.namespace);
    ctx.wait_for_event("follows", "EnvUpdated", &what).await?;
    let env = ctx.wait_for_env(&kept, "c").await?;
    expect_var(&env, "MODE", "a")?;
    expect_var(&env, "CM_mode", "a")
}
