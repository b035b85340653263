//! [`Counters`]: what one transport counts — requests by verb ([`CountLayer`], a tower layer
//! over the whole stack), requests it sent again, and the connections it holds open. Owned by
//! a transport instance and shared by its clones; nothing is process-global.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::Request;

use crate::classify::Verb;
use crate::config::Negotiated;

/// The counters of one transport. Cheap to clone; clones share the counts.
///
/// [`Transport::counters`](crate::Transport::counters) gives the counters of the transport
/// behind a client built by [`client`](crate::client); [`Counters::layer`] counts the requests
/// of any other tower stack.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    inner: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Indexed by [`Verb::index`].
    requests: [AtomicU64; Verb::COUNT],
    retried_refused: AtomicU64,
    retried_unsent: AtomicU64,
    retried_throttled: AtomicU64,
    open_http1: AtomicUsize,
    open_http2: AtomicUsize,
}

/// Requests sent through a transport, by Kubernetes verb, each counted once when the caller
/// sends it (before any retry): a watch when it is opened, a watch-list as a watch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestCounts {
    /// GET of one object (or of a non-resource path such as `/version`).
    pub get: u64,
    /// GET of a collection.
    pub list: u64,
    /// GET with `watch=true`.
    pub watch: u64,
    /// POST.
    pub create: u64,
    /// PUT.
    pub update: u64,
    /// PATCH.
    pub patch: u64,
    /// DELETE.
    pub delete: u64,
    /// Any other method.
    pub other: u64,
}

impl RequestCounts {
    /// Every verb with its count, verbs named as Kubernetes names them (`get`, `list`,
    /// `watch`, `create`, `update`, `patch`, `delete`, `other`).
    pub fn by_verb(&self) -> [(&'static str, u64); 8] {
        [
            ("get", self.get),
            ("list", self.list),
            ("watch", self.watch),
            ("create", self.create),
            ("update", self.update),
            ("patch", self.patch),
            ("delete", self.delete),
            ("other", self.other),
        ]
    }
}

/// Requests a transport sent again (see the crate docs, (6) and (7)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryCounts {
    /// Requests the server refused without processing them (GOAWAY, `REFUSED_STREAM`), sent
    /// again on another connection.
    pub refused: u64,
    /// Requests sent again on another connection because theirs closed before they were
    /// written to it (never sent, so never processed).
    pub unsent: u64,
    /// Requests answered 429/503/504 with `Retry-After`, sent again after that delay.
    pub throttled: u64,
}

/// Connections a transport holds to its API server, by protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionCounts {
    /// HTTP/1.1 connections.
    pub http1: usize,
    /// HTTP/2 connections.
    pub http2: usize,
}

impl Counters {
    /// Fresh counters, all zero.
    pub fn new() -> Self {
        Counters::default()
    }

    /// A tower layer counting each request through it in these counters, by verb.
    pub fn layer(&self) -> CountLayer {
        CountLayer {
            counters: self.clone(),
        }
    }

    /// Requests sent so far, by verb.
    pub fn requests(&self) -> RequestCounts {
        let n = |v: Verb| self.inner.requests[v.index()].load(Ordering::Relaxed);
        RequestCounts {
            get: n(Verb::Get),
            list: n(Verb::List),
            watch: n(Verb::Watch),
            create: n(Verb::Create),
            update: n(Verb::Update),
            patch: n(Verb::Patch),
            delete: n(Verb::Delete),
            other: n(Verb::Other),
        }
    }

    /// Requests sent again so far.
    pub fn retries(&self) -> RetryCounts {
        RetryCounts {
            refused: self.inner.retried_refused.load(Ordering::Relaxed),
            unsent: self.inner.retried_unsent.load(Ordering::Relaxed),
            throttled: self.inner.retried_throttled.load(Ordering::Relaxed),
        }
    }

