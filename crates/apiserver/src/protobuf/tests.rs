//! Round trips of every served kind through the protobuf encoding, and the bytes of a small
//! object checked against the field numbers of upstream's `generated.proto` (v1.36).

use serde_json::{Value, json};

use super::{decode, encode};

fn round_trip(obj: &Value) {
    let bytes = encode(obj).unwrap_or_else(|e| panic!("encode {}: {e}", obj["kind"]));
    assert!(bytes.starts_with(b"k8s\0"));
    let back = decode(&bytes).unwrap_or_else(|e| panic!("decode {}: {e}", obj["kind"]));
    assert_eq!(&back, obj, "round trip of {}", obj["kind"]);
}

fn meta(name: &str) -> Value {
    json!({
        "name": name, "namespace": "ns1", "uid": "5f0c3c57-a2c1-4f7c-9d43-0d5c6f0f8a10",
        "resourceVersion": "42", "generation": 3,
        "creationTimestamp": "2026-11-23T01:02:03Z",
        "labels": {"app": "web"}, "annotations": {"note": ""},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1",
            "uid": "0d5c6f0f-a2c1-4f7c-9d43-5f0c3c578a10", "controller": true}],
        "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
            "time": "2026-11-23T01:02:03Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:a": {}}}}],
        "finalizers": ["x/y"],
    })
}

#[test]
fn every_served_kind_survives_a_protobuf_round_trip() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": meta("p"),
        "spec": {
            "nodeName": "n1", "restartPolicy": "Always", "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false, "serviceAccountName": "default",
            "securityContext": {"fsGroup": 2000, "runAsUser": 1000},
            "containers": [{
                "name": "c", "image": "busybox", "command": ["sh", "-c"],
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": true}}},
                        {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        {"name": "D", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "envFrom": [{"prefix": "P_", "configMapRef": {"name": "cm"}}, {"secretRef": {"name": "s", "optional": false}}],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "1"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": "http"}},
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config", "readOnly": true, "subPath": "x"}],
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420, "items": [{"key": "k", "path": "p", "mode": 256}], "optional": true}},
                {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0}},
                {"name": "tmp", "emptyDir": {}},
                {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "kube-api-access-7c5bl", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    {"secret": {"name": "s", "optional": true}}]}},
                {"name": "dapi", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}}]}},
            ],
            "imagePullSecrets": [{"name": "reg"}],
            "tolerations": [{"key": "nodelet.io/agent", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
        },
        "status": {
            "phase": "Pending", "startTime": "2026-11-23T01:02:04Z",
            "conditions": [{"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-11-23T01:02:05Z"}],
            "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "m"}}}],
        },
    });
    // imageID "" is what Go sends for an unset string: it decodes as absent.
    let mut pod_back = pod.clone();
    pod_back["status"]["containerStatuses"][0]
        .as_object_mut()
        .map(|o| o.remove("imageID"));
    let back = decode(&encode(&pod).expect("encode pod")).expect("decode pod");
    assert_eq!(back, pod_back);

    for obj in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cm"), "immutable": true,
               "data": {"a": "b", "empty": ""}, "binaryData": {"bin": "AAEC/w=="}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("s"), "type": "Opaque",
               "data": {"p": "cQ==", "raw": "AP8="}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("default"),
               "automountServiceAccountToken": false, "secrets": [{"name": "t"}], "imagePullSecrets": [{"name": "reg"}]}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
               "spec": {"taints": [{"key": "nodelet.io/agent", "effect": "NoSchedule"}], "podCIDRs": ["10.0.0.0/24"]},
               "status": {"capacity": {"cpu": "2", "memory": "24Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-23T01:02:03Z", "reason": "NodeletReady"}],
                          "nodeInfo": {"kubeletVersion": "v1.36.0", "machineID": "m", "systemUUID": "u", "bootID": "b",
                                       "kernelVersion": "k", "osImage": "o", "containerRuntimeVersion": "c",
                                       "kubeProxyVersion": "p", "operatingSystem": "linux", "architecture": "amd64"}}}),
        json!({"apiVersion": "v1", "kind": "Event", "metadata": meta("p.1"),
               "involvedObject": {"kind": "Pod", "namespace": "ns1", "name": "p", "uid": "u", "apiVersion": "v1", "fieldPath": "spec.containers{c}"},
               "reason": "FailedMount", "message": "m", "source": {"component": "kubelet", "host": "n1"},
               "firstTimestamp": "2026-11-23T01:02:03Z", "lastTimestamp": "2026-11-23T01:02:04Z", "count": 2, "type": "Warning",
               "eventTime": "2026-11-23T01:02:03.123456Z", "reportingComponent": "kubelet", "reportingInstance": "n1",
               "series": {"count": 3, "lastObservedTime": "2026-11-23T01:02:05.000001Z"}}),
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta("e"),
               "eventTime": "2026-11-23T01:02:03.500000Z", "reportingController": "kubelet", "reportingInstance": "n1",
               "action": "Mount", "reason": "FailedMount", "type": "Warning", "note": "n",
               "regarding": {"kind": "Pod", "name": "p", "namespace": "ns1"}}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("n1"),
               "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": "2026-11-23T01:02:03.000000Z"}}),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": meta("default"),
               "spec": {"audiences": ["api"], "expirationSeconds": 3607,
                        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"}},
               "status": {"token": "t", "expirationTimestamp": "2026-11-23T02:02:03Z"}}),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
               "spec": {"token": "t", "audiences": ["api"]},
               "status": {"authenticated": true, "audiences": ["api"],
                          "user": {"username": "u", "uid": "1", "groups": ["g"],
                                   "extra": {"authentication.kubernetes.io/pod-name": ["p"]}}}}),
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
               "spec": {"user": "u", "groups": ["g"], "extra": {"k": ["a", "b"]},
                        "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": "proxy", "name": "n1",
                                               "fieldSelector": {"rawSelector": "spec.nodeName=n1"}}},
               "status": {"allowed": true, "reason": "r"}}),
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
               "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}},
               "status": {"allowed": true}}),
        json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
               "message": "pods \"p\" not found", "reason": "NotFound",
               "details": {"name": "p", "kind": "pods", "causes": [{"reason": "FieldValueInvalid", "message": "m", "field": "data[a]"}]}, "code": 404}),
        json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "7", "continue": "c", "remainingItemCount": 2},
               "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}]}),
    ] {
        round_trip(&obj);
    }
}

