//! The churn bench's server: `nodelet-apiserver` in the bench's process (the default), or a
//! real kube-apiserver v1.36.2 with etcd (`SCALE_SERVER=realk8s REALK8S_DIR=…`, as the scale
//! bench's real-server mode, `support/realk8s.rs`). Both write the same objects and pods; on
//! the real server objects are updated with a controller's merge patch, pods are deleted as
//! `kubectl delete` does (the default grace period: the agent stops the pod and removes it with
//! grace 0), ServiceAccount admission adds each pod's `kube-api-access` volume (a TokenRequest
//! and `kube-root-ca.crt` per pod) and the agent registers its Node, as a kubelet.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{ListParams, WatchEvent, WatchParams};
use parking_lot::Mutex;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::DeleteParams;
use nodelet_apiserver::{ApiServer, ServerHandle, User};

use crate::support::applied::{KUBECTL_USER_AGENT, Writer};
use crate::support::realk8s::{RealK8s, ServerCounts};
use crate::support::{NODE, delete_object, list_watch_counts, object, pod};

/// The server the churn runs against (see the module docs). One value per run: its size does
/// not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Cluster {
    /// `nodelet-apiserver` in this process, TLS, auth, the Node authorizer's lag.
    Stand {
        server: ApiServer,
        handle: ServerHandle,
        node: User,
    },
    /// A real kube-apiserver and etcd, started through the `realk8s` scripts.
    Real {
        k8s: RealK8s,
        writer: Writer,
        pods: Api<Pod>,
        nodes: Api<Node>,
    },
}

/// When the bench's own watch of the node's pods first saw each pod (by index): the server's
/// fan-out of the pod's creation, which the agent's pod watch receives from the same cache.
pub(crate) type PodEvents = Arc<Mutex<HashMap<usize, Instant>>>;

/// The server's record of requests at a moment, to diff at the end (see [`Cluster::requests`]).
pub(crate) enum Mark {
    Stand,
    Real(ServerCounts),
}

impl Cluster {
    /// `nodelet-apiserver` with `config`; the node's kubeconfig written to `kubeconfig`.
    pub(crate) async fn stand_in(config: nodelet_apiserver::Config, kubeconfig: &Path) -> Cluster {
        let server = ApiServer::start(config)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let node = User::node(NODE);
        server
            .write_kubeconfig(kubeconfig, &node)
            .unwrap_or_else(|e| panic!("{e}"));
        let handle = server.handle();
        Cluster::Stand {
            server,
            handle,
            node,
        }
    }

    /// The real control plane (fails naming what is missing); the node's kubeconfig path.
    pub(crate) async fn real() -> (Cluster, std::path::PathBuf) {
        let k8s = RealK8s::start();
        let admin = k8s.admin_client(KUBECTL_USER_AGENT).await;
        let kubeconfig = k8s.node_kubeconfig(NODE);
        let cluster = Cluster::Real {
            writer: Writer::from_client(admin.clone()),
            pods: Api::namespaced(admin.clone(), "default"),
            nodes: Api::all(admin),
            k8s,
        };
        (cluster, kubeconfig)
    }

    /// `stand-in` or `kube-apiserver on 127.0.0.1:PORT`.
    pub(crate) fn name(&self) -> String {
        match self {
            Cluster::Stand { .. } => "nodelet-apiserver (stand-in)".to_owned(),
            Cluster::Real { k8s, .. } => {
                format!("kube-apiserver v1.36.2 on 127.0.0.1:{}", k8s.port)
            }
        }
    }

    /// Whether the agent is ready for pods: it watches them (stand-in) or its Node exists.
    pub(crate) async fn agent_ready(&self) -> bool {
        match self {
            Cluster::Stand { handle, .. } => handle.open_watches("pods", None, None) > 0,
            Cluster::Real { nodes, .. } => nodes.get_opt(NODE).await.ok().flatten().is_some(),
        }
    }

