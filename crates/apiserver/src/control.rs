//! Test controls: the request log, fault injection, latency, and `TestHandle`, the cloneable
//! remote control with direct store access.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use crate::error::Error;
use crate::registry::{DeleteOptions, WriteOptions, meta_str};
use crate::resources::{self, ResourceId};
use crate::server::Shared;
use crate::store::Notice;

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

/// An open watch, as [`TestHandle::open_watches`] counts it.
#[derive(Debug, Clone)]
struct OpenWatch {
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
}

/// Client connections open right now, by the protocol they speak (see
/// [`TestHandle::open_connections`]).
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
        shared: &Arc<Shared>,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> OpenWatchGuard {
        let c = &shared.controls;
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
            shared: Arc::downgrade(shared),
            id,
        }
    }
}

impl Controls {
    /// Registers an accepted connection; it counts until the guard is dropped. The protocol
    /// starts unknown and is set by the connection's first request.
    pub(crate) fn connection_opened(shared: &Arc<Shared>) -> ConnectionGuard {
        let c = &shared.controls;
        let id = c
            .next_connection
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let protocol = ConnectionProtocol::default();
        lock(&c.connections).insert(id, protocol.clone());
        ConnectionGuard {
            shared: Arc::downgrade(shared),
            id,
            protocol,
        }
    }
}

/// Keeps a client connection counted as open; held by the connection's task.
pub(crate) struct ConnectionGuard {
    shared: std::sync::Weak<Shared>,
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
        if let Some(s) = self.shared.upgrade() {
            lock(&s.controls.connections).remove(&self.id);
        }
    }
}

/// Keeps a watch counted as open; held by the watch's task.
pub(crate) struct OpenWatchGuard {
    shared: std::sync::Weak<Shared>,
    id: u64,
}

impl Drop for OpenWatchGuard {
    fn drop(&mut self) {
        if let Some(s) = self.shared.upgrade() {
            lock(&s.controls.watches).remove(&self.id);
        }
    }
}

/// A cloneable remote control over a running [`ApiServer`](crate::ApiServer).
///
/// Store methods act like the matching HTTP verbs (same defaulting, validation, events and
/// resourceVersions) without going through HTTP, authentication or fault injection.
#[derive(Clone)]
pub struct TestHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TestHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHandle")
            .field("addr", &self.shared.addr)
            .finish()
    }
}

fn resolve(api_version: &str, kind: &str) -> Result<ResourceId, Error> {
    resources::by_kind(api_version, kind).ok_or_else(|| Error::UnknownKind {
        api_version: api_version.into(),
        kind: kind.into(),
    })
}

fn target(obj: &Value) -> Result<(ResourceId, String, String), Error> {
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let res = resolve(av, kind)?;
    let ns = if res.info().namespaced {
        meta_str(obj, "namespace")
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_string()
    } else {
        String::new()
    };
    Ok((res, ns, meta_str(obj, "name").unwrap_or("").to_string()))
}

fn ns_of(res: ResourceId, namespace: Option<&str>) -> &str {
    if res.info().namespaced {
        namespace.unwrap_or("default")
    } else {
        ""
    }
}

