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
use hyper::client::conn::TrySendError;
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
use crate::replay::{Failure, REFUSED_RETRIES, Retries, clone_request};
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
    /// This transport's counters (requests sent again are counted here).
    counters: Counters,
    /// How many times one request the server refused unprocessed is sent again
    /// ([`REFUSED_RETRIES`]; tests lower it).
    refused_retries: u32,
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

    /// The server sent GOAWAY (or refused a stream, or the connection closed under a request
    /// not yet written): no new request goes here.
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
            refused_retries: REFUSED_RETRIES,
        })
    }

    fn slot(self: &Arc<Self>, id: u64) -> StreamSlot {
        let owner: Weak<dyn SlotOwner> = Arc::downgrade(self) as Weak<Pool>;
        StreamSlot::new(owner, id)
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

    /// Sends one request on a connection chosen by [`Pool::acquire`] (module docs, (6)):
    /// - a request never written to its connection (hyper handed it back: the connection
    ///   closed first) is sent again on another connection, whatever it is, without spending
    ///   the retry budget, as long as fewer than
    ///   [`UNSENT_RETRIES`](crate::replay::UNSENT_RETRIES) connections closed under it;
    /// - a request the server refused without processing it (its stream above a GOAWAY's
    ///   last stream, or a `REFUSED_STREAM` reset) is sent again on another connection, up to
    ///   [`REFUSED_RETRIES`] times;
    /// - any other failure goes back to the caller: the request may have been processed.
    async fn send(self: Arc<Self>, req: Request<Body>) -> Result<Response<TrackedBody>, BoxError> {
        let mut req = req;
        let mut retries = Retries::new(self.refused_retries);
        loop {
            let again = clone_request(&req);
            let (failure, conn) = match self.clone().send_once(req).await {
                Ok(response) => return Ok(response),
                Err(Sent::Failed(error)) => return Err(error.into()),
                Err(Sent::Http { failure, conn }) => (failure, conn),
            };
            req = match failure {
                // The connection closed before the request was written: another one.
                Failure::Unsent { request, error } => {
                    self.set_draining(conn);
                    let next = request.map(|r| *r).or(again);
                    let Some(next) = next.filter(|_| retries.after_unsent()) else {
                        return Err(TransportError::NotSent {
                            connections: retries.connections_lost() + 1,
                            source: error,
                        }
                        .into());
                    };
                    self.counters.count_unsent_retry();
                    tracing::debug!(%error, lost = retries.connections_lost(), "connection closed before the request was written; sending it on another connection");
                    next
                }
                Failure::Refused { error } => {
                    self.set_draining(conn);
                    let Some(next) = again.filter(|_| retries.after_refusal()) else {
                        return Err(TransportError::Http { source: error }.into());
                    };
                    self.counters.count_refused_retry();
                    tracing::debug!(%error, "request refused unprocessed; sending it on another connection");
                    next
                }
                Failure::Failed { error } => {
                    return Err(TransportError::Http { source: error }.into());
                }
            };
        }
    }

    /// Stops placing requests on connection `id`.
    fn set_draining(&self, id: u64) {
        if let Some(e) = self.state.lock().entries.iter().find(|e| e.id == id) {
            e.conn.draining.store(true, Ordering::Release);
        }
    }

    /// Sends `req` once, on a connection [`Pool::acquire`] chose.
    async fn send_once(
        self: Arc<Self>,
        mut req: Request<Body>,
    ) -> Result<Response<TrackedBody>, Sent> {
        let class = if is_watch(req.uri()) {
            Class::Watch
        } else {
            Class::Short
        };
        let (conn, slot) = self.acquire(class).await.map_err(Sent::Failed)?;
        // A connection can close between being chosen and being used (the server went away,
        // an HTTP/1.1 body was dropped): the request is not written yet.
        let unsent = |request, error| Sent::Http {
            failure: Failure::Unsent {
                request: Some(Box::new(request)),
                error,
            },
            conn: slot.id(),
        };
        // HTTP/1.1 wants the origin form; a request handed back gets its URI back.
        let uri = req.uri().clone();
        let response: Pin<Box<dyn Future<Output = Sending> + Send>> = match &conn.sender {
            Sender::Http2(sender) => {
                let mut sender = sender.clone();
                if let Err(error) = sender.ready().await {
                    return Err(unsent(req, error));
                }
                Box::pin(sender.try_send_request(req))
            }
            Sender::Http1(sender) => {
                let mut sender = sender.lock().await;
                if let Err(error) = sender.ready().await {
                    return Err(unsent(req, error));
                }
                origin_form(&mut req);
                Box::pin(sender.try_send_request(req))
            }
        };
        let response = match self.read_timeout {
            Some(timeout) => tokio::time::timeout(timeout, response)
                .await
                .map_err(|_| Sent::Failed(TransportError::ReadTimeout { timeout }))?,
            None => response.await,
        };
        let response = match response {
            Ok(response) => response,
            Err(error) => {
                let mut failure = Failure::of(error);
                if let Failure::Unsent {
                    request: Some(request),
                    ..
                } = &mut failure
                {
                    *request.uri_mut() = uri;
                }
                return Err(Sent::Http {
                    failure,
                    conn: slot.id(),
                });
            }
        };
        tracing::Span::current().record("http.status_code", response.status().as_u16());
        let read_timeout = self.read_timeout;
        Ok(response.map(|body| TrackedBody::new(body, slot, read_timeout)))
    }
}

/// A request in hyper's hands: its response, or why it failed (with the request, when hyper
/// never wrote it).
type Sending = Result<Response<Incoming>, TrySendError<Request<Body>>>;

