//! What a node agent reports to the API server, as a kubelet does: pod statuses
//! ([`StatusWriter`], the kubelet's status manager), pod events through client-go's event
//! correlator ([`EventPublisher`]), and the Node with its Lease ([`run_node`]). Each part takes a small config of its own and counts the writes it could
//! not make in shared [`Counters`] for the agent's metrics.
//!
//! # Principal types
//!
//! * [`StatusWriter`] ([`StatusConfig`]): a non-blocking `nodelet_core::StatusSink`; the
//!   newest status per pod wins, a task sends it as a strategic merge patch of `pods/status`
//!   (skipping one equal to the last sent; a condition's `lastTransitionTime` moves only when
//!   its status does) and deletes a pod being deleted once it has terminated (grace period 0,
//!   UID precondition).
//! * [`EventPublisher`] ([`EventConfig`]): a non-blocking `nodelet_core::EventSink`; a bounded
//!   queue and one task that aggregates, rate-limits and creates or updates core/v1 Events
//!   (see the [`events`](EventPublisher) docs for the steps).
//! * [`run_node`] ([`NodeConfig`]): creates or reconciles the Node (labels, taints only when
//!   it creates it, the Ready condition, addresses, capacity), renews its Lease in
//!   `kube-node-lease` and refreshes the Ready heartbeat until shut down.
//! * [`Counters`]: failed writes by [`WriteTarget`], events not published by [`EventDrop`].
//! * [`delete_node`]: the node taken off the cluster (`nodelet reset --delete-node`): its
//!   Lease, then its Node, each outcome reported ([`Deletion`]).
//!
//! ```text
//! pod workers ─► StatusWriter (newest per pod) ─► task: PATCH pods/status │ DELETE pod
//! pod workers, volume manager ─► EventPublisher (queue ≤ 1000) ─► task: aggregate ─► correlate
//!                                                                  ─► spam filter ─► POST/PATCH events
//! run_node: register Node ─► every 10 s: renew Lease; every 60 s: Node status (Ready)
//! ```
//!
//! # Invariants
//!
//! * Every request is one a node identity may make under the Node authorizer and
//!   NodeRestriction: the status of its own pods and their deletion, events, its own Node
//!   (labels and status only once it exists), its own Lease. [`delete_node`] alone asks more
//!   (the Node's deletion): it reports the refusal a node identity gets, with what to do.
//! * Nothing blocks the caller: events are queued or dropped and counted; a failed write is
//!   logged, counted and retried on the next tick (Node, Lease) or forgotten (events).
//! * Event messages are never logged (reason and pod only).
//!
//! # Example
//!
//! ```no_run
//! use nodelet_reporting::{Counters, EventConfig, EventPublisher, NodeConfig, run_node};
//! use tokio_util::sync::CancellationToken;
//! use tokio_util::task::TaskTracker;
//!
//! # async fn demo(client: kube::Client) {
//! let (shutdown, tracker, counters) =
//!     (CancellationToken::new(), TaskTracker::new(), Counters::default());
//! let events = EventPublisher::start(
//!     EventConfig::new("dev-1"),
//!     client.clone(),
//!     counters.clone(),
//!     shutdown.clone(),
//!     &tracker,
//! );
//! tracker.spawn(run_node(
//!     NodeConfig::new("dev-1", "/var/lib/nodelet"),
//!     client,
//!     counters,
//!     shutdown.clone(),
//! ));
//! // ... hand `events` to the pod workers as their `EventSink`; at the end:
//! shutdown.cancel();
//! tracker.close();
//! tracker.wait().await;
//! # drop(events);
//! # }
//! ```

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod counters;
mod events;
mod node;
mod removal;
mod status;

pub use counters::{Counters, EventDrop, WriteTarget};
pub use events::{
    AGGREGATION_WINDOW, CACHE_CAPACITY, COMPONENT, EventConfig, EventPublisher, QUEUE_CAPACITY,
    QueueFull,
};
pub use node::{AGENT_TAINT_KEY, KUBELET_VERSION, NodeConfig, run_node};
pub use removal::{Deletion, NodeObject, delete_node};
pub use status::{StatusConfig, StatusWriter};
