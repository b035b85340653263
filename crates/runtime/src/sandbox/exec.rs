//! Step 11 of the init process (and the last step of `container-exec`): find the container's
//! program as the container runtimes do and execute it, with their error texts.

use std::convert::Infallible;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::unistd::{self, AccessFlags};

use super::error::SandboxError;

/// `PATH` when the container's environment has none (the container runtimes' default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Finds the program and executes it with this process's environment. std's `exec` is
/// `execve` with `environ` after resetting the signal mask and `SIGPIPE` (the Rust runtime
/// ignores it, and an ignored signal would stay ignored in the program).
pub(super) fn exec(program: &str, args: &[String]) -> Result<Infallible, SandboxError> {
    exec_with(program, args, None)
}

/// [`exec`] with exactly the environment `env` (`NAME=value` entries) instead of this
/// process's, `PATH` looked up in it.
pub(super) fn exec_in(
    program: &str,
    args: &[String],
    env: &[OsString],
) -> Result<Infallible, SandboxError> {
    exec_with(program, args, Some(env))
}

fn exec_with(
    program: &str,
    args: &[String],
    env: Option<&[OsString]>,
) -> Result<Infallible, SandboxError> {
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
        let search = match env {
            Some(env) => env_value(env, "PATH"),
            None => std::env::var_os("PATH"),
        };
        find_in_path(program, search)
            .ok_or_else(|| SandboxError::ProgramNotFound(program.to_owned()))?
    };
    let mut command = std::process::Command::new(&path);
    command.arg0(program).args(args);
    if let Some(env) = env {
        command.env_clear();
        for entry in env {
            let bytes = entry.as_bytes();
            // An entry without `=` cannot be set through std; the kernel passes it, but no
            // libc reads it as a variable either.
            if let Some(eq) = bytes.iter().position(|&b| b == b'=').filter(|&i| i > 0) {
                let (name, value) = (&bytes[..eq], &bytes[eq + 1..]);
                command.env(OsStr::from_bytes(name), OsStr::from_bytes(value));
            }
        }
    }
    let err = command.exec();
    Err(SandboxError::Exec(path.display().to_string(), errno(err)))
}

/// The value of `name` in `env` (`NAME=value` entries; the first wins, as `getenv`'s).
pub(super) fn env_value(env: &[OsString], name: &str) -> Option<OsString> {
    env.iter().find_map(|entry| {
        let rest = entry.as_bytes().strip_prefix(name.as_bytes())?;
        let value = rest.strip_prefix(b"=")?;
        Some(OsStr::from_bytes(value).to_owned())
    })
}

/// The first executable regular file named `program` in `search` (a `PATH` value, the
/// default when `None`; an empty entry is the working directory).
fn find_in_path(program: &str, search: Option<OsString>) -> Option<PathBuf> {
    let search = search.unwrap_or_else(|| DEFAULT_PATH.into());
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
