//! `nodelet container-exec PID SPEC.json -- COMMAND [ARG...]` ([`exec_main`]): runs a command
//! in a running container, as `kubectl exec` asks — in the namespaces of the container's
//! process, as the container's user, in its working directory, with its environment.
//!
//! # Algorithm
//!
//! 1. Read the container's [`LaunchSpec`] (uid, gid, groups, working directory) and the
//!    environment of its process, `/proc/<pid>/environ` (the environment is never written to
//!    disk, so the process is where it is; readable by the agent's user, which started it).
//! 2. Open `/proc/<pid>/ns/{user,mnt,uts,ipc}`. The user namespace is joined only when it is
//!    not this process's own (an agent that is not root runs containers in user namespaces of
//!    their own; as root, containers share the host's), the IPC namespace only when it is not
//!    this process's own (a pod's, PW-58).
//! 3. `setns` into the user namespace (first: the others belong to it), the IPC namespace,
//!    then the mount and UTS namespaces. Joining the mount namespace makes its root (the container's, after the
//!    init process's `pivot_root`) this process's root.
//! 4. `chdir("/")`; `setgroups` (not in a user namespace of the container's: it is denied
//!    there), `setresgid`, `setresuid` to the spec's identity, with the container's
//!    capabilities and `no_new_privs` (PW-43, PW-44).
//! 5. Enter the working directory; find the command (a path, or a name in the container's
//!    `PATH`) and execute it with exactly the container's environment.
//!
//! The process must be single-threaded (`setns` into a user or mount namespace refuses a
//! process that shares its filesystem information with other threads): it is a freshly
//! executed program that starts no thread before this.

use std::convert::Infallible;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

use nix::sched::{CloneFlags, setns};
use nix::unistd::{self, Gid, Uid};

use super::error::{self, SandboxError};
use super::exec;
use crate::spec::LaunchSpec;

/// The exit code of a `container-exec` that failed before executing the command: the command
/// was not found (as shells and `runc exec` answer it).
pub const EXEC_NOT_FOUND: i32 = 127;
/// The exit code of a `container-exec` that failed before executing the command for any other
/// reason (the container is gone, its namespaces could not be joined, the command cannot be
/// executed).
pub const EXEC_FAILED: i32 = 126;

/// What `container-exec`'s command line names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExecArgs {
    pid: i32,
    spec: PathBuf,
    command: Vec<String>,
}

/// Runs `COMMAND` in the running container whose process is `PID` (module docs). `args` are
/// `PID SPEC.json -- COMMAND [ARG...]`. Returns only on failure, after writing the error as one
/// line to stderr: [`EXEC_NOT_FOUND`] when the command is not found, else [`EXEC_FAILED`].
pub fn exec_main<I: IntoIterator<Item = OsString>>(args: I) -> i32 {
    let Err(err) = parse(args).and_then(|args| enter(&args));
    let _ = writeln!(io::stderr(), "{}", error::report(&err));
    match err {
        SandboxError::ProgramNotFound(_) | SandboxError::ProgramStat(..) => EXEC_NOT_FOUND,
        _ => EXEC_FAILED,
    }
}

fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<ExecArgs, SandboxError> {
    let mut args = args.into_iter().map(OsString::into_string);
    let (Some(Ok(pid)), Some(spec), Some(Ok(dashes))) = (args.next(), args.next(), args.next())
    else {
        return Err(SandboxError::ExecUsage);
    };
    let pid = pid.parse::<i32>().map_err(|_| SandboxError::ExecUsage)?;
    let spec = PathBuf::from(spec.map_err(|_| SandboxError::ExecUsage)?);
    let command: Vec<String> = args
        .collect::<Result<_, _>>()
        .map_err(|_| SandboxError::ExecUsage)?;
    if dashes != "--" || command.is_empty() || pid <= 0 {
        return Err(SandboxError::ExecUsage);
    }
    Ok(ExecArgs { pid, spec, command })
}

