//! [`VolumeHost`]: what plugins share (object managers, sources, disk layout) and the common
//! SetUp tail of PL-6 steps 5–9 (wrapper directory, nested mountpoints, atomic write); the
//! [`SetUpContext`] and [`TearDownContext`] that carry it to a plugin.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodelet_atomic_writer::{AtomicWriter, Payload, SwitchHook, WriteOutcome, WriterConfig};
use nodelet_core::{AdmittedPod, NodeAllocatable, PodDirs, PodUid, PodVolume};
use nodelet_object_manager::{ConfigMapManager, SecretManager};
use nodelet_sources::Sources;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ownership::{make_nested_mountpoints, nested_mountpoints, set_volume_ownership};
use crate::SetUpError;

/// Where a volume's files live (PL-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Node disk (configMap volumes, emptyDir by default).
    Disk,
    /// Memory: a tmpfs mounted on the volume directory when the agent may mount (root with
    /// `CAP_SYS_ADMIN`), else node disk (one warning at start-up).
    Memory,
}

/// Everything a plugin's [`VolumePlugin::set_up`](crate::VolumePlugin::set_up) needs (VM-10).
#[derive(Clone, Copy)]
pub struct SetUpContext<'a> {
    /// The latest pod object of the desired state (PL-4, VM-5), as it was admitted: its UID
    /// (`pod.uid()`, the directory `pods/<uid>/`) was validated where it entered the node.
    pub pod: &'a AdmittedPod,
    /// The pod volume, as the admitted pod holds it (compact: its source, not a k8s-openapi
    /// `Volume` of every source; [`PodVolume::to_volume`] builds one where a plugin needs it).
    pub volume: &'a PodVolume,
    /// The volume directory (PL-1).
    pub dir: &'a Path,
    /// Whether the volume is already mounted (a remount must never remove live content).
    pub remount: bool,
    /// The pod's `securityContext.fsGroup` (PL-11).
    pub fs_group: Option<u32>,
    /// The pod's effective `runAsUser` when all containers agree (VM-10).
    pub fs_user: Option<u32>,
    /// Shared services: object managers, sources, disk layout.
    pub host: &'a VolumeHost,
}

/// Everything a plugin's [`VolumePlugin::tear_down`](crate::VolumePlugin::tear_down) needs.
#[derive(Clone, Copy)]
pub struct TearDownContext<'a> {
    /// The pod's UID.
    pub pod_uid: &'a PodUid,
    /// The pod volume name.
    pub volume_name: &'a str,
    /// The volume directory (PL-1).
    pub dir: &'a Path,
    /// Shared services.
    pub host: &'a VolumeHost,
}

/// Shared services for plugins: the object managers, the other sources (tokens, trust
/// bundles, pod certificates), the disk layout under the root directory and the common write
/// path.
pub struct VolumeHost {
    dirs: PodDirs,
    configmaps: ConfigMapManager,
    secrets: SecretManager,
    sources: Sources,
    tmpfs: bool,
    fsync: bool,
    allocatable: NodeAllocatable,
    /// Called between a write's switch and the removal of the old data.
    after_swap: Option<crate::AfterSwap>,
    /// [`WRITE_SLOTS`] places for payloads being built and written ([`VolumeHost::write_slot`]).
    write_slots: Arc<Semaphore>,
}

/// How many volumes may have their payload built and be written at once. Beyond this they
/// wait with their object read but no payload built: at a node's start a thousand objects
/// arrive within a second, and on a slow disk their payloads, all built before their writes,
/// were the heap's peak (5 MiB more RSS afterwards on a fresh ext4, the freed room scattered
/// among live data). Sixteen writes in flight keep a disk's journal commits shared and two
/// cores busy.
pub const WRITE_SLOTS: usize = 16;

/// A place to build and write one volume's payload ([`VolumeHost::write_slot`]), given back
/// when dropped.
#[derive(Debug)]
pub struct WriteSlot {
    _permit: Option<OwnedSemaphorePermit>,
}

impl std::fmt::Debug for VolumeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeHost")
            .field("root_dir", &self.dirs.root())
            .field("tmpfs", &self.tmpfs)
            .field("fsync", &self.fsync)
            .finish_non_exhaustive()
    }
}

