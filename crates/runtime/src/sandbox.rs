//! The container's first process: [`init_main`] builds the container's mount namespace from a
//! [`LaunchSpec`], drops to the container's user and executes the container's program.
//!
//! The init process is a freshly executed, single-threaded program running as root, started
//! by the supervisor with exactly the container's environment, stdin `/dev/null`, stdout and
//! stderr the container's log, and the path of a JSON [`LaunchSpec`] as its only argument.
//!
//! # Algorithm
//!
//! 1. Read the spec; connect to the abstract unix socket `spec.status_socket`. The socket is
//!    close-on-exec, so the supervisor reads end-of-file once the program runs; any failure
//!    before that is written there as one line (and to stderr), and the exit code is
//!    [`START_FAILED`].
//! 2. `setsid()`: a session and process group of its own, for the supervisor to signal.
//! 3. New mount and UTS namespaces; set the host name.
//! 4. Make `/` recursively a slave: host mounts still propagate in, nothing propagates out.
//! 5. Build the root: a tmpfs on `spec.scratch`, an overlay (`lowerdir=/`, upper and work on
//!    the tmpfs) on `<scratch>/root`, so writes land in memory and vanish with the namespace.
//!    Every other host mount (from `/proc/self/mountinfo`, parent before child; not those under
//!    a masked directory) is bound at its path under the root: `/proc`, `/sys` and `/dev`
//!    recursively and writable, the others one by one and read-only. Fresh tmpfs on `/tmp`
//!    and `/dev/shm`.
//! 6. Cover each `spec.masked` directory visible in the root with an empty read-only tmpfs.
//! 7. Bind each `spec.mounts` entry, creating its target (a directory or an empty file, like
//!    the source) in the writable layer; remount read-only ones. A volume directory itself is
//!    bound, so swapping its `..data` symlink shows inside at once.
//! 8. `pivot_root` into the new root and detach the old one.
//! 9. `setgroups`, `setresgid`, `setresuid`.
//! 10. Create the working directory if missing (as the container's user) and enter it.
//! 11. Find the program (a path, or a name in the environment's `PATH`) and execute it with the
//!     process's environment.
//!
//! Paths inside the container are resolved under the new root with their symbolic links
//! followed inside it (as they will be after step 8), never on the host.
//!
//! ```text
//! <scratch>/            tmpfs (0755), private to the namespace
//! ├── upper/            the container's writes to its root filesystem
//! ├── work/             overlay's work directory
//! └── root/             overlay lowerdir=/ → "/" after pivot_root
//!     ├── proc sys dev  recursive binds of the host's
//!     ├── tmp dev/shm   fresh tmpfs (1777)
//!     ├── <host mounts> read-only binds
//!     ├── <masked>      empty read-only tmpfs
//!     └── <targets>     the spec's bind mounts
//! ```

use std::convert::Infallible;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};
use nix::unistd::{self, AccessFlags, Gid, Uid};

use crate::spec::LaunchSpec;

/// The exit code of an init process that failed before executing the program.
pub const START_FAILED: i32 = 128;

/// `PATH` when the container's environment has none (the container runtimes' default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Symbolic links followed while resolving one path (the kernel's `MAXSYMLINKS`).
const MAX_SYMLINKS: u32 = 40;

