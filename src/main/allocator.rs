//! The binary's global allocator, as the cargo features select it, and the two things the
//! agent asks of it through [`hooks`] (`nodelet_core::AllocatorHooks`): the bytes held by live
//! allocations (`nodelet_heap_allocated_bytes` in `/metrics`) and giving the memory a burst
//! freed back to the operating system. The library holds none of this: only the binary
//! compiles this module.
//!
//! | feature | allocator ([`NAME`]) | live heap | after a burst |
//! | --- | --- | --- | --- |
//! | none (default) | the system's: glibc `malloc`, one arena per CPU ([`configure`]), no per-thread caches ([`tune_process`]) | `mallinfo2()`: `uordblks + hblkhd` | `malloc_trim(0)` |
//! | `jemalloc` | jemalloc (`tikv-jemallocator`) | `stats.allocated` after `epoch` | `arena.<all>.purge` |
//! | `mimalloc` | mimalloc | not exposed | `mi_collect(true)` |
//! | `dhat-heap` | `dhat::Alloc` over the system's | as the system's (dhat's own tables included) | as the system's |
//!
//! When several are enabled (`--all-features`), one wins by a fixed priority: `dhat-heap`,
//! then `jemalloc`, then `mimalloc`; the others are linked and unused.
//!
//! `main.rs` installs [`GLOBAL`] as the `#[global_allocator]` (the binary's unit tests
//! below measure it too) and hands [`hooks`] to the agent.
//!
//! Each allocator's entry points live in a child module; the ones without a safe wrapper are
//! the crate's documented `unsafe` exceptions (`system.rs`, `jemalloc.rs`, `mimalloc.rs`).

// One module per allocator, chosen once here; each defines `Global`, `GLOBAL` and `NAME` and
// the four functions below.
#[cfg(any(
    feature = "dhat-heap",
    not(any(feature = "jemalloc", feature = "mimalloc"))
))]
#[path = "allocator/system.rs"]
mod selected;

#[cfg(all(feature = "jemalloc", not(feature = "dhat-heap")))]
#[path = "allocator/jemalloc.rs"]
mod selected;

#[cfg(all(
    feature = "mimalloc",
    not(any(feature = "dhat-heap", feature = "jemalloc"))
))]
#[path = "allocator/mimalloc.rs"]
mod selected;

pub(crate) use self::selected::{GLOBAL, Global, NAME};

/// What the agent asks of the selected allocator.
pub(crate) fn hooks() -> nodelet_core::AllocatorHooks {
    nodelet_core::AllocatorHooks {
        name: NAME,
        allocated_bytes,
        release_free_memory,
    }
}

/// Settles the selected allocator's configuration; call it first in `main`, before any thread
/// starts. glibc: at most one arena per CPU unless `MALLOC_ARENA_MAX` says otherwise (returns
/// the cap set); the others: nothing (`None`).
pub(crate) fn configure() -> Option<usize> {
    selected::configure()
}

/// First in the agent: glibc's per-thread caches off (runs the agent again, `system.rs`).
pub(crate) fn tune_process() -> nodelet_core::glibc_tunables::ThreadCaches {
    selected::tune_process()
}

/// Bytes in live allocations right now, as the selected allocator counts them (rounded up to
/// its size classes); `None` where it does not say cheaply (mimalloc, a libc other than glibc).
pub(crate) fn allocated_bytes() -> Option<u64> {
    selected::allocated_bytes()
}

/// Asks the selected allocator to return the free memory it holds to the operating system;
/// `true` when it did (glibc: released some pages; jemalloc, mimalloc: the call succeeded).
/// May walk every arena under its lock: call it from a blocking thread.
pub(crate) fn release_free_memory() -> bool {
    selected::release_free_memory()
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;

    /// The tests below measure the whole process's heap: one at a time.
    static HEAP: Mutex<()> = Mutex::new(());

    // glibc gets one arena per CPU unless MALLOC_ARENA_MAX is set (then glibc follows it).
    #[cfg(all(
        target_os = "linux",
        target_env = "gnu",
        not(any(feature = "jemalloc", feature = "mimalloc"))
    ))]
    #[test]
    fn glibc_is_capped_at_one_arena_per_cpu_unless_the_environment_says() {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let expected = std::env::var_os("MALLOC_ARENA_MAX")
            .is_none()
            .then_some(cpus);
        assert_eq!(configure(), expected);
    }

    #[test]
    fn the_name_says_which_allocator_the_features_chose() {
        let expected = if cfg!(feature = "dhat-heap") {
            "dhat (over system glibc)"
        } else if cfg!(feature = "jemalloc") {
            "jemalloc"
        } else if cfg!(feature = "mimalloc") {
            "mimalloc"
        } else {
            "system (glibc)"
        };
        assert_eq!(NAME, expected);
    }

    #[test]
    fn the_live_heap_grows_by_what_is_allocated_and_shrinks_when_it_is_freed() {
        let _heap = HEAP.lock();
        let mimalloc =
            cfg!(feature = "mimalloc") && !cfg!(any(feature = "jemalloc", feature = "dhat-heap"));
        let reports = !mimalloc
            && (cfg!(feature = "jemalloc") || cfg!(all(target_os = "linux", target_env = "gnu")));
        let Some(before) = allocated_bytes() else {
            assert!(!reports, "{NAME} gives no live-heap figure");
            return;
        };
        assert!(before > 0, "the test harness itself has allocated");
        // 32 MiB in 64 KiB blocks, written so that no allocator can skip them.
        let blocks: Vec<Vec<u8>> = (0..512).map(|i| vec![i as u8; 64 * 1024]).collect();
        let during = allocated_bytes().unwrap_or(0);
        // Other tests of the crate allocate concurrently: a margin of 8 MiB either way.
        assert!(
            during >= before + 24 * 1024 * 1024,
            "{before} -> {during} bytes with 32 MiB more live"
        );
        assert_eq!(blocks.iter().map(Vec::len).sum::<usize>(), 32 * 1024 * 1024);
        drop(blocks);
        let after = allocated_bytes().unwrap_or(0);
        assert!(
            after + 24 * 1024 * 1024 <= during,
            "{during} -> {after} bytes after freeing 32 MiB"
        );
    }

    #[test]
    fn releasing_free_memory_leaves_live_allocations_intact() {
        let _heap = HEAP.lock();
        // A burst on another thread (its own arena or thread cache): every other 64 KiB block
        // freed, so the free space sits between live blocks.
        let kept = std::thread::spawn(|| {
            let mut blocks: Vec<Option<Vec<u8>>> =
                (0..256).map(|i| Some(vec![i as u8; 64 * 1024])).collect();
            for (i, b) in blocks.iter_mut().enumerate() {
                if i % 2 == 0 {
                    *b = None;
                }
            }
            blocks
        })
        .join()
        .unwrap_or_else(|_| panic!("the burst thread panicked"));
        assert!(
            release_free_memory() || !cfg!(all(target_os = "linux", target_env = "gnu")),
            "8 MiB free inside an arena: memory comes back"
        );
        assert_eq!(kept.iter().flatten().count(), 128, "live blocks untouched");
        for (i, b) in kept.iter().enumerate() {
            if let Some(b) = b {
                assert!(b.len() == 64 * 1024 && b.iter().all(|&x| x == i as u8));
            }
        }
    }
}
