//! The container's first process: [`init_main`] builds the container's mount namespace from a
//! [`LaunchSpec`], drops to the container's user and executes the container's program. And
//! [`exec_main`] (`kubectl exec`): a command run later in a running container's namespaces,
//! as its user, with its environment (see `enter.rs`).
//!
//! The init process is a freshly executed, single-threaded program running as the agent's
//! user — root, or an ordinary user in a user namespace of its own (see [Without
//! root](#without-root)) — started by the supervisor with exactly the container's environment,
//! stdin `/dev/null`, stdout and stderr the container's log, and the path of a JSON
//! [`LaunchSpec`] as its only argument.
//!
//! # Algorithm
//!
//! 1. Read the spec; connect to the abstract unix socket `spec.status_socket`. The socket is
//!    close-on-exec, so the supervisor reads end-of-file once the program runs; any failure
//!    before that is written there as one line (and to stderr), and the exit code is
//!    [`START_FAILED`].
//! 2. `setsid()`: a session and process group of its own, for the supervisor to signal.
//! 3. New mount and UTS namespaces — without root, owned by a new user namespace in which the
//!    agent's uid and gid are `spec.uid` and `spec.gid`; set the host name; join the pod's IPC
//!    namespace when the spec names one (PW-58).
//! 4. Make `/` recursively a slave: host mounts still propagate in, nothing propagates out.
//! 5. Build the root: a tmpfs on `spec.scratch`, and on `<scratch>/root` an overlay
//!    (`lowerdir=/`, upper and work on the tmpfs) — without root, a tmpfs holding a copy of the
//!    host's tree made of overlays of its directories — so writes land in memory and vanish
//!    with the namespace. Every other host mount (from `/proc/self/mountinfo`, parent before
//!    child; not those under a masked directory, nor `/dev` and those below it) is bound at
//!    its path under the root: `/proc` and `/sys` recursively and writable, the others one by
//!    one and read-only (keeping their `nosuid`, `nodev`, `noexec` and atime flags). `/dev` is
//!    the container's own, as runc makes it: a tmpfs (0755, 64 MiB) with `null`, `zero`,
//!    `full`, `random`, `urandom` and `tty` like the host's (made with `mknod`; without root,
//!    the host's bound on empty files), a new `devpts` instance on `pts` (`ptmx` a link to
//!    `pts/ptmx`), a fresh tmpfs on `shm`, and the links `fd`, `stdin`, `stdout`, `stderr` (into
//!    `/proc/self/fd`) and `core`; what the container creates there stays in memory too. A
//!    fresh tmpfs on `/tmp`.
//! 6. Cover each `spec.masked` directory visible in the root with an empty read-only tmpfs.
//! 7. Bind each `spec.mounts` entry, creating its target (a directory or an empty file, like
//!    the source) in the writable layer, or in `/dev`'s tmpfs (a termination log); remount
//!    read-only ones. A volume directory itself is bound, so swapping its `..data` symlink
//!    shows inside at once.
//!    Then (PW-42, PW-44, `security.rs`): a container that is not privileged gets `/sys`
//!    (and each mount below it) read-only, `/proc/{bus,fs,irq,sys,sysrq-trigger}` read-only
//!    and runc's masked paths (`/proc/kcore`, `/proc/keys`, `/sys/firmware`, …) covered; a
//!    privileged one gets the host's `/dev` (bound recursively) instead of its own; with
//!    `read_only_root` the root and `/tmp` are remounted read-only (as root only).
//! 8. `pivot_root` into the new root and detach the old one.
//! 9. Drop from the bounding set every capability the spec does not keep (PW-44); `setgroups`
//!    (as root only), `setresgid`, `setresuid`; a process still root keeps exactly the
//!    spec's capabilities; `no_new_privs` when the spec asks for it (PW-43).
//! 10. Create the working directory if missing (as the container's user) and enter it.
//! 11. With `seccomp_runtime_default`, install the RuntimeDefault seccomp filter (PW-46,
//!     `seccomp.rs`); find the program (a path, or a name in the environment's `PATH`) and
//!     execute it with the process's environment.
//!
//! Paths inside the container are resolved under the new root with their symbolic links
//! followed inside it (as they will be after step 8), never on the host.
//!
//! ```text
//! <scratch>/            tmpfs (0755), private to the namespace
//! ├── upper/            the container's writes to its root filesystem (without root:
//! ├── work/             overlayfs' work directory    upper/<n>, work/<n> per overlay)
//! └── root/             overlay lowerdir=/ → "/" after pivot_root (without root: a tmpfs,
//!     │                 with overlays of the host's directories, copies of the directories
//!     │                 above mount points, symbolic links and read-only files)
//!     ├── proc sys      recursive binds of the host's
//!     ├── dev/          tmpfs (0755, 64 MiB), the container's own
//!     │   ├── null zero full random urandom tty
//!     │   │             like the host's: mknod (without root: binds of the host's)
//!     │   ├── pts/      a new devpts instance (ptmxmode 0666)
//!     │   ├── shm/      fresh tmpfs (1777)
//!     │   ├── ptmx      → pts/ptmx
//!     │   └── fd stdin stdout stderr core
//!     │                 → /proc/self/fd{,/0,/1,/2}, /proc/kcore
//!     ├── tmp           fresh tmpfs (1777)
//!     ├── <host mounts> read-only binds
//!     ├── <masked>      empty read-only tmpfs
//!     └── <targets>     the spec's bind mounts (those under /dev in its tmpfs)
//! ```
//!
//! # Without root
//!
//! When the agent's effective uid is not 0, step 3 is `unshare(CLONE_NEWUSER | CLONE_NEWNS |
//! CLONE_NEWUTS)`, then `deny` to `/proc/self/setgroups`, `<spec.uid> <agent's uid> 1` to
//! `/proc/self/uid_map` and `<spec.gid> <agent's gid> 1` to `/proc/self/gid_map`: the one
//! mapping a process may write for a namespace it made without privilege. Until `execve`, the
//! process holds every capability inside that namespace, enough for the mounts and
//! `pivot_root`; on the host it can do no more than the agent's user. The container then:
//!
//! * runs as the agent's user on the host: `runAsUser` and `runAsGroup` are the ids it sees
//!   (`id -u`) and that the agent's files show as owned by; any other id (root's files among
//!   them) shows as the overflow id 65534. A `runAsUser: 0` container is root only inside its
//!   namespace.
//! * reads and writes what the agent's user may, no more: a file the agent's user cannot read
//!   stays unreadable.
//! * has no supplementary groups of its own: `setgroups` is denied in such a namespace, so a
//!   spec with `groups` (`supplementalGroups`, `fsGroup`) fails to start with
//!   [`SandboxError::SupplementaryGroups`], and the agent's own supplementary groups stay with
//!   the process (shown as 65534). Giving groups would take the setuid `newgidmap` helper and
//!   `/etc/subgid` ranges, which map the container's ids onto other host ids than the agent's.
//! * gets a root built differently: the host's mounts are locked to their parents in the new
//!   namespace, and overlayfs refuses `lowerdir=/` over locked mounts, so the directories
//!   above each host mount point and masked directory, and those where missing mount targets
//!   are created, are copied (as directories the container's user owns) and the others
//!   overlaid one by one (the top of each overlay shows as the container's user's too). A
//!   copy-up needs its file's owner mapped, so the container writes (in memory) where the
//!   agent's user owns the tree, at the top of an overlay, in the copied directories and in
//!   its own `/tmp`; elsewhere the write fails (`EACCES`, `EOVERFLOW`, or `EROFS` for a copied
//!   directory's files, which are read-only binds), and never reaches the host. A host mount
//!   with mounts below it is copied the same way rather than bound.
//! * finds the host's device nodes bound in its `/dev` rather than made: a user namespace may
//!   not make device nodes, nor open one on a filesystem mounted in it. A `chmod` of one is
//!   refused (their owner is not mapped).
//! * needs Linux 5.11 or later (overlayfs in a user namespace) and user namespaces open to
//!   ordinary users: [`check_support`] checks the settings it can see.