    /// Creates object `j` holding `value` (see [`object`]).
    pub(crate) async fn create_object(&self, j: usize, value: &str) {
        match self {
            Cluster::Stand { handle, .. } => {
                handle
                    .create(object(j, value))
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            Cluster::Real { writer, .. } => {
                // Left by an interrupted run on a kept state directory: set to `value`.
                if writer.try_create(object(j, value)).await.is_err() {
                    writer.set_key(j, value).await;
                }
            }
        }
    }

    /// Sets object `j`'s key to `value`: a whole-object update (stand-in) or a merge patch.
    pub(crate) async fn update_object(&self, j: usize, value: &str) {
        match self {
            Cluster::Stand { handle, .. } => {
                handle
                    .update(object(j, value))
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            Cluster::Real { writer, .. } => writer.set_key(j, value).await,
        }
    }

    /// Deletes object `j`.
    pub(crate) async fn delete_object(&self, j: usize) {
        match self {
            Cluster::Stand { handle, .. } => {
                delete_object(handle, j).unwrap_or_else(|e| panic!("deleting object {j}: {e}"));
            }
            Cluster::Real { writer, .. } => {
                let name = if j.is_multiple_of(2) {
                    format!("cm-{j}")
                } else {
                    format!("s-{j}")
                };
                let client = writer.client().clone();
                let result = if j.is_multiple_of(2) {
                    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, "default")
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ())
                } else {
                    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client, "default")
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ())
                };
                result.unwrap_or_else(|e| panic!("deleting {name}: {e}"));
            }
        }
    }

    /// Creates pod `p-index` mounting `objs`: its UID and how long the POST took.
    pub(crate) async fn create_pod(&self, index: usize, objs: &[usize]) -> (String, Duration) {
        let sent = Instant::now();
        let created = match self {
            Cluster::Stand { handle, .. } => handle
                .create(pod(index, objs))
                .unwrap_or_else(|e| panic!("{e}")),
            Cluster::Real { writer, .. } => writer.create(pod(index, objs)).await,
        };
        let uid = created["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (uid, sent.elapsed())
    }

    /// Deletes pod `p-index` as `kubectl delete` does.
    pub(crate) async fn delete_pod(&self, index: usize) {
        let name = format!("p-{index}");
        match self {
            Cluster::Stand { handle, .. } => handle
                .delete("v1", "Pod", Some("default"), &name)
                .unwrap_or_else(|e| panic!("deleting {name}: {e}")),
            Cluster::Real { pods, .. } => {
                pods.delete(&name, &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
            }
        }
    }

    /// Whether pod `p-index` is gone from the API.
    pub(crate) async fn pod_gone(&self, index: usize) -> bool {
        let name = format!("p-{index}");
        match self {
            Cluster::Stand { handle, .. } => {
                handle.get("v1", "Pod", Some("default"), &name).is_none()
            }
            Cluster::Real { pods, .. } => matches!(pods.get_opt(&name).await, Ok(None)),
        }
    }

    /// On a real server, a watch of the node's pods (as the agent's: `spec.nodeName`) that
    /// records when each pod first arrived, open when this returns (see [`PodEvents`]); `None`
    /// on the stand-in (in-process: no fan-out to measure). Ends with the bench.
    pub(crate) async fn watch_pods(&self) -> Option<PodEvents> {
        let Cluster::Real { pods, .. } = self else {
            return None;
        };
        let selector = format!("spec.nodeName={NODE}");
        let rv = pods
            .list_metadata(&ListParams::default().fields(&selector).limit(1))
            .await
            .unwrap_or_else(|e| panic!("list pods: {e}"))
            .metadata
            .resource_version
            .unwrap_or_default();
        let params = WatchParams::default().fields(&selector).timeout(290);
        let mut events = pods
            .watch(&params, &rv)
            .await
            .unwrap_or_else(|e| panic!("watch pods: {e}"))
            .boxed();
        let seen = PodEvents::default();
        let (s, pods) = (seen.clone(), pods.clone());
        tokio::spawn(async move {
            let mut rv = rv;
            loop {
                while let Some(Ok(e)) = events.next().await {
                    let p = match e {
                        WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => {
                            p
                        }
                        WatchEvent::Bookmark(b) => {
                            rv = b.metadata.resource_version;
                            continue;
                        }
                        WatchEvent::Error(_) => break,
                    };
                    rv = p.metadata.resource_version.clone().unwrap_or(rv);
                    let index = p
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|n| n.strip_prefix("p-")?.parse().ok());
                    if let Some(index) = index {
                        s.lock().entry(index).or_insert_with(Instant::now);
                    }
                }
                // The server ended the watch (its timeout): resume where it stood.
                match pods.watch(&params, &rv).await {
                    Ok(stream) => events = stream.boxed(),
                    Err(_) => return,
                }
            }
        });
        Some(seen)
    }

    /// Starts counting the agent's requests.
    pub(crate) async fn mark(&self) -> Mark {
        match self {
            Cluster::Stand { handle, .. } => {
                handle.reset_requests();
                Mark::Stand
            }
            Cluster::Real { k8s, writer, .. } => Mark::Real(k8s.counts(writer.client()).await),
        }
    }

    /// The requests since `mark`, as one line: the agent's LISTs, watch-lists and watches
    /// (stand-in), or every request the server counted by verb, resource and code (the node's
    /// and the bench's: the bench's are its POSTs, PATCHes, DELETEs and GETs of pods and
    /// objects).
    pub(crate) async fn requests(&self, mark: &Mark) -> String {
        match (self, mark) {
            (Cluster::Stand { handle, node, .. }, _) => {
                list_watch_counts(&handle.requests(), &node.name)
            }
            (Cluster::Real { k8s, writer, .. }, Mark::Real(before)) => {
                k8s.counts(writer.client()).await.since(before)
            }
            (Cluster::Real { .. }, Mark::Stand) => "-".to_owned(),
        }
    }

    /// Stops the stand-in; on a real server, deletes any pod left (grace 0).
    pub(crate) async fn finish(self) {
        match self {
            Cluster::Stand { server, .. } => server.shutdown().await,
            Cluster::Real { pods, .. } => {
                let _ = pods
                    .delete_collection(
                        &DeleteParams::default().grace_period(0),
                        &Default::default(),
                    )
                    .await;
            }
        }
    }
}
