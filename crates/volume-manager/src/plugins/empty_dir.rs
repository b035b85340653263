//! The emptyDir volume plugin, `kubernetes.io/empty-dir` (PL-30 … PL-32): a directory of the
//! pod on the node's disk, a tmpfs for `medium: Memory` (sized as the kubelet sizes it), a
//! hugetlbfs for `HugePages` media; owned by the pod's fsGroup; unmounted and removed with
//! the pod.
//!
//! ```text
//! <root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>/    0777 (tmpfs: 1777), the volume
//! <root>/pods/<uid>/plugins/kubernetes.io~empty-dir/<volume>/ready   set up once
//! ```

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Volume};
use nix::mount::{MsFlags, mount};
use nodelet_core::downward::quantity_units;

use super::api::{SetUpOutcome, VolumePlugin};
use super::host::{SetUpContext, TearDownContext, is_mountpoint, tear_down_at};
use super::memory_size::memory_volume_size;
use super::ownership::set_writable_volume_ownership;
use crate::SetUpError;

/// The plugin's name, and the escaped directory of its volumes and markers.
const NAME: &str = "kubernetes.io/empty-dir";
const ESCAPED: &str = "kubernetes.io~empty-dir";

/// An emptyDir's directory mode, whatever the umask (the kubelet's `perm`).
const PERM: u32 = 0o777;

/// `kubernetes.io/empty-dir`. Set up once; never remounted (its content belongs to the pod).
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyDirPlugin;

/// Why an emptyDir's medium cannot be set up; `Display` is the kubelet's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmptyDirError {
    /// A medium the API does not define.
    #[error("unknown storage medium {medium:?}")]
    UnknownMedium {
        /// The volume's `medium`.
        medium: String,
    },
    /// A `HugePages` medium in a pod whose containers request no huge pages of that size.
    #[error(
        "medium {medium}: hugePages storage requested, but there is no resource request for huge pages"
    )]
    NoHugePagesRequest {
        /// The volume's `medium`.
        medium: String,
    },
    /// `medium: HugePages` (no size) in a pod requesting huge pages of several sizes.
    #[error("medium: {medium} can't be used if container requests multiple huge page sizes")]
    SeveralHugePageSizes {
        /// The volume's `medium`.
        medium: String,
    },
}

/// What backs an emptyDir (PL-30).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Backing {
    /// The node's disk, under the pod directory.
    Disk,
    /// A tmpfs of `size` bytes (`0`: the kernel's default).
    Tmpfs { size: i64 },
    /// A hugetlbfs with the page size `page_size` (a quantity, `2Mi`).
    HugePages { page_size: String },
}

#[async_trait]
impl VolumePlugin for EmptyDirPlugin {
    fn name(&self) -> &str {
        NAME
    }

    fn can_support(&self, volume: &Volume) -> bool {
        volume.empty_dir.is_some()
    }

    fn requires_remount(&self) -> bool {
        false
    }

    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError> {
        let source = ctx.volume.empty_dir().cloned().unwrap_or_default();
        let medium = source.medium.as_deref().unwrap_or_default();
        let backing = match medium {
            "" => Backing::Disk,
            "Memory" if ctx.host.uses_tmpfs() => Backing::Tmpfs {
                size: memory_volume_size(
                    ctx.pod,
                    source.size_limit.as_ref(),
                    ctx.host.node_allocatable().memory_bytes,
                ),
            },
            // The agent may not mount (not root): the node's disk, as warned at start-up.
            "Memory" => Backing::Disk,
            m if m == "HugePages" || m.starts_with("HugePages-") => Backing::HugePages {
                page_size: huge_page_size(ctx.pod, m)?,
            },
            other => {
                return Err(EmptyDirError::UnknownMedium {
                    medium: other.to_owned(),
                }
                .into());
            }
        };
        let job = SetUpJob {
            dir: ctx.dir.to_path_buf(),
            marker: marker_dir(ctx.host.dirs().plugins(ctx.pod.uid()), ctx.volume.name()),
            backing,
            fs_group: ctx.fs_group,
        };
        let path = job.dir.clone();
        tokio::task::spawn_blocking(move || job.run())
            .await
            .map_err(|_| SetUpError::TaskFailed { path })??;
        Ok(SetUpOutcome::default())
    }

    /// PL-30: unmount a tmpfs or hugetlbfs, remove the directory and the readiness marker.
    async fn tear_down(&self, ctx: &TearDownContext<'_>) -> Result<(), SetUpError> {
        let dir = ctx.dir.to_path_buf();
        let marker = marker_dir(ctx.host.dirs().plugins(ctx.pod_uid), ctx.volume_name);
        let path = dir.clone();
        tokio::task::spawn_blocking(move || tear_down_at(&dir, &marker))
            .await
            .map_err(|_| SetUpError::TaskFailed { path })?
    }
}

