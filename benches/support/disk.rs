//! The file system the benchmarked agent's root directory lives on (`SCALE_DISK`):
//!
//! - `plain` (default): a temporary directory wherever `$TMPDIR` is, as before.
//! - `tmpfs`: a tmpfs mounted for the run.
//! - `fresh-ext4`: a new 8 GiB sparse image, `mkfs.ext4` (inode tables written at once, so no
//!   `ext4lazyinit` runs beside the bench), on a loop device, mounted for the run.
//! - `aged-ext4`: the same after aging: 300,000 files of 1–4 KiB created in 600 directories,
//!   nine in ten deleted again (the survivors fragment every block group's inode and block
//!   bitmaps, as years of package upgrades and logs do). The aged image is built once and
//!   kept as `$CARGO_TARGET_TMPDIR/scale-disk/aged.img` (1.2 GB on disk: freed blocks keep
//!   their data); each run mounts a sparse copy of it (a few seconds), so runs start from
//!   the same state. Built in about 40 s on the 2-core bench machine.
//!
//! The loop devices and mounts need root: without it the run fails naming what is missing.
//! They are removed when the [`Disk`] is dropped — at the end of a run and when it panics
//! (benchmarks unwind) — with any mount the agent made below (its tmpfs volumes) first; a
//! run killed outright leaves them, and the next run removes them before it starts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Files created while aging an image, and how many directories they are spread over.
const AGING_FILES: usize = 300_000;
const AGING_DIRS: usize = 600;
/// One in this many aging files is kept.
const AGING_KEEP_ONE_IN: usize = 10;
/// The image size (sparse): 8 GiB gives mkfs.ext4's default 524,288 inodes.
const IMAGE_SIZE: &str = "8G";

/// Which file system (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskKind {
    Plain,
    Tmpfs,
    FreshExt4,
    AgedExt4,
}

impl DiskKind {
    /// `SCALE_DISK` (default `plain`).
    ///
    /// # Panics
    /// On an unknown value, naming the known ones.
    pub(crate) fn from_env() -> DiskKind {
        match std::env::var("SCALE_DISK").as_deref().unwrap_or("plain") {
            "plain" | "" => DiskKind::Plain,
            "tmpfs" => DiskKind::Tmpfs,
            "fresh-ext4" => DiskKind::FreshExt4,
            "aged-ext4" => DiskKind::AgedExt4,
            other => panic!("SCALE_DISK={other:?}: expected plain, tmpfs, fresh-ext4 or aged-ext4"),
        }
    }

    /// The name `SCALE_DISK` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DiskKind::Plain => "plain",
            DiskKind::Tmpfs => "tmpfs",
            DiskKind::FreshExt4 => "fresh-ext4",
            DiskKind::AgedExt4 => "aged-ext4",
        }
    }
}

/// A file system mounted for one run (or a temporary directory for `plain`); unmounted and
/// detached when dropped.
pub(crate) struct Disk {
    kind: DiskKind,
    /// Where the run's files go: the mount point, or the temporary directory.
    dir: PathBuf,
    mounted: bool,
    loop_device: Option<String>,
    image: Option<PathBuf>,
    _temp: Option<tempfile::TempDir>,
}

impl Disk {
    /// Prepares `kind` for a run (for `aged-ext4`, building the cached aged image first if
    /// there is none).
    ///
    /// # Panics
    /// When not root (for all but `plain`), or when a command fails, naming it.
    pub(crate) fn prepare(kind: DiskKind) -> Disk {
        if kind == DiskKind::Plain {
            let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary dir: {e}"));
            return Disk {
                kind,
                dir: temp.path().to_path_buf(),
                mounted: false,
                loop_device: None,
                image: None,
                _temp: Some(temp),
            };
        }
        assert!(
            nix::unistd::geteuid().is_root(),
            "SCALE_DISK={} needs root (mount, losetup, mkfs.ext4); run the bench as root or \
             with SCALE_DISK=plain",
            kind.name()
        );
        let base = work_dir();
        let mnt = base.join(format!("mnt-{}", kind.name()));
        std::fs::create_dir_all(&mnt).unwrap_or_else(|e| panic!("{}: {e}", mnt.display()));
        // A run killed outright left its mounts and loop device: remove them first.
        unmount_all(&mnt);
        let mut disk = Disk {
            kind,
            dir: mnt.clone(),
            mounted: false,
            loop_device: None,
            image: None,
            _temp: None,
        };
        match kind {
            DiskKind::Plain => {}
            DiskKind::Tmpfs => {
                run(Command::new("mount")
                    .args(["-t", "tmpfs", "-o", "size=2g,mode=0755", "tmpfs"])
                    .arg(&mnt));
                disk.mounted = true;
            }
            DiskKind::FreshExt4 | DiskKind::AgedExt4 => {
                let image = base.join(format!("run-{}.img", kind.name()));
                detach_loops(&image);
                let _ = std::fs::remove_file(&image);
                if kind == DiskKind::FreshExt4 {
                    make_ext4(&image);
                } else {
                    let aged = aged_image(&base);
                    run(Command::new("cp")
                        .arg("--sparse=always")
                        .arg(&aged)
                        .arg(&image));
                }
                disk.image = Some(image.clone());
                let dev = attach_loop(&image);
                disk.loop_device = Some(dev.clone());
                run(Command::new("mount").args(["-t", "ext4", &dev]).arg(&mnt));
                disk.mounted = true;
            }
        }
        disk
    }

