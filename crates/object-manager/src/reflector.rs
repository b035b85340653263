//! The per-object reflector: a watch-list (or list, then watch from the list's resourceVersion),
//! forever.
//!
//! Algorithm (markers `// (n)` below):
//! 1. A watch-list (one WATCH with `sendInitialEvents=true`, as the kubelet's client-go does
//!    since Kubernetes 1.35) where the source offers it, else LIST
//!    `fieldSelector=metadata.name=<name>`; on error back off and start again. A watch-list
//!    that ends before its initial events did counts as a failed list.
//! 2. Replace the cell's content with the listed object (or its absence) — for a watch-list,
//!    the state its initial events gave, at its `initial-events-end` bookmark; mark it synced.
//! 3. Follow the watch-list's stream, or WATCH from the last seen resourceVersion; apply each
//!    event to the cell.
//! 4. `410 Gone` (as the answer or as an error event) → back to (1): relist — at once, unless
//!    nothing healthy happened since the last list (then after a back-off step).
//! 5. Other errors, or a watch that ended within a second without any event → back off, then
//!    watch again from the last resourceVersion (no relist: nothing is missed).
//! 6. While the API server is unreachable, the manager's shared [`Recovery`] signal replaces
//!    the back-off: one reflector probes, the others resume when any request succeeds again
//!    (with jitter and bounded concurrency; steps in `recovery.rs`). Once a resumed watch of
//!    that recovery is answered 410, the server forgot its watch history (it restarted), and
//!    the other woken reflectors go straight to (1) instead of resuming into the same 410.
//! 7. Every write checks the cell's epoch: a stopped reflector can never overwrite what a
//!    newer run wrote, so there is never more than one effective run per object.
//!
//! The task holds only a `Weak` reference to its cell and ends when the cell is dropped or its
//! cancellation token fires.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use rand::Rng;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::recovery::{Pause, Recovery};
use crate::source::{ObjectSource, SourceError, WatchEvent};
use crate::{ObjectKind, ObjectRef};

/// What a reflector has seen of its object.
pub(crate) struct CellState<K> {
    /// Bumped whenever a reflector run is started or stopped; writes of older runs are dropped.
    pub(crate) epoch: u64,
    /// A full list completed since the current run started (or the item is immutable).
    pub(crate) synced: bool,
    /// The object, or `None` when it does not exist.
    pub(crate) object: Option<Arc<K>>,
    /// At least one list completed at some point: content changes are notifiable.
    pub(crate) listed_once: bool,
}

/// One object's shared state: written by its reflector, read by `get`.
pub(crate) struct Cell<K> {
    pub(crate) state: watch::Sender<CellState<K>>,
}

impl<K> Cell<K> {
    pub(crate) fn new() -> Arc<Self> {
        let (state, _) = watch::channel(CellState {
            epoch: 0,
            synced: false,
            object: None,
            listed_once: false,
        });
        Arc::new(Cell { state })
    }
}

/// Reconnect back-off: exponential, capped, with up to 100 % jitter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackoffConfig {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
}

struct Backoff {
    config: BackoffConfig,
    next: Duration,
}

impl Backoff {
    fn new(config: BackoffConfig) -> Self {
        Backoff {
            config,
            next: config.initial,
        }
    }

    fn reset(&mut self) {
        self.next = self.config.initial;
    }

    /// The next delay: the current step plus up to 100 % jitter, capped at `max`.
    fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.config.max);
        let jitter = base.mul_f64(rand::rng().random_range(0.0..1.0));
        (base + jitter).min(self.config.max)
    }
}

/// Everything one reflector run needs.
pub(crate) struct Reflector<K> {
    pub(crate) source: Arc<dyn ObjectSource<K>>,
    /// The object's namespace (empty for a cluster-scoped Node).
    pub(crate) namespace: String,
    /// The object's name.
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) cell: Weak<Cell<K>>,
    pub(crate) epoch: u64,
    pub(crate) backoff: BackoffConfig,
    /// Where content changes are announced, and the object's kind (the reference is built
    /// only when a change is sent); `None`: not announced.
    pub(crate) notify: Option<(broadcast::Sender<ObjectRef>, ObjectKind)>,
    /// The manager's "API server answers again" signal (6); `None`: plain back-off.
    pub(crate) recovery: Option<Arc<Recovery>>,
}

/// Where a reflector stands with respect to the shared recovery signal (6).
#[derive(Default)]
struct RecoveryState {
    /// This reflector holds the prober lease.
    probing: bool,
    /// Woken by the end of an outage: the next request holds a permit.
    woken: bool,
    /// The recovery generation when the last request was sent.
    generation: u64,
}

/// The reflector's exit reason.
enum Stop {
    /// The cell was dropped or a newer run owns it.
    Superseded,
}

/// A watch that ends sooner than this without any event counts as a failure (5).
const SHORT_WATCH: Duration = Duration::from_secs(1);