/// Steps 1 to 5; returns only on failure.
fn enter(args: &ExecArgs) -> Result<Infallible, SandboxError> {
    // (1)
    let spec: LaunchSpec = super::spec_file::load_spec(&args.spec)?;
    let environ = fs::read(format!("/proc/{}/environ", args.pid))
        .map_err(|e| SandboxError::ReadEnviron(args.pid, e))?;
    let env: Vec<OsString> = environ
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| OsString::from_vec(entry.to_vec()))
        .collect();
    // (2)
    let ns = |kind: &str| PathBuf::from(format!("/proc/{}/ns/{kind}", args.pid));
    let open = |path: PathBuf| match File::open(&path) {
        Ok(file) => Ok((path, file)),
        Err(e) => Err(SandboxError::OpenNamespace(path, e)),
    };
    let user = open(ns("user"))?;
    let own = PathBuf::from("/proc/self/ns/user");
    let ours = fs::metadata(&own).map_err(|e| SandboxError::OpenNamespace(own, e))?;
    let theirs = user
        .1
        .metadata()
        .map_err(|e| SandboxError::OpenNamespace(user.0.clone(), e))?;
    let join_user = (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino());
    let mnt = open(ns("mnt"))?;
    let uts = open(ns("uts"))?;
    let ipc = open(ns("ipc"))?;
    let own_ipc = PathBuf::from("/proc/self/ns/ipc");
    let ours = fs::metadata(&own_ipc).map_err(|e| SandboxError::OpenNamespace(own_ipc, e))?;
    let theirs = ipc
        .1
        .metadata()
        .map_err(|e| SandboxError::OpenNamespace(ipc.0.clone(), e))?;
    let join_ipc = (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino());
    // (3)
    let mut joins = Vec::with_capacity(4);
    if join_user {
        joins.push((user, CloneFlags::CLONE_NEWUSER));
    }
    if join_ipc {
        joins.push((ipc, CloneFlags::CLONE_NEWIPC));
    }
    joins.push((mnt, CloneFlags::CLONE_NEWNS));
    joins.push((uts, CloneFlags::CLONE_NEWUTS));
    for ((path, file), kind) in joins {
        setns(&file, kind).map_err(|e| SandboxError::JoinNamespace(path, e))?;
    }
    // (4)
    unistd::chdir("/").map_err(|e| SandboxError::WorkingDir(PathBuf::from("/"), e.into()))?;
    let groups: Vec<Gid> = spec.groups.iter().copied().map(Gid::from_raw).collect();
    let (uid, gid) = (Uid::from_raw(spec.uid), Gid::from_raw(spec.gid));
    super::security::limit_bounding_set(&spec)?;
    match join_user {
        true => Ok(()),
        false => unistd::setgroups(&groups),
    }
    .and_then(|()| unistd::setresgid(gid, gid, gid))
    .and_then(|()| unistd::setresuid(uid, uid, uid))
    .map_err(|source| SandboxError::SwitchUser {
        uid: spec.uid,
        gid: spec.gid,
        groups: spec.groups.clone(),
        source,
    })?;
    super::security::restrict_process(&spec)?;
    super::seccomp::apply(&spec)?;
    // (5)
    std::env::set_current_dir(&spec.working_dir)
        .map_err(|e| SandboxError::WorkingDir(spec.working_dir.clone(), e))?;
    let (program, rest) = args.command.split_first().ok_or(SandboxError::ExecUsage)?;
    exec::exec_in(program, rest, &env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_command_line_is_pid_spec_dashes_and_a_command() {
        let parsed = parse(args(&[
            "42",
            "/x/launch.json",
            "--",
            "cat",
            "/etc/config/key",
        ]));
        assert_eq!(
            parsed.ok(),
            Some(ExecArgs {
                pid: 42,
                spec: PathBuf::from("/x/launch.json"),
                command: vec!["cat".into(), "/etc/config/key".into()],
            })
        );
    }

    #[test]
    fn a_command_line_without_a_command_a_pid_or_dashes_is_refused() {
        for bad in [
            &["42", "/x/launch.json", "--"][..],
            &["42", "/x/launch.json", "cat"],
            &["pid", "/x/launch.json", "--", "cat"],
            &["0", "/x/launch.json", "--", "cat"],
            &["42"],
            &[],
        ] {
            assert!(
                matches!(parse(args(bad)), Err(SandboxError::ExecUsage)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_process_that_does_not_exist_is_reported_not_entered() {
        let dir = tempfile::tempdir().unwrap();
        let spec = LaunchSpec {
            program: "sleep".into(),
            args: vec![],
            uid: 0,
            gid: 0,
            groups: vec![],
            working_dir: "/".into(),
            hostname: "h".into(),
            mounts: vec![],
            scratch: dir.path().into(),
            masked: vec![],
            status_socket: "s".into(),
            privileged: false,
            capabilities: None,
            no_new_privs: false,
            read_only_root: false,
            seccomp_runtime_default: false,
            ipc_namespace: None,
        };
        let path = dir.path().join("launch.json");
        fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
        let path = path.to_str().unwrap();
        // pid_max is at most 2^22: this pid never exists.
        let code = exec_main(args(&["2147483647", path, "--", "true"]));
        assert_eq!(code, EXEC_FAILED);
    }
}
