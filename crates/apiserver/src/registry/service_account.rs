//! ServiceAccount admission on pod create, as upstream's `plugin/pkg/admission/serviceaccount`
//! does it (`Config::service_account_admission`):
//! 1. the pod's account (`spec.serviceAccountName`, defaulted to `default`) must exist, else
//!    the create is forbidden: `error looking up service account NS/NAME: serviceaccount
//!    "NAME" not found`;
//! 2. unless `automountServiceAccountToken: false` on the pod (or, when the pod does not say,
//!    on the account), a projected volume `kube-api-access-<5 random chars>` (token, the
//!    `kube-root-ca.crt` CA, the namespace) is appended to the volumes, and every init and
//!    regular container without a mount at `/var/run/secrets/kubernetes.io/serviceaccount`
//!    gets one, read-only; a volume already named `kube-api-access-*` is reused;
//! 3. a pod without `imagePullSecrets` gets the account's.

use serde_json::{Value, json};

use super::meta::{generate_suffix, meta_str};
use crate::resources::{PODS, SERVICEACCOUNTS};
use crate::status::ApiError;
use crate::store::{Inner, Key};

/// Where the token volume is mounted in every container.
pub(crate) const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The prefix of the token volume's name.
const VOLUME_PREFIX: &str = "kube-api-access-";

/// Applies steps (1)–(3) to a pod being created in `ns`.
pub(crate) fn admit(s: &Inner, ns: &str, pod: &mut Value) -> Result<(), ApiError> {
    let pod_name = meta_str(pod, "name").unwrap_or("").to_string();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    // (1)
    let sa_name = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string();
    let Some(sa) = s.get(&Key::new(SERVICEACCOUNTS, ns, &sa_name)) else {
        return Err(ApiError::forbidden(
            Some(PODS.info()),
            &pod_name,
            &format!(
                "error looking up service account {ns}/{sa_name}: serviceaccount \"{sa_name}\" not found"
            ),
        ));
    };
    // (3)
    let has_pull_secrets = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !has_pull_secrets
        && let Some(secrets) = sa
            .get("imagePullSecrets")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
    {
        spec.insert("imagePullSecrets".into(), Value::Array(secrets.clone()));
    }
    // (2)
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            sa.get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let volumes = spec
        .entry("volumes")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or_else(|| ApiError::bad_request("spec.volumes must be a list"))?;
    let existing = volumes.iter().find_map(|v| {
        v.get("name")
            .and_then(Value::as_str)
            .filter(|n| n.starts_with(VOLUME_PREFIX))
            .map(String::from)
    });
    let volume_name = match existing {
        Some(name) => name,
        None => {
            let name = format!("{VOLUME_PREFIX}{}", generate_suffix());
            volumes.push(token_volume(&name));
            name
        }
    };
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = c
                .entry("volumeMounts")
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .ok_or_else(|| ApiError::bad_request("volumeMounts must be a list"))?;
            let mounted = mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH));
            if !mounted {
                mounts.push(json!({
                    "name": volume_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH,
                }));
            }
        }
    }
    Ok(())
}

/// The projected volume a real v1.36 server injects.
fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}})
}