/// Host mounts bound recursively and writable rather than one by one and read-only.
const KERNEL_TREES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Why a container could not be started; its text (with its sources, [`init_main`] joins
/// them with `: `) is what the supervisor reports. Paths in the container are as seen there.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The command line is not `SPEC.json`.
    #[error("usage: nodelet-container-init SPEC.json")]
    Usage,
    /// The spec file (named) could not be read.
    #[error("cannot read the launch spec {0}")]
    ReadSpec(PathBuf, #[source] io::Error),
    /// The spec file (named) is not a valid [`LaunchSpec`].
    #[error("cannot parse the launch spec {0}")]
    ParseSpec(PathBuf, #[source] serde_json::Error),
    /// The supervisor's status socket (named) could not be reached.
    #[error("cannot connect to the status socket @{0}")]
    ConnectStatus(String, #[source] io::Error),
    /// `setsid` failed.
    #[error("cannot start a new session")]
    NewSession(#[source] Errno),
    /// `unshare(CLONE_NEWNS | CLONE_NEWUTS)` failed.
    #[error("cannot create the mount and UTS namespaces")]
    Unshare(#[source] Errno),
    /// `sethostname` failed.
    #[error("cannot set the host name {0:?}")]
    SetHostname(String, #[source] Errno),
    /// Making `/` a recursive slave failed.
    #[error("cannot make / a slave mount")]
    MakeRootSlave(#[source] Errno),
    /// The scratch directory (its tmpfs, `upper`, `work`, `root`) could not be prepared.
    #[error("cannot prepare the scratch directory {0}")]
    Scratch(PathBuf, #[source] io::Error),
    /// The overlay root could not be mounted on `<scratch>/root`.
    #[error("cannot mount the container's overlay root on {0}")]
    MountOverlay(PathBuf, #[source] Errno),
    /// `/proc/self/mountinfo` could not be read.
    #[error("cannot read /proc/self/mountinfo")]
    ReadMountInfo(#[source] io::Error),
    /// A host mount (its mount point) could not be made read-only in the container.
    #[error("cannot bind the host mount {0} read-only into the container")]
    BindHostMount(PathBuf, #[source] Errno),
    /// A fresh tmpfs (`/tmp`, `/dev/shm`) could not be mounted.
    #[error("cannot mount a tmpfs on {0}")]
    MountTmpfs(PathBuf, #[source] io::Error),
    /// A masked host directory could not be covered.
    #[error("cannot mask {0}")]
    Mask(PathBuf, #[source] io::Error),
    /// A mount's source (host path) for a target (in the container) does not exist.
    #[error("mount source {0} for {1}")]
    MountSource(PathBuf, PathBuf, #[source] io::Error),
    /// A mount's target (in the container), or one of its parents, could not be created.
    #[error("cannot create the mount target {0}")]
    CreateMountTarget(PathBuf, #[source] io::Error),
    /// A mount's target (in the container) exists with another type (directory or file) than
    /// its source (host path).
    #[error("mount target {0} and its source {1} are not both directories or both files")]
    MountTargetType(PathBuf, PathBuf),
    /// The bind mount, or its read-only remount, failed.
    #[error("cannot bind {source_path} on {target}")]
    BindMount {
        /// The host path.
        source_path: PathBuf,
        /// The target in the container.
        target: PathBuf,
        /// Why.
        #[source]
        source: Errno,
    },
    /// `pivot_root` into `<scratch>/root`, or detaching the old root, failed.
    #[error("cannot pivot_root into {0}")]
    PivotRoot(PathBuf, #[source] Errno),
    /// `setgroups`, `setresgid` or `setresuid` failed.
    #[error("cannot switch to uid {uid}, gid {gid}, groups {groups:?}")]
    SwitchUser {
        /// The spec's uid.
        uid: u32,
        /// The spec's gid.
        gid: u32,
        /// The spec's supplementary groups.
        groups: Vec<u32>,
        /// Why.
        #[source]
        source: Errno,
    },
    /// The working directory (in the container) could not be entered.
    #[error("cannot change to the working directory {0}")]
    WorkingDir(PathBuf, #[source] io::Error),
    /// The program is a name not found in `PATH`.
    #[error("exec: \"{0}\": executable file not found in $PATH")]
    ProgramNotFound(String),
    /// The program is a path that cannot be `stat`ed.
    #[error("exec: \"{0}\": stat {0}: {reason}", reason = go_text(*.1))]
    ProgramStat(String, Errno),
    /// The program is a path to a directory or to a file without execute permission.
    #[error("exec: \"{0}\": permission denied")]
    ProgramPermission(String),
    /// `execve` of the program (its path) failed.
    #[error("exec: \"{0}\": {reason}", reason = go_text(*.1))]
    Exec(String, Errno),
    /// The agent (its effective uid) does not run as root.
    #[error(
        "the process runtime needs root (uid 0) to make mount namespaces: the agent runs as uid {0}"
    )]
    NotRoot(u32),
    /// The kernel lacks a filesystem (`overlay`, `tmpfs`) the runtime mounts.
    #[error("the kernel has no {0} filesystem (/proc/filesystems)")]
    MissingFilesystem(&'static str),
    /// `/proc/filesystems` could not be read.
    #[error("cannot read /proc/filesystems")]
    ReadFilesystems(#[source] io::Error),
}

/// Checks that this process can start containers: it runs as root and the kernel has the
/// `tmpfs` and `overlay` filesystems (listed in `/proc/filesystems`, or `overlay` as a module
/// the kernel loads on the first mount).
///
/// # Errors
///
/// [`SandboxError::NotRoot`], [`SandboxError::MissingFilesystem`] or
/// [`SandboxError::ReadFilesystems`]; the text says what is missing.
pub fn check_support() -> Result<(), SandboxError> {
    let euid = Uid::effective();
    if !euid.is_root() {
        return Err(SandboxError::NotRoot(euid.as_raw()));
    }
    let listed = fs::read_to_string("/proc/filesystems").map_err(SandboxError::ReadFilesystems)?;
    let has = |name| {
        listed
            .lines()
            .any(|l| l.split_whitespace().last() == Some(name))
    };
    if !has("tmpfs") {
        return Err(SandboxError::MissingFilesystem("tmpfs"));
    }
    if !has("overlay") && !overlay_module_available() {
        return Err(SandboxError::MissingFilesystem("overlay"));
    }
    Ok(())
}

/// The init process: sets up the container as the spec named by the only argument says and
/// executes its program. Returns only on failure: [`START_FAILED`], after writing the error
/// as one line to the status socket (when connected) and to stderr.
pub fn init_main<I: IntoIterator<Item = OsString>>(args: I) -> i32 {
    // (1)
    let connected = read_spec(args).and_then(|spec| {
        let name = spec.status_socket.clone();
        match SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| UnixStream::connect_addr(&a))
        {
            Ok(stream) => Ok((spec, stream)),
            Err(err) => Err(SandboxError::ConnectStatus(name, err)),
        }
    });
    let (spec, mut status) = match connected {
        Ok(connected) => connected,
        Err(err) => {
            let _ = writeln!(io::stderr(), "{}", report(&err));
            return START_FAILED;
        }
    };
    let Err(err) = start(&spec);
    let text = report(&err);
    let _ = writeln!(status, "{text}");
    let _ = writeln!(io::stderr(), "{text}");
    START_FAILED
}

/// The error and its sources on one line, `: `-separated.
fn report(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// An errno as Go, and so the container runtimes, print it: `no such file or directory`.
fn go_text(errno: Errno) -> String {
    let mut chars = errno.desc().chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

/// Whether `overlay` is a module the kernel can load (`modules.alias` names `fs-overlay`).
fn overlay_module_available() -> bool {
    let Ok(release) = fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let aliases = Path::new("/lib/modules")
        .join(release.trim())
        .join("modules.alias");
    fs::read_to_string(aliases).is_ok_and(|text| {
        text.lines()
            .any(|l| l.split_whitespace().nth(1) == Some("fs-overlay"))
    })
}

fn read_spec<I: IntoIterator<Item = OsString>>(args: I) -> Result<LaunchSpec, SandboxError> {
    let mut args = args.into_iter();
    let (Some(path), None) = (args.next(), args.next()) else {
        return Err(SandboxError::Usage);
    };
    let path = PathBuf::from(path);
    match fs::read(&path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|e| SandboxError::ParseSpec(path, e)),
        Err(err) => Err(SandboxError::ReadSpec(path, err)),
    }
}

/// Steps 2 to 11; returns only on failure.
fn start(spec: &LaunchSpec) -> Result<Infallible, SandboxError> {
    // (2)
    unistd::setsid().map_err(SandboxError::NewSession)?;
    // (3)
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS).map_err(SandboxError::Unshare)?;
    unistd::sethostname(&spec.hostname)
        .map_err(|e| SandboxError::SetHostname(spec.hostname.clone(), e))?;
    // (4)
    let slave = MsFlags::MS_REC | MsFlags::MS_SLAVE;
    mount(None::<&str>, "/", None::<&str>, slave, None::<&str>)
        .map_err(SandboxError::MakeRootSlave)?;
    // (5)
    let root = build_root(&spec.scratch, &spec.masked)?;
    // (6)
    let masked = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for dir in &spec.masked {
        // Not visible in the container (missing, or under its private /tmp): nothing to hide.
        match resolve_in_root(&root, dir) {
            Ok(target) if target.is_dir() => mount_tmpfs(&target, masked, "mode=0755,size=4k")
                .map_err(|e| SandboxError::Mask(dir.clone(), e.into()))?,
            Ok(_) => {}
            Err(err) => return Err(SandboxError::Mask(dir.clone(), err)),
        }
    }
    // (7)
    for entry in &spec.mounts {
        bind_volume(&root, &entry.source, &entry.target, entry.read_only)?;
    }
    // (8)
    unistd::chdir(&root)
        .and_then(|()| unistd::pivot_root(".", "."))
        .and_then(|()| umount2(".", MntFlags::MNT_DETACH))
        .and_then(|()| unistd::chdir("/"))
        .map_err(|e| SandboxError::PivotRoot(root.clone(), e))?;
    // (9)
    let groups: Vec<Gid> = spec.groups.iter().copied().map(Gid::from_raw).collect();
    let (uid, gid) = (Uid::from_raw(spec.uid), Gid::from_raw(spec.gid));
    unistd::setgroups(&groups)
        .and_then(|()| unistd::setresgid(gid, gid, gid))
        .and_then(|()| unistd::setresuid(uid, uid, uid))
        .map_err(|source| SandboxError::SwitchUser {
            uid: spec.uid,
            gid: spec.gid,
            groups: spec.groups.clone(),
            source,
        })?;
    // (10)
    let _ = fs::create_dir_all(&spec.working_dir);
    std::env::set_current_dir(&spec.working_dir)
        .map_err(|e| SandboxError::WorkingDir(spec.working_dir.clone(), e))?;
    // (11)
    exec(&spec.program, &spec.args)
}

/// Step 5: the tmpfs, the overlay and the host's other mounts (but those under a masked
/// directory: hidden anyway, and a copy would pin, say, another pod's tmpfs volume while the
/// container runs); returns `<scratch>/root`.
fn build_root(scratch: &Path, masked: &[PathBuf]) -> Result<PathBuf, SandboxError> {
    let scratch =
        fs::canonicalize(scratch).map_err(|e| SandboxError::Scratch(scratch.to_path_buf(), e))?;
    let root = scratch.join("root");
    let prepare = || -> io::Result<()> {
        mount_tmpfs(&scratch, MsFlags::empty(), "mode=0755")?;
        for dir in ["upper", "work", "root"] {
            fs::create_dir(scratch.join(dir))?;
        }
        // Layer paths relative to the scratch directory need no escaping of `,` or `:`.
        std::env::set_current_dir(&scratch)
    };
    prepare().map_err(|e| SandboxError::Scratch(scratch.clone(), e))?;
    let layers = "lowerdir=/,upperdir=upper,workdir=work";
    mount(
        Some("overlay"),
        "root",
        Some("overlay"),
        MsFlags::empty(),
        Some(layers),
    )
    .map_err(|e| SandboxError::MountOverlay(root.clone(), e))?;

    let mountinfo = fs::read("/proc/self/mountinfo").map_err(SandboxError::ReadMountInfo)?;
    let mut recursive: Vec<PathBuf> = Vec::new();
    for host in mount_points(&mountinfo) {
        if host == Path::new("/")
            || host.starts_with(&scratch)
            || masked.iter().any(|dir| host.starts_with(dir))
            || recursive.iter().any(|tree| host.starts_with(tree))
        {
            continue;
        }
        let inside = root.join(host.strip_prefix("/").unwrap_or(&host));
        let reachable = resolve_in_root(&root, &host).is_ok_and(|p| p == inside);
        if !reachable || fs::symlink_metadata(&inside).is_err() {
            tracing::debug!(path = %host.display(), "host mount shadowed, not bound");
            continue;
        }
        let kernel_tree = KERNEL_TREES.iter().any(|tree| host.starts_with(tree));
        let flags = match kernel_tree {
            true => MsFlags::MS_REC,
            false => MsFlags::empty(),
        };
        if let Err(errno) = bind(&host, &inside, flags) {
            // E.g. a FUSE mount root cannot enter: the container sees the directory beneath,
            // read-only or in the overlay, so nothing reaches the host.
            tracing::debug!(path = %host.display(), %errno, "host mount not bound");
        } else if kernel_tree {
            recursive.push(host);
        } else {
            remount_read_only(&inside).map_err(|e| SandboxError::BindHostMount(host, e))?;
        }
    }

    let no_dev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for (path, flags) in [("/tmp", no_dev), ("/dev/shm", no_dev | MsFlags::MS_NOEXEC)] {
        let target = resolve_in_root(&root, Path::new(path));
        if path == "/dev/shm" && !target.as_ref().is_ok_and(|t| t.is_dir()) {
            // Creating it would write into the host's /dev.
            tracing::debug!(path, "no /dev/shm to mount on");
            continue;
        }
        target
            .and_then(|target| {
                fs::create_dir_all(&target)?;
                Ok(mount_tmpfs(&target, flags, "mode=1777")?)
            })
            .map_err(|e| SandboxError::MountTmpfs(PathBuf::from(path), e))?;
    }
    Ok(root)
}

/// Step 7 for one mount: check the source, create the target, bind, remount read-only.
fn bind_volume(
    root: &Path,
    source: &Path,
    target: &Path,
    read_only: bool,
) -> Result<(), SandboxError> {
    let is_dir = fs::metadata(source)
        .map_err(|e| SandboxError::MountSource(source.to_path_buf(), target.to_path_buf(), e))?
        .is_dir();
    let create_err = |e| SandboxError::CreateMountTarget(target.to_path_buf(), e);
    let host_target = resolve_in_root(root, target).map_err(create_err)?;
    match fs::metadata(&host_target) {
        Ok(meta) if meta.is_dir() != is_dir => {
            let (target, source) = (target.to_path_buf(), source.to_path_buf());
            return Err(SandboxError::MountTargetType(target, source));
        }
        Ok(_) => {}
        Err(_) => create_target(&host_target, is_dir).map_err(create_err)?,
    }
    let bind_err = |errno| SandboxError::BindMount {
        source_path: source.to_path_buf(),
        target: target.to_path_buf(),
        source: errno,
    };
    bind(source, &host_target, MsFlags::MS_REC).map_err(bind_err)?;
    if read_only {
        remount_read_only(&host_target).map_err(bind_err)?;
    }
    Ok(())
}

/// Creates a missing mount target and its parents (in the overlay's writable layer).
fn create_target(path: &Path, is_dir: bool) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    if is_dir {
        return fs::create_dir(path);
    }
    let _file = fs::File::options().append(true).create(true).open(path)?;
    Ok(())
}

/// Makes the bind mount at `target` read-only, keeping the flags it has (a bind remount that
/// drops a locked flag fails with `EPERM`); `relatime` is the kernel's default.
fn remount_read_only(target: &Path) -> nix::Result<()> {
    let had = statvfs(target)?.flags();
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    for (st, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
    ] {
        if had.contains(st) {
            flags |= ms;
        }
    }
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>)
}

/// A bind mount (`MS_BIND` and `flags`) of `source` on `target`.
fn bind(source: &Path, target: &Path, flags: MsFlags) -> nix::Result<()> {
    let flags = MsFlags::MS_BIND | flags;
    mount(Some(source), target, None::<&str>, flags, None::<&str>)
}

fn mount_tmpfs(target: &Path, flags: MsFlags, data: &str) -> nix::Result<()> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(data))
}

/// The mount points of `/proc/self/mountinfo` (field 5), in file order, unescaped.
fn mount_points(mountinfo: &[u8]) -> Vec<PathBuf> {
    mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .map(|field| PathBuf::from(OsString::from_vec(unescape_octal(field))))
        .collect()
}

/// Decodes the kernel's `\ooo` escapes (`\040` for a space).
fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut rest = field;
    while let Some((&first, tail)) = rest.split_first() {
        match tail {
            [a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', ..] if first == b'\\' => {
                out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
                rest = &tail[3..];
            }
            _ => {
                out.push(first);
                rest = tail;
            }
        }
    }
    out
}

/// `path` (absolute, in the container) as a host path under `root`, its symbolic links followed
/// inside `root` (as they resolve once `root` is `/`), never on the host. Missing components
/// are kept as they are.
fn resolve_in_root(root: &Path, path: &Path) -> io::Result<PathBuf> {
    fn names(path: &Path) -> impl DoubleEndedIterator<Item = OsString> + '_ {
        path.components().filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
    }
    let mut pending: Vec<OsString> = names(path).rev().collect();
    let mut inside = PathBuf::new();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            inside.pop();
            continue;
        }
        let candidate = root.join(&inside).join(&name);
        if !fs::symlink_metadata(&candidate).is_ok_and(|m| m.file_type().is_symlink()) {
            inside.push(name);
            continue;
        }
        links += 1;
        if links > MAX_SYMLINKS {
            return Err(Errno::ELOOP.into());
        }
        let link = fs::read_link(&candidate)?;
        if link.is_absolute() {
            inside.clear();
        }
        pending.extend(names(&link).rev());
    }
    Ok(root.join(inside))
}

/// Step 11: finds the program and executes it with this process's environment. std's `exec`
/// is `execve` with `environ` after resetting the signal mask and `SIGPIPE` (the Rust runtime
/// ignores it, and an ignored signal would stay ignored in the program).
fn exec(program: &str, args: &[String]) -> Result<Infallible, SandboxError> {
    let errno =
        |err: io::Error| Errno::from_raw(err.raw_os_error().unwrap_or(Errno::EINVAL as i32));
    let path = if program.contains('/') {
        let meta = fs::metadata(program)
            .map_err(|e| SandboxError::ProgramStat(program.to_owned(), errno(e)))?;
        if !is_executable(Path::new(program), &meta) {
            return Err(SandboxError::ProgramPermission(program.to_owned()));
        }
        PathBuf::from(program)
    } else {
        find_in_path(program).ok_or_else(|| SandboxError::ProgramNotFound(program.to_owned()))?
    };
    let err = std::process::Command::new(&path)
        .arg0(program)
        .args(args)
        .exec();
    Err(SandboxError::Exec(path.display().to_string(), errno(err)))
}

/// The first executable regular file named `program` in the environment's `PATH` (an empty
/// entry is the working directory).
fn find_in_path(program: &str) -> Option<PathBuf> {
    let search = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    search
        .as_bytes()
        .split(|&b| b == b':')
        .map(|dir| match dir {
            b"" => Path::new(".").join(program),
            dir => Path::new(OsStr::from_bytes(dir)).join(program),
        })
        .find(|candidate| fs::metadata(candidate).is_ok_and(|m| is_executable(candidate, &m)))
}

/// A regular file with an execute bit that this process may execute.
fn is_executable(path: &Path, meta: &fs::Metadata) -> bool {
    meta.is_file()
        && meta.permissions().mode() & 0o111 != 0
        && unistd::access(path, AccessFlags::X_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_mount_points_are_unescaped_in_file_order() {
        let mountinfo = b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
            22 27 0:21 / /proc rw,relatime - proc proc rw\n\
            90 27 0:50 / /mnt/a\\040b\\011c\\134d rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mount_points(mountinfo),
            [
                PathBuf::from("/"),
                PathBuf::from("/proc"),
                PathBuf::from("/mnt/a b\tc\\d")
            ]
        );
    }

    #[test]
    fn a_backslash_without_three_octal_digits_is_kept() {
        assert_eq!(unescape_octal(br"a\09x\4"), br"a\09x\4");
        assert_eq!(unescape_octal(br"\012\400"), b"\n\\400");
    }

    #[test]
    fn symlinks_resolve_inside_the_root_not_on_the_host() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        fs::create_dir_all(root.join("run/real")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var-run")).unwrap();
        std::os::unix::fs::symlink("../real", root.join("run/rel")).unwrap();
        std::os::unix::fs::symlink("/loop", root.join("loop")).unwrap();

        let resolve = |p: &str| resolve_in_root(root, Path::new(p));
        assert_eq!(resolve("/var-run/x").unwrap(), root.join("run/x"));
        assert_eq!(
            resolve("/run/rel/missing/y").unwrap(),
            root.join("real/missing/y")
        );
        assert_eq!(resolve("/../../etc").unwrap(), root.join("etc"));
        assert_eq!(
            resolve("/loop/z").unwrap_err().raw_os_error(),
            Some(Errno::ELOOP as i32)
        );
    }

    #[test]
    fn errors_read_as_the_container_runtimes_texts() {
        assert_eq!(go_text(Errno::ENOENT), "no such file or directory");
        let err = SandboxError::ProgramStat("/x".into(), Errno::ENOENT);
        assert_eq!(
            report(&err),
            r#"exec: "/x": stat /x: no such file or directory"#
        );
        let err = SandboxError::WorkingDir("/w".into(), io::Error::from(Errno::EACCES));
        assert_eq!(
            report(&err),
            "cannot change to the working directory /w: Permission denied (os error 13)"
        );
    }

    #[test]
    fn the_spec_is_the_only_argument() {
        assert!(matches!(read_spec([]), Err(SandboxError::Usage)));
        let two = ["a".into(), "b".into()];
        assert!(matches!(read_spec(two), Err(SandboxError::Usage)));
        let missing = [OsString::from("/nonexistent/spec.json")];
        assert!(matches!(
            read_spec(missing),
            Err(SandboxError::ReadSpec(..))
        ));
    }
}