    /// Connections open right now (each counted from its handshake until its task ends).
    pub fn open_connections(&self) -> ConnectionCounts {
        ConnectionCounts {
            http1: self.inner.open_http1.load(Ordering::Relaxed),
            http2: self.inner.open_http2.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_request(&self, verb: Verb) {
        self.inner.requests[verb.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_refused_retry(&self) {
        self.inner.retried_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_unsent_retry(&self) {
        self.inner.retried_unsent.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_throttled_retry(&self) {
        self.inner.retried_throttled.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection of `protocol` as open until the returned guard is dropped.
    pub(crate) fn connection_opened(&self, protocol: Negotiated) -> OpenConnection {
        self.open_counter(protocol).fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            counters: self.clone(),
            protocol,
        }
    }

    fn open_counter(&self, protocol: Negotiated) -> &AtomicUsize {
        match protocol {
            Negotiated::Http1 => &self.inner.open_http1,
            Negotiated::Http2 => &self.inner.open_http2,
        }
    }
}

/// One open connection in [`Counters::open_connections`]; uncounted when dropped.
pub(crate) struct OpenConnection {
    counters: Counters,
    protocol: Negotiated,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.counters
            .open_counter(self.protocol)
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// A tower layer that counts every request passing through it by verb ([`Counters::layer`]).
#[derive(Debug, Clone)]
pub struct CountLayer {
    counters: Counters,
}

impl<S> tower::Layer<S> for CountLayer {
    type Service = CountService<S>;

    fn layer(&self, inner: S) -> CountService<S> {
        CountService {
            inner,
            counters: self.counters.clone(),
        }
    }
}

/// The service of [`CountLayer`]: counts, then calls the inner service.
#[derive(Debug, Clone)]
pub struct CountService<S> {
    inner: S,
    counters: Counters,
}

impl<S, B> tower::Service<Request<B>> for CountService<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.counters
            .count_request(Verb::of(req.method(), req.uri()));
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::{Layer as _, Service as _};

    #[tokio::test]
    async fn the_layer_counts_each_request_by_its_verb() {
        let counters = Counters::new();
        let mut svc = counters
            .layer()
            .layer(tower::service_fn(|_req: Request<()>| async {
                Ok::<_, Infallible>(())
            }));
        let send = |method: &str, uri: &str| {
            Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap_or_default()
        };
        for req in [
            send("GET", "/api/v1/namespaces/d/configmaps/x"),
            send(
                "GET",
                "/api/v1/namespaces/d/configmaps?fieldSelector=metadata.name%3Dx",
            ),
            send("GET", "/api/v1/namespaces/d/configmaps?watch=true"),
            send("PATCH", "/api/v1/namespaces/d/pods/p/status"),
            send("POST", "/api/v1/namespaces/d/events"),
        ] {
            let _ = svc.call(req).await;
        }
        let counts = counters.requests();
        assert_eq!(
            (
                counts.get,
                counts.list,
                counts.watch,
                counts.patch,
                counts.create
            ),
            (1, 1, 1, 1, 1)
        );
        assert_eq!((counts.update, counts.delete, counts.other), (0, 0, 0));
    }

    #[test]
    fn counters_are_per_instance_and_shared_by_clones() {
        let a = Counters::new();
        let b = Counters::new();
        a.clone().count_refused_retry();
        a.count_throttled_retry();
        a.count_unsent_retry();
        a.count_unsent_retry();
        assert_eq!(
            a.retries(),
            RetryCounts {
                refused: 1,
                unsent: 2,
                throttled: 1
            }
        );
        assert_eq!(b.retries(), RetryCounts::default());
    }

    #[test]
    fn an_open_connection_is_counted_until_its_guard_drops() {
        let counters = Counters::new();
        let guard = counters.connection_opened(Negotiated::Http2);
        assert_eq!(counters.open_connections().http2, 1);
        assert_eq!(counters.open_connections().http1, 0);
        drop(guard);
        assert_eq!(counters.open_connections(), ConnectionCounts::default());
    }
}
