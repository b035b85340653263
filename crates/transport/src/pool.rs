//! The connection pool: places each request on a connection with room (steps (1)–(5) of the
//! module docs), and [`PoolService`], the tower service kube's layers wrap.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use kube::client::Body;
use parking_lot::Mutex;
use tokio::time::Instant;
use tracing::Instrument;

use crate::body::TrackedBody;
use crate::classify::is_watch;
use crate::config::{Negotiated, TransportConfig};
use crate::connect::{Connector, Established, Sender};
use crate::counters::{ConnectionCounts, Counters};
use crate::error::{BoxError, SharedFailure, TransportError};
use crate::slot::{SlotOwner, StreamSlot};

impl SlotOwner for Pool {
    fn release(&self, id: u64) {
        let mut state = self.state.lock();
        if let Some(e) = state.entries.iter_mut().find(|e| e.id == id) {
            e.in_flight = e.in_flight.saturating_sub(1);
            if e.in_flight == 0 {
                e.idle_since = Instant::now();
            }
        }
    }
}

/// How many times a request the server refused unprocessed is sent again, each time on a
/// connection that has not sent GOAWAY. Once is enough against a server that sends GOAWAY on
/// a small fraction of its responses; a few more cover a server that sends it on every
/// response while many requests are in flight (each new connection may be told to go away
/// before this request reaches it). Go's client retries such requests without a bound.
const UNPROCESSED_RETRIES: u32 = 8;

/// What a request is, for placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Long-lived: `watch=true`.
    Watch = 0,
    /// Everything else.
    Short = 1,
}

/// One open connection and its bookkeeping.
struct Entry {
    id: u64,
    class: Class,
    conn: Arc<Established>,
    /// Streams open on it: requests sent whose response body has not ended or been dropped.
    in_flight: usize,
    /// When `in_flight` last became 0.
    idle_since: Instant,
}

#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    next_id: u64,
    /// The protocol of the last connection established.
    last_protocol: Option<Negotiated>,
    /// Per class: connection attempts started so far, and the last failed one.
    attempts: [u64; 2],
    failure: [Option<(u64, SharedFailure)>; 2],
}

/// The pool behind one `kube::Client`.
pub(crate) struct Pool {
    connector: Connector,
    config: TransportConfig,
    read_timeout: Option<Duration>,
    state: Mutex<State>,
    /// Per class: held while a connection is being opened, so that concurrent requests share
    /// one new connection instead of each opening their own (3).
    opening: [tokio::sync::Mutex<()>; 2],
    reaper_started: AtomicBool,
    /// This transport's counters (refused requests sent again are counted here).
    counters: Counters,
}

