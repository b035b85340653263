//! Service account tokens through the TokenRequest API (PL-10).

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::*;

fn claims(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

// PL-10: the token is requested for the pod's service account with the source's audience and
// expiry, bound to the pod, and written at the source's path.
#[tokio::test]
async fn a_projected_token_is_bound_to_the_pod_with_audience_and_expiry() {
    let env = Env::start().await;
    let pod = env.create_pod(
        "p",
        json!([{"name": "kube-api-access-x", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 7200}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
        ]}}]),
    );
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, PROJECTED, "kube-api-access-x");
    let seen = files(&dir);
    let c = claims(&seen["token"]);
    assert_eq!(c["aud"], json!(["vault"]));
    assert_eq!(c["sub"], "system:serviceaccount:default:default");
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "p");
    assert_eq!(
        c["kubernetes.io"]["pod"]["uid"].as_str(),
        pod.metadata.uid.as_deref()
    );
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        7200
    );
    assert_eq!(seen["namespace"], "default");
    assert_eq!(modes(&dir)["token"], 0o644);
}

fn fast_refresh(config: &mut nodelet_volume_manager::Config) {
    config.resync_interval = None;
}

// PL-10: before the token expires (at the configured fraction of its lifetime, 80 % by
// default) a new token is requested and the volume rewritten, with no object change.
#[tokio::test]
async fn tokens_are_refreshed_before_expiry_by_rewriting_the_volume() {
    let env = Env::start_with(Options {
        configure: fast_refresh,
        // 0.1 % of the 600 s minimum lifetime: the mechanism runs in well under a second.
        sources: SourceOptions {
            token_refresh_fraction: 0.001,
            ..SourceOptions::default()
        },
        ..Options::default()
    })
    .await;
    let pod = env.create_pod(
        "p",
        json!([{"name": "tok", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}}]}}]),
    );
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, PROJECTED, "tok");
    let first = files(&dir)["token"].clone();
    env.until("a new token is written", || {
        files(&dir).get("token").is_some_and(|t| *t != first)
    })
    .await;
    let second = files(&dir)["token"].clone();
    assert_ne!(claims(&first)["jti"], claims(&second)["jti"]);
}

// PL-10, PL-11: with fsGroup (and a run-as user) the token is written 0600 and chowned to the
// user; fsGroup then adds group read: 0640. Current uid/gid, so no privilege is needed.
#[tokio::test]
async fn a_token_with_fs_group_and_run_as_user_is_0640_and_owned_by_the_user() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::start().await;
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let pod = env.create_pod_json(PodBuilder::new("default", "p").spec(json!({
                 "securityContext": {"fsGroup": gid, "runAsUser": uid},
                 "containers": [{"name": "c", "image": "x",
                     "volumeMounts": [{"name": "tok", "mountPath": "/t"}]}],
                 "volumes": [{"name": "tok", "projected": {"defaultMode": 0o644, "sources": [
                     {"serviceAccountToken": {"path": "token"}}]}}]
    })).json());
    env.add_and_mount(&pod).await;
    let dir = env.dir(&pod, PROJECTED, "tok");
    assert_eq!(modes(&dir)["token"], 0o640);
    let meta = std::fs::metadata(dir.join("token")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (uid, gid));
}