/// `<pod>/plugins/kubernetes.io~empty-dir/<volume>`: the readiness marker's directory.
fn marker_dir(plugins: PathBuf, volume: &str) -> PathBuf {
    plugins.join(ESCAPED).join(volume)
}

/// The `pagesize=` of a hugetlbfs for `medium` (the kubelet's `getPageSizeMountOption`): the
/// page size of the huge pages the pod's containers (and init containers) request — for
/// `HugePages-<size>` one of that size, for `HugePages` one size only.
fn huge_page_size(pod: &Pod, medium: &str) -> Result<String, EmptyDirError> {
    let wanted = medium
        .strip_prefix("HugePages-")
        .map(|size| (size, quantity_units(size)));
    let mut found: Option<String> = None;
    let containers = pod.spec.iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    for c in containers {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        for name in requests.into_iter().flatten().map(|(n, _)| n) {
            let Some(size) = name.strip_prefix("hugepages-") else {
                continue;
            };
            match wanted {
                None => {
                    if found
                        .as_deref()
                        .is_some_and(|f| quantity_units(f) != quantity_units(size))
                    {
                        return Err(EmptyDirError::SeveralHugePageSizes {
                            medium: medium.to_owned(),
                        });
                    }
                    found = Some(size.to_owned());
                }
                Some((_, bytes)) if bytes.is_some() && quantity_units(size) == bytes => {
                    found = Some(size.to_owned());
                }
                Some(_) => {}
            }
        }
    }
    found.ok_or_else(|| EmptyDirError::NoHugePagesRequest {
        medium: medium.to_owned(),
    })
}

/// The blocking part of a SetUp (PL-30): the kubelet's `SetUpAt`.
struct SetUpJob {
    dir: PathBuf,
    marker: PathBuf,
    backing: Backing,
    fs_group: Option<u32>,
}

