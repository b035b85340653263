//! What one watch event costs the agent to decode: a ConfigMap as the real API server sends it
//! (kubectl's last-applied annotation, two managedFields entries, three keys of 200–600 bytes),
//! as a JSON line (what `KubeSource` reads, decoded as it decodes it, then trimmed to what a
//! node keeps) and as the Kubernetes protobuf frame the kubelet asks for (`k8s-pb`, converted
//! into the same `k8s_openapi` type the managers store, which any adoption would need).
//!
//! Run: `cargo bench -p nodelet-object-manager --bench decode -- --warm-up-time 1
//! --measurement-time 3`. The event sizes are printed first (`decode: ...` lines).

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::Criterion;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use prost::Message as _;

use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime as pb_runtime;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The three keys of the benchmark's ConfigMap and their sizes.
fn data() -> BTreeMap<String, String> {
    [
        ("app.properties", 600),
        ("log-level", 200),
        ("feature-flags.json", 400),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_owned(), "x".repeat(n)))
    .collect()
}

/// The ConfigMap as a kubectl-applied object updated once by another client reads back from
/// the API server, as JSON.
fn config_map_json() -> serde_json::Value {
    let data = data();
    let applied = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app-config-042", "namespace": "scale-bench"},
        "data": data,
    });
    let data_fields: serde_json::Map<String, serde_json::Value> = data
        .keys()
        .map(|k| (format!("f:{k}"), serde_json::json!({})))
        .collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "app-config-042", "namespace": "scale-bench",
            "uid": "6f1c1e2a-52a4-4d1e-9a35-0d2a8b0c5e11",
            "resourceVersion": "1048576", "creationTimestamp": "2026-11-28T10:00:00Z",
            "labels": {"app": "bench", "tier": "backend"},
            "annotations": {LAST_APPLIED: applied.to_string()},
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply", "operation": "Update",
                    "apiVersion": "v1", "time": "2026-11-28T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:data": data_fields,
                        "f:metadata": {"f:annotations": {".": {}, format!("f:{LAST_APPLIED}"): {}},
                                       "f:labels": {".": {}, "f:app": {}, "f:tier": {}}},
                    },
                },
                {
                    "manager": "scale-bench", "operation": "Update",
                    "apiVersion": "v1", "time": "2026-11-28T10:05:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {"f:log-level": {}}},
                },
            ],
        },
        "data": data,
    })
}

/// `"k8s\0"` and a `runtime.Unknown` around `raw`: the envelope of every protobuf body.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = pb_runtime::Unknown {
        type_meta: Some(pb_runtime::TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    unknown.encode(&mut out).expect("a Vec grows");
    out
}

/// The same ConfigMap as one protobuf watch frame's payload.
fn config_map_protobuf(json: &ConfigMap) -> Vec<u8> {
    let meta = &json.metadata;
    let managed = meta
        .managed_fields
        .iter()
        .flatten()
        .map(|m| pb_meta::ManagedFieldsEntry {
            manager: m.manager.clone(),
            operation: m.operation.clone(),
            api_version: m.api_version.clone(),
            time: Some(pb_meta::Time {
                seconds: Some(1_795_860_000),
                nanos: Some(0),
            }),
            fields_type: m.fields_type.clone(),
            fields_v1: m.fields_v1.as_ref().map(|f| pb_meta::FieldsV1 {
                raw: Some(serde_json::to_vec(&f.0).expect("JSON")),
            }),
            subresource: None,
        })
        .collect();
    let cm = pb_core::ConfigMap {
        metadata: Some(pb_meta::ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            creation_timestamp: Some(pb_meta::Time {
                seconds: Some(1_795_860_000),
                nanos: Some(0),
            }),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            managed_fields: managed,
            ..Default::default()
        }),
        data: json.data.clone().unwrap_or_default(),
        ..Default::default()
    };
    let event = pb_meta::WatchEvent {
        r#type: Some("MODIFIED".to_owned()),
        object: Some(pb_runtime::RawExtension {
            raw: Some(envelope("v1", "ConfigMap", cm.encode_to_vec())),
        }),
    };
    envelope("meta.k8s.io/v1", "WatchEvent", event.encode_to_vec())
}

/// What `KubeSource` does with a JSON line: decode, then drop what no node reads.
fn decode_json(line: &[u8]) -> ConfigMap {
    match serde_json::from_slice::<kube::api::WatchEvent<ConfigMap>>(line) {
        Ok(kube::api::WatchEvent::Modified(mut cm)) => {
            cm.metadata.managed_fields = None;
            if let Some(a) = cm.metadata.annotations.as_mut() {
                a.remove(LAST_APPLIED);
            }
            cm
        }
        other => panic!("not a MODIFIED ConfigMap: {other:?}"),
    }
}

fn unwrap_envelope(bytes: &[u8]) -> Vec<u8> {
    let body = bytes.strip_prefix(b"k8s\0").expect("the protobuf prefix");
    pb_runtime::Unknown::decode(body)
        .expect("an Unknown")
        .raw
        .unwrap_or_default()
}

/// A protobuf frame decoded into the type the managers store, keeping what a node keeps
/// (managedFields and the last-applied copy are decoded by prost, then dropped).
fn decode_protobuf(frame: &[u8]) -> ConfigMap {
    let event = pb_meta::WatchEvent::decode(unwrap_envelope(frame).as_slice()).expect("event");
    let raw = event.object.and_then(|o| o.raw).expect("an object");
    let cm = pb_core::ConfigMap::decode(unwrap_envelope(&raw).as_slice()).expect("ConfigMap");
    let meta = cm.metadata.unwrap_or_default();
    let mut annotations = meta.annotations;
    annotations.remove(LAST_APPLIED);
    ConfigMap {
        metadata: ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            labels: Some(meta.labels).filter(|l| !l.is_empty()),
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            ..Default::default()
        },
        data: Some(cm.data).filter(|d| !d.is_empty()),
        binary_data: None,
        immutable: cm.immutable,
    }
}

fn main() {
    let object = config_map_json();
    let typed: ConfigMap = serde_json::from_value(object.clone()).expect("a ConfigMap");
    let line = serde_json::to_vec(&serde_json::json!({"type": "MODIFIED", "object": object}))
        .expect("JSON");
    let frame = config_map_protobuf(&typed);
    let managed: usize = typed
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m: &ManagedFieldsEntry| serde_json::to_vec(m).expect("JSON").len())
        .sum();
    println!(
        "decode: JSON event {} bytes (managedFields {managed}, last-applied {}), protobuf frame {} bytes",
        line.len(),
        typed
            .metadata
            .annotations
            .as_ref()
            .map_or(0, |a| a[LAST_APPLIED].len()),
        frame.len(),
    );
    assert_eq!(decode_json(&line).data, decode_protobuf(&frame).data);

    let mut c = Criterion::default().configure_from_args();
    c.bench_function("decode ConfigMap watch event: JSON", |b| {
        b.iter(|| decode_json(black_box(&line)))
    });
    c.bench_function(
        "decode ConfigMap watch event: protobuf (k8s-pb) + conversion",
        |b| b.iter(|| decode_protobuf(black_box(&frame))),
    );
    c.final_summary();
}
