//! What the program's global allocator tells the agent ([`AllocatorHooks`], installed by the
//! binary, which alone chooses the allocator), and returning to the operating system the
//! memory a burst of work freed.
//!
//! An allocator keeps freed memory for reuse: glibc's keeps what a thread freed in that
//! thread's arena and gives back only the free space at an arena's top, so after a burst (a
//! node's first thousand volumes, a relist after an API server restart) the agent stays
//! resident at the burst's high-water mark: at 1,000 watched objects about 16 MiB of its RSS
//! was memory already freed. Once the volume manager has been quiet for [`QUIET`], the
//! allocator is asked once to hand those pages back
//! ([`AllocatorHooks::release_free_memory`]; the `nodelet` binary's are glibc's
//! `malloc_trim(0)`, jemalloc's purge, mimalloc's collect); live allocations are untouched.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What the program's global allocator offers the agent: its name and two entry points. The
/// library holds no allocator code: the `nodelet` binary, which installs the global allocator
/// its cargo features select, hands these to the agent ([`AgentConfig::allocator`]); an
/// embedding program may hand its own, or none (no heap figure in `/metrics`, no trimming).
///
/// [`AgentConfig::allocator`]: crate::AgentConfig::allocator
#[derive(Debug, Clone, Copy)]
pub struct AllocatorHooks {
    /// The allocator's name, as in `nodelet_build_info{allocator}`.
    pub name: &'static str,
    /// Bytes in live allocations right now (`nodelet_heap_allocated_bytes`); `None` where the
    /// allocator does not say cheaply. Called at each `/metrics` scrape.
    pub allocated_bytes: fn() -> Option<u64>,
    /// Returns the free memory the allocator holds to the operating system; `true` when it did.
    /// Called on a blocking thread once after each burst of volume work.
    pub release_free_memory: fn() -> bool,
}

/// How long the volume manager must have been quiet before memory is trimmed.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// Calls `trim` (in the agent [`AllocatorHooks::release_free_memory`]) once after each burst of
/// volume-manager activity (`activity` bumps on every change of its desired or actual state),
/// when nothing changed for [`QUIET`]. Runs until `shutdown` or until the volume manager is
/// gone.
pub(crate) async fn trim_after_bursts(
    mut activity: watch::Receiver<u64>,
    shutdown: CancellationToken,
    trim: fn() -> bool,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = activity.changed() => if changed.is_err() { return },
        }
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = activity.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(QUIET) => break,
            }
        }
        // The trim walks every arena: a blocking thread, not a runtime worker.
        let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
        tracing::debug!(released, "freed memory returned to the operating system");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static TRIMS: AtomicUsize = AtomicUsize::new(0);

    fn count_trim() -> bool {
        TRIMS.fetch_add(1, Ordering::SeqCst);
        true
    }

    #[tokio::test(start_paused = true)]
    async fn trims_once_per_burst_after_a_quiet_second_and_stops_with_the_agent() {
        let (tx, rx) = watch::channel(0u64);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(trim_after_bursts(rx, shutdown.clone(), count_trim));
        tokio::time::sleep(QUIET * 3).await;
        assert_eq!(TRIMS.load(Ordering::SeqCst), 0, "no activity, no trim");
        for _ in 0..5 {
            tx.send_modify(|n| *n += 1);
            tokio::time::sleep(QUIET / 2).await;
        }
        assert_eq!(
            TRIMS.load(Ordering::SeqCst),
            0,
            "not while the burst goes on"
        );
        tokio::time::sleep(QUIET * 3).await;
        assert_eq!(TRIMS.load(Ordering::SeqCst), 1, "once, after the burst");
        tx.send_modify(|n| *n += 1);
        tokio::time::sleep(QUIET * 3).await;
        assert_eq!(
            TRIMS.load(Ordering::SeqCst),
            2,
            "once more after the next burst"
        );
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .unwrap_or_else(|_| panic!("the trim task did not stop"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
