//! [`paced`]: a `kube::Client` whose requests, watches excepted, each take a token of a
//! [`ReadLimiter`] first, as client-go's rate limiter paces every request of a kubelet's
//! client but its watches (OM-33).
//!
//! The agent's clients:
//! 1. **The node's client** (TokenRequests, pod status patches and deletions, the pod and
//!    Service lists, every other non-watch request of the pods' parts) draws from the bucket
//!    of `kubeAPIQPS` / `kubeAPIBurst` that the ConfigMap and Secret managers' first reads take
//!    from too (OM-30): one budget for the node, first come, first served. The object
//!    managers themselves read through the unpaced client and take their tokens per first
//!    read, so a read is never paced twice, and an established watch's resumes never wait.
//! 2. **Events** have a bucket of their own, `eventRecordQPS` / `eventBurst` (the kubelet's
//!    50 / 100), as the kubelet's event client: a burst of events never delays a pod's reads.
//! 3. **Heartbeats** (the Node's status, its Lease) go unpaced, as the kubelet's heartbeat
//!    client: a node that starts many pods still renews its lease on time.
//! 4. Watches are never paced (client-go does not rate-limit a watch either); a request is a
//!    watch when its query says `watch=true` or `watch=1`.
//! 5. The node's client and the events' client also take places in the node's [`Window`]
//!    with the first reads (OM-35), each request until its answer's headers came: while the
//!    server's answers slow down, the node has fewer requests of every kind outstanding. Only
//!    a read (`GET`) is a sample of its class (its verb and resource, e.g. `GET services`);
//!    a write (a TokenRequest, a status patch, a deletion, an event) holds its place and
//!    says nothing about the server: its answer waits for the server's own work on it (a
//!    commit to etcd, a token signed), whose time varies by more than the window's target
//!    when nothing else is asked of the server (on the project's churn benchmark a pod
//!    deletion took 3.0 ms at best and 6.0 ms in the median, a TokenRequest 1.8 and 6.5 ms,
//!    where a first read took 0.6 and 2.1 ms), so a write's slow answer would shrink the
//!    window for no one's sake.

use std::time::Duration;

use crate::{ReadLimiter, ReadLimits, Window, WindowConfig};
use http::Request;
use kube::client::Body;

/// The kubelet's `eventRecordQPS` / `eventBurst` defaults: the bucket of the events' client (2).
pub const EVENT_LIMITS: ReadLimits = ReadLimits {
    qps: 50.0,
    burst: 100,
};

/// The node's window of outstanding requests (OM-34, OM-35): first reads, the node's and the
/// events' clients' requests together. At most 8 at once: on the project's benchmark (a v1.36
/// kube-apiserver on the same two cores, 110 pods × 9 objects) 8 instead of 128 first reads
/// (64 per manager) made the pod POSTs of the same moments about 13 % faster on average, with
/// every volume on disk no later; 2 was no better (docs/figures.md). Fewer while the server's
/// answers to reads (5) come later than its best by more than 2 ms, down to a quarter of a
/// place (one request at a time, each after a pause of three times the last one's answer
/// time): on the
/// same benchmark with other work loading the machine, a minimum of ¼ instead of 1 halved the
/// pod POSTs' time while the node started and brought every volume on disk sooner.
pub const WINDOW: WindowConfig = WindowConfig {
    min: 0.25,
    max: 8,
    target: Duration::from_millis(2),
};