    /// The directory the run's files go in (on the chosen file system).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Which file system this is.
    pub(crate) fn kind(&self) -> DiskKind {
        self.kind
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if self.mounted {
            unmount_all(&self.dir);
        }
        if let Some(dev) = self.loop_device.take() {
            let _ = Command::new("losetup").args(["-d", &dev]).status();
        }
        if let Some(image) = self.image.take() {
            detach_loops(&image);
            let _ = std::fs::remove_file(image);
        }
    }
}

/// `$CARGO_TARGET_TMPDIR/scale-disk`: images and mount points, kept between runs.
fn work_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scale-disk");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Runs `cmd`, panicking with its output if it fails.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Unmounts everything at and below `dir` (the agent's tmpfs volumes included); lazily when
/// busy. Nothing mounted is fine.
fn unmount_all(dir: &Path) {
    let mounted = |d: &Path| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(&*d.to_string_lossy()))
    };
    if !mounted(dir) {
        return;
    }
    let ok = Command::new("umount")
        .arg("-R")
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let _ = Command::new("umount").args(["-R", "-l"]).arg(dir).status();
    }
}

/// Detaches every loop device backed by `image`.
fn detach_loops(image: &Path) {
    let Ok(out) = Command::new("losetup").arg("-j").arg(image).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((dev, _)) = line.split_once(':') {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

fn attach_loop(image: &Path) -> String {
    run(Command::new("losetup")
        .args(["--find", "--show"])
        .arg(image))
}

/// A sparse image of [`IMAGE_SIZE`] with a new ext4 on it.
fn make_ext4(image: &Path) {
    run(Command::new("truncate").args(["-s", IMAGE_SIZE]).arg(image));
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
        .arg(image));
}

/// The cached aged image, built now if missing (under a temporary name, renamed when done,
/// so an interrupted build is never used).
fn aged_image(base: &Path) -> PathBuf {
    let aged = base.join("aged.img");
    if aged.exists() {
        return aged;
    }
    let building = base.join("aged.img.building");
    detach_loops(&building);
    let _ = std::fs::remove_file(&building);
    make_ext4(&building);
    let mnt = base.join("mnt-aging");
    std::fs::create_dir_all(&mnt).unwrap_or_else(|e| panic!("{}: {e}", mnt.display()));
    unmount_all(&mnt);
    let dev = attach_loop(&building);
    run(Command::new("mount").args(["-t", "ext4", &dev]).arg(&mnt));
    let started = Instant::now();
    let aged_result = std::panic::catch_unwind(|| age(&mnt));
    unmount_all(&mnt);
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    if let Err(p) = aged_result {
        std::panic::resume_unwind(p);
    }
    std::fs::rename(&building, &aged).unwrap_or_else(|e| panic!("{}: {e}", aged.display()));
    eprintln!(
        "scale/disk: built the aged ext4 image {} in {:.1?} ({AGING_FILES} files created in {AGING_DIRS} directories, {} kept)",
        aged.display(),
        started.elapsed(),
        AGING_FILES / AGING_KEEP_ONE_IN
    );
    aged
}

/// Creates [`AGING_FILES`] files of 1–4 KiB over [`AGING_DIRS`] directories, then deletes all
/// but one in [`AGING_KEEP_ONE_IN`], interleaved so the survivors are spread everywhere.
fn age(root: &Path) {
    let content = vec![b'x'; 4096];
    let dir = |d: usize| root.join(format!("d{d:03}"));
    for d in 0..AGING_DIRS {
        std::fs::create_dir(dir(d)).unwrap_or_else(|e| panic!("aging: {e}"));
    }
    let path = |i: usize| dir(i % AGING_DIRS).join(format!("f{i:06}"));
    for i in 0..AGING_FILES {
        let len = 1024 + (i * 7919) % 3072;
        std::fs::write(path(i), &content[..len]).unwrap_or_else(|e| panic!("aging: {e}"));
    }
    for i in 0..AGING_FILES {
        if i % AGING_KEEP_ONE_IN != 0 {
            std::fs::remove_file(path(i)).unwrap_or_else(|e| panic!("aging: {e}"));
        }
    }
    // The directories that held them stay, large and mostly empty, as on a used disk.
    nix::unistd::sync();
}
