//! The per-object reflector: a watch-list (or list, then watch from the list's resourceVersion),
//! forever.
//!
//! Algorithm (markers `// (n)` below):
//! 1. A watch-list (one WATCH with `sendInitialEvents=true`, as the kubelet's client-go does
//!    since Kubernetes 1.35) where the source offers it, else LIST
//!    `fieldSelector=metadata.name=<name>`; on error back off and start again. A watch-list
//!    that ends before its initial events did counts as a failed list. Either is served from
//!    the server's watch cache as it is (`resourceVersion=0`, as client-go's first LIST was
//!    before watch-lists), except after a `410 Gone` (4), until a list succeeds: then a
//!    consistent read, for the cache may be behind what this run already saw. A consistent
//!    read from the cache waits for the cache to catch up with etcd, which after any write to
//!    another resource takes a progress notification (requested every 100 ms while reads
//!    wait); at a node's start, a thousand of them queue behind those notifications.
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
//! 8. A refusal (401, 403) is not an outage: the Node authorizer's "no relationship found"
//!    is retried soon and often for a while, for its graph lags the API; a lasting or any other
//!    refusal is reported once at WARN and backed off (steps in `refusal.rs`).
//!
//! The steps are the states of [`State`] (`Empty` (1), `Listing` (1)–(2), `WatchListing` (2),
//! `Watching` (3), `Backoff` (5)–(6), `Stopped` (7)), moved on by one transition function,
//! [`Reflector::step`]; nothing else decides what a run does next.
//!
//! The task holds only a `Weak` reference to its cell and ends when the cell is dropped or its
//! cancellation token fires.
//!
//! With a [`WatchDriver`] (the Watch store always has one), a run that reaches (3) with its watch
//! open does not keep a task: it hands the open watch to the driver as a [`Follow`] and the
//! task ends. The driver applies the watch's events with the same code and, when the watch
//! ends or fails, spawns a task that goes on from the state that follows — so a thousand idle
//! watches cost a thousand small followers in one task, not a thousand tasks each sized for
//! the largest step (`driver.rs`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use nodelet_core::backoff::{Backoff, Schedule};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::driver;
use crate::gate::{PodGate, Scout};
use crate::kept::Keep;
use crate::limiter::ReadLimiter;
use crate::recovery::{Pause, Recovery};
use crate::refusal::{Refusals, Verdict};
use crate::source::{ObjectSource, ReadFrom, SourceError, WatchEvent, WatchStream};
use crate::tasks::Tasks;
use crate::{ObjectKind, ObjectRef};

/// What a reflector has seen of its object.
pub(crate) struct CellState<K: Keep> {
    /// Bumped whenever a reflector run is started or stopped; writes of older runs are dropped.
    pub(crate) epoch: u64,
    /// A full list completed since the current run started (or the item is immutable).
    pub(crate) synced: bool,
    /// The object as kept (`kept.rs`), or `None` when it does not exist.
    pub(crate) object: Option<K::Kept>,
    /// At least one list completed at some point: content changes are notifiable.
    pub(crate) listed_once: bool,
    /// A `get` gave up waiting for the first list (`SyncTimeout`): the list that completes
    /// is announced like a change, so whoever failed retries at once instead of after its
    /// back-off. Without it a first list is not announced (nobody has seen the object yet).
    pub(crate) waited_out: bool,
    /// The run waits in the node's own queue (its start slot in the driver; then, for a first
    /// read, its pod's gate, the first-read bucket, the window: OM-31, OM-30, OM-34) and has
    /// sent nothing yet: a `get` does not count this time against its `sync_timeout` (OM-36).
    pub(crate) queued: bool,
    /// When the first read of the current run was sent (after its queue).
    pub(crate) sent: Option<tokio::time::Instant>,
}

/// One object's shared state: written by its reflector, read by `get`.
pub(crate) struct Cell<K: Keep> {
    pub(crate) state: watch::Sender<CellState<K>>,
}

impl<K: Keep> Cell<K> {
    pub(crate) fn new() -> Arc<Self> {
        let (state, _) = watch::channel(CellState {
            epoch: 0,
            synced: false,
            object: None,
            listed_once: false,
            waited_out: false,
            queued: false,
            sent: None,
        });
        Arc::new(Cell { state })
    }
}

/// Reconnect back-off: exponential, capped, with up to 100 % jitter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackoffConfig {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
    /// How long "no relationship found" refusals in a row are retried as the authorizer's lag
    /// before they count as a denial (`refusal.rs`).
    pub(crate) relationship_grace: Duration,
}

impl BackoffConfig {
    /// A fresh reconnect back-off: doubling from `initial` to `max`, each delay plus up to
    /// 100 % jitter.
    fn start(self) -> Backoff {
        Schedule {
            initial: self.initial,
            max: self.max,
            ..Schedule::WATCH
        }
        .backoff()
    }
}

/// Everything one reflector run needs. What every run of a store shares is in [`Settings`], so
/// that an idle watch's follower (`driver.rs`) carries one pointer to it, not a copy.
pub(crate) struct Reflector<K: Keep> {
    pub(crate) source: Arc<dyn ObjectSource<K>>,
    /// The object's namespace (empty for a cluster-scoped Node).
    pub(crate) namespace: String,
    /// The object's name.
    pub(crate) name: String,
    pub(crate) cell: Weak<Cell<K>>,
    pub(crate) epoch: u64,
    pub(crate) settings: Arc<Settings<K>>,
}

