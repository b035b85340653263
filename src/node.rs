//! `--register-node`: the agent's Node (labels, a NoSchedule taint, Ready condition) and its
//! Lease in `kube-node-lease`, renewed every 10 s.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::AgentConfig;
use crate::metrics::Metrics;

/// The taint that keeps ordinary pods away from a nodelet node: it runs no containers.
pub const AGENT_TAINT_KEY: &str = "nodelet.io/agent";
/// How often the Node's Ready condition heartbeat is refreshed.
const STATUS_INTERVAL: Duration = Duration::from_secs(60);

/// Node allocatable quantities for `resourceFieldRef` and the Node status: CPUs and memory of
/// this machine.
pub(crate) fn allocatable() -> BTreeMap<String, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = BTreeMap::from([
        ("cpu".to_owned(), cpus.to_string()),
        ("pods".to_owned(), "110".to_owned()),
    ]);
    if let Some(kib) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    }) {
        out.insert("memory".to_owned(), format!("{kib}Ki"));
    }
    out
}

fn now_micro() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn now_secs() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Registers the Node, then renews the Lease and refreshes the Ready heartbeat until
/// `shutdown`. Failures are logged and retried on the next tick.
pub(crate) async fn run(
    config: AgentConfig,
    client: kube::Client,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let mut registered = false;
    let mut lease_tick = tokio::time::interval(config.lease_renew_interval);
    let mut status_tick = tokio::time::interval(STATUS_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = lease_tick.tick() => {
                if !registered {
                    match register(&nodes, &config, &metrics).await {
                        Ok(()) => {
                            registered = true;
                            info!("node registered");
                        }
                        Err(error) => {
                            warn!(%error, "node registration failed; retrying");
                            continue;
                        }
                    }
                }
                if let Err(error) = renew_lease(&leases, &nodes, &config, &metrics).await {
                    warn!(%error, "lease renewal failed");
                }
            }
            _ = status_tick.tick(), if registered => {
                if let Err(error) = patch_status(&nodes, &config, &metrics).await {
                    warn!(%error, "node status update failed");
                }
            }
        }
    }
}

fn labels(config: &AgentConfig) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (
            "kubernetes.io/hostname".to_owned(),
            config.node_name.clone(),
        ),
        (
            "kubernetes.io/os".to_owned(),
            std::env::consts::OS.to_owned(),
        ),
        (
            "kubernetes.io/arch".to_owned(),
            match std::env::consts::ARCH {
                "x86_64" => "amd64",
                "aarch64" => "arm64",
                other => other,
            }
            .to_owned(),
        ),
        (
            "node.kubernetes.io/instance-type".to_owned(),
            "nodelet".to_owned(),
        ),
        (AGENT_TAINT_KEY.to_owned(), "true".to_owned()),
    ]);
    labels.extend(config.node_labels.clone());
    labels
}

fn taint() -> Value {
    json!({"key": AGENT_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
}

/// Create the Node, or add our labels and taint to an existing one. Annotations (the TTL
/// controller's `node.alpha.kubernetes.io/ttl`) are never touched.
async fn register(
    nodes: &Api<Node>,
    config: &AgentConfig,
    metrics: &Metrics,
) -> Result<(), kube::Error> {
    metrics.api_request("get");
    match nodes.get_opt(&config.node_name).await? {
        None => {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": config.node_name, "labels": labels(config)},
                "spec": {"taints": [taint()]},
            }))
            .map_err(kube::Error::SerdeError)?;
            metrics.api_request("create");
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        Some(node) => {
            let mut taints: Vec<Value> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|ts| {
                    ts.iter()
                        .filter_map(|t| serde_json::to_value(t).ok())
                        .collect()
                })
                .unwrap_or_default();
            if !taints.iter().any(|t| t["key"] == AGENT_TAINT_KEY) {
                taints.push(taint());
            }
            metrics.api_request("patch");
            nodes
                .patch(
                    &config.node_name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"labels": labels(config)}, "spec": {"taints": taints}}),
                    ),
                )
                .await?;
        }
    }
    patch_status(nodes, config, metrics).await
}

async fn patch_status(
    nodes: &Api<Node>,
    config: &AgentConfig,
    metrics: &Metrics,
) -> Result<(), kube::Error> {
    let now = now_secs();
    let allocatable = allocatable();
    let status = json!({"status": {
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "nodelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }],
        "addresses": [{"type": "Hostname", "address": config.node_name}],
        "capacity": allocatable, "allocatable": allocatable,
        "nodeInfo": {
            "kubeletVersion": concat!("nodelet/", env!("CARGO_PKG_VERSION")),
            "operatingSystem": std::env::consts::OS, "architecture": std::env::consts::ARCH,
            "containerRuntimeVersion": "nodelet-env-file://0", "kubeProxyVersion": "",
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
        },
    }});
    metrics.api_request("patch");
    nodes
        .patch_status(
            &config.node_name,
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .map(|_| ())
}

async fn renew_lease(
    leases: &Api<Lease>,
    nodes: &Api<Node>,
    config: &AgentConfig,
    metrics: &Metrics,
) -> Result<(), kube::Error> {
    let name = &config.node_name;
    metrics.api_request("patch");
    let renew = json!({"spec": {"renewTime": now_micro(), "holderIdentity": name,
                                "leaseDurationSeconds": config.lease_duration_seconds}});
    match leases
        .patch(name, &PatchParams::default(), &Patch::Merge(&renew))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            metrics.api_request("get");
            let owner = nodes.get_opt(name).await?.and_then(|n| n.metadata.uid);
            let mut lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": renew["spec"],
            });
            if let Some(uid) = owner {
                lease["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]);
            }
            let lease: Lease = serde_json::from_value(lease).map_err(kube::Error::SerdeError)?;
            metrics.api_request("create");
            leases
                .create(&PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    }
}