impl VolumeHost {
    pub(crate) fn new(
        root_dir: PathBuf,
        configmaps: ConfigMapManager,
        secrets: SecretManager,
        sources: Sources,
        tmpfs: bool,
        fsync: bool,
        allocatable: NodeAllocatable,
    ) -> Self {
        Self {
            dirs: PodDirs::new(root_dir),
            configmaps,
            secrets,
            sources,
            tmpfs,
            fsync,
            allocatable,
            after_swap: None,
            write_slots: Arc::new(Semaphore::new(WRITE_SLOTS)),
        }
    }

    /// This host with `hook` called in each write between the switch and the removal of the
    /// old data ([`crate::Config::after_swap`]).
    pub(crate) fn with_after_swap(mut self, hook: Option<crate::AfterSwap>) -> Self {
        self.after_swap = hook;
        self
    }

    /// Waits for one of [`WRITE_SLOTS`] places to build and write a payload. A plugin takes it
    /// after reading its objects and before building the payload, and holds it through
    /// [`project`](Self::project), so the payloads alive at once stay bounded however many
    /// volumes are set up together. (The projected plugin builds its payload while it reads
    /// its sources, a token request among them, so it takes the slot for the write only.)
    pub async fn write_slot(&self) -> WriteSlot {
        // The semaphore is never closed; if it were, the slot would just not bound anything.
        WriteSlot {
            _permit: self.write_slots.clone().acquire_owned().await.ok(),
        }
    }

    /// The sources the agent built: tokens (PL-10), and trust bundles (PL-17) and pod
    /// certificates (PL-21) when their gates are on.
    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// The agent's root directory (the kubelet's `--root-dir`).
    pub fn root_dir(&self) -> &Path {
        self.dirs.root()
    }

    /// The pod directories under the root directory.
    pub fn dirs(&self) -> &PodDirs {
        &self.dirs
    }

    /// PL-1: `<root>/pods/<uid>/volumes/<escaped plugin>/<volume>`.
    pub fn volume_dir(&self, pod_uid: &PodUid, plugin: &str, volume: &str) -> PathBuf {
        self.dirs.volume(pod_uid, plugin, volume)
    }

    /// PL-5: the wrapper's readiness marker directory
    /// `<root>/pods/<uid>/plugins/kubernetes.io~empty-dir/wrapped_<volume>`.
    pub fn wrapper_marker_dir(&self, pod_uid: &PodUid, volume: &str) -> PathBuf {
        self.dirs.wrapper_marker(pod_uid, volume)
    }

    /// The shared ConfigMap manager (PW-13).
    pub fn configmaps(&self) -> &ConfigMapManager {
        &self.configmaps
    }

    /// The shared Secret manager (PW-13).
    pub fn secrets(&self) -> &SecretManager {
        &self.secrets
    }

    /// Whether memory-medium volumes get a tmpfs.
    pub fn uses_tmpfs(&self) -> bool {
        self.tmpfs
    }

    /// Node allocatable resources for `resourceFieldRef` (PL-13).
    pub fn node_allocatable(&self) -> &NodeAllocatable {
        &self.allocatable
    }

    /// PL-6 steps 5–9: set up the wrapper directory (0777, tmpfs for [`Medium::Memory`] when
    /// possible, readiness marker), create nested mountpoints (PL-12), then write `payload`
    /// atomically, applying fsGroup ownership (PL-11) to the whole directory when new data is
    /// written. Runs on the blocking pool.
    ///
    /// If this call created the directory and fails afterwards, the directory is torn down
    /// again. A directory that existed before (a remount, an adopted volume) is never removed
    /// or emptied: the atomic writer keeps the old content on failure (upstream #113242).
    ///
    /// # Errors
    /// [`SetUpError::Wrapper`], [`SetUpError::NestedMountpoints`], [`SetUpError::Write`].
    pub async fn project(
        &self,
        ctx: &SetUpContext<'_>,
        medium: Medium,
        payload: Payload,
    ) -> Result<WriteOutcome, SetUpError> {
        let job = WriteJob {
            dir: ctx.dir.to_path_buf(),
            marker: self.wrapper_marker_dir(ctx.pod.uid(), ctx.volume.name()),
            tmpfs: medium == Medium::Memory && self.tmpfs,
            fsync: self.fsync,
            fs_group: ctx.fs_group,
            nested: nested_mountpoints(ctx.pod, ctx.volume.name()),
            remount: ctx.remount,
            on_switch: self.after_swap.clone().map(|hook| {
                let (pod, volume, dir) = (
                    ctx.pod.clone(),
                    ctx.volume.name().to_owned(),
                    ctx.dir.to_path_buf(),
                );
                let on_switch: SwitchHook =
                    Arc::new(move |_new: &Path| (hook.0)(&pod, &volume, &dir));
                on_switch
            }),
        };
        let dir = job.dir.clone();
        tokio::task::spawn_blocking(move || job.run(&payload))
            .await
            .map_err(|_| SetUpError::TaskFailed { path: dir })?
    }

