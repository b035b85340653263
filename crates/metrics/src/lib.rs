//! A node agent's Prometheus metrics: [`Metrics`], one registry (prefix `nodelet_`) with every
//! metric registered at start, set by the agent's parts as things happen and refreshed from
//! the counters other crates keep at each scrape, encoded as the text exposition `/metrics`
//! serves.
//!
//! # Principal types
//!
//! * [`Metrics`]: cheap to clone. The agent's tasks set gauges (watches open, volumes by
//!   plugin and state, pods by phase, the API's health, the first-read bucket) and observe the
//!   propagation latency; [`Metrics::encode`] first copies in what others count — the
//!   transport's requests, retries and connections (`nodelet_transport::Counters`), the
//!   reporting parts' failed writes and dropped events (`nodelet_reporting::Counters`), the
//!   allocator's live heap (`nodelet_core::AllocatorHooks`).
//!
//! # Invariants
//!
//! * A counter copied from another crate's count only grows: it follows that count, never
//!   set back; two scrapes never both advance it (one lock around refresh and encoding).
//! * The dropped-event series exist at 0 from the start.
//!
//! # Example
//!
//! ```
//! let metrics = nodelet_metrics::Metrics::new();
//! metrics.set_watches("pods", 1);
//! assert!(metrics.encode().contains("nodelet_watches_open{resource=\"pods\"} 1"));
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::sync::Arc;

use parking_lot::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use nodelet_reporting::{Counters as ReportCounters, EventDrop, WriteTarget};
use nodelet_transport::Counters;

use nodelet_core::AllocatorHooks;

type Labels = Vec<(String, String)>;
/// A gauge of seconds.
type GaugeF64 = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The agent's metrics (crate docs). Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

