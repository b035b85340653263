//! [`Driver`]: one task per Watch store that follows every open watch stream.
//!
//! A reflector run spends nearly all its life at step (3) of `reflector.rs`: its watch is open
//! and nothing happens until the server sends an event. A task per run would hold, all that
//! time, a future sized for the run's largest step (the list, the back-off, the recovery
//! signal: about 1.8 KB) plus the task's own header. Instead, a run that reaches (3) hands the
//! open watch to the driver as a [`Follow`] — the reflector's settings, where the run stands
//! and the stream — and its task ends. The driver polls every follower in one task
//! (`FuturesUnordered`: only the followers whose stream was woken are polled) and applies the
//! events with the reflector's own code. When a watch ends, fails or answers 410, the follower
//! completes with the state that comes next and the driver spawns a task for it; that task
//! hands the watch back once it is open again.
//!
//! A follower ends without a task when its run is cancelled (the last pod went, the object
//! turned out immutable, idle stop, shutdown) or superseded: its stream is dropped, which
//! closes the watch on the server. The driver ends with the store's root token.
//!
//! The driver knows runs only through the traits [`Start`], [`Follow`] and [`Resume`], which
//! `reflector.rs` implements (this module imports nothing from it).
//!
//! The driver also starts the runs: a new run waits in a queue until fewer than `starting`
//! runs are between their start and their open watch, so a thousand objects registered at
//! once are a thousand small queue entries and a bounded number of tasks, not a thousand
//! tasks at once. The allocator keeps the heap at its peak, so the peak is what a node pays
//! for good.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::tasks::Tasks;

/// A new run the driver starts (`reflector.rs`: a reflector and its cancellation token).
pub(crate) trait Start: Send + 'static {
    /// The run was cancelled while queued: it is dropped unstarted.
    fn is_cancelled(&self) -> bool;
    /// Spawns the run under `tasks`; it holds `slot` until its watch is open or it ends.
    fn spawn(self, tasks: &Tasks, slot: OwnedSemaphorePermit);
}

/// An open watch the driver follows (`reflector.rs`: `Follow`).
pub(crate) trait Follow: Send + 'static {
    /// What is left of the run when the watch ended or failed.
    type Resume: Resume;
    /// The follower: `None` when the run was cancelled or superseded.
    type Future: Future<Output = Option<Self::Resume>> + Send;
    fn follow(self) -> Self::Future;
}

/// The rest of a run whose watch ended (`reflector.rs`: `Resume`).
pub(crate) trait Resume: Send + 'static {
    /// Goes on with the run in a task of its own.
    fn spawn(self, tasks: &Tasks);
}

/// A handle on the driver task of one store: where runs start and park their open watches.
pub(crate) struct Driver<S, F> {
    inbox: mpsc::UnboundedSender<Message<S, F>>,
    following: Arc<AtomicUsize>,
}

impl<S, F> Clone for Driver<S, F> {
    fn clone(&self) -> Self {
        Driver {
            inbox: self.inbox.clone(),
            following: self.following.clone(),
        }
    }
}

/// What the driver task is handed.
enum Message<S, F> {
    /// A new run, to be started when a start slot is free.
    Start(S),
    /// An open watch, to be followed.
    Follow(Counted<F>),
}

/// A follower, counted in [`Driver::len`] from the moment it is handed over until it is done
/// or dropped.
struct Counted<F> {
    follow: F,
    count: CountGuard,
}

pin_project_lite::pin_project! {
    /// A follower's future and its count, dropped together.
    struct Counting<G> {
        #[pin]
        following: G,
        _count: CountGuard,
    }
}

impl<G: Future> Future for Counting<G> {
    type Output = G::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().following.poll(cx)
    }
}

struct CountGuard(Arc<AtomicUsize>);

impl Drop for CountGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<S: Start, F: Follow> Driver<S, F> {
    /// Starts the driver task under `tasks`, with at most `starting` runs between their start
    /// and their open watch at once; it ends when `tasks.root` is cancelled.
    pub(crate) fn spawn(tasks: &Tasks, starting: usize) -> Self {
        let (inbox, receiver) = mpsc::unbounded_channel();
        let slots = Arc::new(Semaphore::new(starting.max(1)));
        tasks.spawn(drive(receiver, tasks.clone(), slots));
        Driver {
            inbox,
            following: Arc::default(),
        }
    }

    /// Queues a new run, started when a start slot is free unless it was cancelled by then.
    pub(crate) fn start(&self, run: S) {
        // A closed channel: the driver ended with the root token, and the run with it.
        let _ = self.inbox.send(Message::Start(run));
    }

    /// Hands an open watch to the driver. After shutdown the follower is dropped, which closes
    /// its watch.
    pub(crate) fn follow(&self, follow: F) {
        self.following.fetch_add(1, Ordering::Relaxed);
        let counted = Counted {
            follow,
            count: CountGuard(self.following.clone()),
        };
        // A closed channel: the driver ended with the root token; dropping is the stop.
        let _ = self.inbox.send(Message::Follow(counted));
    }

    /// Watches followed by the driver right now (handed over and not yet done).
    pub(crate) fn len(&self) -> usize {
        self.following.load(Ordering::Relaxed)
    }
}

/// Hands back most of the queue's room once it is mostly empty: a node's first thousand
/// watches queue at once for their start slots (114 KB for a thousand runs), and the queue
/// would keep that room for the agent's life.
fn shrink_when_sparse<T>(queue: &mut VecDeque<T>) {
    if queue.capacity() > 64 && queue.len() * 4 < queue.capacity() {
        queue.shrink_to(queue.len() * 2);
    }
}

/// The driver task: starts queued runs as start slots free up, follows every parked watch, and
/// spawns a task for each run whose watch ended.
async fn drive<S: Start, F: Follow>(
    mut inbox: mpsc::UnboundedReceiver<Message<S, F>>,
    tasks: Tasks,
    slots: Arc<Semaphore>,
) {
    let mut following = FuturesUnordered::new();
    let mut queued: VecDeque<S> = VecDeque::new();
    let mut open = true;
    loop {
        // Runs cancelled while queued (their pod went already) are dropped unstarted.
        while queued.front().is_some_and(Start::is_cancelled) {
            queued.pop_front();
        }
        tokio::select! {
            biased;
            _ = tasks.root.cancelled() => return,
            Some(done) = following.next(), if !following.is_empty() => {
                let done: Option<F::Resume> = done;
                if let Some(resume) = done {
                    resume.spawn(&tasks);
                }
            }
            Ok(slot) = slots.clone().acquire_owned(), if !queued.is_empty() => {
                if let Some(run) = queued.pop_front() {
                    run.spawn(&tasks, slot);
                }
                shrink_when_sparse(&mut queued);
            }
            received = inbox.recv(), if open => match received {
                Some(Message::Start(run)) => queued.push_back(run),
                Some(Message::Follow(Counted { follow, count })) => following.push(Counting {
                    following: follow.follow(),
                    _count: count,
                }),
                None => open = false,
            },
            else => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_queue_gives_its_room_back_and_a_small_one_is_left_alone() {
        let mut queue: VecDeque<[u8; 112]> = (0..1000).map(|_| [0; 112]).collect();
        let full = queue.capacity();
        while queue.len() > 10 {
            queue.pop_front();
            shrink_when_sparse(&mut queue);
        }
        assert!(queue.capacity() <= 64, "{} of {full}", queue.capacity());
        assert!(queue.capacity() >= 10);

        let mut small: VecDeque<u8> = VecDeque::with_capacity(64);
        small.push_back(1);
        shrink_when_sparse(&mut small);
        assert!(small.capacity() >= 64);
    }
}