    /// PL-5 step 5 only (emptyDir): create the directory (tmpfs for memory) and apply fsGroup.
    ///
    /// # Errors
    /// [`SetUpError::Wrapper`].
    pub async fn set_up_dir(
        &self,
        ctx: &SetUpContext<'_>,
        medium: Medium,
    ) -> Result<(), SetUpError> {
        let dir = ctx.dir.to_path_buf();
        let marker = self.wrapper_marker_dir(ctx.pod.uid(), ctx.volume.name());
        let tmpfs = medium == Medium::Memory && self.tmpfs;
        let fs_group = ctx.fs_group;
        let expect_new = !ctx.remount;
        let path = dir.clone();
        tokio::task::spawn_blocking(move || {
            set_up_wrapper(&dir, &marker, tmpfs, fs_group, expect_new).map(drop)
        })
        .await
        .map_err(|_| SetUpError::TaskFailed { path })?
    }

    /// PL-14: unmount a tmpfs on `dir` if any, remove `dir` recursively, remove the wrapper's
    /// marker and the now empty plugin directory. Missing directories are fine.
    ///
    /// # Errors
    /// [`SetUpError::TearDown`].
    pub async fn tear_down_dir(
        &self,
        pod_uid: &PodUid,
        volume: &str,
        dir: &Path,
    ) -> Result<(), SetUpError> {
        let dir = dir.to_path_buf();
        let marker = self.wrapper_marker_dir(pod_uid, volume);
        let path = dir.clone();
        tokio::task::spawn_blocking(move || tear_down(&dir, &marker))
            .await
            .map_err(|_| SetUpError::TaskFailed { path })?
    }
}

/// The blocking part of [`VolumeHost::project`].
struct WriteJob {
    dir: PathBuf,
    marker: PathBuf,
    tmpfs: bool,
    fsync: bool,
    fs_group: Option<u32>,
    nested: Vec<String>,
    remount: bool,
    /// [`crate::AfterSwap`] bound to this volume.
    on_switch: Option<SwitchHook>,
}

impl WriteJob {
    fn run(self, payload: &Payload) -> Result<WriteOutcome, SetUpError> {
        // (5) Set up the wrapper directory.
        let created = set_up_wrapper(
            &self.dir,
            &self.marker,
            self.tmpfs,
            self.fs_group,
            !self.remount,
        )?;
        // (7) From here on a failure tears down a directory this call created (never a live
        // one: see the doc of `project`).
        let result = self.write(payload, created);
        if result.is_err()
            && created
            && !self.remount
            && let Err(e) = tear_down(&self.dir, &self.marker)
        {
            tracing::warn!(error = %e, "could not remove a volume directory after a failed set-up");
        }
        result
    }

    /// (6)-(9); `created`: this SetUp created the (empty) volume directory.
    fn write(&self, payload: &Payload, created: bool) -> Result<WriteOutcome, SetUpError> {
        // (6) Nested mountpoints.
        make_nested_mountpoints(&self.dir, &self.nested).map_err(|cause| {
            SetUpError::NestedMountpoints {
                cause: Arc::new(cause),
            }
        })?;
        // (8) The writer; tmpfs content does not survive a reboot, so no fsync there.
        let mut config = WriterConfig::default().fsync(self.fsync && !self.tmpfs);
        config.on_switch = self.on_switch.clone();
        // A directory this SetUp created holds nothing yet (no nested mountpoint either): the
        // writer need not list it. Either way the wrapper has just seen the directory: the
        // writer need not `stat` it again.
        let mut writer = if created && self.nested.is_empty() {
            AtomicWriter::for_new_dir(&self.dir, config)
        } else {
            AtomicWriter::for_existing_dir(&self.dir, config)
        };
        // (9) Write; fsGroup is applied to the whole volume directory when data changes.
        let dir = self.dir.clone();
        let fs_group = self.fs_group;
        let mut set_perms = move |_: &Path| -> io::Result<()> {
            if let Some(gid) = fs_group {
                set_volume_ownership(&dir, gid);
            }
            Ok(())
        };
        writer
            .write(payload, Some(&mut set_perms))
            .map_err(|e| SetUpError::Write(Arc::new(e)))
    }
}

