//! Returning to the operating system the memory a burst of volume work freed, through what the
//! program's global allocator offers ([`AllocatorHooks`], installed by the binary, which
//! alone chooses the allocator).
//!
//! An allocator keeps freed memory for reuse: glibc's keeps what a thread freed in that
//! thread's arena and gives back only the free space at an arena's top, so after a burst (a
//! node's first thousand volumes, a relist after an API server restart) the agent stays
//! resident at the burst's high-water mark: at 1,000 watched objects about 16 MiB of its RSS
//! was memory already freed. Once the volume manager has been quiet for [`QUIET`], the
//! allocator is asked once to hand those pages back
//! ([`AllocatorHooks::release_free_memory`]; the `nodelet` binary's are glibc's
//! `malloc_trim(0)`, jemalloc's purge, mimalloc's collect); live allocations are untouched.
//!
//! Under steady pod churn the volume manager is never quiet for a second, and the freed pages
//! piled up (RSS +185 KiB/min over a 30-minute churn): while it stays busy the allocator is
//! asked every [`BUSY_TRIM_EVERY`] too. A glibc trim of the agent's heap under churn takes
//! about half a millisecond, 0.012 % of a core at one per 10 s (docs/memory.md, "Trimming
//! under churn").

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use nodelet_core::AllocatorHooks;

/// How long the volume manager must have been quiet before memory is trimmed.
pub const QUIET: Duration = Duration::from_secs(1);

/// While the volume manager stays busy (never [`QUIET`]), memory is trimmed this long after the
/// first change since the last trim.
pub const BUSY_TRIM_EVERY: Duration = Duration::from_secs(10);

/// Calls `trim` (in the agent [`AllocatorHooks::release_free_memory`]) after volume-manager
/// activity (`activity`, from [`VolumeManager::subscribe`](crate::VolumeManager::subscribe), bumps on every change of its desired or actual state): once nothing
/// changed for [`QUIET`], or [`BUSY_TRIM_EVERY`] after the first change since the last trim,
/// whichever comes first. Without activity, no trim. Runs until `shutdown` or until the volume
/// manager is gone.
pub async fn trim_after_bursts(
    mut activity: watch::Receiver<u64>,
    shutdown: CancellationToken,
    trim: fn() -> bool,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = activity.changed() => if changed.is_err() { return },
        }
        let busy_until = tokio::time::Instant::now() + BUSY_TRIM_EVERY;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = activity.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(QUIET) => break,
                () = tokio::time::sleep_until(busy_until) => break,
            }
        }
        // The trim walks every arena: a blocking thread, not a runtime worker.
        let took = std::time::Instant::now();
        let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
        tracing::debug!(
            released,
            took_us = took.elapsed().as_micros() as u64,
            "freed memory returned to the operating system"
        );
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

    static BUSY_TRIMS: AtomicUsize = AtomicUsize::new(0);

    fn count_busy_trim() -> bool {
        BUSY_TRIMS.fetch_add(1, Ordering::SeqCst);
        true
    }

    // Steady churn: a change every half second for a minute, never a quiet second.
    #[tokio::test(start_paused = true)]
    async fn trims_every_ten_seconds_while_the_volume_manager_never_goes_quiet() {
        let (tx, rx) = watch::channel(0u64);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(trim_after_bursts(rx, shutdown.clone(), count_busy_trim));
        let busy = Duration::from_secs(60);
        let step = QUIET / 2;
        for _ in 0..busy.as_millis() / step.as_millis() {
            tx.send_modify(|n| *n += 1);
            tokio::time::sleep(step).await;
        }
        let trims = BUSY_TRIMS.load(Ordering::SeqCst);
        let most = (busy.as_secs() / BUSY_TRIM_EVERY.as_secs()) as usize;
        assert!(
            (most - 1..=most).contains(&trims),
            "{trims} trims in {busy:?} of churn"
        );
        tokio::time::sleep(QUIET * 3).await;
        assert_eq!(
            BUSY_TRIMS.load(Ordering::SeqCst),
            trims + 1,
            "once more when the churn stops"
        );
        tokio::time::sleep(BUSY_TRIM_EVERY * 3).await;
        assert_eq!(
            BUSY_TRIMS.load(Ordering::SeqCst),
            trims + 1,
            "no activity, no trim"
        );
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .unwrap_or_else(|_| panic!("the trim task did not stop"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
