//! mimalloc (`mimalloc` feature): its collection after a burst; no live-heap figure.
//!
//! mimalloc returns freed pages on its own after a short delay; `mi_collect(true)` after a
//! burst frees the calling thread's empty pages and purges every arena at once. Its statistics
//! count live bytes only in builds with `MI_STAT`, so the agent exposes no heap figure.

/// The selected allocator's type.
pub(crate) type Global = ::mimalloc::MiMalloc;

/// The allocator the `nodelet` binary installs:
/// `#[global_allocator] static GLOBAL: Global = allocator::GLOBAL;`.
pub(crate) const GLOBAL: Global = ::mimalloc::MiMalloc;

/// The selected allocator's name, as logged at start and in `nodelet_build_info`.
pub(crate) const NAME: &str = "mimalloc";

/// Not available cheaply: `None`.
pub(super) fn allocated_bytes() -> Option<u64> {
    None
}

/// `mi_collect(true)`; always `true` (mimalloc reports nothing).
#[expect(
    unsafe_code,
    reason = "mi_collect: mimalloc's entry point has no safe wrapper"
)]
pub(super) fn release_free_memory() -> bool {
    // SAFETY: mi_collect takes a plain flag, touches only the allocator's own state, and is
    // safe to call from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
    true
}

/// Nothing to configure: its arenas are its own business.
pub(super) fn configure() -> Option<usize> {
    None
}

pub(super) fn tune_process() -> nodelet_core::glibc_tunables::ThreadCaches {
    nodelet_core::glibc_tunables::ThreadCaches::NotApplicable
}
