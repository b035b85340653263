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
//! Three of the crate's documented `unsafe` exceptions: calls into glibc with no pointer, no
//! buffer and no precondition on the caller. Elsewhere (musl, other systems) neither exists
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

/// The glibc tunable that turns the threads' caches off.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TCACHE_OFF: &str = "glibc.malloc.tcache_count=0";

/// Set on the re-executed agent only: the operator's own `GLIBC_TUNABLES` after a `=`, or
/// nothing when there was none, so that the agent can put it back for what it starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(super) const REEXEC_MARK: &str = "NODELET_GLIBC_TUNABLES";

/// What [`tune_process`] does with the environment it finds.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Run the binary again with these `GLIBC_TUNABLES` and [`REEXEC_MARK`].
    Reexec {
        tunables: std::ffi::OsString,
        mark: std::ffi::OsString,
    },
    /// This is the re-executed agent: put the operator's `GLIBC_TUNABLES` back (or none).
    Restore(Option<std::ffi::OsString>),
    /// The operator's `GLIBC_TUNABLES` says how many chunks the caches hold: keep it.
    Keep,
}

/// The plan for `GLIBC_TUNABLES` = `tunables` and [`REEXEC_MARK`] = `mark`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn plan(tunables: Option<&std::ffi::OsStr>, mark: Option<&std::ffi::OsStr>) -> Plan {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::OsStrExt as _;
    if let Some(mark) = mark {
        let previous = mark.as_bytes().strip_prefix(b"=");
        return Plan::Restore(previous.map(|v| OsStr::from_bytes(v).to_owned()));
    }
    // `name=value` entries separated by colons.
    let sets_tcache = |t: &OsStr| {
        t.as_bytes()
            .split(|&b| b == b':')
            .any(|entry| entry.starts_with(b"glibc.malloc.tcache_count="))
    };
    match tunables {
        Some(t) if sets_tcache(t) => Plan::Keep,
        Some(t) => {
            let mut mark = OsString::from("=");
            mark.push(t);
            let mut tunables = t.to_owned();
            if !t.is_empty() {
                tunables.push(":");
            }
            tunables.push(TCACHE_OFF);
            Plan::Reexec { tunables, mark }
        }
        None => Plan::Reexec {
            tunables: TCACHE_OFF.into(),
            mark: OsString::new(),
        },
    }
}

/// Turns glibc's per-thread caches off for the agent: glibc reads its tunables only when a
/// program starts, so the agent runs its own binary again (`/proc/self/exe`, the same
/// arguments and process) with `glibc.malloc.tcache_count=0` added to `GLIBC_TUNABLES`; the
/// re-executed agent then puts the operator's own `GLIBC_TUNABLES` back, so the programs it
/// starts never see the change. An operator's `GLIBC_TUNABLES` that sets
/// `glibc.malloc.tcache_count` itself is kept as it is. Call it first in the agent, before
/// any thread starts.
///
/// Why: each thread keeps up to seven freed chunks of every small size for itself, and what
/// they hold is neither reused by other threads nor merged with its free neighbours; after a
/// node's start the arenas stayed 1.4–1.5 MiB larger with the caches than without, at the
/// same CPU (docs/memory.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "setting the process's environment: std makes it unsafe where threads may run"
)]
pub(super) fn tune_process() -> super::ThreadCaches {
    use std::os::unix::process::CommandExt as _;
    let tunables = std::env::var_os("GLIBC_TUNABLES");
    let mark = std::env::var_os(REEXEC_MARK);
    match plan(tunables.as_deref(), mark.as_deref()) {
        Plan::Keep => super::ThreadCaches::AsConfigured,
        Plan::Restore(previous) => {
            // SAFETY: called first in the agent's `main`, before the process starts any
            // thread, so nothing reads the environment while it changes.
            unsafe {
                std::env::remove_var(REEXEC_MARK);
                match previous {
                    Some(v) => std::env::set_var("GLIBC_TUNABLES", v),
                    None => std::env::remove_var("GLIBC_TUNABLES"),
                }
            }
            super::ThreadCaches::Off
        }
        Plan::Reexec { tunables, mark } => {
            let mut args = std::env::args_os();
            let arg0 = args.next().unwrap_or_else(|| "nodelet".into());
            // Returns only when the exec failed.
            let error = std::process::Command::new("/proc/self/exe")
                .arg0(arg0)
                .args(args)
                .env("GLIBC_TUNABLES", tunables)
                .env(REEXEC_MARK, mark)
                .exec();
            super::ThreadCaches::On(error)
        }
    }
}

/// Nothing to tune off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn tune_process() -> super::ThreadCaches {
    super::ThreadCaches::NotApplicable
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::ffi::{OsStr, OsString};

    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn without_tunables_the_agent_runs_again_with_the_caches_off_and_a_mark_of_none() {
        assert_eq!(
            plan(None, None),
            Plan::Reexec {
                tunables: "glibc.malloc.tcache_count=0".into(),
                mark: OsString::new(),
            }
        );
    }

    #[test]
    fn the_operators_other_tunables_are_kept_and_remembered_in_the_mark() {
        assert_eq!(
            plan(os("glibc.malloc.check=3:glibc.malloc.mmap_threshold=131072"), None),
            Plan::Reexec {
                tunables: "glibc.malloc.check=3:glibc.malloc.mmap_threshold=131072:glibc.malloc.tcache_count=0".into(),
                mark: "=glibc.malloc.check=3:glibc.malloc.mmap_threshold=131072".into(),
            }
        );
        assert_eq!(
            plan(os(""), None),
            Plan::Reexec {
                tunables: "glibc.malloc.tcache_count=0".into(),
                mark: "=".into(),
            }
        );
    }

    #[test]
    fn an_operator_who_sizes_the_caches_is_followed() {
        assert_eq!(plan(os("glibc.malloc.tcache_count=3"), None), Plan::Keep);
        assert_eq!(
            plan(os("glibc.malloc.check=3:glibc.malloc.tcache_count=7"), None),
            Plan::Keep
        );
        // Another tunable whose name only begins the same way is not that one.
        assert!(matches!(
            plan(os("glibc.malloc.tcache_count_x=1"), None),
            Plan::Reexec { .. }
        ));
    }

    #[test]
    fn the_reexecuted_agent_puts_back_what_the_operator_had() {
        let with_ours = os("glibc.malloc.tcache_count=0");
        assert_eq!(plan(with_ours, os("")), Plan::Restore(None));
        assert_eq!(
            plan(with_ours, os("=")),
            Plan::Restore(Some(OsString::new()))
        );
        assert_eq!(
            plan(
                os("glibc.malloc.check=3:glibc.malloc.tcache_count=0"),
                os("=glibc.malloc.check=3")
            ),
            Plan::Restore(Some("glibc.malloc.check=3".into()))
        );
    }
}
