//! Test controls: the request log, open connections and watches, fault injection, latency, and
//! the failures a real server shows on its own (GOAWAY, 429 under load, a restart's not-ready
//! window, watch-list refusal) (read by the pipeline, set through `ServerHandle`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::config::{Config, clamp_chance};

/// One served request, recorded after its response status is known.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestRecord {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for
    /// non-resource paths (`/version`, discovery) the lower-case HTTP method.
    pub verb: String,
    /// Plural resource (`configmaps`); empty for non-resource paths.
    pub resource: String,
    /// Subresource (`status`).
    pub subresource: Option<String>,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Name from the path, or from a `metadata.name=` field selector on list/watch.
    pub name: Option<String>,
    /// Authenticated user name (`None` when authentication failed).
    pub user: Option<String>,
    /// HTTP status of the response (200 for a watch that started).
    pub status: u16,
    /// API group (`""` for core).
    pub api_group: String,
    /// Request path.
    pub path: String,
    /// A watch-list: `sendInitialEvents=true` (the object's state, then its changes, on one
    /// watch).
    pub send_initial_events: bool,
    /// The `resourceVersion` query parameter, as sent (`None`: not sent).
    pub resource_version: Option<String>,
    /// When the request reached the pipeline (after its headers were read).
    pub received: std::time::Instant,
    /// When its answer was ready: for a watch, once it was set up (its initial events queued
    /// for a watch-list), not when it ended.
    pub answered: std::time::Instant,
}

#[derive(Default)]
struct Faults {
    remaining: usize,
    status: u16,
    /// Only requests with this verb count (and fail); `None` = any.
    verb: Option<String>,
    /// Only requests for this resource count (and fail); `None` = any.
    resource: Option<String>,
}

/// An open watch, as [`crate::ServerHandle::open_watches`] counts it.
#[derive(Debug, Clone)]
struct OpenWatch {
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
}

/// Client connections open right now, by the protocol they speak (see
/// [`crate::ServerHandle::open_connections`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenConnections {
    /// Connections whose requests arrive over HTTP/1.1 (or 1.0).
    pub http1: usize,
    /// Connections speaking HTTP/2.
    pub http2: usize,
    /// Accepted connections that have not sent a request yet (or whose TLS handshake is still
    /// running).
    pub unknown: usize,
}

impl OpenConnections {
    /// All open connections.
    pub fn total(&self) -> usize {
        self.http1 + self.http2 + self.unknown
    }
}

/// What [`crate::ServerHandle::restart`] imitates: a killed kube-apiserver process and its
/// replacement. `Restart::default()` is an instant restart (down 0, ready at once, the Node
/// authorizer's graph rebuilt at once).
///
/// ```
/// use std::time::Duration;
/// use nodelet_apiserver::Restart;
/// let r = Restart::like_kube_apiserver().down(Duration::from_millis(300));
/// assert_eq!((r.down, r.not_ready), (Duration::from_millis(300), Duration::from_secs(2)));
/// assert_eq!(r.graph_rebuild, Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Restart {
    /// How long the port refuses connections (no process listening). Default 0.
    pub down: Duration,
    /// How long `/readyz` answers 500 once the server listens again, while every request is
    /// served (`/livez` and `/healthz` stay 200). Default 0.
    pub not_ready: Duration,
    /// How long after the server listens again the Node authorizer's graph stays empty (every
    /// node request that needs a pod relationship is refused, "no relationship found") before
    /// it is rebuilt from the stored pods, as a new process's authorizer starts empty and fills
    /// its graph from its informers. Default 0 (rebuilt at once).
    pub graph_rebuild: Duration,
}

impl Restart {
    /// A restart with these two durations (and the graph rebuilt at once).
    pub fn new(down: Duration, not_ready: Duration) -> Self {
        Restart {
            down,
            not_ready,
            graph_rebuild: Duration::ZERO,
        }
    }