/// `kubectl create configmap a --from-literal=k=v` as bytes, field numbers from upstream's
/// `generated.proto`: Unknown{typeMeta=1{apiVersion=1, kind=2}, raw=2}; ConfigMap{metadata=1,
/// data=2 (map entry key=1, value=2)}; ObjectMeta{name=1}.
#[test]
fn a_configmap_encodes_to_the_field_numbers_of_the_upstream_proto() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
    let raw: Vec<u8> = [
        &[0x0a, 3, 0x0a, 1, b'a'][..],                // metadata { name: "a" }
        &[0x12, 6, 0x0a, 1, b'k', 0x12, 1, b'v'][..], // data { "k": "v" }
    ]
    .concat();
    let type_meta: Vec<u8> = [&[0x0a, 2][..], b"v1", &[0x12, 9][..], b"ConfigMap"].concat();
    let mut expected = b"k8s\0".to_vec();
    expected.extend([0x0a, u8::try_from(type_meta.len()).unwrap()]);
    expected.extend(&type_meta);
    expected.extend([0x12, u8::try_from(raw.len()).unwrap()]);
    expected.extend(&raw);
    assert_eq!(encode(&cm).unwrap(), expected);
    assert_eq!(decode(&expected).unwrap(), cm);
}

#[test]
fn go_zero_values_decode_as_absent_and_secret_bytes_as_base64() {
    // Secret{metadata{name "s", generateName "", creationTimestamp{}}, data{"p": 0x00 0xff}, type ""}
    let raw: Vec<u8> = [
        &[0x0a, 7, 0x0a, 1, b's', 0x12, 0, 0x42, 0][..],
        &[0x12, 7, 0x0a, 1, b'p', 0x12, 2, 0x00, 0xff][..],
        &[0x1a, 0][..],
    ]
    .concat();
    let type_meta: Vec<u8> = [&[0x0a, 2][..], b"v1", &[0x12, 6][..], b"Secret"].concat();
    let mut body = b"k8s\0".to_vec();
    body.extend([0x0a, u8::try_from(type_meta.len()).unwrap()]);
    body.extend(&type_meta);
    body.extend([0x12, u8::try_from(raw.len()).unwrap()]);
    body.extend(&raw);
    assert_eq!(
        decode(&body).unwrap(),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"p": "AP8="}})
    );
}

#[test]
fn a_body_without_the_magic_or_of_an_unknown_kind_is_refused_by_name() {
    assert!(
        decode(b"{}")
            .unwrap_err()
            .to_string()
            .contains("k8s\\0 prefix")
    );
    let err = encode(&json!({"apiVersion": "v1", "kind": "Widget"})).unwrap_err();
    assert!(err.to_string().contains("\"Widget\""), "{err}");
    let err = encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"nmae": "x"}}))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "metadata.nmae: ObjectMeta has no such field"
    );
    let err = encode(&json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "%%secret%%"}}))
        .unwrap_err();
    assert!(!err.to_string().contains("secret%%"), "{err}");
}
