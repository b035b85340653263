//! The kubelet's ConfigMap/Secret managers: `get(namespace, name)` for every consumer on the
//! node, with bounded API load (spec rules OM-1 … OM-21).
//!
//! Volume plugins, env-var resolution and image-pull-secret lookup all read ConfigMaps and
//! Secrets through one [`ConfigMapManager`] and one [`SecretManager`] (spec PW-13). The pod
//! worker registers a pod before anything reads for it and unregisters it after its volumes
//! are gone (PW-4, PW-6); the manager uses those registrations to decide what to keep fresh.
//!
//! # Principal types
//!
//! * [`Manager<K>`] (aliases [`ConfigMapManager`], [`SecretManager`]): `get`, `register_pod`,
//!   `unregister_pod`, `subscribe`. Cheap to clone; objects are handed out as `Arc<K>`, never
//!   copied per read.
//! * [`ManagerConfig`] with [`Strategy`]: the kubelet's
//!   `configMapAndSecretChangeDetectionStrategy` and its defaults.
//! * [`referenced_secret_names`] / [`referenced_config_map_names`]: which objects a pod
//!   references (OM-3 / OM-4); the managers register exactly these.
//! * [`source::ObjectSource`]: the seam to the API server. [`source::KubeSource`] is the real
//!   one; `source::FakeSource` (feature `test-util`) is an in-memory one for unit tests.
//! * [`WatchHealth`] ([`Manager::watch_health`]): per watched object, when the API server last
//!   answered its watch and whether the latest request failed, for metrics and status pages.
//! * From nodelet-core: [`ObjectRef`] (kind, namespace, name), the
//!   key of the managers' stores and what [`Manager::subscribe`] sends (each `Manager<K>`
//!   knows its kind); [`AdmittedPod`](nodelet_core::AdmittedPod), what `register_pod` takes,
//!   and [`PodUid`], what `unregister_pod` takes and what references
//!   are counted by.
//! * [`Error`]: `Display` reproduces the kubelet's texts; classify with
//!   [`Error::is_not_found`] or by variant.
//! * [`ServiceLister`]: the node's one cluster-wide Service watch (`spec.clusterIP!=None`, as
//!   the kubelet's service informer), started by the first read (its task on the owner's
//!   tracker, none detached), for the service environment
//!   of containers (PW-15); it keeps each service's cluster IP and ports ([`ServiceInfo`]).
//!
//! ```text
//!  register_pod(&AdmittedPod) ──► names (OM-3/4) ──► add/delete references ──► store
//!  get(ns, name) ───────────────────────────────────────────────────► store ──► Arc<K>
//!                         Get:   no store, one GET per call
//!                         Cache: TTL entry per object, GET when stale
//!                         Watch: one reflector (watch-list, or LIST+WATCH, metadata.name=<name>) per object
//!  store sees new content ──► subscribe() receivers get the ObjectRef
//! ```
//!
//! # Choosing a strategy
//!
//! | | Watch (default) | Cache | Get |
//! |---|---|---|---|
//! | freshness of `get` | the watch's view: milliseconds behind the API server | up to one TTL old (node annotation `node.alpha.kubernetes.io/ttl`, default 60 s; `0` on clusters ≤ 100 nodes) | live |
//! | API cost | one watch-list (`sendInitialEvents=true`; LIST + WATCH where the server refuses it) per referenced object, then one long WATCH re-opened every 290 s, nothing per `get`; idle watches (unread for `max(5 × resync, 1 min)`) are stopped and relisted on the next `get`; immutable objects need no watch at all | at most one GET per object per TTL, only when something reads it, plus one when another pod starts referencing it (with TTL 0: one GET per `get`, served from the API server's watch cache) | one quorum GET per `get` |
//! | change notifications | immediately on each watch event | only when a `get` refreshes an entry | none |
//! | `get` for an unregistered object | `object "ns"/"name" not registered` | same | allowed |
//! | missing object | `secret "x" not found` (singular) | `secrets "x" not found` (API text) | same as Cache |
//! | during an API outage | last seen object | last cached object (errors other than 404 do not evict) | error |
//!
//! Every request names one object (GET by name; LIST/WATCH with
//! `fieldSelector=metadata.name=<name>`), which is what the Node authorizer allows a node
//! identity (`system:node:<node>`) for objects its pods reference; no namespace-wide list of
//! ConfigMaps or Secrets is ever made (the [`ServiceLister`]'s cluster-wide Service watch is
//! what RBAC's `system:node` role allows every node). kube's default client speaks HTTP/1.1, so each running watch would hold one
//! connection to the API server; build the client with `nodelet_transport::client` instead and the
//! watches share a few HTTP/2 connections, sharded below the server's stream limit (as the
//! kubelet multiplexes its watches). After an outage, one reflector probes and every watch
//! resumes as soon as a request succeeds again (see `reflector.rs`, `recovery.rs`). The Cache strategy's TTL comes from a watch on the agent's own Node
//! (`metadata.name=<node>`), also allowed.
//!
//! # Invariants
//!
//! * `register_pod` / `unregister_pod` never block on the network and are idempotent.
//!   References are counted per pod UID, which an admitted pod carries validated, so no pod
//!   is ever counted under an empty UID.
//! * Watch: a reflector runs for an object exactly while a registered pod references it and it
//!   is neither idle-stopped nor immutable; at most one run per object (runs carry an epoch and
//!   a stopped run's writes are discarded). Reference counts never go negative.
//! * Background tasks hold only `Weak` references and end on [`Manager::shutdown`] or when the
//!   last clone of the manager is dropped. A reflector whose watch is open keeps no task of its
//!   own: one driver task per manager follows every open watch (a 424-byte follower each,
//!   [`ManagerStats::followed_watches`]); a watch that ends or fails goes back to a task of its
//!   own until it is open again.
//! * At most [`ManagerConfig::requests_in_flight`] reflector requests await their answer at
//!   once, and as many new reflectors start at once, the others queued (not in the kubelet,
//!   whose client rate-limits instead), so a thousand registrations at once hold a bounded
//!   number of tasks and requests in memory.
//! * Payloads never reach logs or `Debug` output: the manager's `Debug` prints counters, errors
//!   carry names and server messages only.
//!
//! # Differences from the kubelet
//!
//! * **Change notifications** ([`Manager::subscribe`]): not in the kubelet; lets the volume
//!   manager remount at once instead of on the next pod resync.
//! * **No negative reference counts** (the OM-17 quirk): dropping a reference that
//!   a pod never held is ignored instead of recording `-1` and pinning the watch forever.
//! * **Readiness is awaited, not polled**: `get` waits on a channel for the first list (same
//!   1 s bound and error text as the kubelet's 10 ms poll).
//! * **Watch time-out 290 s** instead of ≥ 30 min (kube's client stops reading a response
//!   after 295 s); the reflector re-watches from its last resourceVersion, so this costs one
//!   request per 5 minutes per object and never a relist.
//! * **Cache: the node TTL is read from a watch on the agent's own Node**, and the first `get`
//!   waits once (at most `sync_timeout`) for that Node's first list — the kubelet's node lister
//!   is likewise synced before pods start.
//! * **410 loops are damped**: a 410 right after a relist, with no healthy watch in between,
//!   relists after a back-off step instead of at once.
//! * **After shutdown** a Watch `get` fails at once with [`Error::ShutDown`] instead of waiting
//!   1 s for a sync that cannot happen.
//! * **Typed wrappers**: the kubelet's `unexpected object type` cannot happen (`Manager<K>` is
//!   typed), so there is no such error.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), nodelet_object_manager::Error> {
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::{ConfigMap, Pod};
//! use nodelet_core::AdmittedPod;
//! use nodelet_object_manager::{ConfigMapManager, ManagerConfig, source::FakeSource};
//!
//! // In production: `ConfigMapManager::new(kube_client, ManagerConfig::default())?`.
//! let api = FakeSource::<ConfigMap>::new();
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! api.apply("default", cm);
//! let manager = ConfigMapManager::with_sources(Arc::new(api), None, ManagerConfig::default())?;
//!
//! let pod: Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"namespace": "default", "name": "web", "uid": "1234"},
//!     "spec": {"containers": [{"name": "c"}],
//!              "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]},
//! })).expect("valid pod");
//! let pod = AdmittedPod::new(pod).expect("a pod with a UID"); // the agent's pod source does this
//! manager.register_pod(&pod); // never blocks; starts the watch of default/settings
//! let settings = manager.get("default", "settings").await?; // waits for the first list
//! assert_eq!(settings.metadata.name.as_deref(), Some("settings"));
//!
//! let mut changes = manager.subscribe(); // ObjectRef of every object whose content changes
//! # drop(changes.try_recv());
//! manager.unregister_pod(pod.uid()); // stops the watch
//! manager.shutdown().await;
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod config;
mod driver;
mod error;
mod gate;
mod health;
mod kept;
mod kind;
mod limiter;
mod manager;
pub mod paced;
mod recovery;
mod reflector;
mod refs;
mod refusal;
mod services;
pub mod source;
mod tasks;
mod ttl;
mod watch;
mod window;

#[cfg(test)]
mod testutil;

pub use config::{ManagerConfig, Strategy};
pub use error::Error;
pub use health::WatchHealth;
pub use kind::ManagedObject;
pub use limiter::{LimiterStats, ReadLimiter, ReadLimits};
pub use manager::{ConfigMapManager, Manager, ManagerStats, SecretManager};
pub use refs::{referenced_config_map_names, referenced_secret_names};
pub use services::{
    SERVICE_FIELD_SELECTOR, ServiceInfo, ServiceListError, ServiceLister, ServiceListerConfig,
    ServicePortInfo,
};
pub use ttl::TTL_ANNOTATION;
pub use window::{Place, Window, WindowConfig, WindowStats};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The shared node types, under the paths this crate's modules use.
use nodelet_core::{ObjectKind, ObjectRef, PodUid};
