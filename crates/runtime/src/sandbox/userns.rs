//! Without root: the user namespace the init process makes in step 3, and the check that the
//! kernel lets an ordinary user make one.

use std::fs;
use std::io;

use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Uid};

use super::error::{SandboxError, UserNamespaceGap};
use crate::spec::LaunchSpec;

/// The first kernel to mount overlayfs in a user namespace.
const OVERLAY_IN_USERNS: (u32, u32) = (5, 11);

/// Limits on the namespaces step 3 makes: 0 forbids them.
const NAMESPACE_LIMITS: [&str; 3] = [
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/user/max_uts_namespaces",
];

/// Debian's and older Ubuntus' switch for user namespaces without privilege: absent or 1 allows.
const USERNS_CLONE: &str = "/proc/sys/kernel/unprivileged_userns_clone";

/// Ubuntu's (23.10 and later) AppArmor restriction: when 1, a user namespace made by an
/// unconfined process has no capabilities.
const APPARMOR_RESTRICT: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";

/// The process's AppArmor label, newer and older file.
const APPARMOR_LABEL: [&str; 2] = [
    "/proc/self/attr/apparmor/current",
    "/proc/self/attr/current",
];

/// Makes the user, mount and UTS namespaces of an init process that is not root, in which the
/// process's effective uid and gid appear as `spec.uid` and `spec.gid` and it holds every
/// capability (until it executes the program as a user other than 0). `setgroups` is denied
/// there, as the kernel requires before an unprivileged process writes its `gid_map`.
///
/// # Errors
///
/// [`SandboxError::SupplementaryGroups`] when the spec has groups (before anything is made),
/// [`SandboxError::UnshareUser`], [`SandboxError::MapIds`].
pub(super) fn enter(spec: &LaunchSpec) -> Result<(), SandboxError> {
    if !spec.groups.is_empty() {
        return Err(SandboxError::SupplementaryGroups(spec.groups.clone()));
    }
    let (uid, gid) = (Uid::effective(), Gid::effective());
    let namespaces = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS;
    unshare(namespaces).map_err(SandboxError::UnshareUser)?;
    for (file, line) in [
        ("/proc/self/setgroups", "deny\n".to_owned()),
        ("/proc/self/uid_map", format!("{} {uid} 1\n", spec.uid)),
        ("/proc/self/gid_map", format!("{} {gid} 1\n", spec.gid)),
    ] {
        // One write(2): the kernel takes a map in a single write only.
        fs::write(file, &line).map_err(|source| SandboxError::MapIds { file, line, source })?;
    }
    Ok(())
}

/// What keeps this kernel from giving an ordinary user the namespaces step 3 makes, `None`
/// when nothing seen does; `read` reads a `/proc` file. A check of settings only: a seccomp
/// filter or a security module may still refuse at the first start.
pub(super) fn missing_support(
    read: &dyn Fn(&str) -> io::Result<String>,
) -> Option<UserNamespaceGap> {
    for path in NAMESPACE_LIMITS {
        match read(path) {
            Ok(value) if value.trim().parse::<u64>().is_ok_and(|n| n > 0) => {}
            Ok(value) => return Some(sysctl(path, &value)),
            Err(error) => return Some(UserNamespaceGap::ReadSysctl { path, error }),
        }
    }
    match read(USERNS_CLONE) {
        Ok(value) if value.trim() != "1" => return Some(sysctl(USERNS_CLONE, &value)),
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            return Some(UserNamespaceGap::ReadSysctl {
                path: USERNS_CLONE,
                error,
            });
        }
    }
    if read(APPARMOR_RESTRICT).is_ok_and(|v| v.trim() == "1") {
        let label = APPARMOR_LABEL.iter().find_map(|path| read(path).ok());
        if label.is_none_or(|label| label.trim_end_matches(['\n', '\0']) == "unconfined") {
            return Some(UserNamespaceGap::AppArmor);
        }
    }
    let release = read("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    match kernel_version(release) {
        Some(version) if version < OVERLAY_IN_USERNS => {
            Some(UserNamespaceGap::OldKernel(release.to_owned()))
        }
        _ => None,
    }
}