/// What the reflector runs of one store share.
pub(crate) struct Settings<K: Keep> {
    pub(crate) kind: &'static str,
    pub(crate) backoff: BackoffConfig,
    /// Where content changes are announced, and the object's kind (the reference is built
    /// only when a change is sent); `None`: not announced.
    pub(crate) notify: Option<(broadcast::Sender<ObjectRef>, ObjectKind)>,
    /// The manager's "API server answers again" signal (6); `None`: plain back-off.
    pub(crate) recovery: Option<Arc<Recovery>>,
    /// Where an open watch is followed (3); `None`: by this run's own task.
    pub(crate) driver: Option<WatchDriver<K>>,
    /// The bucket a read takes a token from until the object was listed once (1), OM-30.
    pub(crate) first_reads: ReadLimiter,
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

/// Where one reflector run stands: the steps of the module docs as states, moved on by
/// [`Reflector::step`], the one transition function.
///
/// ```text
/// Empty ──watch-list──► WatchListing ──InitialEventsEnd──► Watching(stream) ─┐
///   │  └─refused──► Listing ──listed──► Watching(open) ◄──ended/failed──────┘
///   └─failed──► Backoff ──► (the state it names)       410 ──► Empty (or Backoff ► Empty)
/// any write to a superseded cell ──► Stopped
/// ```
pub(crate) enum State<K: Keep> {
    /// Nothing current: open a watch-list, else LIST (1).
    Empty,
    /// The source offers no watch-list: LIST (1), then (2).
    Listing,
    /// Following a watch-list until its initial events end (2); `listed` is the state its
    /// events gave so far.
    WatchListing {
        stream: WatchStream<K>,
        started: Instant,
        listed: Option<K>,
    },
    /// Listed: follow `stream` or, without one, open a WATCH from the last resourceVersion (3).
    Watching {
        stream: Option<Open<K>>,
        /// An event arrived, or a watch stayed up for a while, since the last list (4).
        progressed: bool,
    },
    /// After a failure: back off, or wait for the shared recovery signal when `error` says the
    /// server is unreachable (5)/(6); then `then`.
    Backoff {
        error: Option<SourceError>,
        then: Box<State<K>>,
    },
    /// The cell is gone or a newer run owns it (7): the run ends.
    Stopped,
}

impl<K: Keep> State<K> {
    /// The state's name, for logs and tests.
    fn name(&self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::Listing => "Listing",
            State::WatchListing { .. } => "WatchListing",
            State::Watching { .. } => "Watching",
            State::Backoff { .. } => "Backoff",
            State::Stopped => "Stopped",
        }
    }

    /// A relist (4): at once when something healthy happened since the last list, else after
    /// a back-off step, so a server that keeps answering 410 cannot drive a hot loop.
    fn relist(progressed: bool) -> Self {
        if progressed {
            State::Empty
        } else {
            State::backoff(None, State::Empty)
        }
    }

    fn backoff(error: Option<SourceError>, then: State<K>) -> Self {
        State::Backoff {
            error,
            then: Box::new(then),
        }
    }
}

/// A watch being followed (3).
pub(crate) struct Open<K> {
    stream: WatchStream<K>,
    /// When it was requested: one that ends within [`SHORT_WATCH`] without events failed (5).
    started: Instant,
    /// An event was applied from it (a watch-list's end of initial events counts).
    saw_event: bool,
}

/// The shared driver of a store's reflector runs (`driver.rs`).
pub(crate) type WatchDriver<K> = driver::Driver<Start<K>, Follow<K>>;

/// A new run, queued in the [`WatchDriver`] until a start slot is free.
pub(crate) struct Start<K: Keep> {
    pub(crate) reflector: Reflector<K>,
    pub(crate) cancel: CancellationToken,
    /// The gate of the pod whose registration started this run: its first read waits for the
    /// pod's scout (OM-31); `None`: none.
    pub(crate) gate: Option<Arc<PodGate>>,
}

impl<K: Keep> driver::Start for Start<K> {
    fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    fn spawn(self, tasks: &Tasks, slot: tokio::sync::OwnedSemaphorePermit) {
        let Start {
            reflector,
            cancel,
            gate,
        } = self;
        // The slot is held until the run parks its open watch or ends.
        tasks.spawn(async move {
            reflector.run(cancel, gate).await;
            drop(slot);
        });
    }
}

/// A run parked at (3) with its watch open: followed by the shared [`WatchDriver`] instead of a task
/// of its own. It holds what the run needs to go on, and nothing sized for the other steps.
pub(crate) struct Follow<K: Keep> {
    reflector: Reflector<K>,
    run: RunState,
    open: Open<K>,
    progressed: bool,
    cancel: CancellationToken,
}

impl<K: Keep> driver::Follow for Follow<K> {
    type Resume = Resume<K>;
    type Future = Following<K>;

    /// The future that follows the watch: it completes when the watch ends or fails — with
    /// the rest of the run, for a task of its own — or when the run is cancelled or superseded
    /// (`None`; the stream is dropped with it, which closes the watch).
    fn follow(self) -> Following<K> {
        Following {
            cancelled: self.cancel.clone().cancelled_owned(),
            follow: Some(self),
        }
    }
}

