//! glibc's tunables (`GLIBC_TUNABLES`), which glibc reads only when a program starts: how a
//! program turns its allocator's per-thread caches off for itself by running its own binary
//! again with one more tunable, and puts the operator's `GLIBC_TUNABLES` back afterwards so
//! that nothing it starts inherits the change. The `nodelet` binary does this first thing in
//! the agent (`src/main/allocator/system.rs`); the environment itself is the caller's to set.
//!
//! ```
//! use nodelet_core::glibc_tunables::{plan, Plan};
//! // No tunables yet: run again with the caches off, remembering that there were none.
//! assert_eq!(
//!     plan(None, None),
//!     Plan::Reexec { tunables: "glibc.malloc.tcache_count=0".into(), mark: "".into() }
//! );
//! // An operator who sizes the caches is followed.
//! assert_eq!(plan(Some("glibc.malloc.tcache_count=3".as_ref()), None), Plan::Keep);
//! ```

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;

/// The tunable that turns glibc's per-thread caches (tcache) off.
pub const TCACHE_OFF: &str = "glibc.malloc.tcache_count=0";

/// Set on the re-executed program only: the operator's own `GLIBC_TUNABLES` after a `=`, or
/// empty when there was none.
pub const REEXEC_MARK: &str = "NODELET_GLIBC_TUNABLES";

/// What to do with the `GLIBC_TUNABLES` and [`REEXEC_MARK`] a program started with.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Run the program again ([`reexec`]) with these `GLIBC_TUNABLES` and [`REEXEC_MARK`].
    Reexec {
        /// The operator's tunables (if any) and [`TCACHE_OFF`].
        tunables: OsString,
        /// [`REEXEC_MARK`]'s value.
        mark: OsString,
    },
    /// This is the re-executed program: set `GLIBC_TUNABLES` back to this (unset it for
    /// `None`) and unset [`REEXEC_MARK`].
    Restore(Option<OsString>),
    /// The operator's `GLIBC_TUNABLES` sizes the caches itself: leave everything as it is.
    Keep,
}

/// The plan for a program started with `GLIBC_TUNABLES` = `tunables` and [`REEXEC_MARK`] =
/// `mark` (`None`: unset).
pub fn plan(tunables: Option<&OsStr>, mark: Option<&OsStr>) -> Plan {
    if let Some(mark) = mark {
        let previous = mark.as_bytes().strip_prefix(b"=");
        return Plan::Restore(previous.map(|v| OsStr::from_bytes(v).to_owned()));
    }
    // `name=value` entries separated by colons.
    let sizes_caches = |t: &OsStr| {
        t.as_bytes()
            .split(|&b| b == b':')
            .any(|entry| entry.starts_with(b"glibc.malloc.tcache_count="))
    };
    match tunables {
        Some(t) if sizes_caches(t) => Plan::Keep,
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

/// Replaces the running program by its own binary (`/proc/self/exe`: the same process,
/// arguments and open files) with `GLIBC_TUNABLES` = `tunables` and [`REEXEC_MARK`] = `mark`.
/// Returns only when that failed, with the reason.
pub fn reexec(tunables: &OsStr, mark: &OsStr) -> std::io::Error {
    use std::os::unix::process::CommandExt as _;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "nodelet".into());
    std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .env(REEXEC_MARK, mark)
        .exec()
}

/// What became of glibc's per-thread caches when a program started.
#[derive(Debug)]
pub enum ThreadCaches {
    /// Off: the program runs with [`TCACHE_OFF`] (it re-executed itself with it).
    Off,
    /// As the operator's `GLIBC_TUNABLES` sizes them.
    AsConfigured,
    /// On, as glibc's default: running the program again failed.
    On(std::io::Error),
    /// Another allocator than glibc's: nothing to tune.
    NotApplicable,
}

impl std::fmt::Display for ThreadCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::AsConfigured => f.write_str("as GLIBC_TUNABLES sets them"),
            Self::On(e) => write!(
                f,
                "on (running the agent again to turn them off failed: {e})"
            ),
            Self::NotApplicable => f.write_str("not glibc's"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn without_tunables_the_program_runs_again_with_the_caches_off_and_a_mark_of_none() {
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
            plan(
                os("glibc.malloc.check=3:glibc.malloc.mmap_threshold=131072"),
                None
            ),
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
    fn the_reexecuted_program_puts_back_what_the_operator_had() {
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