impl Entry {
    /// How many streams this connection may carry for its class (2).
    fn limit(&self, cap: usize) -> usize {
        match &self.conn.sender {
            Sender::Http1(_) => 1,
            // Short requests all share one connection; beyond the server's limit they wait in
            // hyper for a stream, which a short request frees soon (4).
            Sender::Http2(_) if self.class == Class::Short => usize::MAX,
            Sender::Http2(_) => {
                let advertised = self.conn.max_streams.load(Ordering::Acquire);
                watch_limit(advertised, cap)
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.conn.closed.load(Ordering::Acquire)
    }

    /// The server sent GOAWAY (or refused a stream): no new request goes here.
    fn is_draining(&self) -> bool {
        self.conn.draining.load(Ordering::Acquire)
    }
}

/// Watches per HTTP/2 connection: the cap, and 5 % (at least one) below the server's limit.
pub(crate) fn watch_limit(advertised: usize, cap: usize) -> usize {
    let headroom = advertised.div_ceil(20).max(1);
    advertised.saturating_sub(headroom).min(cap).max(1)
}

impl State {
    /// Forgets closed connections, and draining ones with no stream left (the server closes
    /// those once their last stream ends).
    fn purge_closed(&mut self) {
        self.entries
            .retain(|e| !(e.is_closed() || (e.is_draining() && e.in_flight == 0)));
    }

    /// The oldest connection of `class` with room; claims a slot on it.
    fn claim(&mut self, class: Class, cap: usize) -> Option<(Arc<Established>, u64)> {
        self.purge_closed();
        let entry = self.entries.iter_mut().find(|e| {
            e.class == class
                && !e.is_draining()
                && e.in_flight < e.limit(cap)
                && match &e.conn.sender {
                    // An idle HTTP/1.1 connection whose previous response is not fully
                    // processed yet is skipped rather than waited for.
                    Sender::Http1(m) => m.try_lock().is_ok_and(|s| s.is_ready()),
                    Sender::Http2(_) => true,
                }
        })?;
        entry.in_flight += 1;
        Some((entry.conn.clone(), entry.id))
    }
}

impl Pool {
    pub(crate) fn new(
        connector: Connector,
        config: TransportConfig,
        read_timeout: Option<Duration>,
        counters: Counters,
    ) -> Arc<Pool> {
        Arc::new(Pool {
            connector,
            config,
            read_timeout,
            state: Mutex::default(),
            opening: [tokio::sync::Mutex::new(()), tokio::sync::Mutex::new(())],
            reaper_started: AtomicBool::new(false),
            counters,
        })
    }

    fn slot(self: &Arc<Self>, id: u64) -> StreamSlot {
        let owner: Weak<dyn SlotOwner> = Arc::downgrade(self) as Weak<Pool>;
        StreamSlot::new(owner, id)
    }

    /// Forgets a connection found unusable.
    fn discard(&self, id: u64) {
        self.state.lock().entries.retain(|e| e.id != id);
    }

    /// A connection with room for one more request of `class`, opening one if needed (2)–(4).
    async fn acquire(
        self: &Arc<Self>,
        class: Class,
    ) -> Result<(Arc<Established>, StreamSlot), TransportError> {
        let cap = self.config.max_streams_per_connection;
        let (serialize, seen_attempt) = {
            let mut state = self.state.lock();
            if let Some((conn, id)) = state.claim(class, cap) {
                return Ok((conn, self.slot(id)));
            }
            // HTTP/1.1 connections are never shared: no reason to queue for one.
            (
                state.last_protocol != Some(Negotiated::Http1),
                state.attempts[class as usize],
            )
        };
        if !serialize {
            return self.open(class, seen_attempt).await;
        }
        // The connection is opened in a task of its own, not in this request's future. Other
        // requests of the class wait for it, and a caller may leave a request it started
        // unpolled for a while (a watch stream inside a `select!` whose other branch sends a
        // request of its own): were the opening driven by that future, every request of the
        // class would wait for it, the caller's own included, for good. If this request is
        // dropped meanwhile, the task still ends (bounded by `connect_timeout`) and the slot
        // it claimed is released with its output.
        let pool = self.clone();
        let opening = async move {
            let _opening = pool.opening[class as usize].lock().await;
            pool.open(class, seen_attempt).await
        };
        tokio::spawn(opening.in_current_span()).await.map_err(|_| {
            TransportError::ConnectAborted {
                authority: self.connector.authority().to_owned(),
            }
        })?
    }

    /// (3) Claims room on a connection opened meanwhile, or opens one; a waiter whose attempt
    /// another request made just failed fails alike.
    async fn open(
        self: &Arc<Self>,
        class: Class,
        seen_attempt: u64,
    ) -> Result<(Arc<Established>, StreamSlot), TransportError> {
        let cap = self.config.max_streams_per_connection;
        let attempt = {
            let mut state = self.state.lock();
            if let Some((conn, id)) = state.claim(class, cap) {
                return Ok((conn, self.slot(id)));
            }
            // An attempt made while this request waited failed: fail alike, at once, instead
            // of every waiter retrying in turn (an outage would take waiters × timeout).
            if let Some((n, failure)) = &state.failure[class as usize]
                && *n > seen_attempt
            {
                return Err(TransportError::Shared {
                    message: failure.0.to_string(),
                });
            }
            state.attempts[class as usize] += 1;
            state.attempts[class as usize]
        };
        match self.connector.connect().await {
            Ok(conn) => {
                let conn = Arc::new(conn);
                let protocol = conn.protocol();
                let id = {
                    let mut state = self.state.lock();
                    state.next_id += 1;
                    let id = state.next_id;
                    state.entries.push(Entry {
                        id,
                        class,
                        conn: conn.clone(),
                        in_flight: 1,
                        idle_since: Instant::now(),
                    });
                    state.last_protocol = Some(protocol);
                    state.failure[class as usize] = None;
                    id
                };
                tracing::debug!(
                    authority = self.connector.authority(),
                    %protocol,
                    class = ?class,
                    streams = conn.max_streams.load(Ordering::Acquire),
                    "API server connection opened"
                );
                self.start_reaper();
                Ok((conn, self.slot(id)))
            }
            Err(error) => {
                let mut state = self.state.lock();
                state.failure[class as usize] =
                    Some((attempt, SharedFailure(error.to_string().into())));
                Err(error)
            }
        }
    }

    /// Closes connections that stayed empty for `idle_timeout` (5); holds only a `Weak`.
    fn start_reaper(self: &Arc<Self>) {
        if self.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let pool = Arc::downgrade(self);
        let every = (self.config.idle_timeout / 2).max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = pool.upgrade() else { return };
                let idle = pool.config.idle_timeout;
                let now = Instant::now();
                let mut state = pool.state.lock();
                state.purge_closed();
                state
                    .entries
                    .retain(|e| e.in_flight > 0 || now.duration_since(e.idle_since) < idle);
            }
        });
    }

    fn counts(&self) -> ConnectionCounts {
        let mut state = self.state.lock();
        state.purge_closed();
        let mut counts = ConnectionCounts::default();
        for e in &state.entries {
            match e.conn.protocol() {
                Negotiated::Http1 => counts.http1 += 1,
                Negotiated::Http2 => counts.http2 += 1,
            }
        }
        counts
    }

    /// Sends one request on a connection chosen by [`Pool::acquire`]; a request the server
    /// refused without processing it (its stream above a GOAWAY's last stream, a
    /// `REFUSED_STREAM` reset, or never handed to a connection that closed) is sent again on
    /// another connection, up to [`UNPROCESSED_RETRIES`] times (module docs, (6)).
    async fn send(self: Arc<Self>, req: Request<Body>) -> Result<Response<TrackedBody>, BoxError> {
        let mut req = req;
        let mut retries = 0;
        loop {
            let again = clone_request(&req);
            match self.clone().send_once(req).await {
                Err(Sent::Unprocessed { error, conn }) => {
                    self.set_draining(conn);
                    let Some(next) = again.filter(|_| retries < UNPROCESSED_RETRIES) else {
                        return Err(error.into());
                    };
                    retries += 1;
                    self.counters.count_refused_retry();
                    tracing::debug!(%error, retries, "request refused unprocessed; sending it on another connection");
                    req = next;
                }
                other => return other.map_err(Sent::into_error),
            }
        }
    }

    /// Stops placing requests on connection `id`.
    fn set_draining(&self, id: u64) {
        if let Some(e) = self.state.lock().entries.iter().find(|e| e.id == id) {
            e.conn.draining.store(true, Ordering::Release);
        }
    }

    async fn send_once(
        self: Arc<Self>,
        mut req: Request<Body>,
    ) -> Result<Response<TrackedBody>, Sent> {
        let class = if is_watch(req.uri()) {
            Class::Watch
        } else {
            Class::Short
        };
        let http = |source| TransportError::Http { source };
        // A connection can close between being chosen and being used (the server went away,
        // an HTTP/1.1 body was dropped): the request is not sent yet, so choose again.
        let mut attempts = 0;
        let (response, slot) = loop {
            attempts += 1;
            let (conn, slot) = self.acquire(class).await.map_err(Sent::Failed)?;
            let response: Pin<Box<dyn Future<Output = hyper::Result<Response<Incoming>>> + Send>> =
                match &conn.sender {
                    Sender::Http2(sender) => {
                        let mut sender = sender.clone();
                        match sender.ready().await {
                            Ok(()) => Box::pin(sender.send_request(req)),
                            Err(_) if attempts < 3 => {
                                self.discard(slot.id());
                                continue;
                            }
                            Err(e) => return Err(Sent::Failed(http(e))),
                        }
                    }
                    Sender::Http1(sender) => {
                        let mut sender = sender.lock().await;
                        match sender.ready().await {
                            Ok(()) => {
                                origin_form(&mut req);
                                Box::pin(sender.send_request(req))
                            }
                            Err(_) if attempts < 3 => {
                                self.discard(slot.id());
                                continue;
                            }
                            Err(e) => return Err(Sent::Failed(http(e))),
                        }
                    }
                };
            break (response, slot);
        };
        let response = match self.read_timeout {
            Some(timeout) => tokio::time::timeout(timeout, response)
                .await
                .map_err(|_| Sent::Failed(TransportError::ReadTimeout { timeout }))?,
            None => response.await,
        };
        let response = match response {
            Ok(response) => response,
            Err(e) if unprocessed(&e) => {
                return Err(Sent::Unprocessed {
                    conn: slot.id(),
                    error: http(e),
                });
            }
            Err(e) => return Err(Sent::Failed(http(e))),
        };
        tracing::Span::current().record("http.status_code", response.status().as_u16());
        let read_timeout = self.read_timeout;
        Ok(response.map(|body| TrackedBody::new(body, slot, read_timeout)))
    }
}