    /// What a v1.36 kube-apiserver shows from the moment its new process listens: requests
    /// are served at once while `/readyz` fails for about 2 s, and the Node authorizer refuses
    /// node requests that need a pod relationship for 1 s (`graph_rebuild`): the pessimistic
    /// end of what an agent's burst of requests meets (a quiet server rebuilds its graph in
    /// about 0.1 s). `down` is 0 (how long the process takes to listen depends on the machine;
    /// set it with [`Restart::down`]).
    pub fn like_kube_apiserver() -> Self {
        Restart::new(Duration::ZERO, Duration::from_secs(2)).graph_rebuild(Duration::from_secs(1))
    }

    /// Sets [`Restart::down`](struct@Restart#structfield.down).
    #[must_use]
    pub fn down(mut self, d: Duration) -> Self {
        self.down = d;
        self
    }

    /// Sets [`Restart::not_ready`](struct@Restart#structfield.not_ready).
    #[must_use]
    pub fn not_ready(mut self, d: Duration) -> Self {
        self.not_ready = d;
        self
    }

    /// Sets [`Restart::graph_rebuild`](struct@Restart#structfield.graph_rebuild).
    #[must_use]
    pub fn graph_rebuild(mut self, d: Duration) -> Self {
        self.graph_rebuild = d;
        self
    }
}

/// A connection's protocol as [`Controls`] records it: 0 unknown, 1 HTTP/1.x, 2 HTTP/2.
pub(crate) type ConnectionProtocol = Arc<std::sync::atomic::AtomicU8>;

/// Mutable test-control state.
pub(crate) struct Controls {
    records: Mutex<Vec<RequestRecord>>,
    connections: Mutex<std::collections::HashMap<u64, ConnectionProtocol>>,
    next_connection: AtomicU64,
    watches: Mutex<std::collections::HashMap<u64, OpenWatch>>,
    next_watch: AtomicU64,
    faults: Mutex<Faults>,
    latency: Mutex<Duration>,
    /// [`Config::goaway_chance`], as `f64` bits.
    goaway_chance: AtomicU64,
    /// [`Config::max_requests_in_flight`] (0: unlimited).
    max_in_flight: AtomicUsize,
    /// Requests holding a [`Seat`] now.
    in_flight: AtomicUsize,
    /// [`Config::watch_list`].
    watch_list: AtomicBool,
    /// `/readyz` fails until then (a restart's not-ready window).
    not_ready_until: Mutex<Option<tokio::time::Instant>>,
    goaways: AtomicU64,
    throttled: AtomicU64,
    restarts: AtomicU64,
    /// [`Config::cost_model`] and its places.
    pub(crate) costs: crate::cost::Costs,
}

impl Controls {
    /// Controls starting from the run-time options of `config`.
    pub(crate) fn new(config: &Config) -> Self {
        Controls {
            records: Mutex::default(),
            connections: Mutex::default(),
            next_connection: AtomicU64::default(),
            watches: Mutex::default(),
            next_watch: AtomicU64::default(),
            faults: Mutex::default(),
            latency: Mutex::default(),
            goaway_chance: AtomicU64::new(clamp_chance(config.goaway_chance).to_bits()),
            max_in_flight: AtomicUsize::new(config.max_requests_in_flight),
            in_flight: AtomicUsize::default(),
            watch_list: AtomicBool::new(config.watch_list),
            not_ready_until: Mutex::default(),
            goaways: AtomicU64::default(),
            throttled: AtomicU64::default(),
            restarts: AtomicU64::default(),
            costs: crate::cost::Costs::new(config.cost_model),
        }
    }

    pub(crate) fn record(&self, r: RequestRecord) {
        self.records.lock().push(r);
    }

    /// Takes one queued fault, if any.
    pub(crate) fn take_fault(&self, verb: &str, resource: &str) -> Option<u16> {
        let mut f = self.faults.lock();
        if f.remaining == 0
            || f.verb.as_deref().is_some_and(|v| v != verb)
            || f.resource.as_deref().is_some_and(|r| r != resource)
        {
            return None;
        }
        f.remaining -= 1;
        Some(f.status)
    }

