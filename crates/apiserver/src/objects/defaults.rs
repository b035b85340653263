//! Defaulting as the real API server (defaulters + default admission plugins) applies it to
//! the fields a kubelet reads: pods, containers, volumes, secrets, namespaces.

use serde_json::{Map, Value, json};

/// `defaultMode` given to configMap/secret/projected/downwardAPI volumes (0644).
pub(crate) const DEFAULT_MODE: i64 = 420;

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    v.get_mut(key).and_then(Value::as_object_mut)
}

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_string(), value);
    }
}

/// The pull policy the defaulter picks from the image reference.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

fn default_field_ref(v: &mut Value) {
    if let Some(fr) = v.get_mut("fieldRef").and_then(Value::as_object_mut) {
        set_default(fr, "apiVersion", json!("v1"));
    }
}

fn default_container(c: &mut Value) {
    let Some(map) = c.as_object_mut() else { return };
    let image = map
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default(map, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(map, "terminationMessagePolicy", json!("File"));
    set_default(map, "imagePullPolicy", json!(pull_policy(&image)));
    set_default(map, "resources", json!({}));
    if let Some(ports) = map.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    if let Some(env) = map.get_mut("env").and_then(Value::as_array_mut) {
        for e in env {
            if let Some(vf) = e.get_mut("valueFrom") {
                default_field_ref(vf);
            }
        }
    }
}

fn default_volume(v: &mut Value) {
    let Some(map) = v.as_object_mut() else { return };
    for kind in ["configMap", "secret", "projected", "downwardAPI"] {
        if let Some(src) = map.get_mut(kind).and_then(Value::as_object_mut) {
            set_default(src, "defaultMode", json!(DEFAULT_MODE));
            if kind == "downwardAPI"
                && let Some(items) = src.get_mut("items").and_then(Value::as_array_mut)
            {
                items.iter_mut().for_each(default_field_ref);
            }
            if kind == "projected"
                && let Some(sources) = src.get_mut("sources").and_then(Value::as_array_mut)
            {
                for s in sources {
                    if let Some(items) = s
                        .pointer_mut("/downwardAPI/items")
                        .and_then(Value::as_array_mut)
                    {
                        items.iter_mut().for_each(default_field_ref);
                    }
                    if let Some(t) = s
                        .get_mut("serviceAccountToken")
                        .and_then(Value::as_object_mut)
                    {
                        set_default(t, "expirationSeconds", json!(3600));
                    }
                }
            }
        }
    }
    if let Some(hp) = map.get_mut("hostPath").and_then(Value::as_object_mut) {
        set_default(hp, "type", json!(""));
    }
}

/// The QoS class the API server records in `status.qosClass`.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        for r in ["cpu", "memory"] {
            let l = lim.and_then(|m| m.get(r));
            let q = req.and_then(|m| m.get(r)).or(l);
            if l.is_some() || q.is_some() {
                any = true;
            }
            if l.is_none() || q != l {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Pod defaulting on create: [`pod_spec`], then the create-only admission defaults
/// (ServiceAccount: `serviceAccountName: default`; Priority: `priority: 0`,
/// `preemptionPolicy: PreemptLowerPriority`), and `status` reset to `Pending` with its QoS
/// class, as the pod strategy does.
pub(crate) fn pod(obj: &mut Value) {
    if let Some(spec) = obj_mut(obj, "spec") {
        // ServiceAccount admission: the `default` account; no token volume is injected here.
        set_default(spec, "serviceAccountName", json!("default"));
        set_default(spec, "priority", json!(0));
        set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
    pod_spec(obj);
    let qos = obj.get("spec").map_or("BestEffort", qos_class);
    if let Some(map) = obj.as_object_mut() {
        map.insert(
            "status".into(),
            json!({"phase": "Pending", "qosClass": qos}),
        );
    }
}

/// The pod defaulting the real server applies on create *and* update (and to patch results):
/// the v1 defaulters, the `serviceAccount`/`serviceAccountName` alias of the v1 conversion,
/// and the DefaultTolerationSeconds admission plugin (which runs on update too). Create-only
/// admission defaults (service account, priority) are in [`pod`].
pub(crate) fn pod_spec(obj: &mut Value) {
    let Some(spec) = obj_mut(obj, "spec") else {
        return;
    };
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    // Conversion: `serviceAccount` is the deprecated alias of `serviceAccountName`.
    let non_empty = |v: Option<&Value>| {
        v.filter(|s| s.as_str().is_some_and(|s| !s.is_empty()))
            .cloned()
    };
    if let Some(sa) =
        non_empty(spec.get("serviceAccountName")).or_else(|| non_empty(spec.get("serviceAccount")))
    {
        spec.insert("serviceAccountName".into(), sa.clone());
        spec.insert("serviceAccount".into(), sa);
    }
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        if let Some(list) = spec.get_mut(key).and_then(Value::as_array_mut) {
            list.iter_mut().for_each(default_container);
        }
    }
    if let Some(vols) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        vols.iter_mut().for_each(default_volume);
    }
    // DefaultTolerationSeconds admission.
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut() {
        for taint in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !list
                .iter()
                .any(|t| t.get("key").and_then(Value::as_str) == Some(taint))
            {
                list.push(json!({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// Secret defaulting: `stringData` merged into `data` (base64) and dropped; `type: Opaque`.
pub(crate) fn secret(obj: &mut Value) {
    use base64::Engine as _;
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(sd)) = map.remove("stringData") {
        let data = map.entry("data").or_insert_with(|| json!({}));
        if data.is_null() {
            *data = json!({});
        }
        if let Some(data) = data.as_object_mut() {
            for (k, v) in sd {
                let s = v.as_str().unwrap_or("");
                data.insert(
                    k,
                    json!(base64::engine::general_purpose::STANDARD.encode(s)),
                );
            }
        }
    }
    set_default(map, "type", json!("Opaque"));
}

/// Namespace defaulting: the name label, the `kubernetes` finalizer and phase Active.
pub(crate) fn namespace(obj: &mut Value) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(meta) = obj_mut(obj, "metadata") {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
    if let Some(map) = obj.as_object_mut() {
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        if let Some(s) = spec.as_object_mut() {
            set_default(s, "finalizers", json!(["kubernetes"]));
        }
        map.insert("status".into(), json!({"phase": "Active"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_default_mode_is_420_and_items_keep_their_mode() {
        let mut p = json!({"spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": [
            {"name": "a", "configMap": {"name": "cm", "items": [{"key": "k", "path": "p", "mode": 256}]}},
            {"name": "b", "secret": {"secretName": "s", "defaultMode": 256}},
            {"name": "c", "projected": {"sources": []}},
            {"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}
        ]}});
        pod(&mut p);
        let v = &p["spec"]["volumes"];
        assert_eq!(v[0]["configMap"]["defaultMode"], 420);
        assert_eq!(v[0]["configMap"]["items"][0]["mode"], 256);
        assert_eq!(v[1]["secret"]["defaultMode"], 256);
        assert_eq!(v[2]["projected"]["defaultMode"], 420);
        assert_eq!(
            v[3]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"],
            "v1"
        );
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
    }

    #[test]
    fn pull_policy_depends_on_the_tag() {
        assert_eq!(pull_policy("busybox"), "Always");
        assert_eq!(pull_policy("busybox:latest"), "Always");
        assert_eq!(pull_policy("localhost:5000/busybox:1.36"), "IfNotPresent");
        assert_eq!(pull_policy("localhost:5000/busybox"), "Always");
        assert_eq!(pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn string_data_wins_over_data_and_is_dropped() {
        let mut s = json!({"data": {"a": "eA=="}, "stringData": {"a": "y", "b": "z"}});
        secret(&mut s);
        assert_eq!(
            s,
            json!({"data": {"a": "eQ==", "b": "eg=="}, "type": "Opaque"})
        );
    }
}