/// Events a follower applies in one poll before it lets the driver poll the others.
const EVENTS_PER_POLL: usize = 32;

pin_project_lite::pin_project! {
    /// [`Follow::follow`]'s future, written out so that it holds the follower and the
    /// cancellation wait once (an `async` block would also keep the space of every call it
    /// awaits).
    pub(crate) struct Following<K: Keep> {
        #[pin]
        cancelled: tokio_util::sync::WaitForCancellationFutureOwned,
        follow: Option<Follow<K>>,
    }
}

impl<K: Keep> std::future::Future for Following<K> {
    type Output = Option<Resume<K>>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = self.project();
        if this.cancelled.poll(cx).is_ready() {
            this.follow.take();
            return Poll::Ready(None);
        }
        let Some(f) = this.follow.as_mut() else {
            return Poll::Ready(None);
        };
        let _span = f.reflector.span().entered();
        let mut next = None;
        for _ in 0..EVENTS_PER_POLL {
            match f.open.stream.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(item)) => {
                    next = f
                        .reflector
                        .apply(item, &mut f.run, &mut f.open, &mut f.progressed);
                }
                Poll::Ready(None) => {
                    next = Some(f.reflector.ended(&mut f.run, &f.open, f.progressed, None));
                }
            }
            if next.is_some() {
                break;
            }
        }
        let Some(state) = next else {
            // More events are ready: come back after the other followers had their turn.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        let Some(Follow {
            reflector,
            run,
            open,
            cancel,
            ..
        }) = this.follow.take()
        else {
            return Poll::Ready(None);
        };
        // The watch is closed before the run requests anything else.
        drop(open);
        Poll::Ready(match state {
            State::Stopped => None,
            state => Some(Resume {
                reflector,
                run,
                state,
                cancel,
            }),
        })
    }
}

/// The rest of a run whose followed watch ended or failed.
pub(crate) struct Resume<K: Keep> {
    reflector: Reflector<K>,
    run: RunState,
    state: State<K>,
    cancel: CancellationToken,
}

impl<K: Keep> driver::Resume for Resume<K> {
    /// Goes on with the run in a task of its own (under `tasks`).
    fn spawn(self, tasks: &Tasks) {
        let Resume {
            reflector,
            run,
            state,
            cancel,
        } = self;
        tasks.spawn(reflector.resume(state, run, cancel));
    }
}

/// What a run carries from state to state.
pub(crate) struct RunState {
    backoff: Backoff,
    recovery: RecoveryState,
    /// Refusals (401/403) in a row, and whether they were reported (`refusal.rs`).
    refusals: Refusals,
    /// Where the next WATCH starts.
    resource_version: String,
    /// How the next list is served (1): from the watch cache, or consistent after a 410.
    read: ReadFrom,
    /// The gate of the pod whose registration started this run, until the run's first read
    /// opened it (OM-31): then nothing waits for it any more.
    gate: Option<Arc<PodGate>>,
    /// This run is its pod's scout until its first read is answered (OM-31).
    scout: Option<Scout>,
    /// The first read's place in the node's window, held until it was answered in full: a
    /// watch-list until its initial events ended (OM-34, OM-35). Boxed: a watch followed for
    /// the object's life carries an empty one.
    place: Option<Box<crate::window::Place>>,
}

/// The permits of one request: (a recovery permit, a request in flight).
type Permits<'a> = (
    Option<tokio::sync::SemaphorePermit<'a>>,
    Option<tokio::sync::SemaphorePermit<'a>>,
);

/// A watch that ends sooner than this without any event counts as a failure (5).
const SHORT_WATCH: Duration = Duration::from_secs(1);

impl<K: Keep> Reflector<K> {
    /// A run from the start, until `cancel` fires or the cell goes away; its first read passes
    /// `gate` (OM-31).
    pub(crate) async fn run(self, cancel: CancellationToken, gate: Option<Arc<PodGate>>) {
        let run = RunState {
            backoff: self.settings.backoff.start(),
            recovery: RecoveryState::default(),
            refusals: Refusals::default(),
            resource_version: String::new(),
            read: ReadFrom::WatchCache,
            gate,
            scout: None,
            place: None,
        };
        self.resume(State::Empty, run, cancel).await;
    }

    /// Goes on with a run from `state` until `cancel` fires, the cell goes away or, with a
    /// driver, the run's watch is open (3): then the driver follows it and this task ends.
    pub(crate) async fn resume(self, state: State<K>, run: RunState, cancel: CancellationToken) {
        let span = self.span();
        async move {
            tracing::trace!(state = state.name(), "reflector running");
            let parked = tokio::select! {
                biased;
                _ = cancel.cancelled() => None,
                parked = self.list_and_watch(state, run) => parked,
            };
            let Some((run, open, progressed)) = parked else {
                tracing::debug!("reflector stopped");
                return;
            };
            // Only a run with a driver parks its watch.
            if let Some(driver) = self.settings.driver.clone() {
                driver.follow(Follow {
                    reflector: self,
                    run,
                    open,
                    progressed,
                    cancel,
                });
            }
        }
        .instrument(span)
        .await
    }