    pub(crate) fn latency(&self) -> Duration {
        *self.latency.lock()
    }

    /// Registers an open watch; it counts until the returned guard is dropped.
    pub(crate) fn watch_opened(
        self: &Arc<Self>,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> OpenWatchGuard {
        let c = self;
        let id = c.next_watch.fetch_add(1, Ordering::Relaxed);
        c.watches.lock().insert(
            id,
            OpenWatch {
                resource: resource.to_string(),
                namespace: namespace.map(String::from),
                name: name.map(String::from),
            },
        );
        OpenWatchGuard {
            controls: Arc::downgrade(self),
            id,
        }
    }

    /// Registers an accepted connection; it counts until the guard is dropped. The protocol
    /// starts unknown and is set by the connection's first request.
    pub(crate) fn connection_opened(self: &Arc<Self>) -> ConnectionGuard {
        let c = self;
        let id = c.next_connection.fetch_add(1, Ordering::Relaxed);
        let protocol = ConnectionProtocol::default();
        c.connections.lock().insert(id, protocol.clone());
        ConnectionGuard {
            controls: Arc::downgrade(self),
            id,
            protocol,
        }
    }

    /// Every request served since start or the last [`crate::ServerHandle::reset_requests`].
    pub(crate) fn requests(&self) -> Vec<RequestRecord> {
        self.records.lock().clone()
    }

    /// Forgets the recorded requests.
    pub(crate) fn reset_requests(&self) {
        self.records.lock().clear();
    }

    /// Counts recorded requests with this verb and resource; `None` matches any namespace/name.
    /// A list with `watch=true` counts as `watch`.
    pub(crate) fn count(
        &self,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> usize {
        self.records
            .lock()
            .iter()
            .filter(|r| {
                r.verb == verb
                    && r.resource == resource
                    && namespace.is_none_or(|n| r.namespace.as_deref() == Some(n))
                    && name.is_none_or(|n| r.name.as_deref() == Some(n))
            })
            .count()
    }

    /// Counts recorded requests by user name.
    pub(crate) fn count_by_user(&self, user: &str) -> usize {
        self.records
            .lock()
            .iter()
            .filter(|r| r.user.as_deref() == Some(user))
            .count()
    }

    /// Counts the watches open right now on `resource`; `None` matches any namespace/name
    /// (the name of a watch is its `metadata.name=` field selector, if any).
    pub(crate) fn open_watches(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> usize {
        self.watches
            .lock()
            .values()
            .filter(|w| {
                w.resource == resource
                    && namespace.is_none_or(|n| w.namespace.as_deref() == Some(n))
                    && name.is_none_or(|n| w.name.as_deref() == Some(n))
            })
            .count()
    }

    /// Client connections open right now, by protocol (HTTP/1.1 or HTTP/2, as their requests
    /// arrive). A connection stops counting when it is closed by either side.
    pub(crate) fn open_connections(&self) -> OpenConnections {
        let mut open = OpenConnections::default();
        for p in self.connections.lock().values() {
            match p.load(Ordering::Relaxed) {
                1 => open.http1 += 1,
                2 => open.http2 += 1,
                _ => open.unknown += 1,
            }
        }
        open
    }

    /// Answers the next `n` API requests (not `/nodelet/...`) with `status` and a `Status`
    /// body; 429 and 503 carry `Retry-After: 1`.
    pub(crate) fn fail_next(&self, n: usize, status: u16) {
        *self.faults.lock() = Faults {
            remaining: n,
            status,
            ..Faults::default()
        };
    }

    /// Like [`crate::ServerHandle::fail_next`], but only requests with this verb (`get`, `list`,
    /// `watch`, ...) and/or resource (`configmaps`) fail and count; others are served.
    pub(crate) fn fail_next_matching(
        &self,
        n: usize,
        status: u16,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        *self.faults.lock() = Faults {
            remaining: n,
            status,
            verb: verb.map(String::from),
            resource: resource.map(String::from),
        };
    }

    /// Delays every request by `d` before it is handled (zero turns it off).
    pub(crate) fn set_latency(&self, d: Duration) {
        *self.latency.lock() = d;
    }

    /// Sets the GOAWAY probability (clamped to 0..=1).
    pub(crate) fn set_goaway_chance(&self, p: f64) {
        self.goaway_chance
            .store(clamp_chance(p).to_bits(), Ordering::Relaxed);
    }

    /// Draws whether the response just given on an HTTP/2 connection ends that connection.
    pub(crate) fn draw_goaway(&self) -> bool {
        let p = f64::from_bits(self.goaway_chance.load(Ordering::Relaxed));
        p > 0.0 && rand::random::<f64>() < p
    }

    /// Counts a GOAWAY sent.
    pub(crate) fn goaway_sent(&self) {
        self.goaways.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections sent GOAWAY since start.
    pub(crate) fn goaways(&self) -> u64 {
        self.goaways.load(Ordering::Relaxed)
    }

    /// Sets the in-flight limit (0: unlimited). Requests holding a seat keep it.
    pub(crate) fn set_max_in_flight(&self, n: usize) {
        self.max_in_flight.store(n, Ordering::Relaxed);
    }

    /// A seat for one request, or `None` (counted as throttled) when the limit is reached.
    pub(crate) fn take_seat(self: &Arc<Self>) -> Option<Seat> {
        let max = self.max_in_flight.load(Ordering::Relaxed);
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (max == 0 || n < max).then_some(n + 1)
            });
        if taken.is_err() {
            self.throttled.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Seat {
            controls: Arc::downgrade(self),
        })
    }

    /// Requests refused with 429 by the in-flight limit since start.
    pub(crate) fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Turns streaming lists (watches with `sendInitialEvents`) on or off.
    pub(crate) fn set_watch_list(&self, on: bool) {
        self.watch_list.store(on, Ordering::Relaxed);
    }

    /// Whether streaming lists are served.
    pub(crate) fn watch_list(&self) -> bool {
        self.watch_list.load(Ordering::Relaxed)
    }

    /// Makes `/readyz` fail for `d` from now.
    pub(crate) fn not_ready_for(&self, d: Duration) {
        *self.not_ready_until.lock() = Some(tokio::time::Instant::now() + d);
    }

    /// Whether `/readyz` should pass now.
    pub(crate) fn ready(&self) -> bool {
        self.not_ready_until
            .lock()
            .is_none_or(|t| tokio::time::Instant::now() >= t)
    }

    /// Counts a completed restart.
    pub(crate) fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Restarts since start.
    pub(crate) fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }
}

/// One request's place under the in-flight limit, given back when dropped.
pub(crate) struct Seat {
    controls: std::sync::Weak<Controls>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(c) = self.controls.upgrade() {
            c.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Keeps a client connection counted as open; held by the connection's task.
pub(crate) struct ConnectionGuard {
    controls: std::sync::Weak<Controls>,
    id: u64,
    pub(crate) protocol: ConnectionProtocol,
}

impl ConnectionGuard {
    /// Records the protocol of a request served on this connection.
    pub(crate) fn saw(protocol: &ConnectionProtocol, version: http::Version) {
        let p = if version == http::Version::HTTP_2 {
            2
        } else {
            1
        };
        protocol.store(p, Ordering::Relaxed);
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(c) = self.controls.upgrade() {
            c.connections.lock().remove(&self.id);
        }
    }
}

/// Keeps a watch counted as open; held by the watch's task.
pub(crate) struct OpenWatchGuard {
    controls: std::sync::Weak<Controls>,
    id: u64,
}

impl Drop for OpenWatchGuard {
    fn drop(&mut self) {
        if let Some(c) = self.controls.upgrade() {
            c.watches.lock().remove(&self.id);
        }
    }
}