/// How one attempt to send a request failed.
enum Sent {
    /// The server did not process it: it may be sent again.
    Unprocessed {
        error: TransportError,
        /// The connection that refused it.
        conn: u64,
    },
    /// Anything else: reported.
    Failed(TransportError),
}

impl Sent {
    fn into_error(self) -> BoxError {
        match self {
            Sent::Unprocessed { error, .. } | Sent::Failed(error) => error.into(),
        }
    }
}

/// Whether a failed request is known not to have been processed by the server: its stream was
/// above the last stream of a graceful GOAWAY the server sent, the server reset it with
/// `REFUSED_STREAM`, or hyper never handed it to the connection (RFC 9113 §8.7: such requests
/// may be retried whatever their method).
fn unprocessed(error: &hyper::Error) -> bool {
    if error.is_canceled() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            // A graceful GOAWAY fails only the streams above its last stream; one with an error
            // code may end processed streams too, so only NO_ERROR counts.
            return h2.is_remote()
                && match h2.reason() {
                    Some(h2::Reason::NO_ERROR) => h2.is_go_away(),
                    Some(h2::Reason::REFUSED_STREAM) => h2.is_reset(),
                    _ => false,
                };
        }
        source = e.source();
    }
    false
}

/// A copy of `req` to send again, when its body can be replayed (kube's bodies are bytes).
pub(crate) fn clone_request(req: &Request<Body>) -> Option<Request<Body>> {
    let body = req.body().try_clone()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

/// HTTP/1.1 wants `/path?query` and a `Host` header; kube's base-URI layer made the URI
/// absolute (which HTTP/2 needs for `:scheme` and `:authority`).
fn origin_form(req: &mut Request<Body>) {
    if let Some(authority) = req.uri().authority().cloned()
        && !req.headers().contains_key(http::header::HOST)
        && let Ok(host) = http::HeaderValue::from_str(authority.as_str())
    {
        req.headers_mut().insert(http::header::HOST, host);
    }
    if let Some(pq) = req.uri().path_and_query().cloned()
        && let Ok(uri) = http::Uri::builder().path_and_query(pq).build()
    {
        *req.uri_mut() = uri;
    }
}

/// The tower service at the bottom of the `kube::Client` stack.
#[derive(Clone)]
pub(crate) struct PoolService {
    pool: Arc<Pool>,
}

impl PoolService {
    pub(crate) fn new(pool: Arc<Pool>) -> Self {
        PoolService { pool }
    }
}

impl tower::Service<Request<Body>> for PoolService {
    type Response = Response<TrackedBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let span = tracing::debug_span!(
            "HTTP",
            http.method = %req.method(),
            http.url = %req.uri(),
            http.status_code = tracing::field::Empty,
            otel.kind = "client",
        );
        Box::pin(self.pool.clone().send(req).instrument(span))
    }
}

