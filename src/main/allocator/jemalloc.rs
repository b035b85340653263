//! jemalloc (`jemalloc` feature): its live-heap figure and its purge.
//!
//! jemalloc returns freed pages on its own as they age (`dirty_decay_ms`, 10 s), but only when
//! the allocator is next used, and the agent is idle after a burst: `arena.<all>.purge` after
//! each burst returns them at once, as `malloc_trim` does for glibc.

/// The selected allocator's type.
pub(crate) type Global = tikv_jemallocator::Jemalloc;

/// The allocator the `nodelet` binary installs:
/// `#[global_allocator] static GLOBAL: Global = allocator::GLOBAL;`.
pub(crate) const GLOBAL: Global = tikv_jemallocator::Jemalloc;

/// The selected allocator's name, as logged at start and in `nodelet_build_info`.
pub(crate) const NAME: &str = "jemalloc";

use std::ptr;

/// `arena.<MALLCTL_ARENAS_ALL>.purge` (`MALLCTL_ARENAS_ALL` is 4096 in jemalloc 5).
const PURGE_ALL_ARENAS: &[u8] = b"arena.4096.purge\0";

/// `stats.allocated` after advancing `epoch` (the statistics are a snapshot refreshed by it):
/// bytes in allocations the program holds, rounded up to jemalloc's size classes.
pub(super) fn allocated_bytes() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    let bytes = tikv_jemalloc_ctl::stats::allocated::read().ok()?;
    u64::try_from(bytes).ok()
}

/// Purges the unused dirty pages of every arena; `true` when jemalloc accepted the call.
#[expect(
    unsafe_code,
    reason = "arena.<i>.purge takes no value, which tikv-jemalloc-ctl cannot express"
)]
pub(super) fn release_free_memory() -> bool {
    // SAFETY: the name is a NUL-terminated string; a purge reads and writes no value, so every
    // pointer is null and the length 0, as mallctl(3) requires for it. It takes the arenas'
    // own locks and is safe from any thread.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL_ARENAS.as_ptr().cast(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        )
    };
    rc == 0
}

/// Nothing to configure: its arenas are its own business.
pub(super) fn configure() -> Option<usize> {
    None
}

pub(super) fn tune_process() -> nodelet_core::glibc_tunables::ThreadCaches {
    nodelet_core::glibc_tunables::ThreadCaches::NotApplicable
}