impl<K: Resource + Send + Sync + 'static> Reflector<K> {
    /// Runs until `cancel` fires or the cell goes away.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let span = tracing::debug_span!(
            "reflector",
            object.ref = %format_args!("{}/{}", self.namespace, self.name),
            kind = self.kind
        );
        async move {
            tracing::debug!("reflector started");
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {}
                Stop::Superseded = self.list_and_watch() => {}
            }
            tracing::debug!("reflector stopped");
        }
        .instrument(span)
        .await
    }

    async fn list_and_watch(&self) -> Stop {
        let (namespace, name) = (&self.namespace, &self.name);
        let mut backoff = Backoff::new(self.backoff);
        // A 410 right after a list with no healthy watch in between backs off before the next
        // relist, so a server that keeps answering 410 cannot drive a list/watch hot loop.
        let mut delay_relist = false;
        let mut rs = RecoveryState::default();
        'relist: loop {
            if delay_relist {
                tokio::time::sleep(backoff.next_delay()).await;
            }
            // (1) a watch-list, else LIST.
            let opened = {
                let _permit = self.permit(&mut rs).await;
                self.answered(self.source.watch_list(namespace, name).await)
            };
            let mut initial = match opened {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%error, "watch-list failed");
                    self.failed(&error, &mut backoff, &mut rs).await;
                    delay_relist = false;
                    continue 'relist;
                }
            };
            let mut resource_version = String::new();
            if initial.is_none() {
                let listed = {
                    let _permit = self.permit(&mut rs).await;
                    self.answered(self.source.list(namespace, name).await)
                };
                let listed = match listed {
                    Ok(listed) => listed,
                    Err(error) => {
                        tracing::debug!(%error, "list failed");
                        self.failed(&error, &mut backoff, &mut rs).await;
                        delay_relist = false;
                        continue 'relist;
                    }
                };
                // (2)
                if !self.replace(listed.object.map(Arc::new)) {
                    return Stop::Superseded;
                }
                resource_version = listed.resource_version;
            }
            // An event arrived, or a watch stayed up for a while, since the list.
            let mut progressed = false;

            loop {
                // (3) the watch-list's own stream first, then watches from the last version.
                let started = Instant::now();
                let (mut stream, mut listing) = match initial.take() {
                    Some(stream) => (stream, true),
                    None if rs.woken && self.history_was_forgotten() => {
                        tracing::debug!("the API server forgot its watch history; relisting"); // (6)
                        delay_relist = false;
                        continue 'relist;
                    }
                    None => {
                        let opened = {
                            let _permit = self.permit(&mut rs).await;
                            self.answered(
                                self.source.watch(namespace, name, &resource_version).await,
                            )
                        };
                        match opened {
                            Ok(stream) => (stream, false),
                            Err(error) if error.is_gone() => {
                                tracing::debug!("watch expired, relisting"); // (4)
                                self.expired(&rs);
                                delay_relist = !progressed;
                                continue 'relist;
                            }
                            Err(error) => {
                                tracing::debug!(%error, "watch failed");
                                self.failed(&error, &mut backoff, &mut rs).await; // (5)
                                continue;
                            }
                        }
                    }
                };
                // A watch-list's initial state, applied at its end (2).
                let mut listed: Option<Arc<K>> = None;
                let mut saw_event = false;
                let mut failed = None;
                while let Some(item) = stream.next().await {
                    let applied = match item {
                        Ok(WatchEvent::Applied(obj)) if listing => {
                            listed = Some(Arc::new(obj));
                            true
                        }
                        Ok(WatchEvent::Deleted(_)) if listing => {
                            listed = None;
                            true
                        }
                        Ok(WatchEvent::InitialEventsEnd {
                            resource_version: end,
                        }) if listing => {
                            listing = false;
                            resource_version = end;
                            self.replace(listed.take())
                        }
                        Ok(WatchEvent::Applied(obj)) => {
                            resource_version = obj_rv(&obj).unwrap_or(resource_version);
                            let obj = Arc::new(obj);
                            self.update(|s| {
                                let changed = rv(&s.object) != Some(rv_of(&obj));
                                s.object = Some(obj);
                                changed
                            })
                        }
                        Ok(WatchEvent::Deleted(obj)) => {
                            resource_version = obj_rv(&obj).unwrap_or(resource_version);
                            self.update(|s| s.object.take().is_some())
                        }
                        Ok(
                            WatchEvent::Bookmark {
                                resource_version: bookmark,
                            }
                            | WatchEvent::InitialEventsEnd {
                                resource_version: bookmark,
                            },
                        ) => {
                            if !listing {
                                resource_version = bookmark;
                            }
                            true
                        }
                        Err(error) if error.is_gone() => {
                            tracing::debug!("watch expired, relisting"); // (4)
                            if !listing {
                                self.expired(&rs);
                            }
                            delay_relist = !(progressed || saw_event);
                            continue 'relist;
                        }
                        Err(error) => {
                            tracing::debug!(%error, "watch stream failed");
                            failed = Some(error);
                            break;
                        }
                    };
                    if !applied {
                        return Stop::Superseded;
                    }
                    if !listing {
                        saw_event = true;
                        progressed = true;
                        backoff.reset();
                    }
                }
                if listing {
                    // The watch-list ended before its initial events did: list again (1).
                    match failed {
                        Some(error) => self.failed(&error, &mut backoff, &mut rs).await,
                        None => tokio::time::sleep(backoff.next_delay()).await,
                    }
                    delay_relist = false;
                    continue 'relist;
                }
                let healthy = started.elapsed() >= SHORT_WATCH;
                if healthy {
                    progressed = true;
                }
                if let Some(error) = failed {
                    self.failed(&error, &mut backoff, &mut rs).await; // (5)
                } else if !(saw_event || healthy) {
                    tokio::time::sleep(backoff.next_delay()).await; // (5)
                } else {
                    backoff.reset();
                }
            }
        }
    }

    /// Replaces the cell's content with a listed state and marks it synced (2); `false` when
    /// the run is superseded.
    fn replace(&self, object: Option<Arc<K>>) -> bool {
        self.update(|s| {
            let changed = s.listed_once && rv(&s.object) != rv(&object);
            s.object = object;
            s.synced = true;
            s.listed_once = true;
            changed
        })
    }

    /// After a failed request: the back-off, or the shared recovery signal (6).
    async fn failed(&self, error: &SourceError, backoff: &mut Backoff, rs: &mut RecoveryState) {
        let delay = backoff.next_delay();
        let Some(recovery) = &self.recovery else {
            tokio::time::sleep(delay).await;
            return;
        };
        if let Pause::Recovered = recovery
            .pause(error, delay, &mut rs.probing, rs.generation)
            .await
        {
            backoff.reset();
            rs.woken = true;
        }
    }

    /// A resumed watch was answered 410: tells the recovery signal (6).
    fn expired(&self, rs: &RecoveryState) {
        if let Some(recovery) = &self.recovery {
            recovery.saw_expired(rs.generation);
        }
    }

    /// Whether the recovery that woke this reflector found the server's watch history gone (6).
    fn history_was_forgotten(&self) -> bool {
        self.recovery
            .as_ref()
            .is_some_and(|r| r.history_forgotten())
    }

    /// A recovery permit when this reflector was woken by the end of an outage (6).
    /// Also notes the recovery generation the request is sent at.
    async fn permit(&self, rs: &mut RecoveryState) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let recovery = self.recovery.as_ref()?;
        rs.generation = recovery.generation();
        if !std::mem::take(&mut rs.woken) {
            return None;
        }
        recovery.permit().await
    }

    /// Reports an answered request to the recovery signal (6).
    fn answered<T>(&self, result: Result<T, SourceError>) -> Result<T, SourceError> {
        let reached = match &result {
            Ok(_) => true,
            Err(error) => !Recovery::is_outage(error),
        };
        if let (true, Some(recovery)) = (reached, &self.recovery) {
            recovery.succeeded();
        }
        result
    }

    /// Applies `f` to the cell if this run still owns it (7); `f` says whether the object's
    /// content changed, which is then announced. `false` when the run is superseded.
    fn update(&self, f: impl FnOnce(&mut CellState<K>) -> bool) -> bool {
        let Some(cell) = self.cell.upgrade() else {
            return false;
        };
        let mut owned = true;
        let mut changed = false;
        cell.state.send_if_modified(|s| {
            if s.epoch != self.epoch {
                owned = false;
                return false;
            }
            changed = f(s);
            true
        });
        if owned && changed {
            tracing::debug!("object changed");
            if let Some((notify, kind)) = &self.notify {
                // No subscriber is fine.
                let object = ObjectRef::new(*kind, self.namespace.clone(), self.name.clone());
                let _ = notify.send(object);
            }
        }
        owned
    }
}

fn obj_rv<K: Resource>(obj: &K) -> Option<String> {
    obj.meta().resource_version.clone()
}

fn rv_of<K: Resource>(obj: &Arc<K>) -> Option<&str> {
    obj.meta().resource_version.as_deref()
}

/// The resourceVersion of an optional object; `None` for a missing one.
fn rv<K: Resource>(obj: &Option<Arc<K>>) -> Option<Option<&str>> {
    obj.as_ref().map(rv_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitters_within_one_step() {
        let mut b = Backoff::new(BackoffConfig {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
        });
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(800) && first < Duration::from_millis(1600));
        let second = b.next_delay();
        assert!(second >= Duration::from_millis(1600) && second < Duration::from_millis(3200));
        for _ in 0..20 {
            assert!(b.next_delay() <= Duration::from_secs(30));
        }
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(1600));
    }
}
