//! [`run_node`]: the agent's Node (labels, a NoSchedule taint, Ready condition) and its Lease
//! in `kube-node-lease`, renewed every [`NodeConfig::lease_renew_interval`] (10 s), as a
//! kubelet started with `--register-node` keeps them.
//!
//! A Node that already exists (left by a kubelet, created by hand or by an older nodelet) is
//! reconciled as the kubelet does under NodeRestriction: labels and status only. Its taints
//! are never changed (a node may set them only when it creates itself), and a missing
//! `nodelet.io/agent` taint is reported once as a warning.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use nodelet_core::NodeAllocatable;

use crate::counters::{Counters, WriteTarget};

/// The taint that keeps ordinary pods away from a nodelet node (unless `--register-with-taints`
/// says otherwise): it runs no containers, or runs them as local processes on a dev machine.
pub const AGENT_TAINT_KEY: &str = "nodelet.io/agent";
/// How often the Node's Ready condition heartbeat is refreshed.
const STATUS_INTERVAL: Duration = Duration::from_secs(60);

/// What the Node says and how its Lease is kept. [`NodeConfig::new`] gives the kubelet's
/// defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeConfig {
    /// The Node's and the Lease's name.
    pub node_name: String,
    /// Labels besides the agent's own (`kubernetes.io/hostname`, `os`, `arch`,
    /// `instance-type`, [`AGENT_TAINT_KEY`]); these win.
    pub labels: BTreeMap<String, String>,
    /// The taints a Node this agent creates gets; `None`: `nodelet.io/agent=true:NoSchedule`.
    /// An existing Node's taints are never changed.
    pub taints: Option<Vec<Taint>>,
    /// How often the Lease is renewed (the kubelet's 10 s).
    pub lease_renew_interval: Duration,
    /// The Lease's `leaseDurationSeconds` (the kubelet's 40).
    pub lease_duration_seconds: i32,
    /// The directory whose filesystem is the node's ephemeral storage (capacity, allocatable).
    pub root_dir: PathBuf,
    /// The node's `InternalIP` address.
    pub node_ip: Option<IpAddr>,
    /// Where the kubelet API listens: the host name is reported as an address only when it
    /// leads there.
    pub kubelet_listen: Option<SocketAddr>,
    /// The kubelet API's port, advertised in `daemonEndpoints` (with the WebSocket feature).
    pub kubelet_port: Option<u16>,
    /// The container runtime's name in `containerRuntimeVersion` (`<name>://<version>`).
    pub runtime_name: String,
    /// Whether the runtime can run containers now (`Err`: why not), asked at each heartbeat.
    pub runtime_ready: fn() -> Result<(), String>,
}

impl NodeConfig {
    /// The Node `node_name` with the agent's labels and taint, its ephemeral storage the
    /// filesystem of `root_dir`, a Lease renewed every 10 s for 40 s, a runtime always ready.
    pub fn new(node_name: impl Into<String>, root_dir: impl Into<PathBuf>) -> Self {
        Self {
            node_name: node_name.into(),
            labels: BTreeMap::new(),
            taints: None,
            lease_renew_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            root_dir: root_dir.into(),
            node_ip: None,
            kubelet_listen: None,
            kubelet_port: None,
            runtime_name: "nodelet".to_owned(),
            runtime_ready: || Ok(()),
        }
    }
}