pub(crate) mod binds;
mod dev;
mod enter;
mod error;
mod exec;
mod mirror;
mod paths;
mod root;
mod seccomp;
mod security;
mod spec_file;
mod userns;

use std::convert::Infallible;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;

pub use enter::{EXEC_FAILED, EXEC_NOT_FOUND, exec_main};
pub use error::{SandboxError, UserNamespaceGap};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::unistd::{self, Gid, Uid};
use root::Privilege;
use spec_file::load_spec;

use crate::spec::LaunchSpec;

/// The exit code of an init process that failed before executing the program.
pub const START_FAILED: i32 = 128;

/// Checks that this process can start containers: it runs as root, or the kernel lets an
/// ordinary user make user namespaces and mount overlayfs in them (the limits in
/// `/proc/sys/user/max_{user,mnt,uts}_namespaces` above 0,
/// `/proc/sys/kernel/unprivileged_userns_clone` absent or 1, Ubuntu's
/// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns` off or the agent confined by a
/// profile, Linux 5.11 or later); and the kernel has the `tmpfs` and `overlay` filesystems
/// (listed in `/proc/filesystems`, or `overlay` as a module the kernel loads on the first
/// mount). Without root, a seccomp filter or a security module may still refuse the user
/// namespace: the first container then fails with [`SandboxError::UnshareUser`].
///
/// # Errors
///
/// [`SandboxError::NoUserNamespaces`], [`SandboxError::MissingFilesystem`] or
/// [`SandboxError::ReadFilesystems`]; the text says what is missing.
pub fn check_support() -> Result<(), SandboxError> {
    let euid = Uid::effective();
    if !euid.is_root() {
        let read = |path: &str| fs::read_to_string(path);
        if let Some(missing) = userns::missing_support(&read) {
            let uid = euid.as_raw();
            return Err(SandboxError::NoUserNamespaces { uid, missing });
        }
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
            let _ = writeln!(io::stderr(), "{}", error::report(&err));
            return START_FAILED;
        }
    };
    let Err(err) = start(&spec);
    let text = error::report(&err);
    let _ = writeln!(status, "{text}");
    let _ = writeln!(io::stderr(), "{text}");
    START_FAILED
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
    load_spec(Path::new(&path))
}