fn sysctl(path: &'static str, value: &str) -> UserNamespaceGap {
    let value = value.trim().to_owned();
    UserNamespaceGap::Sysctl { path, value }
}

/// The major and minor numbers of a kernel release (`6.18.44-fc` → `(6, 18)`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut numbers = release.split(|c: char| !c.is_ascii_digit());
    let major = numbers.next()?.parse().ok()?;
    let minor = numbers.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A `/proc` reader over `files`; any other file is missing.
    fn proc(files: &[(&str, &str)]) -> impl Fn(&str) -> io::Result<String> {
        let files: HashMap<String, String> = files
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |path| {
            files
                .get(path)
                .cloned()
                .ok_or_else(|| io::ErrorKind::NotFound.into())
        }
    }

    const ALLOWED: [(&str, &str); 4] = [
        ("/proc/sys/user/max_user_namespaces", "96365\n"),
        ("/proc/sys/user/max_mnt_namespaces", "96365\n"),
        ("/proc/sys/user/max_uts_namespaces", "96365\n"),
        ("/proc/sys/kernel/osrelease", "6.18.44-fc-v595\n"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Option<UserNamespaceGap> {
        let mut files: Vec<(&str, &str)> = ALLOWED.to_vec();
        files.retain(|(path, _)| !extra.iter().any(|(p, _)| p == path));
        files.extend_from_slice(extra);
        missing_support(&proc(&files))
    }

    #[test]
    fn a_recent_kernel_with_user_namespaces_is_enough() {
        assert!(with(&[]).is_none());
        assert!(with(&[(USERNS_CLONE, "1\n"), (APPARMOR_RESTRICT, "0\n")]).is_none());
        let confined = [
            (APPARMOR_RESTRICT, "1\n"),
            ("/proc/self/attr/apparmor/current", "nodelet (enforce)\n"),
        ];
        assert!(with(&confined).is_none());
    }

    #[test]
    fn each_refusal_names_the_setting() {
        let text = |extra: &[(&'static str, &'static str)]| with(extra).map(|gap| gap.to_string());
        assert_eq!(
            text(&[(USERNS_CLONE, "0\n")]).as_deref(),
            Some("/proc/sys/kernel/unprivileged_userns_clone is 0")
        );
        assert_eq!(
            text(&[("/proc/sys/user/max_user_namespaces", "0\n")]).as_deref(),
            Some("/proc/sys/user/max_user_namespaces is 0")
        );
        assert!(matches!(
            with(&[
                (APPARMOR_RESTRICT, "1\n"),
                ("/proc/self/attr/current", "unconfined\n")
            ]),
            Some(UserNamespaceGap::AppArmor)
        ));
        assert_eq!(
            text(&[("/proc/sys/kernel/osrelease", "5.10.0-21-amd64\n")]).as_deref(),
            Some(
                "the kernel is 5.10.0-21-amd64; overlayfs in a user namespace needs Linux 5.11 or later"
            )
        );
    }

    #[test]
    fn a_kernel_without_user_namespaces_lacks_the_limit_file() {
        let files: Vec<(&str, &str)> = ALLOWED[1..].to_vec();
        assert!(matches!(
            missing_support(&proc(&files)),
            Some(UserNamespaceGap::ReadSysctl {
                path: "/proc/sys/user/max_user_namespaces",
                ..
            })
        ));
    }

    #[test]
    fn kernel_releases_parse_to_major_and_minor() {
        assert_eq!(kernel_version("6.18.44-fc-v595"), Some((6, 18)));
        assert_eq!(kernel_version("5.11.0"), Some((5, 11)));
        assert_eq!(kernel_version("4.19-rc1"), Some((4, 19)));
        assert_eq!(kernel_version("weird"), None);
    }
}