/// The node's capacity and allocatable as Kubernetes quantities, from the one detection the
/// volume plugins and `resourceFieldRef` env vars also use (`NodeAllocatable::detect`): cpu,
/// memory, ephemeral-storage (the filesystem holding the root directory) and pods (110, the
/// kubelet's default `maxPods`).
fn quantities(detected: &NodeAllocatable) -> BTreeMap<String, String> {
    let cpu = if detected.cpu_millis % 1000 == 0 {
        (detected.cpu_millis / 1000).to_string()
    } else {
        format!("{}m", detected.cpu_millis)
    };
    let mut out = BTreeMap::from([
        ("cpu".to_owned(), cpu),
        ("pods".to_owned(), "110".to_owned()),
    ]);
    if detected.memory_bytes > 0 {
        out.insert("memory".to_owned(), detected.memory_bytes.to_string());
    }
    if detected.ephemeral_storage_bytes > 0 {
        out.insert(
            "ephemeral-storage".to_owned(),
            detected.ephemeral_storage_bytes.to_string(),
        );
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
/// `shutdown`. Failures are logged, counted in `counters` and retried on the next tick.
pub async fn run_node(
    config: NodeConfig,
    client: kube::Client,
    counters: Counters,
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
                    match register(&nodes, &config).await {
                        Ok(outcome) => {
                            registered = true;
                            outcome.log(&config.node_name);
                        }
                        Err(error) => {
                            warn!(%error, "node registration failed; retrying");
                            counters.write_failed(WriteTarget::NodeRegistration);
                            continue;
                        }
                    }
                }
                if let Err(error) = renew_lease(&leases, &nodes, &config).await {
                    warn!(%error, "lease renewal failed");
                    counters.write_failed(WriteTarget::Lease);
                }
            }
            _ = status_tick.tick(), if registered => {
                if let Err(error) = patch_status(&nodes, &config).await {
                    warn!(%error, "node status update failed");
                    counters.write_failed(WriteTarget::NodeStatus);
                }
            }
        }
    }
}

/// The node-declared feature that tells the API server this node's kubelet API serves
/// exec/attach/port-forward WebSockets itself (NodeDeclaredFeatures).
const DECLARED_WEBSOCKETS: &str = "ExtendWebSocketsToKubelet";

/// The Kubernetes version whose kubelet nodelet follows (the Node's `kubeletVersion`).
pub const KUBELET_VERSION: &str = "v1.36.2";

fn labels(config: &NodeConfig) -> BTreeMap<String, String> {
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
            nodelet_core::go::arch().to_owned(),
        ),
        (
            "node.kubernetes.io/instance-type".to_owned(),
            "nodelet".to_owned(),
        ),
        (AGENT_TAINT_KEY.to_owned(), "true".to_owned()),
    ]);
    labels.extend(config.labels.clone());
    labels
}

/// The taints the Node is created with: `--register-with-taints`, else `nodelet.io/agent`
/// NoSchedule (ordinary pods must not land on a dev machine by accident).
fn taints(config: &NodeConfig) -> Vec<Taint> {
    match &config.taints {
        Some(taints) => taints.clone(),
        None => vec![Taint {
            key: AGENT_TAINT_KEY.to_owned(),
            value: Some("true".to_owned()),
            effect: "NoSchedule".to_owned(),
            time_added: None,
        }],
    }
}

/// What registration found and did, logged once by [`run`].
#[derive(Debug, Default)]
struct Registration {
    /// The Node existed before this agent (it was reconciled, not created).
    existed: bool,
    /// The existing Node has no `nodelet.io/agent` NoSchedule/NoExecute taint.
    missing_taint: bool,
    /// The API server refused the label update (NodeRestriction: a label a node may not set).
    labels_refused: Option<String>,
}

impl Registration {
    fn log(&self, node: &str) {
        if !self.existed {
            info!("node registered");
            return;
        }
        info!("existing node reconciled (labels and status; taints are left alone)");
        if let Some(error) = &self.labels_refused {
            warn!(%error, "the API server refused this node's labels; they stay as they are");
        }
        if self.missing_taint {
            warn!(
                node,
                taint = "nodelet.io/agent=true:NoSchedule",
                fix = %format!("kubectl taint node {node} nodelet.io/agent=true:NoSchedule"),
                "the existing Node lacks nodelet's taint, and a node may set its taints only when \
                 it creates its Node: ordinary pods can be scheduled to this node and will never \
                 run here; an admin can add the taint"
            );
        }
    }
}