    /// The span of this reflector's logs.
    fn span(&self) -> tracing::Span {
        tracing::debug_span!(
            "reflector",
            object.ref = %format_args!("{}/{}", self.namespace, self.name),
            kind = self.settings.kind
        )
    }

    /// Moves through the states until [`State::Stopped`] (`None`) or, with a driver, until the
    /// watch is open (3): then the open watch, to be followed by the driver.
    async fn list_and_watch(
        &self,
        mut state: State<K>,
        mut run: RunState,
    ) -> Option<(RunState, Open<K>, bool)> {
        loop {
            match state {
                State::Stopped => return None,
                State::Watching {
                    stream: Some(open),
                    progressed,
                } if self.settings.driver.is_some() => return Some((run, open, progressed)),
                current => {
                    tracing::trace!(state = current.name(), "reflector state");
                    state = self.step(current, &mut run).await;
                    // A first read's place is held only while its watch-list's initial
                    // events are awaited (OM-34): never through a back-off or an open watch.
                    // Answered in full (a watch now open) it is a sample of the server's
                    // answer time (OM-35); a failure says nothing of it.
                    match state {
                        State::WatchListing { .. } => {}
                        State::Watching { .. } => {
                            if let Some(place) = run.place.take() {
                                place.answered();
                            }
                        }
                        _ => run.place = None,
                    }
                }
            }
        }
    }

    /// The transition function: does what `state` calls for and returns the next state.
    async fn step(&self, state: State<K>, run: &mut RunState) -> State<K> {
        match state {
            State::Stopped => State::Stopped,
            State::Backoff { error, then } => {
                match error {
                    Some(error) => self.failed(&error, run).await,
                    None => tokio::time::sleep(run.backoff.next_delay()).await,
                }
                *then
            }
            State::Empty => self.open_watch_list(run).await,
            State::Listing => self.list(run).await,
            State::WatchListing {
                stream,
                started,
                listed,
            } => self.follow_watch_list(run, stream, started, listed).await,
            State::Watching {
                stream: None,
                progressed,
            } => self.open_watch(run, progressed).await,
            State::Watching {
                stream: Some(mut open),
                mut progressed,
            } => self.follow(run, &mut open, &mut progressed).await,
        }
    }

    /// (1) A watch-list, else (the source has none) LIST.
    async fn open_watch_list(&self, run: &mut RunState) -> State<K> {
        self.first_read(run).await;
        let opened = {
            let _permit = self.permit(&mut run.recovery).await;
            self.answered(
                &mut run.refusals,
                self.source
                    .watch_list(&self.namespace, &self.name, run.read)
                    .await,
            )
        };
        self.scouted(run, opened.as_ref().err());
        match opened {
            Ok(Some(stream)) => State::WatchListing {
                stream,
                started: Instant::now(),
                listed: None,
            },
            Ok(None) => State::Listing,
            Err(error) => {
                tracing::debug!(%error, "watch-list failed");
                State::backoff(Some(error), State::Empty)
            }
        }
    }

    /// (1) LIST, then (2) its object is the cell's and a watch follows from its version.
    async fn list(&self, run: &mut RunState) -> State<K> {
        self.first_read(run).await;
        let listed = {
            let _permit = self.permit(&mut run.recovery).await;
            self.answered(
                &mut run.refusals,
                self.source
                    .list(&self.namespace, &self.name, run.read)
                    .await,
            )
        };
        self.scouted(run, listed.as_ref().err());
        match listed {
            Err(error) => {
                tracing::debug!(%error, "list failed");
                State::backoff(Some(error), State::Empty)
            }
            // (2)
            Ok(listed) => {
                if !self.replace(listed.object.map(K::keep)) {
                    return State::Stopped;
                }
                run.resource_version = listed.resource_version;
                run.read = ReadFrom::WatchCache;
                State::Watching {
                    stream: None,
                    progressed: false,
                }
            }
        }
    }

    /// A watch-list's initial state, applied at its end (2); its stream is then followed.
    async fn follow_watch_list(
        &self,
        run: &mut RunState,
        mut stream: WatchStream<K>,
        started: Instant,
        mut listed: Option<K>,
    ) -> State<K> {
        while let Some(item) = stream.next().await {
            match item {
                Ok(WatchEvent::Applied(obj)) => listed = Some(obj),
                Ok(WatchEvent::Deleted(_)) => listed = None,
                Ok(WatchEvent::InitialEventsEnd { resource_version }) => {
                    run.resource_version = resource_version;
                    run.read = ReadFrom::WatchCache;
                    if !self.replace(listed.take().map(K::keep)) {
                        return State::Stopped;
                    }
                    // The end of the initial events is the stream's first event.
                    run.backoff.reset();
                    return State::Watching {
                        stream: Some(Open {
                            stream,
                            started,
                            saw_event: true,
                        }),
                        progressed: true,
                    };
                }
                Ok(WatchEvent::Bookmark { .. }) => {}
                Err(error) if error.is_gone() => {
                    tracing::debug!("watch expired, relisting"); // (4)
                    run.read = ReadFrom::Quorum;
                    return State::relist(false);
                }
                Err(error) => {
                    tracing::debug!(%error, "watch stream failed");
                    // The watch-list ended before its initial events did: list again.
                    return State::backoff(Some(error), State::Empty);
                }
            }
        }
        State::backoff(None, State::Empty)
    }

