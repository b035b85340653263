//! Step 11 of the init process: find the container's program as the container runtimes do and
//! execute it, with their error texts.

use std::convert::Infallible;
use std::ffi::OsStr;
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