/// The agent's clients over `client` and their buckets (see the module docs).
pub struct Clients {
    /// The bucket of `kubeAPIQPS` / `kubeAPIBurst`, for the object managers' first reads
    /// through the unpaced client (OM-30), with the node's window ([`WINDOW`], OM-34, OM-35).
    pub first_reads: ReadLimiter,
    /// The node's client, paced by the same bucket (1).
    pub node: kube::Client,
    /// The events' client, paced by a bucket of its own (2).
    pub events: kube::Client,
    /// Both paced clients' buckets by name (`node`, `events`), for `/metrics`.
    pub buckets: [(&'static str, ReadLimiter); 2],
}

/// The [`Clients`] over `client` (unpaced: heartbeats and the kubelet API's upgrades keep it),
/// the node's bucket of `limits`.
pub fn clients(client: &kube::Client, limits: ReadLimits) -> Clients {
    let window = Window::new(WINDOW);
    let first_reads = ReadLimiter::new(limits).with_window(window.clone());
    let node = first_reads.sharing();
    let events = ReadLimiter::new(EVENT_LIMITS).with_window(window);
    Clients {
        node: paced(client, node.clone()),
        events: paced(client, events.clone()),
        first_reads,
        buckets: [("node", node), ("events", events)],
    }
}

/// `client`'s requests, watches excepted, each after a token of `limiter` (see the module
/// docs). Errors come back as `client` gives them.
pub fn paced(client: &kube::Client, limiter: ReadLimiter) -> kube::Client {
    let inner = client.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let (inner, limiter) = (inner.clone(), limiter.clone());
        async move {
            if is_watch(&request) {
                return inner.send(request).await;
            }
            limiter.acquire().await;
            // Only a read is a sample (5); a write's place is given back unmeasured.
            let read = request.method() == http::Method::GET;
            let place = limiter.place(&class(&request)).await;
            let response = inner.send(request).await;
            if let (Some(place), Ok(_), true) = (place, &response, read) {
                place.answered();
            }
            response
        }
    });
    kube::Client::new(service, client.default_namespace())
}