    /// (3) A watch from the last version (the watch-list's own stream was followed first).
    async fn open_watch(&self, run: &mut RunState, progressed: bool) -> State<K> {
        let started = Instant::now();
        if run.recovery.woken && self.history_was_forgotten() {
            tracing::debug!("the API server forgot its watch history; relisting"); // (6)
            return State::Empty;
        }
        let opened = {
            let _permit = self.permit(&mut run.recovery).await;
            self.answered(
                &mut run.refusals,
                self.source
                    .watch(&self.namespace, &self.name, &run.resource_version)
                    .await,
            )
        };
        match opened {
            Ok(stream) => State::Watching {
                stream: Some(Open {
                    stream,
                    started,
                    saw_event: false,
                }),
                progressed,
            },
            Err(error) if error.is_gone() => {
                tracing::debug!("watch expired, relisting"); // (4)
                self.expired(&run.recovery);
                run.read = ReadFrom::Quorum;
                State::relist(progressed)
            }
            Err(error) => {
                tracing::debug!(%error, "watch failed");
                State::backoff(
                    Some(error),
                    State::Watching {
                        stream: None,
                        progressed,
                    },
                ) // (5)
            }
        }
    }

    /// (3) Applies the events of an open watch until it ends or fails; returns the state that
    /// follows. The driver's followers do the same, item by item, in [`Following`].
    async fn follow(
        &self,
        run: &mut RunState,
        open: &mut Open<K>,
        progressed: &mut bool,
    ) -> State<K> {
        while let Some(item) = open.stream.next().await {
            if let Some(next) = self.apply(item, run, open, progressed) {
                return next;
            }
        }
        self.ended(run, open, *progressed, None)
    }

    /// Applies one item of an open watch (3); the state that follows when the watch is done
    /// with (410, an error, a superseded run), `None` to keep following.
    fn apply(
        &self,
        item: Result<WatchEvent<K>, SourceError>,
        run: &mut RunState,
        open: &mut Open<K>,
        progressed: &mut bool,
    ) -> Option<State<K>> {
        let applied = match item {
            Ok(WatchEvent::Applied(obj)) => {
                run.resource_version =
                    obj_rv(&obj).unwrap_or(std::mem::take(&mut run.resource_version));
                let obj = K::keep(obj);
                self.update(|s| {
                    let changed = rv::<K>(&s.object) != Some(K::kept_version(&obj));
                    s.object = Some(obj);
                    changed
                })
            }
            Ok(WatchEvent::Deleted(obj)) => {
                run.resource_version =
                    obj_rv(&obj).unwrap_or(std::mem::take(&mut run.resource_version));
                self.update(|s| s.object.take().is_some())
            }
            Ok(
                WatchEvent::Bookmark { resource_version }
                | WatchEvent::InitialEventsEnd { resource_version },
            ) => {
                run.resource_version = resource_version;
                true
            }
            Err(error) if error.is_gone() => {
                tracing::debug!("watch expired, relisting"); // (4)
                self.expired(&run.recovery);
                run.read = ReadFrom::Quorum;
                return Some(State::relist(*progressed || open.saw_event));
            }
            Err(error) => {
                tracing::debug!(%error, "watch stream failed");
                return Some(self.ended(run, open, *progressed, Some(error)));
            }
        };
        if !applied {
            return Some(State::Stopped);
        }
        open.saw_event = true;
        *progressed = true;
        run.backoff.reset();
        None
    }

    /// The state after an open watch ended (`failed`: with an error item) (3)/(5).
    fn ended(
        &self,
        run: &mut RunState,
        open: &Open<K>,
        progressed: bool,
        failed: Option<SourceError>,
    ) -> State<K> {
        let healthy = open.started.elapsed() >= SHORT_WATCH;
        let next = State::Watching {
            stream: None,
            progressed: progressed || healthy,
        };
        if let Some(error) = failed {
            State::backoff(Some(error), next) // (5)
        } else if !(open.saw_event || healthy) {
            State::backoff(None, next) // (5)
        } else {
            run.backoff.reset();
            next
        }
    }

    /// Replaces the cell's content with a listed state and marks it synced (2); `false` when
    /// the run is superseded.
    fn replace(&self, object: Option<K::Kept>) -> bool {
        self.update(|s| {
            let changed = (s.listed_once && rv::<K>(&s.object) != rv::<K>(&object))
                || std::mem::take(&mut s.waited_out);
            s.object = object;
            s.synced = true;
            s.listed_once = true;
            changed
        })
    }