/// A handle on the transport behind one `kube::Client`: its protocol, connections and
/// [`Counters`].
#[derive(Clone)]
pub struct Transport {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("authority", &self.pool.connector.authority())
            .field("protocol", &self.protocol())
            .field("connections", &self.connections())
            .finish()
    }
}

impl Transport {
    pub(crate) fn new(pool: Arc<Pool>) -> Self {
        Transport { pool }
    }

    /// The protocol of the most recently opened connection; `None` before the first.
    pub fn protocol(&self) -> Option<Negotiated> {
        self.pool.state.lock().last_protocol
    }

    /// This transport's open connections, by protocol.
    pub fn connections(&self) -> ConnectionCounts {
        self.pool.counts()
    }

    /// This transport's counters: requests by verb, requests sent again, open connections.
    pub fn counters(&self) -> Counters {
        self.pool.counters.clone()
    }

    /// Opens the connection for short requests now (errors are left for the first request).
    pub(crate) async fn warm_up(&self) {
        if let Err(error) = self.pool.acquire(Class::Short).await {
            tracing::debug!(%error, "API server not reachable yet");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::watch_limit;

    #[test]
    fn watch_limit_keeps_five_percent_headroom_below_the_server_and_the_cap() {
        assert_eq!(watch_limit(100, 95), 95);
        assert_eq!(watch_limit(100, 80), 80);
        assert_eq!(watch_limit(8, 95), 7);
        assert_eq!(watch_limit(1, 95), 1);
        assert_eq!(watch_limit(usize::MAX, 95), 95);
        assert_eq!(watch_limit(250, 1000), 237);
    }
}
