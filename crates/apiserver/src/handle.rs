//! `ServerHandle`, the cloneable remote control over a running server: direct store access for
//! seeding, the test controls (`control.rs`), listener stop/restart, simulated process
//! restarts and minted tokens.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::access::auth::User;
use crate::control::{OpenConnections, RequestRecord, Restart};
use crate::error::Error;
use crate::registry::{DeleteOptions, WriteOptions, meta_str};
use crate::resources::{ResourceId, Served};
use crate::state::Shared;

/// A cloneable handle on a running [`ApiServer`](crate::ApiServer) (from
/// [`ApiServer::handle`](crate::ApiServer::handle)): what tests use to seed and steer it, and
/// what offline mode's [`ManifestSync`](crate::ManifestSync) writes through.
///
/// Store methods act like the matching HTTP verbs (same defaulting, validation, events and
/// resourceVersions) without going through HTTP, authentication or fault injection.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("addr", &self.shared.addr)
            .finish()
    }
}

fn resolve(served: &Served, api_version: &str, kind: &str) -> Result<ResourceId, Error> {
    served
        .by_kind(api_version, kind)
        .ok_or_else(|| Error::UnknownKind {
            api_version: api_version.into(),
            kind: kind.into(),
        })
}

fn target(served: &Served, obj: &Value) -> Result<(ResourceId, String, String), Error> {
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let res = resolve(served, av, kind)?;
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

impl ServerHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        ServerHandle { shared }
    }

    /// `http://127.0.0.1:PORT`, or `https://...` with [`Config::tls`](crate::Config::tls).
    pub fn url(&self) -> String {
        self.shared.url()
    }

    /// Every request served since start or the last [`ServerHandle::reset_requests`].
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.controls.requests()
    }

    /// Forgets the recorded requests.
    pub fn reset_requests(&self) {
        self.shared.controls.reset_requests()
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
        self.shared.controls.count(verb, resource, namespace, name)
    }

    /// Counts recorded requests by user name.
    pub fn count_by_user(&self, user: &str) -> usize {
        self.shared.controls.count_by_user(user)
    }

    /// Counts the watches open right now on `resource`; `None` matches any namespace/name
    /// (the name of a watch is its `metadata.name=` field selector, if any).
    pub fn open_watches(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> usize {
        self.shared.controls.open_watches(resource, namespace, name)
    }

    /// Client connections open right now, by protocol (HTTP/1.1 or HTTP/2, as their requests
    /// arrive). A connection stops counting when it is closed by either side.
    pub fn open_connections(&self) -> OpenConnections {
        self.shared.controls.open_connections()
    }

    /// Ends every open watch cleanly (the client sees the stream end and resumes).
    pub fn close_watches(&self) {
        self.shared.close_watches();
    }

    /// Answers the next `n` API requests (not `/nodelet/...`) with `status` and a `Status`
    /// body; 429 and 503 carry `Retry-After: 1`.
    pub fn fail_next(&self, n: usize, status: u16) {
        self.shared.controls.fail_next(n, status)
    }

    /// Like [`ServerHandle::fail_next`], but only requests with this verb (`get`, `list`,
    /// `watch`, ...) and/or resource (`configmaps`) fail and count; others are served.
    pub fn fail_next_matching(
        &self,
        n: usize,
        status: u16,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        self.shared
            .controls
            .fail_next_matching(n, status, verb, resource)
    }

    /// Delays every request by `d` before it is handled (zero turns it off).
    pub fn set_latency(&self, d: Duration) {
        self.shared.controls.set_latency(d)
    }

    /// Drops the event history: resuming a watch or an exact list from any resourceVersion
    /// handed out so far answers 410 `Expired`. Open watches continue.
    pub fn compact(&self) {
        self.shared.compact();
    }

    /// Sends a BOOKMARK now to every watch that allows bookmarks.
    pub fn bookmark_now(&self) {
        self.shared.bookmark_now();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.registry.store.inner.lock().rv
    }

    /// Closes the listening socket and every connection (clients see connection errors).
    pub async fn stop_listener(&self) {
        crate::http::stop_listener(&self.shared).await;
    }

    /// Listens again on the same port.
    ///
    /// # Errors
    /// [`Error::Bind`] if the port was taken meanwhile; [`Error::ShutDown`] after shutdown.
    pub async fn restart_listener(&self) -> Result<(), Error> {
        crate::http::restart_listener(&self.shared).await
    }

    /// Imitates a kube-apiserver killed and started again (see [`Restart`]):
    /// 1. closes the listening socket and every connection (watches end);
    /// 2. forgets the watch history, as [`ServerHandle::compact`]: a watch resumed from any
    ///    resourceVersion handed out so far gets HTTP 200 and one ERROR event, 410 `Expired`
    ///    `too old resource version: X (Y)`; lists and streaming lists work at once;
    /// 3. refuses connections for `restart.down`;
    /// 4. listens again on the same port and serves every request at once, while `/readyz`
    ///    answers 500 (`[-]etcd failed: reason withheld` ... `readyz check failed`) for
    ///    `restart.not_ready`; `/livez` and `/healthz` stay 200. The Node authorizer's graph
    ///    is empty when it listens (a node is refused everything that needs a pod
    ///    relationship) and is rebuilt from the stored pods `restart.graph_rebuild` later.
    ///
    /// Returns once the server listens again. The store keeps every object.
    ///
    /// # Errors
    /// [`Error::Bind`] if the port was taken meanwhile; [`Error::ShutDown`] after shutdown.
    ///
    /// # Cancel safety
    /// Dropped during `down`, the server stays stopped (call
    /// [`ServerHandle::restart_listener`]).
    pub async fn restart(&self, restart: Restart) -> Result<(), Error> {
        crate::http::restart(&self.shared, restart).await
    }

    /// Restarts completed since start ([`ServerHandle::restart`], `POST /nodelet/restart`).
    pub fn restarts(&self) -> u64 {
        self.shared.controls.restarts()
    }

    /// Sets [`Config::goaway_chance`](crate::Config::goaway_chance) (clamped to 0..=1) from
    /// the next response on.
    pub fn set_goaway_chance(&self, p: f64) {
        self.shared.controls.set_goaway_chance(p);
    }

    /// HTTP/2 connections sent GOAWAY by [`Config::goaway_chance`](crate::Config::goaway_chance)
    /// since start.
    pub fn goaways_sent(&self) -> u64 {
        self.shared.controls.goaways()
    }

    /// Sets [`Config::max_requests_in_flight`](crate::Config::max_requests_in_flight) (0:
    /// unlimited) from the next request on; requests already served keep their seats.
    pub fn set_max_requests_in_flight(&self, n: usize) {
        self.shared.controls.set_max_in_flight(n);
    }

    /// Requests answered 429 `TooManyRequests` by the in-flight limit since start (not those
    /// of [`ServerHandle::fail_next`]).
    pub fn throttled(&self) -> u64 {
        self.shared.controls.throttled()
    }

    /// Sets [`Config::node_authorizer_lag`](crate::Config::node_authorizer_lag): pod writes
    /// not yet visible to the Node authorizer and later ones become visible that long after
    /// they were made (never before an earlier write); 0 makes the graph consistent from the
    /// next check on, unless a restart's rebuild is still pending.
    pub fn set_node_authorizer_lag(&self, lag: Duration) {
        self.shared
            .registry
            .store
            .inner
            .lock()
            .node_graph
            .set_lag(lag);
    }

    /// Sets [`Config::watch_list`](crate::Config::watch_list) from the next watch on.
    pub fn set_watch_list(&self, on: bool) {
        self.shared.controls.set_watch_list(on);
    }

    /// Creates an object; `apiVersion` and `kind` pick the resource, `metadata.namespace`
    /// (default `default`) the namespace.
    ///
    /// # Errors
    /// [`Error::UnknownKind`], or [`Error::Rejected`] with the API error (AlreadyExists, Invalid, ...).
    pub fn create(&self, obj: Value) -> Result<Value, Error> {
        let (res, ns, _) = target(&self.shared.registry.served, &obj)?;
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
        let (res, ns, name) = target(&self.shared.registry.served, &obj)?;
        self.shared
            .registry
            .update(res, &ns, &name, None, obj, WriteOptions::default())
            .map(|(v, _)| v)
            .map_err(Error::Rejected)
    }

    /// Replaces an object's `status` (a PUT to the `status` subresource).
    ///
    /// # Errors
    /// As [`ServerHandle::update`].
    pub fn update_status(&self, obj: Value) -> Result<Value, Error> {
        let (res, ns, name) = target(&self.shared.registry.served, &obj)?;
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
    /// [`ServerHandle::delete_now`].
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
        let res = resolve(&self.shared.registry.served, api_version, kind)?;
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
    /// As [`ServerHandle::delete`].
    pub fn delete_now(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), Error> {
        let res = resolve(&self.shared.registry.served, api_version, kind)?;
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
        let res = self.shared.registry.served.by_kind(api_version, kind)?;
        self.shared
            .registry
            .get(res, ns_of(res, namespace), name)
            .ok()
            .map(|v| (*v).clone())
    }

    /// Lists objects of a kind (all namespaces when `namespace` is `None`), sorted by namespace
    /// and name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let Some(res) = self.shared.registry.served.by_kind(api_version, kind) else {
            return Vec::new();
        };
        let s = self.shared.registry.store.inner.lock();
        let rv = s.rv;
        s.snapshot(res, namespace, rv)
            .into_iter()
            .map(|(_, v)| (*v).clone())
            .collect()
    }

    /// The served resource of an object's `apiVersion` and `kind` (manifests resolve through it).
    pub(crate) fn served_kind(&self, api_version: &str, kind: &str) -> Option<ResourceId> {
        self.shared.registry.served.by_kind(api_version, kind)
    }

    /// A bearer token that authenticates as `user` (see
    /// [`ApiServer::token_for`](crate::ApiServer::token_for)).
    pub fn token_for(&self, user: &User) -> String {
        self.shared.extras.mint_token(user)
    }

    /// The CA that signed the serving certificate, with [`Config::tls`](crate::Config::tls)
    /// (see [`ApiServer::ca_pem`](crate::ApiServer::ca_pem)).
    pub fn ca_pem(&self) -> Option<String> {
        self.shared
            .extras
            .tls
            .as_ref()
            .map(|_| self.shared.extras.ca.pem())
    }

    /// The cluster CA (see
    /// [`ApiServer::kubelet_client_ca_pem`](crate::ApiServer::kubelet_client_ca_pem)).
    pub fn kubelet_client_ca_pem(&self) -> String {
        self.shared.extras.ca.pem()
    }

    /// A client certificate for `cn` in `orgs` (see
    /// [`ApiServer::issue_client_certificate`](crate::ApiServer::issue_client_certificate)).
    ///
    /// # Errors
    /// [`Error::Keygen`] if generating the key or signing fails.
    pub fn issue_client_certificate(
        &self,
        cn: &str,
        orgs: &[&str],
    ) -> Result<(String, String), Error> {
        let cert = self.shared.extras.ca.issue_client(cn, orgs)?;
        Ok((cert.pem, cert.key_pem))
    }
}
