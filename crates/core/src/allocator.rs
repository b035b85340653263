//! [`AllocatorHooks`]: what a program's global allocator reports to the node agent it embeds.

/// What the program's global allocator offers the agent: its name and two entry points. No
/// library of the workspace holds allocator code: the `nodelet` binary, which installs the
/// global allocator its cargo features select, hands these to the agent (its configuration's
/// `allocator`); an embedding program may hand its own, or none (no heap figure in
/// `/metrics`, no trimming).
#[derive(Debug, Clone, Copy)]
pub struct AllocatorHooks {
    /// The allocator's name, as in `nodelet_build_info{allocator}`.
    pub name: &'static str,
    /// Bytes in live allocations right now (`nodelet_heap_allocated_bytes`); `None` where the
    /// allocator does not say cheaply. Called at each `/metrics` scrape.
    pub allocated_bytes: fn() -> Option<u64>,
    /// Returns the free memory the allocator holds to the operating system; `true` when it did.
    /// Called on a blocking thread once after each burst of volume work, and every
    /// 10 s while the work goes on.
    pub release_free_memory: fn() -> bool,
}