/// PL-5: create `dir` with mode 0777 (umask-independent), mount a tmpfs on it if asked and not
/// mounted yet, write the readiness marker, apply fsGroup to a new directory. Returns whether
/// the directory was created by this call.
///
/// `expect_new` (a first SetUp, not a remount) orders the syscalls for the likely case: a
/// `mkdir` first, and an `lstat` only when something is there already; a remount `lstat`s the
/// directory once and takes its device from that for the mountpoint check. Either way an
/// existing directory is used as it is and anything else by that name is refused.
fn set_up_wrapper(
    dir: &Path,
    marker: &Path,
    tmpfs: bool,
    fs_group: Option<u32>,
    expect_new: bool,
) -> Result<bool, SetUpError> {
    let wrap = |e: io::Error| SetUpError::wrapper(dir, e);
    let existing = if expect_new {
        match fs::create_dir(dir) {
            Ok(()) => None,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Some(existing_dir(dir)?),
            // The pod's first volume of this plugin: its directory first. `create_dir_all`
            // also copes with a sibling's teardown removing the (empty) plugin directory at
            // the same moment.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match dir.parent() {
                    Some(parent) => fs::create_dir_all(parent)
                        .and_then(|()| fs::create_dir(dir))
                        .or_else(|_| fs::create_dir_all(dir)),
                    None => fs::create_dir_all(dir),
                }
                .map_err(wrap)?;
                None
            }
            Err(e) => return Err(wrap(e)),
        }
    } else {
        match fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => Some(meta),
            Ok(_) => return Err(wrap(not_a_directory())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(wrap)?;
                None
            }
            Err(e) => return Err(wrap(e)),
        }
    };
    let created = existing.is_none();
    if created {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).map_err(wrap)?;
    }
    // A directory created just now is no mountpoint yet.
    if tmpfs {
        let mounted = match &existing {
            None => false,
            Some(meta) => is_mountpoint_with(dir, meta).map_err(wrap)?,
        };
        if !mounted {
            mount_tmpfs(dir).map_err(wrap)?;
        }
    }
    mark_ready(marker, created).map_err(wrap)?;
    if created && let Some(gid) = fs_group {
        set_volume_ownership(dir, gid);
    }
    Ok(created)
}

/// The `lstat` of `dir`, which a `mkdir` found taken: a directory, or refused.
fn existing_dir(dir: &Path) -> Result<fs::Metadata, SetUpError> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(meta),
        Ok(_) => Err(SetUpError::wrapper(dir, not_a_directory())),
        Err(e) => Err(SetUpError::wrapper(dir, e)),
    }
}

fn not_a_directory() -> io::Error {
    io::Error::new(io::ErrorKind::AlreadyExists, "not a directory")
}

/// PL-5: the readiness marker `<marker>/ready`. A volume directory that existed already (a
/// remount, an adopted volume) normally has it: one `lstat` then, and no write (rewriting it
/// would dirty its inode on every remount). A new one gets the directory and an empty file.
fn mark_ready(marker: &Path, created: bool) -> io::Result<()> {
    let ready = marker.join("ready");
    if !created && fs::symlink_metadata(&ready).is_ok() {
        return Ok(());
    }
    fs::create_dir_all(marker)?;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&ready)
        .map(drop)
}

/// PL-14 on the blocking pool (also emptyDir's tear-down, PL-30, with its own marker).
pub(crate) fn tear_down_at(dir: &Path, marker: &Path) -> Result<(), SetUpError> {
    tear_down(dir, marker)
}