/// Create the Node (labels, taint), or reconcile an existing one the way the kubelet does: only
/// what NodeRestriction lets a node change (its labels, its status), never its taints, which a
/// node may set only when it creates itself. Annotations (the TTL controller's
/// `node.alpha.kubernetes.io/ttl`) are never touched.
async fn register(nodes: &Api<Node>, config: &NodeConfig) -> Result<Registration, kube::Error> {
    let mut existing = nodes.get_opt(&config.node_name).await?;
    if existing.is_none() {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": config.node_name, "labels": labels(config)},
            "spec": {"taints": taints(config)},
        }))
        .map_err(kube::Error::SerdeError)?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {
                patch_status(nodes, config).await?;
                return Ok(Registration::default());
            }
            // Created meanwhile by someone else: reconcile it as an existing Node.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                existing = nodes.get_opt(&config.node_name).await?;
            }
            Err(e) => return Err(e),
        }
    }
    let mut outcome = Registration {
        existed: true,
        ..Registration::default()
    };
    if let Some(node) = &existing {
        outcome.missing_taint = !has_agent_taint(node);
        let changed = changed_labels(node, &labels(config));
        if !changed.is_empty() {
            let patch = Patch::Merge(json!({"metadata": {"labels": changed}}));
            match nodes
                .patch(&config.node_name, &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => {}
                // A label NodeRestriction forbids (e.g. from `nodeLabels`): retrying cannot
                // help, and the Lease and heartbeat matter more than labels.
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    outcome.labels_refused = Some(e.message);
                }
                Err(e) => return Err(e),
            }
        }
    }
    patch_status(nodes, config).await?;
    Ok(outcome)
}

/// Whether the Node carries the `nodelet.io/agent` taint with an effect that keeps pods away.
fn has_agent_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter().any(|t| {
                t.key == AGENT_TAINT_KEY && matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            })
        })
}

