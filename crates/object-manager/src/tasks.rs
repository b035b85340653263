//! [`Tasks`]: the runtime, task tracker and root cancellation token every background task of a
//! manager (reflectors, the idle sweeper, the node-TTL watch) hangs off. Its own module so the
//! stores (`ttl.rs`, `watch.rs`) and the manager that owns them all depend on it, and none of
//! them on another for it.

use std::future::Future;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The runtime, task tracker and root cancellation token every background task hangs off.
#[derive(Clone)]
pub(crate) struct Tasks {
    handle: Handle,
    tracker: TaskTracker,
    pub(crate) root: CancellationToken,
}

impl Tasks {
    /// Tasks spawned on `handle`, under a fresh tracker and root token.
    pub(crate) fn new(handle: Handle) -> Self {
        Tasks {
            handle,
            tracker: TaskTracker::new(),
            root: CancellationToken::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Self::new(Handle::current())
    }

    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn_on(task, &self.handle);
    }

    /// Tasks alive right now (including ones still winding down).
    pub(crate) fn len(&self) -> usize {
        self.tracker.len()
    }

    /// Closes the tracker and waits until every tracked task has ended. Cancels nothing: cancel
    /// [`root`](Self::root) first.
    pub(crate) async fn close_and_wait(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }
}