fn tear_down(dir: &Path, marker: &Path) -> Result<(), SetUpError> {
    match is_mountpoint(dir) {
        Ok(true) => unmount(dir).map_err(|e| SetUpError::tear_down(dir, e))?,
        Ok(false) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(SetUpError::tear_down(dir, e)),
    }
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(SetUpError::tear_down(dir, e)),
    }
    match fs::remove_dir_all(marker) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(SetUpError::tear_down(marker, e)),
    }
    // The plugin directory `volumes/<plugin>` goes when its last volume does (PW-6 waits for
    // the pod's volume directories to disappear).
    if let Some(plugin_dir) = dir.parent() {
        let _ = fs::remove_dir(plugin_dir);
    }
    Ok(())
}

/// Whether `dir` is the root of a mount (its device differs from its parent's).
pub(crate) fn is_mountpoint(dir: &Path) -> io::Result<bool> {
    is_mountpoint_with(dir, &fs::symlink_metadata(dir)?)
}

/// [`is_mountpoint`] for a `dir` whose `lstat` is `meta` already: one `stat` of its parent.
fn is_mountpoint_with(dir: &Path, meta: &fs::Metadata) -> io::Result<bool> {
    let Some(parent) = dir.parent() else {
        return Ok(true);
    };
    Ok(meta.dev() != fs::metadata(parent)?.dev())
}

fn mount_tmpfs(dir: &Path) -> io::Result<()> {
    use nix::mount::{MsFlags, mount};
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(io::Error::from)
}

fn unmount(dir: &Path) -> io::Result<()> {
    use nix::mount::{MntFlags, umount2};
    umount2(dir, MntFlags::MNT_DETACH).map_err(io::Error::from)
}

/// Whether this process can mount a tmpfs: it tries one on a scratch directory under `root`
/// (only when running as root) and unmounts it again.
pub(crate) fn probe_tmpfs(root: &Path) -> bool {
    if !nix::unistd::geteuid().is_root() {
        return false;
    }
    let probe = root.join(format!(".tmpfs-probe-{}", std::process::id()));
    if fs::create_dir_all(&probe).is_err() {
        return false;
    }
    let ok = mount_tmpfs(&probe).is_ok() && unmount(&probe).is_ok();
    let _ = fs::remove_dir(&probe);
    ok
}

