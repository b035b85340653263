//! The `RuntimeDefault` seccomp filter (PW-46), installed last before `execve`: the system calls
//! containerd's default profile keeps from a container fail with `EPERM`; those it grants with
//! `CAP_SYS_ADMIN` stay allowed when the container keeps that capability. Every other call is
//! allowed (a deny list, where containerd's profile is an allow list of several hundred calls).

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch};

use super::error::SandboxError;
use crate::spec::LaunchSpec;

/// Calls no container makes under the default profile, whatever its capabilities: kernel
/// modules and images, the clock, swap, reboot, keyrings, accounting, quotas, handles that
/// bypass the mount namespace, userfaultfd.
const ALWAYS_DENIED: &[i64] = &[
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    libc::SYS_lookup_dcookie,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_userfaultfd,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ustat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_sysfs,
    #[cfg(target_arch = "x86_64")]
    libc::SYS__sysctl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_nfsservctl,
];

/// Calls the default profile grants only with `CAP_SYS_ADMIN`: mounts, namespaces, BPF,
/// performance events, fanotify.
const SYS_ADMIN: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_fanotify_init,
    libc::SYS_name_to_handle_at,
];

/// Installs the filter when `spec` asks for it; a no-op otherwise. Sets `no_new_privs` too
/// (the filter is installed as the container's user, which the kernel allows only so).
///
/// # Errors
/// [`SandboxError::Seccomp`].
pub(super) fn apply(spec: &LaunchSpec) -> Result<(), SandboxError> {
    if !spec.seccomp_runtime_default {
        return Ok(());
    }
    let program = filter(spec)?;
    seccompiler::apply_filter(&program).map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// The filter for `spec`: [`ALWAYS_DENIED`], and [`SYS_ADMIN`] unless the spec keeps
/// `CAP_SYS_ADMIN` (or every capability).
fn filter(spec: &LaunchSpec) -> Result<BpfProgram, SandboxError> {
    let sys_admin = spec
        .capabilities
        .as_ref()
        .is_none_or(|caps| caps.iter().any(|c| c == "CAP_SYS_ADMIN"));
    let denied = ALWAYS_DENIED
        .iter()
        .chain(SYS_ADMIN.iter().filter(|_| !sys_admin));
    let rules: BTreeMap<i64, Vec<SeccompRule>> = denied.map(|&nr| (nr, Vec::new())).collect();
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    let errno = u32::try_from(libc::EPERM).unwrap_or(1);
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SandboxError::Seccomp(e.to_string()))
}