impl SetUpJob {
    /// 1. A volume marked ready is set up already when its directory exists (disk) or is a
    ///    mount point (memory, huge pages); a marker without its directory is removed.
    /// 2. Create the directory, mode 0777 whatever the umask.
    /// 3. Mount the tmpfs (`size=` the computed size) or the hugetlbfs on it, unless mounted.
    /// 4. fsGroup: the group and the writable volume bits (PL-31) on everything in it.
    /// 5. Mark the volume ready.
    fn run(self) -> Result<(), SetUpError> {
        let dir = &self.dir;
        let wrap = |e: io::Error| SetUpError::wrapper(dir, e);
        let mounted = match is_mountpoint(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(wrap(e)),
        };
        // (1)
        let ready = self.marker.join("ready");
        if ready.exists() {
            match self.backing {
                Backing::Disk if dir.is_dir() => return Ok(()),
                Backing::Tmpfs { .. } | Backing::HugePages { .. } if mounted => return Ok(()),
                _ => {}
            }
            if !dir.exists() {
                let _ = fs::remove_dir_all(&self.marker);
            }
        }
        // (2)
        fs::create_dir_all(dir).map_err(wrap)?;
        let mode = fs::symlink_metadata(dir)
            .map_err(wrap)?
            .permissions()
            .mode()
            & 0o777;
        if mode != PERM {
            fs::set_permissions(dir, fs::Permissions::from_mode(PERM)).map_err(wrap)?;
        }
        // (3)
        let (source, fstype, data) = match &self.backing {
            Backing::Disk => (None, None, String::new()),
            Backing::Tmpfs { size } if *size > 0 => {
                (Some("tmpfs"), Some("tmpfs"), format!("size={size}"))
            }
            Backing::Tmpfs { .. } => (Some("tmpfs"), Some("tmpfs"), String::new()),
            Backing::HugePages { page_size } => (
                Some("nodev"),
                Some("hugetlbfs"),
                format!("pagesize={page_size}"),
            ),
        };
        if let (Some(source), Some(fstype), false) = (source, fstype, mounted) {
            let data = (!data.is_empty()).then_some(data.as_str());
            mount(Some(source), dir, Some(fstype), MsFlags::empty(), data)
                .map_err(|e| wrap(e.into()))?;
        }
        // (4)
        if let Some(gid) = self.fs_group {
            set_writable_volume_ownership(dir, gid);
        }
        // (5)
        fs::create_dir_all(&self.marker)
            .and_then(|()| fs::write(&ready, b""))
            .map_err(wrap)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn job(root: &Path, backing: Backing, fs_group: Option<u32>) -> SetUpJob {
        SetUpJob {
            dir: root.join("volumes/kubernetes.io~empty-dir/data"),
            marker: root.join("plugins/kubernetes.io~empty-dir/data"),
            backing,
            fs_group,
        }
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_disk_volume_is_0777_marked_ready_and_torn_down_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let j = job(tmp.path(), Backing::Disk, None);
        let (dir, marker) = (j.dir.clone(), j.marker.clone());
        j.run().unwrap();
        assert_eq!(mode(&dir), 0o777);
        assert!(marker.join("ready").exists());
        fs::write(dir.join("kept"), "x").unwrap();
        // Set up again: ready, nothing touched.
        job(tmp.path(), Backing::Disk, None).run().unwrap();
        assert!(dir.join("kept").exists());
        tear_down_at(&dir, &marker).unwrap();
        assert!(!dir.exists() && !marker.exists());
    }

    #[test]
    fn fs_group_gives_the_volume_root_the_group_and_setgid() {
        let tmp = tempfile::tempdir().unwrap();
        let gid = nix::unistd::getegid().as_raw();
        let j = job(tmp.path(), Backing::Disk, Some(gid));
        let dir = j.dir.clone();
        j.run().unwrap();
        assert_eq!(mode(&dir), 0o2777);
        assert_eq!(fs::metadata(&dir).unwrap().gid(), gid);
    }

    // Needs root (mount): the session and CI run as root; elsewhere this fails naming it.
    #[test]
    fn a_memory_volume_is_a_tmpfs_of_its_size_unmounted_at_tear_down() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test mounts a tmpfs: it needs root"
        );
        let tmp = tempfile::tempdir().unwrap();
        let size = 10 * 1024 * 1024;
        let j = job(tmp.path(), Backing::Tmpfs { size }, Some(123));
        let (dir, marker) = (j.dir.clone(), j.marker.clone());
        j.run().unwrap();
        assert!(is_mountpoint(&dir).unwrap());
        let stat = nix::sys::statfs::statfs(&dir).unwrap();
        assert_eq!(stat.filesystem_type(), nix::sys::statfs::TMPFS_MAGIC);
        let bytes = stat.blocks() * stat.block_size() as u64;
        assert_eq!(bytes, size as u64);
        // The tmpfs root (1777) with fsGroup: group 123, setgid.
        assert_eq!(mode(&dir), 0o3777);
        assert_eq!(fs::metadata(&dir).unwrap().gid(), 123);
        // A write past the size fails.
        let big = vec![0u8; (size + 4096) as usize];
        let err = fs::write(dir.join("big"), &big).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(nix::errno::Errno::ENOSPC as i32));
        // Set up again: mounted and ready, no second mount.
        job(tmp.path(), Backing::Tmpfs { size }, None)
            .run()
            .unwrap();
        tear_down_at(&dir, &marker).unwrap();
        assert!(!dir.exists() && !marker.exists());
    }

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": containers}}),
        )
        .unwrap()
    }

    #[test]
    fn huge_pages_take_the_requested_page_size_with_the_kubelets_errors() {
        let two = pod(json!([{"name": "c", "resources": {"requests": {"hugepages-2Mi": "4Mi"}}}]));
        assert_eq!(huge_page_size(&two, "HugePages").unwrap(), "2Mi");
        assert_eq!(huge_page_size(&two, "HugePages-2Mi").unwrap(), "2Mi");
        assert_eq!(
            huge_page_size(&two, "HugePages-1Gi")
                .unwrap_err()
                .to_string(),
            "medium HugePages-1Gi: hugePages storage requested, but there is no resource request for huge pages"
        );
        let both = pod(json!([
            {"name": "a", "resources": {"requests": {"hugepages-2Mi": "4Mi"}}},
            {"name": "b", "resources": {"requests": {"hugepages-1Gi": "1Gi"}}},
        ]));
        assert_eq!(
            huge_page_size(&both, "HugePages").unwrap_err().to_string(),
            "medium: HugePages can't be used if container requests multiple huge page sizes"
        );
        assert_eq!(huge_page_size(&both, "HugePages-1Gi").unwrap(), "1Gi");
    }

    #[test]
    fn an_unknown_medium_has_the_kubelets_text() {
        let e = EmptyDirError::UnknownMedium {
            medium: "Floppy".into(),
        };
        assert_eq!(e.to_string(), "unknown storage medium \"Floppy\"");
    }
}
