//! Test controls: the request log, open connections and watches, fault injection and latency
//! (read by the pipeline, set through `ServerHandle`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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

/// A connection's protocol as [`Controls`] records it: 0 unknown, 1 HTTP/1.x, 2 HTTP/2.
pub(crate) type ConnectionProtocol = Arc<std::sync::atomic::AtomicU8>;

/// Mutable test-control state.
#[derive(Default)]
pub(crate) struct Controls {
    records: Mutex<Vec<RequestRecord>>,
    connections: Mutex<std::collections::HashMap<u64, ConnectionProtocol>>,
    next_connection: std::sync::atomic::AtomicU64,
    watches: Mutex<std::collections::HashMap<u64, OpenWatch>>,
    next_watch: std::sync::atomic::AtomicU64,
    faults: Mutex<Faults>,
    latency: Mutex<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Controls {
    pub(crate) fn record(&self, r: RequestRecord) {
        lock(&self.records).push(r);
    }

    /// Takes one queued fault, if any.
    pub(crate) fn take_fault(&self, verb: &str, resource: &str) -> Option<u16> {
        let mut f = lock(&self.faults);
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
        *lock(&self.latency)
    }

    /// Registers an open watch; it counts until the returned guard is dropped.
    pub(crate) fn watch_opened(
        self: &Arc<Self>,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> OpenWatchGuard {
        let c = self;
        let id = c
            .next_watch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&c.watches).insert(
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
        let id = c
            .next_connection
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let protocol = ConnectionProtocol::default();
        lock(&c.connections).insert(id, protocol.clone());
        ConnectionGuard {
            controls: Arc::downgrade(self),
            id,
            protocol,
        }
    }

    /// Every request served since start or the last [`crate::ServerHandle::reset_requests`].
    pub(crate) fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.records).clone()
    }

    /// Forgets the recorded requests.
    pub(crate) fn reset_requests(&self) {
        lock(&self.records).clear();
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
        lock(&self.records)
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
        lock(&self.records)
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
        lock(&self.watches)
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
        for p in lock(&self.connections).values() {
            match p.load(std::sync::atomic::Ordering::Relaxed) {
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
        *lock(&self.faults) = Faults {
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
        *lock(&self.faults) = Faults {
            remaining: n,
            status,
            verb: verb.map(String::from),
            resource: resource.map(String::from),
        };
    }

    /// Delays every request by `d` before it is handled (zero turns it off).
    pub(crate) fn set_latency(&self, d: Duration) {
        *lock(&self.latency) = d;
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
        protocol.store(p, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(c) = self.controls.upgrade() {
            lock(&c.connections).remove(&self.id);
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
            lock(&c.watches).remove(&self.id);
        }
    }
}
