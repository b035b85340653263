//! Writer options ([`WriterConfig`]) and the hidden fault-injection seam used by crash tests.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A hook called between the switch and the removal of the old data: see
/// [`WriterConfig::on_switch`].
pub type SwitchHook = Arc<dyn Fn(&Path) + Send + Sync>;

/// Options of an [`AtomicWriter`](crate::AtomicWriter).
///
/// ```
/// use nodelet_atomic_writer::WriterConfig;
/// let config = WriterConfig::default().fsync(false);
/// assert!(!config.fsync);
/// let same = WriterConfig { fsync: false, ..WriterConfig::default() };
/// assert_eq!(same.fsync, config.fsync);
/// ```
#[derive(Clone)]
pub struct WriterConfig {
    /// `fsync` file contents and the new data directory before `..data` can name them, and the
    /// target directory around the `..data` switch, so a power loss never exposes empty or torn
    /// files (the crate docs list each `fsync` and why it is needed).
    ///
    /// Default: `true`. Turn it off for data that is rebuilt after a reboot anyway (tmpfs
    /// volumes, tests), where it only costs latency.
    pub fsync: bool,
    /// Called once per write that switched `..data` to a new data directory, with that
    /// directory's path, after the switch and the names are durable and before the old data
    /// directory is removed (between steps (11) and (12)): while it runs, a reader holding a
    /// path into the old data still finds it. The hook must not touch the target directory.
    ///
    /// Default: none. nodelet uses it to move a running container's bind of an item of the
    /// old data to the new data before the old is removed.
    pub on_switch: Option<SwitchHook>,
    /// Test-only seam, see [`fault`]. Not part of the stable API.
    #[doc(hidden)]
    pub fault_hook: Option<fault::FaultHook>,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            fsync: true,
            on_switch: None,
            fault_hook: None,
        }
    }
}

impl WriterConfig {
    /// Sets [`WriterConfig::fsync`].
    #[must_use]
    pub fn fsync(mut self, enabled: bool) -> Self {
        self.fsync = enabled;
        self
    }

    /// Sets [`WriterConfig::on_switch`].
    #[must_use]
    pub fn on_switch(mut self, hook: SwitchHook) -> Self {
        self.on_switch = Some(hook);
        self
    }

    /// Installs a fault hook (test-only seam, see [`fault`]).
    #[doc(hidden)]
    #[must_use]
    pub fn fault_hook(mut self, hook: fault::FaultHook) -> Self {
        self.fault_hook = Some(hook);
        self
    }

    pub(crate) fn inject(&self, point: fault::FaultPoint) -> io::Result<()> {
        match &self.fault_hook {
            Some(hook) => hook(point),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for WriterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterConfig")
            .field("fsync", &self.fsync)
            .field("on_switch", &self.on_switch.as_ref().map(|_| "<hook>"))
            .field("fault_hook", &self.fault_hook.as_ref().map(|_| "<hook>"))
            .finish()
    }
}

/// Test-only seam for crash-consistency tests. **Not part of the stable API**: it may change in
/// any release.
///
/// The writer calls the hook right before each disk mutation of the algorithm, naming the
/// point. A hook that returns `Err` makes that mutation fail as a real I/O error would (the
/// writer's own error handling runs); a hook that panics stops the writer on the spot, like a
/// crash (tests catch the unwind and inspect the directory).
#[doc(hidden)]
pub mod fault {
    use std::io;
    use std::sync::Arc;

    /// The hook: called with each [`FaultPoint`] as the writer reaches it.
    pub type FaultHook = Arc<dyn Fn(FaultPoint) -> io::Result<()> + Send + Sync>;

    /// Places where the writer calls the hook, named after the step (crate docs) they precede.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum FaultPoint {
        /// (2) before removing a stale `..data_tmp`.
        RemoveStaleDataTmp,
        /// (5) before creating the new data directory.
        CreateDataDir,
        /// (6) before each payload file is written.
        WriteFile,
        /// (8) before the durability `fsync`s of the new files and directories.
        SyncDataDir,
        /// (8), (11) before each `fsync` of the target directory.
        SyncTarget,
        /// (8) before creating `..data_tmp` (updates only).
        CreateDataTmp,
        /// (9) before renaming `..data_tmp` over `..data`, or, on a first write, creating
        /// `..data`.
        SwapData,
        /// (10) before each user-visible symlink is created.
        CreateVisibleLink,
        /// (11) before each stale user-visible symlink is removed.
        RemoveVisibleLink,
        /// (12) before each old data directory is removed.
        RemoveOldDataDir,
    }
}