#[cfg(test)]
mod tests {
    use nodelet_atomic_writer::FileProjection;

    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_wrapper_directory_is_0777_and_teardown_removes_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("volumes/kubernetes.io~configmap/v");
        let marker = tmp.path().join("plugins/kubernetes.io~empty-dir/wrapped_v");
        assert!(set_up_wrapper(&dir, &marker, false, None, true).unwrap());
        assert_eq!(mode(&dir), 0o777);
        assert!(marker.join("ready").exists());
        assert!(!set_up_wrapper(&dir, &marker, false, None, false).unwrap());
        tear_down(&dir, &marker).unwrap();
        assert!(!dir.exists() && !marker.exists());
        assert!(!tmp.path().join("volumes/kubernetes.io~configmap").exists());
        tear_down(&dir, &marker).unwrap();
    }

    // The first SetUp tries `mkdir` first, a remount `lstat`s first: either way an existing
    // directory is used as it is (not made 0777 again) and anything else there is refused.
    #[test]
    fn the_wrapper_takes_an_existing_directory_as_it_is_whichever_it_expected() {
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join("plugins/kubernetes.io~empty-dir/wrapped_v");
        for expect_new in [true, false] {
            let dir = tmp
                .path()
                .join(format!("volumes/kubernetes.io~configmap/{expect_new}"));
            fs::create_dir_all(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
            let created = set_up_wrapper(&dir, &marker, false, None, expect_new).unwrap();
            assert!(!created, "expect_new {expect_new}");
            assert_eq!(mode(&dir), 0o750, "expect_new {expect_new}");
            assert!(marker.join("ready").exists());

            let file = tmp.path().join(format!("file-{expect_new}"));
            fs::write(&file, "x").unwrap();
            let err = set_up_wrapper(&file, &marker, false, None, expect_new).unwrap_err();
            assert!(err.to_string().contains("not a directory"), "{err}");
            // A remount of a volume whose directory vanished creates it again.
            let gone = tmp
                .path()
                .join(format!("volumes/kubernetes.io~secret/{expect_new}"));
            assert!(set_up_wrapper(&gone, &marker, false, None, expect_new).unwrap());
            assert_eq!(mode(&gone), 0o777);
        }
    }

    /// Every entry under `root`, symlinks not followed: the inodes a set-up left there.
    fn inodes_under(root: &Path) -> usize {
        fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| match e.file_type().unwrap().is_dir() {
                true => 1 + inodes_under(&e.path()),
                false => 1,
            })
            .sum()
    }

    fn job(root: &Path, volume: &str, remount: bool) -> WriteJob {
        WriteJob {
            dir: root.join(format!("volumes/kubernetes.io~configmap/{volume}")),
            marker: root.join(format!("plugins/kubernetes.io~empty-dir/wrapped_{volume}")),
            tmpfs: false,
            fsync: true,
            fs_group: None,
            nested: Vec::new(),
            remount,
            on_switch: None,
        }
    }

    #[test]
    fn a_one_key_configmap_volume_costs_seven_inodes_and_a_remount_none() {
        let tmp = tempfile::tempdir().unwrap();
        let payload: Payload = [("app.conf", FileProjection::new("port = 80\n", 0o644))]
            .into_iter()
            .collect();
        // The pod's first volume also creates `volumes/<plugin>` and `plugins/<wrapper>`.
        job(tmp.path(), "first", false).run(&payload).unwrap();
        let shared = 4;
        assert_eq!(inodes_under(tmp.path()), shared + 7);
        // Per volume: its directory, the marker directory and `ready`, then the writer's data
        // directory, file, `..data` and visible symlink.
        nodelet_atomic_writer::probe::take();
        job(tmp.path(), "second", false).run(&payload).unwrap();
        assert_eq!(nodelet_atomic_writer::probe::take().inodes(), 4);
        assert_eq!(inodes_under(tmp.path()), shared + 2 * 7);
        // A remount of unchanged data allocates nothing and leaves the marker alone.
        let ready = tmp
            .path()
            .join("plugins/kubernetes.io~empty-dir/wrapped_second/ready");
        let before = fs::symlink_metadata(&ready).unwrap().ctime_nsec();
        let outcome = job(tmp.path(), "second", true).run(&payload).unwrap();
        assert_eq!(outcome, WriteOutcome::Unchanged);
        assert_eq!(nodelet_atomic_writer::probe::take().inodes(), 0);
        assert_eq!(inodes_under(tmp.path()), shared + 2 * 7);
        assert_eq!(fs::symlink_metadata(&ready).unwrap().ctime_nsec(), before);
    }

    // A volume directory this SetUp created is written without a listing of it; one that
    // existed (a remount) or holds nested mountpoints is listed first, and a nested
    // mountpoint that takes a payload's name is refused as before.
    #[test]
    fn only_a_volume_directory_created_empty_is_written_without_a_listing() {
        let tmp = tempfile::tempdir().unwrap();
        let payload: Payload = [("app.conf", FileProjection::new("port = 80\n", 0o644))]
            .into_iter()
            .collect();
        let listings = |job: WriteJob| {
            nodelet_atomic_writer::probe::take();
            let outcome = job.run(&payload);
            (outcome, nodelet_atomic_writer::probe::take().read_dirs)
        };
        let (outcome, lists) = listings(job(tmp.path(), "new", false));
        assert_eq!((outcome.unwrap(), lists), (WriteOutcome::Written, 0));
        let (outcome, lists) = listings(job(tmp.path(), "new", true));
        assert_eq!((outcome.unwrap(), lists), (WriteOutcome::Unchanged, 2));

        let mut nested = job(tmp.path(), "nested", false);
        nested.nested = vec!["sub".into()];
        let (outcome, lists) = listings(nested);
        assert_eq!((outcome.unwrap(), lists), (WriteOutcome::Written, 1));
        let mut taken = job(tmp.path(), "taken", false);
        taken.nested = vec!["app.conf".into()];
        let err = taken.run(&payload).unwrap_err().to_string();
        assert!(err.contains("app.conf"), "{err}");
    }

    #[test]
    fn a_plain_directory_is_not_a_mountpoint() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("d")).unwrap();
        assert!(!is_mountpoint(&tmp.path().join("d")).unwrap());
    }
}
