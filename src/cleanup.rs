//! [`remove_pods`]: what the agent leaves in `<root-dir>/pods` — its pods' directories and the
//! tmpfs mounts of their secret and token volumes — unmounted and removed (`--cleanup-on-exit`,
//! `nodelet reset`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use nix::errno::Errno;

/// What [`remove_pods`] did (or, with `dry_run`, would do).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct PodsRemoved {
    /// Mount points unmounted, deepest first.
    pub unmounted: Vec<PathBuf>,
    /// `<root>/pods`, when it was there and is removed.
    pub removed: Option<PathBuf>,
}

/// Unmounts every mount inside `<root>/pods` (deepest first, never one outside it), then
/// removes `<root>/pods` if nothing stays mounted (symlinks are removed, never followed); with
/// `dry_run` only says what it would do. The caller holds the root directory's lock (`nodelet
/// reset`, or the agent itself at exit with `--cleanup-on-exit`).
///
/// # Errors
/// A mount that would not go (then nothing is removed), or a file that could not be removed.
pub fn remove_pods(root: &Path, dry_run: bool) -> anyhow::Result<PodsRemoved> {
    let mut report = PodsRemoved::default();
    let pods = nodelet_core::PodDirs::new(root).pods();
    let Ok(pods) = pods.canonicalize() else {
        return Ok(report);
    };
    // (2)
    let mounts = mounts_inside(&pods).context("reading /proc/self/mountinfo")?;
    for mount in mounts {
        if !dry_run {
            nix::mount::umount2(&mount, nix::mount::MntFlags::empty())
                .or_else(|e| match e {
                    Errno::EBUSY => nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH),
                    other => Err(other),
                })
                .with_context(|| format!("unmounting {}", mount.display()))?;
        }
        report.unmounted.push(mount);
    }
    // (3)
    if !dry_run {
        let still = mounts_inside(&pods).context("reading /proc/self/mountinfo")?;
        if let Some(m) = still.first() {
            anyhow::bail!(
                "{} is still mounted; nothing under {} was removed",
                m.display(),
                pods.display()
            );
        }
        std::fs::remove_dir_all(&pods).with_context(|| format!("removing {}", pods.display()))?;
    }
    report.removed = Some(pods);
    Ok(report)
}

/// Mount points strictly inside `dir`, deepest first (2). `dir` is canonical, so a symlink can
/// never lead outside it here: mount points in `mountinfo` are canonical paths too.
fn mounts_inside(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape(field)))
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    Ok(found)
}

/// `mountinfo` escapes space, tab, newline and backslash as `\NNN` (octal).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/a\\040b/c\\134d"), "/a b/c\\d");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/trailing\\04"), "/trailing\\04");
    }
}