struct Inner {
    registry: Mutex<Registry>,
    api_requests: Family<Labels, Counter>,
    api_write_failures: Family<Labels, Counter>,
    watches_open: Family<Labels, Gauge>,
    service_watch_lists: Gauge,
    first_reads: Family<Labels, Gauge>,
    first_read_wait: Gauge<f64, std::sync::atomic::AtomicU64>,
    paced: PacedMetrics,
    volumes: Family<Labels, Gauge>,
    volume_errors: Family<Labels, Gauge>,
    pods: Family<Labels, Gauge>,
    propagation: Histogram,
    /// Refreshed from the object manager's transport at each scrape.
    api_connections: Family<Labels, Gauge>,
    /// Refreshed from the transport's retry counters at each scrape.
    api_retries: Family<Labels, Gauge>,
    api_reachable: Gauge,
    watches_failing: Family<Labels, Gauge>,
    watch_last_success: Family<Labels, Gauge>,
    /// The counters of the transport under the agent's client: requests by verb, retries and
    /// open connections are read from it at each scrape.
    transport: Option<Counters>,
    events_dropped: Family<Labels, Counter>,
    /// What the reporting parts (events, node, lease) count: write failures and dropped
    /// events are read from it at each scrape.
    reporting: ReportCounters,
    /// Refreshed from the allocator at each scrape; `None` where it gives no figure.
    heap_allocated: Option<Gauge>,
    /// What the program's allocator reports (installed by the binary); `None`: nothing.
    allocator: Option<AllocatorHooks>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered, without transport counters (the
    /// request, retry and connection metrics stay empty).
    pub fn new() -> Self {
        Self::for_transport(None, None)
    }

    /// A fresh registry whose request, retry and connection metrics come from `transport`, the
    /// counters of the `nodelet-transport` under the agent's client, and whose allocator
    /// metrics (`nodelet_build_info`, `nodelet_heap_allocated_bytes`) come from `allocator`,
    /// what the binary's global allocator reports (`None`: allocator `unknown`, no heap figure).
    pub fn for_transport(transport: Option<Counters>, allocator: Option<AllocatorHooks>) -> Self {
        let mut registry = Registry::with_prefix("nodelet");
        let api_requests = Family::<Labels, Counter>::default();
        registry.register(
            "api_requests",
            "API requests the agent made, by verb (watches counted when opened); counted by the transport",
            api_requests.clone(),
        );
        let service_watch_lists = Gauge::default();
        registry.register(
            "service_watch_lists",
            "LISTs the node's Service watch (the containers' service variables) has made since the agent started, failed attempts included",
            service_watch_lists.clone(),
        );
        let first_reads = Family::<Labels, Gauge>::default();
        registry.register(
            "first_reads",
            "First reads of ConfigMaps and Secrets (a reflector's watch-list or LIST until its object was listed once; Get/Cache GETs) that took a token of the kubeAPIQPS/kubeAPIBurst bucket, by whether they waited for it",
            first_reads.clone(),
        );
        let first_read_wait = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "first_read_wait_seconds",
            "Seconds first reads waited for their token of the kubeAPIQPS/kubeAPIBurst bucket, summed",
            first_read_wait.clone(),
        );
        let paced = register_paced(&mut registry);
        let watches_open = Family::<Labels, Gauge>::default();
        registry.register(
            "watches_open",
            "Watches open against the API server, by resource",
            watches_open.clone(),
        );
        let volumes = Family::<Labels, Gauge>::default();
        registry.register(
            "volumes",
            "Pod volumes by plugin and state (Mounted, Pending, Uncertain, Unmounting, Unsupported)",
            volumes.clone(),
        );
        let volume_errors = Family::<Labels, Gauge>::default();
        registry.register(
            "volume_errors",
            "Pod volumes whose last SetUp/TearDown failed, by plugin",
            volume_errors.clone(),
        );
        let pods = Family::<Labels, Gauge>::default();
        registry.register("pods", "Pods by pod-worker phase", pods.clone());
        let propagation = Histogram::new([
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
        ]);
        registry.register(
            "propagation_latency_seconds",
            "Object change seen by the volume manager -> new content on disk, one sample per volume that uses it",
            propagation.clone(),
        );
        let api_connections = Family::<Labels, Gauge>::default();
        registry.register(
            "api_connections",
            "Connections open to the API server, by protocol (HTTP/1.1, HTTP/2)",
            api_connections.clone(),
        );
        let api_write_failures = Family::<Labels, Counter>::default();
        registry.register(
            "api_write_failures",
            "Writes of the agent that failed after the transport's retries and were logged, by what: pod_status, event, node_registration, lease, node_status",
            api_write_failures.clone(),
        );
        let api_retries = Family::<Labels, Gauge>::default();
        registry.register(
            "api_requests_retried",
            "Requests the transport sent again, by reason: refused (GOAWAY or REFUSED_STREAM, never processed; sent again on another connection, up to 8 times), unsent (handed back unwritten when their connection closed; sent again on another one) or throttled (429/503/504 with Retry-After); a counter kept by the transport",
            api_retries.clone(),
        );
        let api_reachable = Gauge::default();
        registry.register(
            "api_reachable",
            "1 while no watch of the agent is failing (pods, configmaps, secrets), 0 during an API outage",
            api_reachable.clone(),
        );
        let watches_failing = Family::<Labels, Gauge>::default();
        registry.register(
            "watches_failing",
            "Watches whose latest request to the API server failed, by resource",
            watches_failing.clone(),
        );
        let watch_last_success = Family::<Labels, Gauge>::default();
        registry.register(
            "watch_last_success_timestamp_seconds",
            "Oldest last answer from the API server among the running watches of a resource (Unix time; 0 = never answered)",
            watch_last_success.clone(),
        );
        let (events_dropped, heap_allocated) = register_agent_metrics(&mut registry, allocator);
        Self {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                api_requests,
                api_write_failures,
                watches_open,
                service_watch_lists,
                first_reads,
                first_read_wait,
                paced,
                volumes,
                volume_errors,
                pods,
                propagation,
                api_connections,
                api_retries,
                api_reachable,
                watches_failing,
                watch_last_success,
                transport,
                events_dropped,
                reporting: ReportCounters::default(),
                heap_allocated,
                allocator,
            }),
        }
    }

    /// The counters the reporting parts (`nodelet-reporting`) count in; read at each scrape.
    pub fn reporting(&self) -> ReportCounters {
        self.inner.reporting.clone()
    }

    /// Set how many LISTs the service watch has made.
    pub fn set_service_watch_lists(&self, n: u64) {
        self.inner
            .service_watch_lists
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Set the first-read bucket's figures (OM-30).
    pub fn set_first_reads(&self, stats: nodelet_object_manager::LimiterStats) {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.inner
            .first_reads
            .get_or_create(&vec![("waited".to_owned(), "false".to_owned())])
            .set(n(stats.reads.saturating_sub(stats.delayed)));
        self.inner
            .first_reads
            .get_or_create(&vec![("waited".to_owned(), "true".to_owned())])
            .set(n(stats.delayed));
        self.inner.first_read_wait.set(stats.waited.as_secs_f64());
    }

    /// Set the figures of the paced client `client` (`node`, `events`; OM-33).
    pub fn set_paced(&self, client: &str, stats: nodelet_object_manager::LimiterStats) {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let labels = |waited: &str| {
            vec![
                ("client".to_owned(), client.to_owned()),
                ("waited".to_owned(), waited.to_owned()),
            ]
        };
        self.inner
            .paced
            .requests
            .get_or_create(&labels("false"))
            .set(n(stats.reads.saturating_sub(stats.delayed)));
        self.inner
            .paced
            .requests
            .get_or_create(&labels("true"))
            .set(n(stats.delayed));
        self.inner
            .paced
            .wait
            .get_or_create(&vec![("client".to_owned(), client.to_owned())])
            .set(stats.waited.as_secs_f64());
    }

    /// Set the figures of the node's window of outstanding requests (OM-35).
    pub fn set_request_window(&self, stats: nodelet_object_manager::WindowStats) {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let count = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        for (figure, value) in [
            ("limit", count(stats.limit)),
            ("lowest", count(stats.lowest)),
            ("samples", n(stats.samples)),
            ("over_target", n(stats.over_target)),
            ("pauses", n(stats.pauses)),
            (
                "paused_ms",
                n(u64::try_from(stats.paused.as_millis()).unwrap_or(u64::MAX)),
            ),
        ] {
            self.inner
                .paced
                .window
                .get_or_create(&vec![("figure".to_owned(), figure.to_owned())])
                .set(value);
        }
    }

    /// Set the number of open watches of `resource`.
    pub fn set_watches(&self, resource: &str, n: usize) {
        self.inner
            .watches_open
            .get_or_create(&vec![("resource".to_owned(), resource.to_owned())])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Replace the volume gauges: `(plugin, state) → count` and `plugin → errors`.
    pub fn set_volumes(&self, by_state: &[((String, String), usize)], errors: &[(String, usize)]) {
        self.inner.volumes.clear();
        for ((plugin, state), n) in by_state {
            self.inner
                .volumes
                .get_or_create(&vec![
                    ("plugin".to_owned(), plugin.clone()),
                    ("state".to_owned(), state.clone()),
                ])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        self.inner.volume_errors.clear();
        for (plugin, n) in errors {
            self.inner
                .volume_errors
                .get_or_create(&vec![("plugin".to_owned(), plugin.clone())])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// Replace the pods-by-phase gauge.
    pub fn set_pods(&self, by_phase: &[(String, usize)]) {
        self.inner.pods.clear();
        for (phase, n) in by_phase {
            self.inner
                .pods
                .get_or_create(&vec![("phase".to_owned(), phase.clone())])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// Set the API connection gauges: `reachable`, and per resource the number of failing
    /// watches and the oldest last answer (Unix seconds; no series without running watches).
    pub fn set_api_health(&self, reachable: bool, resources: &[(String, usize, Option<i64>)]) {
        self.inner.api_reachable.set(i64::from(reachable));
        self.inner.watch_last_success.clear();
        for (resource, failing, oldest) in resources {
            let labels = vec![("resource".to_owned(), resource.clone())];
            self.inner
                .watches_failing
                .get_or_create(&labels)
                .set(i64::try_from(*failing).unwrap_or(i64::MAX));
            if let Some(t) = oldest {
                self.inner.watch_last_success.get_or_create(&labels).set(*t);
            }
        }
    }

    /// Record one propagation latency.
    pub fn observe_propagation(&self, seconds: f64) {
        self.inner.propagation.observe(seconds);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Under the registry lock: two scrapes never both advance the request counters.
        {
            let registry = self.inner.registry.lock();
            if let Some(counters) = &self.inner.transport {
                self.refresh_from(counters);
            }
            self.refresh_reporting();
            if let (Some(gauge), Some(bytes)) = (
                &self.inner.heap_allocated,
                self.inner.allocator.and_then(|a| (a.allocated_bytes)()),
            ) {
                gauge.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            let _ = encode(&mut out, &registry);
        }
        out
    }

    /// Copies the reporting parts' counts into the write-failure and dropped-event counters.
    fn refresh_reporting(&self) {
        let counters = &self.inner.reporting;
        for target in WriteTarget::ALL {
            let n = counters.write_failures(target);
            if n > 0 {
                follow(&self.inner.api_write_failures, "what", target.as_str(), n);
            }
        }
        for reason in EventDrop::ALL {
            let n = counters.events_dropped(reason);
            follow(&self.inner.events_dropped, "reason", reason.as_str(), n);
        }
    }

    /// Copies the transport's counts into the request, retry and connection metrics.
    fn refresh_from(&self, counters: &Counters) {
        for (verb, n) in counters.requests().by_verb() {
            if n == 0 {
                continue;
            }
            let counter = self
                .inner
                .api_requests
                .get_or_create(&vec![("verb".to_owned(), verb.to_owned())]);
            // The transport's count only grows; the Prometheus counter follows it.
            let seen = counter.get();
            if n > seen {
                counter.inc_by(n - seen);
            }
        }
        let open = counters.open_connections();
        for (protocol, n) in [("HTTP/1.1", open.http1), ("HTTP/2", open.http2)] {
            self.inner
                .api_connections
                .get_or_create(&vec![("protocol".to_owned(), protocol.to_owned())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let retried = counters.retries();
        for (reason, n) in [
            ("refused", retried.refused),
            ("unsent", retried.unsent),
            ("throttled", retried.throttled),
        ] {
            self.inner
                .api_retries
                .get_or_create(&vec![("reason".to_owned(), reason.to_owned())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

/// Registers the paced clients' figures (OM-33): requests that took a token, by client and
/// whether they waited; their waits summed, by client.
/// The paced clients' figures (OM-33) and the node's request window (OM-35).
struct PacedMetrics {
    requests: Family<Labels, Gauge>,
    wait: Family<Labels, GaugeF64>,
    window: Family<Labels, Gauge>,
}

fn register_paced(registry: &mut Registry) -> PacedMetrics {
    let paced = Family::<Labels, Gauge>::default();
    registry.register(
        "paced_requests",
        "Non-watch requests of the node's client (TokenRequests, pod status patches and deletions, lists) and of its events' client that took a token of their bucket (node: the kubeAPIQPS/kubeAPIBurst bucket the first reads share; events: eventRecordQPS/eventBurst), by client and whether they waited for it",
        paced.clone(),
    );
    let paced_wait = Family::<Labels, GaugeF64>::default();
    registry.register(
        "paced_request_wait_seconds",
        "Seconds the paced requests waited for their token, summed, by client",
        paced_wait.clone(),
    );
    let window = Family::<Labels, Gauge>::default();
    registry.register(
        "request_window",
        "The node's window of outstanding requests (first reads, the node's and the events' clients' requests), which narrows while the API server's answers come later than its best (OM-35): places now (limit), the fewest it had (lowest), answers measured (samples) and of those later than the target (over_target), requests that waited a pause below one place (pauses) and those pauses' total in milliseconds (paused_ms)",
        window.clone(),
    );
    PacedMetrics {
        requests: paced,
        wait: paced_wait,
        window,
    }
}

/// Registers what the agent itself counts and is: the dropped events (their series at 0 from
/// the start), the build's allocator, the live heap when the allocator gives it.
fn register_agent_metrics(
    registry: &mut Registry,
    allocator: Option<AllocatorHooks>,
) -> (Family<Labels, Counter>, Option<Gauge>) {
    let events_dropped = Family::<Labels, Counter>::default();
    registry.register(
        "events_dropped",
        "Pod events not published, by reason: queue_full (the publisher's queue of 1000 was full) or spam_filter (the pod's burst of 25 was spent)",
        events_dropped.clone(),
    );
    for reason in EventDrop::ALL {
        // The series exist at 0 from the start.
        let _ =
            events_dropped.get_or_create(&vec![("reason".to_owned(), reason.as_str().to_owned())]);
    }
    registry.register(
        "build",
        "What this agent was built with: the global allocator",
        Info::new(vec![(
            "allocator".to_owned(),
            allocator.map_or("unknown", |a| a.name).to_owned(),
        )]),
    );
    let heap_allocated = allocator.and_then(|a| (a.allocated_bytes)()).map(|_| {
        let gauge = Gauge::default();
        registry.register(
            "heap_allocated_bytes",
            "Bytes in live heap allocations, as the allocator counts them (glibc: mallinfo2 uordblks + hblkhd; jemalloc: stats.allocated); absent with mimalloc",
            gauge.clone(),
        );
        gauge
    });
    (events_dropped, heap_allocated)
}

/// Advances the counter `label=value` of `family` to `n`: the source's count only grows, the
/// Prometheus counter follows it.
fn follow(family: &Family<Labels, Counter>, label: &str, value: &str, n: u64) {
    let counter = family.get_or_create(&vec![(label.to_owned(), value.to_owned())]);
    let seen = counter.get();
    if n > seen {
        counter.inc_by(n - seen);
    }
}

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `name` (no labels) in `text`.
    fn sample(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    fn forty_two_bytes() -> Option<u64> {
        Some(42)
    }

    #[test]
    fn the_exposition_names_the_installed_allocator_and_its_live_heap() {
        let hooks = AllocatorHooks {
            name: "test-allocator",
            allocated_bytes: forty_two_bytes,
            release_free_memory: || false,
        };
        let text = Metrics::for_transport(None, Some(hooks)).encode();
        let info = "nodelet_build_info{allocator=\"test-allocator\"} 1";
        assert!(
            text.lines().any(|l| l == info),
            "{info} missing from\n{text}"
        );
        assert_eq!(
            sample(&text, "nodelet_heap_allocated_bytes"),
            Some(42.0),
            "{text}"
        );
    }

    #[test]
    fn the_reporting_parts_counts_are_exported_and_the_dropped_series_exist_from_the_start() {
        let metrics = Metrics::new();
        let line = |text: &str, series: &str| {
            text.lines()
                .find(|l| l.starts_with(series))
                .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
        };
        let queue_full = "nodelet_events_dropped_total{reason=\"queue_full\"}";
        let lease = "nodelet_api_write_failures_total{what=\"lease\"}";
        let text = metrics.encode();
        assert_eq!(line(&text, queue_full).as_deref(), Some("0"), "{text}");
        assert_eq!(line(&text, lease), None, "{text}");
        let counters = metrics.reporting();
        for _ in 0..3 {
            counters.event_dropped(EventDrop::QueueFull);
        }
        counters.write_failed(WriteTarget::Lease);
        let text = metrics.encode();
        assert_eq!(line(&text, queue_full).as_deref(), Some("3"), "{text}");
        assert_eq!(line(&text, lease).as_deref(), Some("1"), "{text}");
        // A second scrape counts nothing twice.
        let text = metrics.encode();
        assert_eq!(line(&text, queue_full).as_deref(), Some("3"), "{text}");
    }

    #[test]
    fn without_an_installed_allocator_the_heap_is_not_reported() {
        let text = Metrics::new().encode();
        assert!(
            text.lines()
                .any(|l| l == "nodelet_build_info{allocator=\"unknown\"} 1"),
            "{text}"
        );
        assert!(!text.contains("nodelet_heap_allocated_bytes"), "{text}");
    }
}
