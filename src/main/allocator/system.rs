//! The system allocator (glibc's `malloc`): its live-heap figure and its trim.
//!
//! glibc keeps what a thread freed in that thread's arena and gives back on its own only the
//! free space at an arena's top, so after a burst a process stays resident at the burst's
//! high-water mark: `malloc_trim(0)` hands the free pages of every arena back (`madvise`).
//!
//! glibc also gives each thread that meets a locked arena a new one, up to 8 per CPU: the
//! agent's 32 blocking threads (writes, fsyncs) spread one burst over 16 arenas on a 2-core
//! node, each keeping its own free space. [`configure`] caps them at one per CPU before any
//! thread starts (1–2 MiB less RSS at 1,000 watched objects, no CPU or latency cost measured),
//! unless `MALLOC_ARENA_MAX` is set, which glibc then follows.
//!
//! Four of the crate's documented `unsafe` exceptions: calls into glibc with no pointer, no
//! buffer and no precondition on the caller, and the environment set before threads exist. Elsewhere (musl, other systems) neither exists
//! and both functions say so.

/// The selected allocator's type: the system's, or `dhat::Alloc` over it (`dhat-heap`).
#[cfg(not(feature = "dhat-heap"))]
pub(crate) type Global = std::alloc::System;
/// The selected allocator's type: the system's, or `dhat::Alloc` over it (`dhat-heap`).
#[cfg(feature = "dhat-heap")]
pub(crate) type Global = dhat::Alloc;

/// The allocator the `nodelet` binary installs:
/// `#[global_allocator] static GLOBAL: Global = allocator::GLOBAL;`.
#[cfg(not(feature = "dhat-heap"))]
pub(crate) const GLOBAL: Global = std::alloc::System;
/// The allocator the `nodelet` binary installs:
/// `#[global_allocator] static GLOBAL: Global = allocator::GLOBAL;`.
#[cfg(feature = "dhat-heap")]
pub(crate) const GLOBAL: Global = dhat::Alloc;

/// The selected allocator's name, as logged at start and in `nodelet_build_info`.
pub(crate) const NAME: &str = if cfg!(feature = "dhat-heap") {
    "dhat (over system glibc)"
} else {
    "system (glibc)"
};

/// `uordblks + hblkhd` of `mallinfo2()`: bytes in chunks in use in every arena plus the
/// `mmap`ped ones (allocations of 128 KiB and more). Walks every arena under its lock.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "mallinfo2: glibc's entry point has no safe wrapper"
)]
pub(super) fn allocated_bytes() -> Option<u64> {
    // SAFETY: mallinfo2 takes no argument and returns a struct by value; it reads the
    // allocator's own state under its locks and is safe to call from any thread at any time
    // (glibc 2.33 and later, which the binary links against).
    let info = unsafe { libc::mallinfo2() };
    u64::try_from(info.uordblks.saturating_add(info.hblkhd)).ok()
}

/// No `mallinfo2` off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn allocated_bytes() -> Option<u64> {
    None
}

/// `malloc_trim(0)`: `true` when glibc released some pages.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "malloc_trim: glibc's entry point has no safe wrapper"
)]
pub(super) fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes a plain size (the padding to keep, 0 here), touches only the
    // allocator's own state under its locks, and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) != 0 }
}

/// Nothing to do off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn release_free_memory() -> bool {
    false
}

/// Caps glibc's arenas at one per CPU (`mallopt(M_ARENA_MAX)`), unless `MALLOC_ARENA_MAX` is
/// set. Returns the cap set. Call it before the process starts threads.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "mallopt: glibc's entry point has no safe wrapper"
)]
pub(super) fn configure() -> Option<usize> {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return None;
    }
    let arenas = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let cap = libc::c_int::try_from(arenas).ok()?;
    // SAFETY: mallopt takes two plain integers and changes a limit in the allocator's own
    // state under its lock; any value is accepted (arenas already made stay).
    let set = unsafe { libc::mallopt(libc::M_ARENA_MAX, cap) } == 1;
    set.then_some(arenas)
}

/// Nothing to configure off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn configure() -> Option<usize> {
    None
}

/// glibc's per-thread caches off (`nodelet_core::glibc_tunables`; docs/memory.md): first thing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(unsafe_code, reason = "std makes setting the environment unsafe")]
pub(super) fn tune_process() -> nodelet_core::glibc_tunables::ThreadCaches {
    use nodelet_core::glibc_tunables::{Plan, REEXEC_MARK, ThreadCaches, plan, reexec};
    let tunables = std::env::var_os("GLIBC_TUNABLES");
    let mark = std::env::var_os(REEXEC_MARK);
    match plan(tunables.as_deref(), mark.as_deref()) {
        Plan::Keep => ThreadCaches::AsConfigured,
        Plan::Reexec { tunables, mark } => ThreadCaches::On(reexec(&tunables, &mark)),
        // SAFETY: no thread exists yet: nothing reads the environment while it changes.
        Plan::Restore(previous) => unsafe {
            std::env::remove_var(REEXEC_MARK);
            match previous {
                Some(v) => std::env::set_var("GLIBC_TUNABLES", v),
                None => std::env::remove_var("GLIBC_TUNABLES"),
            }
            ThreadCaches::Off
        },
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn tune_process() -> nodelet_core::glibc_tunables::ThreadCaches {
    nodelet_core::glibc_tunables::ThreadCaches::NotApplicable
}
