//! One agent per root directory: an exclusive `flock(2)` on `<root-dir>/nodelet.lock`, taken
//! before anything else at start and held until the agent exits. A second agent on the same
//! directory fails at once, naming the directory and the pid that holds it, and changes nothing
//! there (its lock and kubeconfig stay the first agent's). The kernel drops the lock when the
//! holder exits, however it exits,
//! so a stale lock file never blocks a restart.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;

use anyhow::Context as _;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nodelet_config::LOCK_FILE_NAME;

/// The held lock; released when dropped (or when the process exits).
#[derive(Debug)]
pub(crate) struct RootDirLock {
    _file: Flock<File>,
}

/// Creates `root` if needed and locks it for this process.
///
/// # Errors
/// Another process holds the lock (the message names the directory and its pid), or the
/// directory or lock file cannot be created or locked.
pub(crate) fn lock_root_dir(root: &Path) -> anyhow::Result<RootDirLock> {
    std::fs::create_dir_all(root)
        .with_context(|| format!("creating root directory {}", root.display()))?;
    let path = root.join(LOCK_FILE_NAME);
    // No truncation: the holder's pid must survive a failed attempt.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening the lock file {}", path.display()))?;
    let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => locked,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let holder = match file.read_to_string(&mut text) {
                Ok(_) if !text.trim().is_empty() => format!("pid {}", text.trim()),
                _ => "pid unknown".to_owned(),
            };
            anyhow::bail!(
                "root directory {} is in use by another nodelet ({holder}, lock file {}): \
                 stop it or choose another --root-dir",
                root.display(),
                path.display()
            );
        }
        Err((_, errno)) => {
            return Err(errno).with_context(|| format!("locking {}", path.display()));
        }
    };
    let record = (|| {
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        writeln!(file, "{}", std::process::id())
    })();
    record.with_context(|| format!("writing the pid to {}", path.display()))?;
    Ok(RootDirLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_names_the_directory_and_the_holder_pid() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path().join("root");
        let held = lock_root_dir(&root).unwrap_or_else(|e| panic!("{e:#}"));
        let err = lock_root_dir(&root).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(&root.display().to_string()), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        lock_root_dir(&root).unwrap_or_else(|e| panic!("{e:#}"));
    }
}