/// A request's class in the window (5): its verb and its resource (with its subresource), e.g.
/// `PATCH pods/status`; the namespace and the object's name left out.
fn class<B>(request: &Request<B>) -> String {
    let mut parts = request.uri().path().split('/').filter(|p| !p.is_empty());
    // `/api/v1/…` or `/apis/<group>/<version>/…`.
    let skip = match parts.next() {
        Some("apis") => 2,
        _ => 1,
    };
    let rest: Vec<&str> = parts.skip(skip).collect();
    let rest = match rest.as_slice() {
        ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let resource = match rest {
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [resource, ..] => (*resource).to_owned(),
        [] => String::new(),
    };
    format!("{} {resource}", request.method())
}

/// Whether `request` opens a watch (4).
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1"))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::Mutex;
    use tokio::time::Instant;

    use http::Response;

    use super::*;

    /// Each request's path (with its query) and when it arrived.
    type Arrivals = Arc<Mutex<Vec<(String, Instant)>>>;

    /// A client whose server answers every request at once with `{}`, and its [`Arrivals`].
    fn recording() -> (kube::Client, Arrivals) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let log = log.clone();
            async move {
                let path = request
                    .uri()
                    .path_and_query()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                log.lock().push((path, Instant::now()));
                let response = Response::builder()
                    .status(200)
                    .body(Body::from(b"{}".to_vec()))
                    .map_err(|e| kube::Error::Service(Box::new(e)))?;
                Ok::<_, kube::Error>(response)
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    fn get(path: &str) -> Request<Vec<u8>> {
        Request::get(path)
            .body(Vec::new())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test(start_paused = true)]
    async fn requests_past_the_burst_wait_for_their_token_and_watches_never_do() {
        let (inner, seen) = recording();
        let limiter = ReadLimiter::new(ReadLimits {
            qps: 10.0,
            burst: 1,
        });
        let client = paced(&inner, limiter.clone());
        let started = Instant::now();
        for path in [
            "/api/v1/namespaces/a/pods/p",
            "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1",
            "/api/v1/namespaces/a/configmaps?fieldSelector=x&watch=1",
            "/api/v1/namespaces/a/pods/q",
        ] {
            client
                .request_text(get(path))
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        let at: Vec<Duration> = seen
            .lock()
            .iter()
            .map(|(_, t)| t.duration_since(started))
            .collect();
        assert_eq!(at.len(), 4);
        assert_eq!(
            &at[..3],
            &[Duration::ZERO; 3],
            "the first GET takes the burst; watches take nothing"
        );
        assert_eq!(
            at[3],
            Duration::from_millis(100),
            "the second GET waits 1/qps"
        );
        let stats = limiter.stats();
        assert_eq!((stats.reads, stats.delayed), (2, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_paced_client_shares_its_bucket_with_the_first_reads() {
        let (inner, seen) = recording();
        let first_reads = ReadLimiter::new(ReadLimits {
            qps: 10.0,
            burst: 2,
        });
        let client = paced(&inner, first_reads.sharing());
        let started = Instant::now();
        first_reads.acquire().await;
        first_reads.acquire().await;
        client
            .request_text(get("/api/v1/namespaces/a/serviceaccounts/d/token"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let at = seen.lock()[0].1.duration_since(started);
        assert_eq!(
            at,
            Duration::from_millis(100),
            "the burst was spent by the first reads"
        );
        assert_eq!(first_reads.stats().reads, 2, "each user counted on its own");
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_of_the_inner_client_comes_back_unchanged() {
        let service = tower::service_fn(|_: Request<Body>| async {
            Err::<Response<Body>, _>(kube::Error::Service("connection refused".into()))
        });
        let inner = kube::Client::new(service, "default");
        let client = paced(&inner, ReadLimiter::unlimited());
        let err = client
            .request_text(get("/api/v1/nodes/n"))
            .await
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("ServiceError: connection refused"),
            "not wrapped twice"
        );
    }

    #[test]
    fn a_request_s_class_is_its_verb_and_resource() {
        let class_of = |method: &str, path: &str| {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .unwrap_or_else(|e| panic!("{e}"));
            class(&request)
        };
        assert_eq!(
            class_of("POST", "/api/v1/namespaces/a/serviceaccounts/d/token"),
            "POST serviceaccounts/token"
        );
        assert_eq!(
            class_of("PATCH", "/api/v1/namespaces/a/pods/p/status"),
            "PATCH pods/status"
        );
        assert_eq!(
            class_of("POST", "/apis/events.k8s.io/v1/namespaces/a/events"),
            "POST events"
        );
        assert_eq!(class_of("GET", "/api/v1/nodes/n"), "GET nodes");
        assert_eq!(
            class_of("GET", "/api/v1/namespaces/a/services"),
            "GET services"
        );
        assert_eq!(class_of("GET", "/api/v1/namespaces"), "GET namespaces");
    }

    #[tokio::test(start_paused = true)]
    async fn the_node_s_and_the_events_clients_take_places_in_the_node_s_window() {
        let (inner, _) = recording();
        let limits = ReadLimits {
            qps: 1000.0,
            burst: 100,
        };
        let clients = clients(&inner, limits);
        let window = clients.first_reads.window().cloned();
        let Some(window) = window else {
            panic!("the first reads have the node's window")
        };
        clients
            .node
            .request_text(get("/api/v1/namespaces/a/pods/p"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        clients
            .events
            .request_text(get("/api/v1/namespaces/a/events/e"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        clients
            .node
            .request_text(get("/api/v1/namespaces/a/pods?watch=true"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            window.stats().samples,
            2,
            "each answer a sample; a watch none"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_holds_a_place_in_the_window_but_only_a_read_is_a_sample() {
        // The server answers a write only after its gate opens.
        let gate = Arc::new(tokio::sync::Notify::new());
        let opened = gate.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let opened = opened.clone();
            async move {
                if request.method() != http::Method::GET {
                    opened.notified().await;
                }
                Response::builder()
                    .status(200)
                    .body(Body::from(b"{}".to_vec()))
                    .map_err(|e| kube::Error::Service(Box::new(e)))
            }
        });
        let inner = kube::Client::new(service, "default");
        let window = Window::new(WindowConfig {
            min: 1.0,
            max: 1,
            target: Duration::from_millis(2),
        });
        let client = paced(&inner, ReadLimiter::unlimited().with_window(window.clone()));
        let write = {
            let client = client.clone();
            tokio::spawn(async move {
                let token = Request::post("/api/v1/namespaces/a/serviceaccounts/d/token")
                    .body(b"{}".to_vec())
                    .unwrap_or_else(|e| panic!("{e}"));
                client.request_text(token).await
            })
        };
        tokio::task::yield_now().await;
        let read = client.request_text(get("/api/v1/namespaces/a/services"));
        let read = tokio::time::timeout(Duration::from_secs(1), read).await;
        assert!(
            read.is_err(),
            "the one place is the write's until it is answered"
        );
        gate.notify_one();
        let written = write.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(written.is_ok(), "{written:?}");
        assert_eq!(window.stats().samples, 0, "a write is no sample");
        client
            .request_text(get("/api/v1/namespaces/a/services"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(window.stats().samples, 1, "a read is");
    }

    #[test]
    fn only_a_watch_query_makes_a_watch() {
        assert!(is_watch(&get("/api/v1/pods?watch=true")));
        assert!(is_watch(&get("/api/v1/pods?a=b&watch=1")));
        assert!(!is_watch(&get("/api/v1/pods?watch=false")));
        assert!(!is_watch(&get("/api/v1/namespaces/watch/pods")));
        assert!(!is_watch(&get("/api/v1/pods?allowWatchBookmarks=true")));
    }
}