impl TestHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        TestHandle { shared }
    }

    /// `http://127.0.0.1:PORT`, or `https://...` with [`Config::tls`](crate::Config::tls).
    pub fn url(&self) -> String {
        self.shared.url()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Every request served since start or the last [`TestHandle::reset_requests`].
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.controls.records).clone()
    }

    /// Forgets the recorded requests.
    pub fn reset_requests(&self) {
        lock(&self.shared.controls.records).clear();
    }

    /// Counts recorded requests with this verb and resource; `None` matches any namespace/name.
    /// A list with `watch=true` counts as `watch`.
    pub fn count(
        &self,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> usize {
        lock(&self.shared.controls.records)
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
    pub fn count_by_user(&self, user: &str) -> usize {
        lock(&self.shared.controls.records)
            .iter()
            .filter(|r| r.user.as_deref() == Some(user))
            .count()
    }

    /// Counts the watches open right now on `resource`; `None` matches any namespace/name
    /// (the name of a watch is its `metadata.name=` field selector, if any).
    pub fn open_watches(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> usize {
        lock(&self.shared.controls.watches)
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
    pub fn open_connections(&self) -> OpenConnections {
        let mut open = OpenConnections::default();
        for p in lock(&self.shared.controls.connections).values() {
            match p.load(std::sync::atomic::Ordering::Relaxed) {
                1 => open.http1 += 1,
                2 => open.http2 += 1,
                _ => open.unknown += 1,
            }
        }
        open
    }

    /// Ends every open watch cleanly (the client sees the stream end and resumes).
    pub fn close_watches(&self) {
        self.shared
            .registry
            .store
            .lock()
            .notify(Notice::CloseWatches);
    }

    /// Answers the next `n` API requests (not `/nodelet/...`) with `status` and a `Status`
    /// body; 429 and 503 carry `Retry-After: 1`.
    pub fn fail_next(&self, n: usize, status: u16) {
        *lock(&self.shared.controls.faults) = Faults {
            remaining: n,
            status,
            ..Faults::default()
        };
    }

    /// Like [`TestHandle::fail_next`], but only requests with this verb (`get`, `list`,
    /// `watch`, ...) and/or resource (`configmaps`) fail and count; others are served.
    pub fn fail_next_matching(
        &self,
        n: usize,
        status: u16,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        *lock(&self.shared.controls.faults) = Faults {
            remaining: n,
            status,
            verb: verb.map(String::from),
            resource: resource.map(String::from),
        };
    }

    /// Delays every request by `d` before it is handled (zero turns it off).
    pub fn set_latency(&self, d: Duration) {
        *lock(&self.shared.controls.latency) = d;
    }

    /// Drops the event history: resuming a watch or an exact list from any resourceVersion
    /// handed out so far answers 410 `Expired`. Open watches continue.
    pub fn compact(&self) {
        self.shared.registry.store.lock().compact();
    }

    /// Sends a BOOKMARK now to every watch that allows bookmarks.
    pub fn bookmark_now(&self) {
        self.shared.bookmark_now();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.registry.store.lock().rv
    }

    /// Closes the listening socket and every connection (clients see connection errors).
    pub async fn stop_listener(&self) {
        self.shared.stop_listener().await;
    }

    /// Listens again on the same port.
    ///
    /// # Errors
    /// [`Error::Bind`] if the port was taken meanwhile; [`Error::ShutDown`] after shutdown.
    pub async fn restart_listener(&self) -> Result<(), Error> {
        self.shared.restart_listener().await
    }

    /// Creates an object; `apiVersion` and `kind` pick the resource, `metadata.namespace`
    /// (default `default`) the namespace.
    ///
    /// # Errors
    /// [`Error::UnknownKind`], or [`Error::Rejected`] with the API error (AlreadyExists, Invalid, ...).
    pub fn create(&self, obj: Value) -> Result<Value, Error> {
        let (res, ns, _) = target(&obj)?;
        self.shared
            .registry
            .create(res, &ns, obj, WriteOptions::default())
            .map_err(Error::Rejected)
    }

    /// Replaces an object (a PUT). Without `metadata.resourceVersion` the update is
    /// unconditional; with it, a stale version is a Conflict.
    ///
    /// # Errors
    /// [`Error::UnknownKind`], or [`Error::Rejected`] (NotFound, Conflict, Invalid, ...).
    pub fn update(&self, obj: Value) -> Result<Value, Error> {
        let (res, ns, name) = target(&obj)?;
        self.shared
            .registry
            .update(res, &ns, &name, None, obj, WriteOptions::default())
            .map(|(v, _)| v)
            .map_err(Error::Rejected)
    }

    /// Replaces an object's `status` (a PUT to the `status` subresource).
    ///
    /// # Errors
    /// As [`TestHandle::update`].
    pub fn update_status(&self, obj: Value) -> Result<Value, Error> {
        let (res, ns, name) = target(&obj)?;
        self.shared
            .registry
            .update(
                res,
                &ns,
                &name,
                Some("status"),
                obj,
                WriteOptions::default(),
            )
            .map(|(v, _)| v)
            .map_err(Error::Rejected)
    }

    /// Deletes an object with default options, exactly like a DELETE without a body: a pod
    /// bound to a node is only marked (deletionTimestamp + grace period); see
    /// [`TestHandle::delete_now`].
    ///
    /// # Errors
    /// [`Error::UnknownKind`], or [`Error::Rejected`] (NotFound).
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), Error> {
        let res = resolve(api_version, kind)?;
        self.shared
            .registry
            .delete(res, ns_of(res, namespace), name, &DeleteOptions::default())
            .map(|_| ())
            .map_err(Error::Rejected)
    }

    /// Deletes with `gracePeriodSeconds=0` (what the kubelet sends after cleanup): removes a
    /// pod at once. Objects with finalizers are still only marked.
    ///
    /// # Errors
    /// As [`TestHandle::delete`].
    pub fn delete_now(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), Error> {
        let res = resolve(api_version, kind)?;
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        self.shared
            .registry
            .delete(res, ns_of(res, namespace), name, &opts)
            .map(|_| ())
            .map_err(Error::Rejected)
    }

    /// Assigns an unbound pod to `node` (a POST to `pods/binding`, as the scheduler does).
    ///
    /// # Errors
    /// [`Error::Rejected`]: NotFound, or Conflict when the pod is already bound or deleting.
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<Value, Error> {
        self.shared
            .registry
            .bind(namespace, name, node, WriteOptions::default())
            .map_err(Error::Rejected)
    }

    /// Reads an object (`None` if absent or the kind is not served).
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let res = resources::by_kind(api_version, kind)?;
        self.shared
            .registry
            .get(res, ns_of(res, namespace), name)
            .ok()
            .map(|v| (*v).clone())
    }

    /// Lists objects of a kind (all namespaces when `namespace` is `None`), sorted by namespace
    /// and name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let Some(res) = resources::by_kind(api_version, kind) else {
            return Vec::new();
        };
        let s = self.shared.registry.store.lock();
        let rv = s.rv;
        s.snapshot(res, namespace, rv)
            .into_iter()
            .map(|(_, v)| (*v).clone())
            .collect()
    }
}