/// The labels in `wanted` whose value on `node` differs (others' labels stay untouched).
fn changed_labels(node: &Node, wanted: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let current = node.metadata.labels.clone().unwrap_or_default();
    wanted
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The Ready condition to post: `True` while the runtime can run containers (`runtime`: why
/// not, as the kubelet's `container runtime is down` text); `lastTransitionTime` moves only
/// when the status changes (as the kubelet's `setNodeReadyCondition`), so a steady status keeps
/// the time it took that value.
fn ready_condition(
    previous: Option<&NodeCondition>,
    now: &str,
    runtime: Result<(), String>,
) -> Value {
    let (status, reason, message) = match runtime {
        Ok(()) => (
            "True",
            "KubeletReady",
            "nodelet is posting ready status".to_owned(),
        ),
        Err(why) => (
            "False",
            "KubeletNotReady",
            format!("container runtime is down: {why}"),
        ),
    };
    let since = previous
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.as_ref())
        .map_or_else(|| now.to_owned(), |t| t.0.to_string());
    json!({
        "type": "Ready", "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now, "lastTransitionTime": since,
    })
}

async fn patch_status(nodes: &Api<Node>, config: &NodeConfig) -> Result<(), kube::Error> {
    let current = nodes.get_opt(&config.node_name).await?;
    let previous = current
        .as_ref()
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    let now = now_secs();
    let allocatable = quantities(&NodeAllocatable::detect(&config.root_dir));
    let mut addresses = Vec::new();
    if let Some(ip) = config.node_ip {
        addresses.push(json!({"type": "InternalIP", "address": ip.to_string()}));
    }
    // The machine's host name, as the kubelet reports it, when it resolves: API servers try
    // `Hostname` first by default, and one that does not resolve would hide the InternalIP.
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_default();
    // It must also lead to the kubelet API: a listener on one address (127.0.0.1) is reached
    // through the host name only if the name resolves to that address.
    let reachable = |ip: std::net::IpAddr| match config.kubelet_listen {
        Some(listen) if !listen.ip().is_unspecified() => listen.ip() == ip,
        _ => true,
    };
    if !hostname.is_empty()
        && tokio::net::lookup_host((hostname.as_str(), 0))
            .await
            .is_ok_and(|mut a| a.any(|addr| reachable(addr.ip())))
    {
        addresses.push(json!({"type": "Hostname", "address": hostname}));
    }
    let runtime = &config.runtime_name;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let machine_id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    let mut status = json!({"status": {
        "conditions": [ready_condition(previous, &now, (config.runtime_ready)())],
        "addresses": addresses,
        "capacity": allocatable, "allocatable": allocatable,
        "nodeInfo": {
            "kubeletVersion": KUBELET_VERSION,
            "operatingSystem": std::env::consts::OS,
            "architecture": nodelet_core::go::arch(),
            "containerRuntimeVersion": format!("{runtime}://{}", env!("CARGO_PKG_VERSION")),
            "kubeProxyVersion": "",
            "machineID": machine_id.trim(), "systemUUID": "", "bootID": boot_id.trim(),
            "kernelVersion": kernel.trim(), "osImage": "nodelet",
        },
    }});
    if let Some(port) = config.kubelet_port {
        status["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": port}});
        // The kubelet API serves exec over WebSocket itself: a v1.36 API server
        // (ExtendWebSocketsToKubelet, on by default) then proxies kubectl's WebSocket straight
        // here instead of translating it to SPDY, which nodelet does not speak.
        status["status"]["declaredFeatures"] = json!([DECLARED_WEBSOCKETS]);
    }
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
    config: &NodeConfig,
) -> Result<(), kube::Error> {
    let name = &config.node_name;
    let renew = json!({"spec": {"renewTime": now_micro(), "holderIdentity": name,
                                "leaseDurationSeconds": config.lease_duration_seconds}});
    match leases
        .patch(name, &PatchParams::default(), &Patch::Merge(&renew))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
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
            leases
                .create(&PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(status: &str, since: &str) -> NodeCondition {
        serde_json::from_value(json!({"type": "Ready", "status": status,
            "lastTransitionTime": since}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_ready_condition_keeps_its_transition_time_while_it_stays_true() {
        let now = "2026-01-02T03:04:05Z";
        let kept = ready_condition(
            Some(&condition("True", "2020-01-01T00:00:00Z")),
            now,
            Ok(()),
        );
        assert_eq!(kept["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(kept["lastHeartbeatTime"], now);
        let flipped = ready_condition(
            Some(&condition("Unknown", "2020-01-01T00:00:00Z")),
            now,
            Ok(()),
        );
        assert_eq!(flipped["lastTransitionTime"], now);
        assert_eq!(
            ready_condition(None, now, Ok(()))["lastTransitionTime"],
            now
        );
    }

    #[test]
    fn a_runtime_that_cannot_run_containers_makes_the_node_not_ready() {
        let now = "2026-01-02T03:04:05Z";
        let down = ready_condition(
            Some(&condition("True", "2020-01-01T00:00:00Z")),
            now,
            Err("the kernel has no overlay filesystem (/proc/filesystems)".to_owned()),
        );
        assert_eq!(down["status"], "False");
        assert_eq!(down["reason"], "KubeletNotReady");
        assert_eq!(
            down["message"],
            "container runtime is down: the kernel has no overlay filesystem (/proc/filesystems)"
        );
        assert_eq!(down["lastTransitionTime"], now, "the status changed");
    }

    #[test]
    fn the_agents_own_labels_are_ones_a_node_may_set() {
        use nodelet_core::node_labels::node_may_set_label;
        let config = NodeConfig::new("n1", "/r");
        for key in labels(&config).keys() {
            assert!(node_may_set_label(key), "{key}");
        }
        assert!(node_may_set_label("a.node.kubernetes.io/x"));
        assert!(!node_may_set_label("node-role.kubernetes.io/worker"));
        assert!(!node_may_set_label("x.node-restriction.kubernetes.io/y"));
        assert!(!node_may_set_label("k8s.io/x"));
    }

    #[test]
    fn only_labels_whose_value_differs_are_patched() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n",
            "labels": {"a": "1", "b": "2", "theirs": "x"}}}))
        .unwrap_or_else(|e| panic!("{e}"));
        let wanted = BTreeMap::from([
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "3".to_owned()),
            ("c".to_owned(), "4".to_owned()),
        ]);
        let changed = changed_labels(&node, &wanted);
        assert_eq!(
            changed.into_iter().collect::<Vec<_>>(),
            [
                ("b".to_owned(), "3".to_owned()),
                ("c".to_owned(), "4".to_owned())
            ]
        );
    }
}