/// Steps 2 to 11; returns only on failure.
fn start(spec: &LaunchSpec) -> Result<Infallible, SandboxError> {
    // (2)
    unistd::setsid().map_err(SandboxError::NewSession)?;
    // (3)
    let privilege = match Uid::effective().is_root() {
        true => {
            unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)
                .map_err(SandboxError::Unshare)?;
            Privilege::Root
        }
        false => {
            userns::enter(spec)?;
            Privilege::UserNamespace
        }
    };
    unistd::sethostname(&spec.hostname)
        .map_err(|e| SandboxError::SetHostname(spec.hostname.clone(), e))?;
    if let Some(path) = &spec.ipc_namespace {
        let file =
            fs::File::open(path).map_err(|e| SandboxError::OpenNamespace(path.clone(), e))?;
        nix::sched::setns(&file, CloneFlags::CLONE_NEWIPC)
            .map_err(|e| SandboxError::JoinNamespace(path.clone(), e))?;
    }
    // (4)
    let slave = MsFlags::MS_REC | MsFlags::MS_SLAVE;
    mount(None::<&str>, "/", None::<&str>, slave, None::<&str>)
        .map_err(SandboxError::MakeRootSlave)?;
    // (5)
    let root = root::build_root(spec, privilege)?;
    // (6)
    root::mask(&root, &spec.masked)?;
    // (7)
    for entry in &spec.mounts {
        root::bind_volume(&root, &entry.source, &entry.target, entry.read_only)?;
    }
    security::protect(&root, spec, privilege == Privilege::Root)?;
    // (8)
    unistd::chdir(&root)
        .and_then(|()| unistd::pivot_root(".", "."))
        .and_then(|()| umount2(".", MntFlags::MNT_DETACH))
        .and_then(|()| unistd::chdir("/"))
        .map_err(|e| SandboxError::PivotRoot(root.clone(), e))?;
    // (9)
    security::limit_bounding_set(spec)?;
    let groups: Vec<Gid> = spec.groups.iter().copied().map(Gid::from_raw).collect();
    let (uid, gid) = (Uid::from_raw(spec.uid), Gid::from_raw(spec.gid));
    match privilege {
        // Denied in the user namespace, and `enter` refused a spec with groups.
        Privilege::UserNamespace => Ok(()),
        Privilege::Root => unistd::setgroups(&groups),
    }
    .and_then(|()| unistd::setresgid(gid, gid, gid))
    .and_then(|()| unistd::setresuid(uid, uid, uid))
    .map_err(|source| SandboxError::SwitchUser {
        uid: spec.uid,
        gid: spec.gid,
        groups: spec.groups.clone(),
        source,
    })?;
    security::restrict_process(spec)?;
    // (10)
    let _ = fs::create_dir_all(&spec.working_dir);
    std::env::set_current_dir(&spec.working_dir)
        .map_err(|e| SandboxError::WorkingDir(spec.working_dir.clone(), e))?;
    // (11)
    seccomp::apply(spec)?;
    exec::exec(&spec.program, &spec.args)
}

#[cfg(test)]
mod tests {
    use super::*;

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