/// How one attempt to send a request failed.
enum Sent {
    /// hyper failed it on connection `conn`; [`Failure`] says whether it may be sent again.
    Http { failure: Failure, conn: u64 },
    /// No connection, or no answer in time: reported.
    Failed(TransportError),
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
    use super::*;
    use crate::config::Protocol;
    use std::net::SocketAddr;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Notify;

    /// Bounds every wait of these tests (nothing here is timed).
    const PATIENCE: Duration = Duration::from_secs(60);

    /// An HTTP/2 server (prior knowledge) that allows one stream per connection: `/hold` is
    /// never answered (`held` is notified when one arrives), any other path is answered at
    /// once. Returns its address and the paths it received.
    async fn one_stream_server(held: Arc<Notify>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen_by_server = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (held, seen) = (held.clone(), seen_by_server.clone());
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let path = req.uri().path().to_owned();
                    seen.lock().push(path.clone());
                    let held = held.clone();
                    async move {
                        if path == "/hold" {
                            held.notify_one();
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, std::convert::Infallible>(Response::new(String::from("ok")))
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .max_concurrent_streams(1)
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service),
                );
            }
        });
        (addr, seen)
    }

    /// A TCP relay to `upstream` that cuts the first connection it accepts, both ways and
    /// forwarding nothing more, when `cut` is notified; later connections pass.
    async fn cutting_relay(upstream: SocketAddr, cut: Arc<Notify>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        tokio::spawn(async move {
            let mut first = true;
            while let Ok((mut inbound, _)) = listener.accept().await {
                let cut = std::mem::take(&mut first).then(|| cut.clone());
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let relay = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                    match cut {
                        Some(cut) => tokio::select! {
                            _ = relay => {}
                            () = cut.notified() => {}
                        },
                        None => {
                            let _ = relay.await;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A pool speaking HTTP/2 to `addr` that sends a refused request again `refused_retries`
    /// times.
    fn pool_to(addr: SocketAddr, refused_retries: u32) -> Arc<Pool> {
        let url = format!("http://{addr}")
            .parse()
            .unwrap_or_else(|e| panic!("url: {e}"));
        let transport = TransportConfig::new(Protocol::Http2);
        let counters = Counters::new();
        let connector = Connector::new(&kube::Config::new(url), &transport, counters.clone())
            .unwrap_or_else(|e| panic!("connector: {e}"));
        let mut pool = Pool::new(connector, transport, None, counters);
        let fresh = Arc::get_mut(&mut pool).map(|p| p.refused_retries = refused_retries);
        assert!(fresh.is_some(), "the pool is shared already");
        pool
    }

    fn get(addr: SocketAddr, path: &str) -> Request<Body> {
        Request::get(format!("http://{addr}{path}"))
            .body(Body::empty())
            .unwrap_or_else(|e| panic!("request: {e}"))
    }

    /// Polls `fut` once; whether it is still pending.
    async fn poll_once<F: Future + Unpin>(fut: &mut F) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx).is_pending())).await
    }

    // Regression (`a_goaway_after_every_response_fails_no_request_of_a_busy_client`, 3 of 500
    // under load: `hyper::Error(Canceled, "connection closed")`): a request still in hyper's
    // queue when its connection closed was never written, yet it spent the retry budget for
    // refused requests, and failed once that was spent. hyper hands such a request back; it is
    // sent again on another connection, with no retry budget at all.
    #[tokio::test]
    async fn a_request_whose_connection_closed_before_it_was_written_is_sent_again_with_no_retry_budget()
     {
        let held = Arc::new(Notify::new());
        let (server, seen) = one_stream_server(held.clone()).await;
        let cut = Arc::new(Notify::new());
        let relay = cutting_relay(server, cut.clone()).await;
        let pool = pool_to(relay, 0);

        // The first connection's only stream is taken by a request the server never answers.
        let hold = tokio::spawn(pool.clone().send(get(relay, "/hold")));
        tokio::time::timeout(PATIENCE, held.notified())
            .await
            .unwrap_or_else(|_| panic!("/hold never reached the server"));
        // Two more requests on that connection wait for a stream in hyper: the first as a
        // stream h2 has not opened, the second in hyper's queue behind it, not handed to h2.
        let mut blocked = Box::pin(pool.clone().send(get(relay, "/ok")));
        let mut queued = Box::pin(pool.clone().send(get(relay, "/ok")));
        assert!(poll_once(&mut blocked).await);
        assert!(poll_once(&mut queued).await);
        // The connection is lost before either was written.
        cut.notify_one();

        let answer = tokio::time::timeout(PATIENCE, queued)
            .await
            .unwrap_or_else(|_| panic!("the queued request never finished"));
        assert_eq!(
            answer.map(|r| r.status()).map_err(|e| e.to_string()),
            Ok(http::StatusCode::OK)
        );
        let retries = pool.counters.retries();
        assert!(retries.unsent >= 1, "{retries:?}");
        assert_eq!(retries.refused, 0, "{retries:?}");
        // The request that was written may have been processed: it fails, and is not sent twice.
        let hold = tokio::time::timeout(PATIENCE, hold)
            .await
            .unwrap_or_else(|_| panic!("/hold never finished"));
        let hold = hold.map(|sent| sent.map(|r| r.status()).map_err(|e| e.to_string()));
        assert!(matches!(hold, Ok(Err(_))), "{hold:?}");
        let seen = seen.lock().clone();
        assert_eq!(seen.iter().filter(|p| *p == "/hold").count(), 1, "{seen:?}");
        drop(blocked);
    }

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
