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
use kube::Resource;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::reflector::{Follow, Following, Reflector, Resume};
use crate::tasks::Tasks;

/// A handle on the driver task of one store: where reflector runs start and park their open
/// watches.
pub(crate) struct Driver<K> {
    inbox: mpsc::UnboundedSender<Message<K>>,
    following: Arc<AtomicUsize>,
}

impl<K> Clone for Driver<K> {
    fn clone(&self) -> Self {
        Driver {
            inbox: self.inbox.clone(),
            following: self.following.clone(),
        }
    }
}

/// What the driver task is handed.
enum Message<K> {
    /// A new run, to be started when a start slot is free.
    Start(Reflector<K>, CancellationToken),
    /// An open watch, to be followed.
    Follow(Counted<K>),
}

/// A follower, counted in [`Driver::len`] from the moment it is handed over until it is done
/// or dropped.
struct Counted<K> {
    follow: Follow<K>,
    count: CountGuard,
}

pin_project_lite::pin_project! {
    /// A follower's future and its count, dropped together.
    struct Counting<K> {
        #[pin]
        following: Following<K>,
        _count: CountGuard,
    }
}

impl<K: Resource + Send + Sync + 'static> Future for Counting<K> {
    type Output = Option<Resume<K>>;

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

impl<K: Resource + Send + Sync + 'static> Driver<K> {
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

    /// Queues a new run of `reflector`, started when a start slot is free unless `cancel` fired
    /// by then.
    pub(crate) fn start(&self, reflector: Reflector<K>, cancel: CancellationToken) {
        // A closed channel: the driver ended with the root token, and the run with it.
        let _ = self.inbox.send(Message::Start(reflector, cancel));
    }

    /// Hands an open watch to the driver. After shutdown the follower is dropped, which closes
    /// its watch.
    pub(crate) fn follow(&self, follow: Follow<K>) {
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

/// The driver task: starts queued runs as start slots free up, follows every parked watch, and
/// spawns a task for each run whose watch ended.
async fn drive<K: Resource + Send + Sync + 'static>(
    mut inbox: mpsc::UnboundedReceiver<Message<K>>,
    tasks: Tasks,
    slots: Arc<Semaphore>,
) {
    let mut following = FuturesUnordered::new();
    let mut queued: VecDeque<(Reflector<K>, CancellationToken)> = VecDeque::new();
    let mut open = true;
    loop {
        // Runs cancelled while queued (their pod went already) are dropped unstarted.
        while queued
            .front()
            .is_some_and(|(_, cancel)| cancel.is_cancelled())
        {
            queued.pop_front();
        }
        tokio::select! {
            biased;
            _ = tasks.root.cancelled() => return,
            Some(done) = following.next(), if !following.is_empty() => {
                let done: Option<Resume<K>> = done;
                if let Some(resume) = done {
                    resume.spawn(&tasks);
                }
            }
            Ok(slot) = slots.clone().acquire_owned(), if !queued.is_empty() => {
                if let Some((reflector, cancel)) = queued.pop_front() {
                    // The slot is held until the run parks its open watch or ends.
                    tasks.spawn(async move {
                        reflector.run(cancel).await;
                        drop(slot);
                    });
                }
            }
            received = inbox.recv(), if open => match received {
                Some(Message::Start(reflector, cancel)) => queued.push_back((reflector, cancel)),
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