    /// After a failed request: a refusal's own schedule (8), the back-off, or the shared
    /// recovery signal (6).
    async fn failed(&self, error: &SourceError, run: &mut RunState) {
        let grace = self.settings.backoff.relationship_grace;
        match run.refusals.failed(error, Instant::now(), grace) {
            Verdict::Lagging(delay) => {
                tracing::debug!(%error, ?delay, "refused for want of a relationship; retrying soon");
                match &self.settings.recovery {
                    Some(recovery) => recovery.wait_for_relationship(delay).await,
                    None => tokio::time::sleep(delay).await,
                }
                return;
            }
            Verdict::Denied { report } => {
                if report {
                    tracing::warn!(
                        object.ref = %format_args!("{}/{}", self.namespace, self.name),
                        kind = self.settings.kind,
                        %error,
                        "the API server refuses this node's watch of the object; retrying with back-off"
                    );
                }
                // A denial, not lag: the pod's other reads need not wait for it (OM-31).
                self.open_gate(run);
            }
            Verdict::Other => {}
        }
        let (backoff, rs) = (&mut run.backoff, &mut run.recovery);
        let delay = backoff.next_delay();
        let Some(recovery) = &self.settings.recovery else {
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

    /// Until the object was listed once, a read waits for its token of the first-read bucket
    /// (1), OM-30, then for its place in the window of outstanding first reads (OM-34); relists after that (a 410, a restarted server) and watches do not.
    /// Before that, it passes its pod's gate first: as the pod's scout, or once the scout
    /// opened it (OM-31).
    /// A run starts queued (`watch.rs`, its start slot); its first request, a read or not,
    /// ends that (OM-36).
    async fn first_read(&self, run: &mut RunState) {
        let listed = self
            .cell
            .upgrade()
            .is_none_or(|cell| cell.state.borrow().listed_once);
        if !listed {
            self.set_queued(true);
            if let Some(gate) = &run.gate
                && run.scout.is_none()
                && !gate.is_open()
            {
                run.scout = gate.pass().await;
            }
            self.settings.first_reads.acquire().await;
            run.place = self
                .settings
                .first_reads
                .place(&format!("first read {}", self.settings.kind))
                .await
                .map(Box::new);
        }
        self.set_queued(false);
    }

    /// Marks the first read queued (OM-36), or sent now; readers waiting for the first list
    /// see it.
    fn set_queued(&self, queued: bool) {
        let Some(cell) = self.cell.upgrade() else {
            return;
        };
        cell.state.send_if_modified(|s| {
            if s.epoch != self.epoch || s.queued == queued {
                return false;
            }
            s.queued = queued;
            if !queued {
                s.sent = Some(Instant::now());
            }
            true
        });
    }

    /// After a first read: anything but a refusal for want of a relationship opens the pod's
    /// gate (OM-31, (2)); such a refusal keeps it closed and this run its scout (3).
    fn scouted(&self, run: &mut RunState, error: Option<&SourceError>) {
        if error.is_some_and(SourceError::is_no_relationship) {
            return;
        }
        self.open_gate(run);
    }

    /// Opens the pod's gate for good, lets go of it, and gives up the scout role.
    fn open_gate(&self, run: &mut RunState) {
        if let Some(gate) = run.gate.take() {
            gate.open();
        }
        run.scout = None;
    }

    /// A resumed watch was answered 410: tells the recovery signal (6).
    fn expired(&self, rs: &RecoveryState) {
        if let Some(recovery) = &self.settings.recovery {
            recovery.saw_expired(rs.generation);
        }
    }

    /// Whether the recovery that woke this reflector found the server's watch history gone (6).
    fn history_was_forgotten(&self) -> bool {
        self.settings
            .recovery
            .as_ref()
            .is_some_and(|r| r.history_forgotten())
    }

    /// The permits a request is sent with: one of the manager's requests in flight and, when
    /// this reflector was woken by the end of an outage, a recovery permit (6). Also notes the
    /// recovery generation the request is sent at.
    async fn permit(&self, rs: &mut RecoveryState) -> Option<Permits<'_>> {
        let recovery = self.settings.recovery.as_ref()?;
        let woken = if std::mem::take(&mut rs.woken) {
            recovery.permit().await
        } else {
            None
        };
        let in_flight = recovery.in_flight().await;
        rs.generation = recovery.generation();
        Some((woken, in_flight))
    }

    /// Reports an answered request to the recovery signal (6) and, when it succeeded, ends a
    /// run of refusals (8).
    fn answered<T>(
        &self,
        refusals: &mut Refusals,
        result: Result<T, SourceError>,
    ) -> Result<T, SourceError> {
        let reached = match &result {
            Ok(_) => {
                refusals.answered();
                true
            }
            Err(error) => !Recovery::is_outage(error),
        };
        if let (true, Some(recovery)) = (reached, &self.settings.recovery) {
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
            if let Some((notify, kind)) = &self.settings.notify {
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

/// The resourceVersion of an optional kept object; `None` for a missing one.
fn rv<K: Keep>(obj: &Option<K::Kept>) -> Option<Option<&str>> {
    obj.as_ref().map(K::kept_version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::FakeSource;
    use k8s_openapi::api::core::v1::Secret;

    fn secret(value: &str) -> Secret {
        nodelet_testutil::SecretBuilder::new("", "s")
            .data("k", value)
            .build()
    }

    /// A reflector of `ns/s` over `fake`, with a plain back-off, writing into `cell`.
    fn reflector(fake: &FakeSource<Secret>, cell: &Arc<Cell<Secret>>) -> Reflector<Secret> {
        Reflector {
            source: Arc::new(fake.clone()),
            namespace: "ns".into(),
            name: "s".into(),
            cell: Arc::downgrade(cell),
            epoch: 0,
            settings: Arc::new(Settings {
                kind: "secret",
                backoff: BackoffConfig {
                    initial: Duration::from_millis(800),
                    max: Duration::from_secs(30),
                    relationship_grace: Duration::from_secs(30),
                },
                notify: None,
                recovery: None,
                driver: None,
                first_reads: ReadLimiter::unlimited(),
            }),
        }
    }

    fn run_state() -> RunState {
        RunState {
            backoff: BackoffConfig {
                initial: Duration::from_millis(800),
                max: Duration::from_secs(30),
                relationship_grace: Duration::from_secs(30),
            }
            .start(),
            recovery: RecoveryState::default(),
            refusals: Refusals::default(),
            resource_version: String::new(),
            read: ReadFrom::WatchCache,
            gate: None,
            scout: None,
            place: None,
        }
    }

    fn synced_value(cell: &Cell<Secret>) -> Option<String> {
        let s = cell.state.borrow();
        s.synced.then(|| {
            s.object
                .as_ref()
                .map(|o| Secret::load(o).unwrap())
                .and_then(|o| o.data.clone())
                .and_then(|mut d| d.remove("k"))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .unwrap_or_default()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn empty_opens_a_watch_list_whose_initial_events_end_syncs_the_cell_and_keeps_watching() {
        let fake = FakeSource::<Secret>::new();
        fake.set_watch_list(true);
        fake.apply("ns", secret("v1"));
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        let state = r.step(State::Empty, &mut run).await;
        assert_eq!(state.name(), "WatchListing");
        assert_eq!(
            synced_value(&cell),
            None,
            "not synced before the initial events end"
        );
        let state = r.step(state, &mut run).await;
        assert!(
            matches!(
                &state,
                State::Watching {
                    stream: Some(Open {
                        saw_event: true,
                        ..
                    }),
                    progressed: true
                }
            ),
            "{}",
            state.name()
        );
        assert_eq!(synced_value(&cell).as_deref(), Some("v1"));
        assert!(
            !run.resource_version.is_empty(),
            "watches resume from the end bookmark"
        );
        assert_eq!(
            fake.total(crate::source::Verb::List),
            0,
            "a watch-list needs no LIST"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_watch_lists_empty_goes_to_listing_which_syncs_and_then_opens_a_watch() {
        let fake = FakeSource::<Secret>::new();
        fake.apply("ns", secret("v1"));
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        let state = r.step(State::Empty, &mut run).await;
        assert_eq!(state.name(), "Listing");
        let state = r.step(state, &mut run).await;
        assert!(
            matches!(
                &state,
                State::Watching {
                    stream: None,
                    progressed: false
                }
            ),
            "{}",
            state.name()
        );
        assert_eq!(synced_value(&cell).as_deref(), Some("v1"));
        let state = r.step(state, &mut run).await;
        assert!(matches!(
            &state,
            State::Watching {
                stream: Some(_),
                ..
            }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_list_backs_off_and_then_starts_over_from_empty() {
        let fake = FakeSource::<Secret>::new();
        fake.fail_next(1, SourceError::status(500, "InternalError", "boom"));
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        let state = r.step(State::Listing, &mut run).await;
        let State::Backoff { error, then } = state else {
            panic!("expected Backoff, got {}", state.name());
        };
        assert!(error.is_some_and(|e| !e.is_gone()));
        assert_eq!(then.name(), "Empty");
        let state = r.step(State::Backoff { error: None, then }, &mut run).await;
        assert_eq!(state.name(), "Empty");
    }

    #[tokio::test(start_paused = true)]
    async fn a_410_relists_at_once_after_progress_and_after_a_back_off_step_without() {
        let fake = FakeSource::<Secret>::new();
        fake.apply("ns", secret("v1"));
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        let listed = r.step(State::Listing, &mut run).await;
        assert_eq!(listed.name(), "Watching");
        fake.apply("ns", secret("v2"));
        fake.compact();
        // Right after a list, nothing healthy since: one back-off step before the relist.
        let state = r
            .step(
                State::Watching {
                    stream: None,
                    progressed: false,
                },
                &mut run,
            )
            .await;
        let State::Backoff { error: None, then } = state else {
            panic!("expected a plain back-off, got {}", state.name());
        };
        assert_eq!(then.name(), "Empty");
        // After progress: at once.
        let state = r
            .step(
                State::Watching {
                    stream: None,
                    progressed: true,
                },
                &mut run,
            )
            .await;
        assert_eq!(state.name(), "Empty");
    }

    #[tokio::test(start_paused = true)]
    async fn lists_read_the_watch_cache_except_after_a_410_until_one_succeeds() {
        let fake = FakeSource::<Secret>::new();
        fake.set_watch_list(true);
        fake.apply("ns", secret("v1"));
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        // (1) The first watch-list: the cache as it is.
        let state = r.step(State::Empty, &mut run).await;
        let state = r.step(state, &mut run).await;
        assert_eq!(state.name(), "Watching");
        assert_eq!(fake.list_reads(), [ReadFrom::WatchCache]);
        // (4) A 410: the relist is consistent.
        fake.apply("ns", secret("v2"));
        fake.compact();
        let state = r
            .step(
                State::Watching {
                    stream: None,
                    progressed: true,
                },
                &mut run,
            )
            .await;
        assert_eq!(state.name(), "Empty");
        let state = r.step(state, &mut run).await;
        let state = r.step(state, &mut run).await;
        assert_eq!(synced_value(&cell).as_deref(), Some("v2"));
        assert_eq!(fake.list_reads(), [ReadFrom::WatchCache, ReadFrom::Quorum]);
        // Listed again: the next relist (after any other failure) reads the cache again.
        assert_eq!(state.name(), "Watching");
        r.step(State::Empty, &mut run).await;
        assert_eq!(
            fake.list_reads(),
            [ReadFrom::WatchCache, ReadFrom::Quorum, ReadFrom::WatchCache]
        );
    }

    fn no_relationship() -> SourceError {
        SourceError::status(
            403,
            "Forbidden",
            "secrets \"s\" is forbidden: User \"system:node:n1\" cannot watch resource \"secrets\" \
             in API group \"\" in the namespace \"ns\": no relationship found between node 'n1' \
             and this object",
        )
    }

    // Issue: after a restart, watches refused by the Node authorizer (its graph not rebuilt
    // yet) stayed in back-off for 10-27 s while the server already served them.
    #[tokio::test(start_paused = true)]
    async fn no_relationship_refusals_are_retried_soon_without_growing_the_back_off() {
        let fake = FakeSource::<Secret>::new();
        fake.set_watch_list(true);
        fake.apply("ns", secret("v1"));
        fake.fail_next(5, no_relationship());
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        let started = Instant::now();
        let mut state = State::Empty;
        while synced_value(&cell).is_none() {
            state = r.step(state, &mut run).await;
        }
        // Retries after <50, <100, <200, <400 and <800 ms; the 800 ms back-off doubling would
        // have taken 24.8 s at least.
        assert!(
            started.elapsed() < Duration::from_millis(1550),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(fake.total(crate::source::Verb::WatchList), 6);
        assert_eq!(
            run.backoff.last_delay(),
            None,
            "the back-off was never used"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_refusals_back_off_as_before() {
        let fake = FakeSource::<Secret>::new();
        fake.fail_next(
            1,
            SourceError::status(403, "Forbidden", "secrets \"s\" is forbidden"),
        );
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        let state = r.step(State::Listing, &mut run).await;
        assert_eq!(state.name(), "Backoff");
        let started = Instant::now();
        let state = r.step(state, &mut run).await;
        assert_eq!(state.name(), "Empty");
        assert!(started.elapsed() >= Duration::from_millis(800));
        assert!(run.backoff.last_delay().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_to_a_cell_a_newer_run_owns_stops_the_run() {
        let fake = FakeSource::<Secret>::new();
        fake.apply("ns", secret("v1"));
        let cell = Cell::new();
        cell.state.send_modify(|s| s.epoch = 1);
        let r = reflector(&fake, &cell);
        let mut run = run_state();
        let state = r.step(State::Listing, &mut run).await;
        assert_eq!(state.name(), "Stopped");
        assert_eq!(synced_value(&cell), None, "the stale run wrote nothing");
        drop(cell);
        let state = r.step(State::Listing, &mut run).await;
        assert_eq!(state.name(), "Stopped", "the cell is gone");
    }

    #[tokio::test]
    async fn a_followed_watch_holds_a_fraction_of_what_a_reflector_task_holds() {
        let fake = FakeSource::<Secret>::new();
        let cell = Cell::new();
        let task = reflector(&fake, &cell).run(CancellationToken::new(), None);
        let follow = driver::Follow::follow(Follow {
            reflector: reflector(&fake, &cell),
            run: run_state(),
            open: Open {
                stream: futures::stream::empty().boxed(),
                started: Instant::now(),
                saw_event: false,
            },
            progressed: false,
            cancel: CancellationToken::new(),
        });
        let (task, follow) = (size_of_val(&task), size_of_val(&follow));
        // What an idle watch costs with the driver (its follower) against a task of its own.
        assert!(
            follow * 4 < task,
            "a follower is {follow} bytes, a reflector task's future {task} bytes"
        );
    }

    #[test]
    fn an_idle_watch_s_follower_carries_no_copy_of_the_store_s_settings_and_no_room_for_a_first_read()
     {
        // 576 bytes (Secret) while each run carried its own copy of the settings and its
        // pod's gate, and the first read's place inline; a follower lives as long as its watch.
        let follower = size_of::<Following<Secret>>();
        assert!(follower <= 400, "a follower is {follower} bytes");
        assert_eq!(size_of::<Option<Box<crate::window::Place>>>(), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_lets_go_of_its_pod_s_gate_once_its_first_read_opened_it() {
        let fake = FakeSource::<Secret>::new();
        fake.set_watch_list(true);
        fake.apply("ns", secret("v1"));
        let cell = Cell::new();
        let r = reflector(&fake, &cell);
        let gate = Arc::new(PodGate::new());
        let mut run = run_state();
        run.gate = Some(gate.clone());
        let state = r.step(State::Empty, &mut run).await;
        assert_eq!(state.name(), "WatchListing");
        assert!(gate.is_open(), "the scout's answered read opens the gate");
        assert!(run.gate.is_none() && run.scout.is_none());
        assert_eq!(Arc::strong_count(&gate), 1, "nothing else holds it");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitters_within_one_step() {
        let mut b = BackoffConfig {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            relationship_grace: Duration::from_secs(30),
        }
        .start();
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
