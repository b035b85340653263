//! Atomic projection of a payload of files into a directory, the way the kubelet updates
//! ConfigMap and Secret volumes, made crash-safe.
//!
//! A [`Payload`] maps relative paths to [`FileProjection`]s (bytes, mode, optional owner). An
//! [`AtomicWriter`] owns one target directory and replaces its whole contents with each
//! [`write`](AtomicWriter::write): every file a reader opens is complete and belongs to either
//! the old or the new payload, never a torn or half-written file; a reader that resolves
//! `..data` once sees one complete payload. Watchers see one `..data` rename per real change.
//! The crate is synchronous `std::fs` code, knows nothing of Kubernetes, and runs on Unix
//! (Linux is what it is tested on).
//!
//! ```
//! use nodelet_atomic_writer::{AtomicWriter, FileProjection, Payload, WriteOutcome, WriterConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let mut writer = AtomicWriter::new(dir.path(), WriterConfig::default())?;
//!
//! let mut payload = Payload::new();
//! payload.insert("app.conf", FileProjection::new(b"port = 8080\n".to_vec(), 0o644));
//! payload.insert("tls/key.pem", FileProjection::new(b"-----BEGIN...".to_vec(), 0o600));
//! assert_eq!(writer.write(&payload, None)?, WriteOutcome::Written);
//! assert_eq!(std::fs::read(dir.path().join("app.conf"))?, b"port = 8080\n");
//!
//! // The same payload again changes nothing.
//! assert_eq!(writer.write(&payload, None)?, WriteOutcome::Unchanged);
//! # Ok(()) }
//! ```
//!
//! # Layout on disk
//!
//! The files live in a hidden *data directory* named after the UTC time of the write plus a
//! random number. `..data` points to the current one; each top-level payload name is a symlink
//! through `..data` (AW-9, AW-11). Payload `{podName, user/labels}`:
//!
//! ```text
//! target/
//! ├── ..2024_01_31_12_00_05.0084130917<20-digit modes digest>/
//! │   │                                 data directory, mode 0755: exactly the payload
//! │   ├── podName                       real file, mode = payload mode
//! │   └── user/labels                   real directories (0755) and files
//! ├── ..data    -> ..2024_01_31_12_00_05.0084130917<digest>
//! ├── podName   -> ..data/podName
//! └── user      -> ..data/user
//! ```
//!
//! The data directory's name has the kubelet's shape (`..<UTC time>.<digits>`); its digits are
//! 10 random ones followed by a digest of the requested modes and owners (see below), so the
//! data directory holds the payload's files and nothing else.
//!
//! An update writes a complete new data directory next to the old one, renames a `..data_tmp`
//! symlink over `..data` (one atomic `rename(2)`), then fixes up the visible symlinks and removes
//! the old directory. Names starting with `..` are reserved for the writer.
//!
//! # The write algorithm
//!
//! [`AtomicWriter::write`] runs these steps; the code carries the same `// (n)` markers.
//! Rule numbers (AW-n) refer to the atomic-writer section of the repository's
//! `docs/rules.md`, which describes the upstream `pkg/volume/util/atomic_writer.go`.
//!
//! 1. **Validate and clean** every key (AW-3, AW-4; see [`validate_path`]), in byte order of
//!    the keys. The first failure aborts the write with the kubelet's error text; nothing on
//!    disk has been touched.
//! 2. **Inspect the target**, from one listing of it. Read `..data` (absent means a first
//!    write). Fail with [`Error::ForeignData`] if `..data` is not a symlink to a real data
//!    directory, or with [`Error::VisibleNameOccupied`] if a visible name the payload needs
//!    holds anything but our symlink. Remove a stale `..data_tmp` symlink left by a crash.
//! 3. **Paths to remove** (AW-8): entries of the current data directory that are neither
//!    payload paths nor their ancestors (one walk, which also finds a legacy manifest).
//! 4. **Change detection** (AW-7): the payload differs if any file is missing, is not a regular
//!    file, or has other bytes, mode or owner, or if the data directory holds a manifest of an
//!    older version of this crate. If nothing differs and nothing is to be removed, skip to
//!    step 10 ([`WriteOutcome::Unchanged`]).
//! 5. **Create the new data directory**, mode exactly 0755.
//! 6. **Write every file**: parent directories 0755, the bytes, `chown` to `fs_user` (gid
//!    unchanged), the mode exactly (umask-independent).
//! 7. **Call `set_perms`** with the new data directory's path.
//! 8. **Make it durable.** An update first creates `..data_tmp` pointing to the new data
//!    directory. Then `fsync` every file, every new directory and the data directory, and, for
//!    an update, the target.
//! 9. **Switch**: an update renames `..data_tmp` over `..data` (one atomic `rename(2)`); a
//!    first write creates `..data` (one atomic `symlink(2)`).
//! 10. **Create missing visible symlinks** `name -> ..data/name` (AW-9); the link of a
//!     top-level file with an `fs_user` is `lchown`ed to it too (Kubernetes 1.36).
//! 11. **Remove stale visible symlinks**: our symlinks whose name the payload no longer has
//!     (AW-10), after an `fsync` of the target that makes the switch durable. Then `fsync` the
//!     target if 9–11 changed anything (not after a first write: nothing old depends on it).
//! 12. **Remove old data directories**: the previous one and orphans of crashed writes (found
//!     by the listing of step 2).
//!
//! A failure in steps 5–9 removes the new data directory (and `..data_tmp`) before returning;
//! `..data` still points to the old, complete data. A failure after step 9 leaves the new data
//! in place; the next write finishes the job.
//!
//! # What a write costs, and why nothing less is safe
//!
//! Inodes: a write allocates exactly what the layout holds, as the kubelet does: the data
//! directory, one per file and per directory inside it, one symlink (`..data`, or `..data_tmp`
//! renamed over it) and, on a first write, one per visible name. Nothing else is created: no
//! manifest, no temporary file. With fsync, the `fsync`s are one per new file and directory,
//! and none (first write) or two (update) of the target, plus one more before step 11 removes a
//! name. Each cut below keeps the guarantees of the next section; the crate README has the
//! counts and `tests/writer/counts.rs` pins them.
//!
//! * **One listing of the target instead of probing each name.** Steps 2, 10, 11 and 12 work
//!   from it (a visible name costs one `readlink`, not two `lstat`s and a `readlink`). Only
//!   this writer changes the directory (one writer per directory), so the listing stays true
//!   for the whole write; names it creates itself it knows. A writer made with
//!   [`AtomicWriter::for_new_dir`] for a directory its caller just created skips even that
//!   listing (and the `stat` of [`AtomicWriter::new`]) on its first write.
//! * **A first write creates `..data` directly** and does not `fsync` the target. The files
//!   and directories are durable before `..data` exists, so `..data` never names torn files.
//!   The entries of the target (the data directory's, `..data`, the visible names) reach the
//!   disk with the file system's next commit; a power loss before it leaves one of the states
//!   a crash can leave anyway: nothing (the volume as empty as before the write, the "old"
//!   content), a dangling `..data` (its directory's entry lost: the next write rewrites, a
//!   data directory that vanished is a change), or `..data` without some visible names (as
//!   between steps 9 and 10: the next write, a remount, creates them). Nothing old is removed
//!   on the strength of the switch, and an update's `fsync` of the target before its rename
//!   makes them durable before anything replaces them. There was nothing to protect by a
//!   rename, nor by an `fsync` of the target (on ext4 a journal commit to force or wait for).
//! * **An update creates `..data_tmp` before the `fsync`s**, so on a journaling file system
//!   the first file `fsync` commits it with everything else and the target `fsync` that must
//!   precede the rename (it makes the new directory's entry durable) finds nothing left to
//!   commit. Readers never follow `..data_tmp`; a crash leaves a stale one that step 2 removes.
//! * **One `fsync` of the target after the switch and the new names** (steps 9–10), not one
//!   after each: a new visible name that reaches the disk before the rename dangles or names
//!   the same file through `..data`, harmless either way. Removing a name (step 11) must wait
//!   for the switch to be durable (else a power loss could keep the old data minus a name), so
//!   only then the target is synced before it as well. The old data directory is removed only
//!   after the last `fsync`.
//! * **Change detection reads each file once** (its size is known from the `lstat`, so no read
//!   to find the end; an empty file is not opened); the walk of step 3 also finds a legacy
//!   manifest.
//! * **Kept, although they cost syscalls**: the `chmod` after each `mkdir` and the `fchmod`
//!   after each create (the umask is process-wide and can only be read by changing it; modes
//!   must be exact), the `fsync` of each file (data of *other* files is not written by one
//!   `fsync`; `syncfs` would flush the whole file system, other tenants' data included) and of
//!   each new directory (POSIX makes entries durable only through their directory), and the
//!   listing inside `remove_dir_all` when the old directory goes (step 3 listed it already,
//!   but removing by path from that listing would follow a directory swapped for a symlink
//!   meanwhile; `remove_dir_all` works from directory descriptors).
//!
//! # Where this crate goes beyond the kubelet
//!
//! Everything observable is the kubelet's (layout, validation order and texts, AW-1 … AW-11)
//! except these deliberate differences:
//!
//! 1. **Durability.** With [`WriterConfig::fsync`] (the default), file contents and the new
//!    data directory are `fsync`ed before `..data` can name them, the target directory before
//!    and after an update's switch, and the old data directory is only deleted after the
//!    switch is durable. A power loss therefore never exposes empty or torn files. The kubelet
//!    does not `fsync`. Turn it off for tmpfs.
//! 2. **A first write creates `..data` directly** instead of renaming `..data_tmp` over it (a
//!    watcher sees a creation rather than a rename; no container runs on a volume before its
//!    first write).
//! 3. **Recovery.** A stale `..data_tmp` (crash between steps 8 and 9) is removed instead of
//!    failing every later changing write (upstream quirk); data directories not referenced by
//!    `..data` are removed after every successful write; missing visible symlinks are recreated
//!    even when the payload is unchanged; our visible symlinks left dangling by a crash are
//!    removed.
//! 4. **Mode and owner changes are applied.** The kubelet compares only contents (AW-7), so a
//!    mode-only change never reaches an existing volume. Here a change of mode or `fs_user`
//!    produces a new data directory, atomically, like a content change. To make this immune to a
//!    `set_perms` hook that adjusts modes afterwards (fsGroup adds group bits), the data
//!    directory's name ends in a 20-digit digest (64-bit FNV-1a) of every file's path,
//!    requested mode and owner, and the next write compares the digest of its own request with
//!    it, not with the modes on disk. Nothing is added to the data directory: it holds exactly
//!    the payload, like the kubelet's. Without a digest (a directory written by the kubelet) the
//!    modes on disk are compared. A directory written by an older version of this crate (with a
//!    `..nodelet_manifest` file, [`MANIFEST_NAME`]) is adopted and rewritten, without the file,
//!    by the next write. A path that is a directory in the old data but a file in the payload
//!    is a change, not an error (upstream fails non-deterministically).
//! 5. **Hostile target contents.** If a visible name the payload needs is occupied by something
//!    that is not our symlink, or `..data` / `..data_tmp` is not a symlink of ours, the write
//!    fails with a clear error and changes nothing (the kubelet silently skips such names, so
//!    the file never becomes visible). This includes a real directory created beside the data
//!    for a nested mount point (PL-12) when a payload key uses the same top-level name.
//!    Stale-name removal touches only our own symlinks; old-directory removal only real
//!    directories with the data directory name shape.
//! 6. **Stricter validation**, reported before the disk is touched where the kubelet fails
//!    half-way: a key that *cleans* to a reserved name (`./..data`) or to `.`, a key with a NUL
//!    byte, a mode above `0o7777`, and a file that is also another path's parent directory
//!    ([`Error::PathConflict`]). Two raw keys that clean to the same path are resolved
//!    deterministically: the one greatest in byte order wins.
//! 7. **Failed writes clean up** the new data directory immediately (the kubelet leaves it
//!    behind after step 6 or 7 failures).
//! 8. **`set_perms` receives the full path** of the new data directory, not its base name.
//! 9. **Error texts never contain a data directory's random name**: a path in the new data
//!    directory is named as the payload path in the target (`<target>/<key>`), one in the
//!    current data through `..data`. The same failure on every retry gives the same text, so
//!    the caller's events aggregate (the kubelet's texts embed the timestamped name).
//!
//! # Guarantees
//!
//! * A reader that opens a visible name gets a file of the old payload or of the new one: both
//!   resolve through `..data`, which switches in one `rename(2)` (or, on a first write, appears
//!   in one `symlink(2)`). Files are complete before the switch (and durable, with fsync).
//! * After a power loss (with fsync) the volume holds the old or the new payload whole: nothing
//!   can make `..data` name the new directory before its files and entries are durable, and
//!   the old directory and removed names go only after the switch is durable. (After a first
//!   write, some of its visible names may be missing, as after a crash between steps 9 and
//!   10.)
//! * Between the switch (9) and steps 10–11 a top-level name *added* by the update is not there
//!   yet and a *removed* one dangles (reads fail with "not found"), as in the kubelet, which
//!   creates new names only after the data is in place (upstream #93686). A crash in that window
//!   leaves exactly this state; the next write completes it.
//! * If a write fails or the process dies before step 9, the visible tree is exactly the old one.
//! * After any failure or crash, the next write (by a new writer, after a restart) converges to
//!   exactly the payload, with one data directory and no `..data_tmp`.
//!
//! # Contracts
//!
//! * **One writer per directory.** [`AtomicWriter::write`] takes `&mut self`: writes through
//!   one writer are sequential by construction. Two writers (or processes) on one directory
//!   are not supported and can remove each other's data directories.
//! * **Blocking.** Plain `std::fs`; from async code use `tokio::task::spawn_blocking`.
//! * **Idempotent.** Writing an unchanged payload touches nothing (except repairs, above).
//! * **Interruption.** There is no cancellation of a synchronous call; if the thread or process
//!   dies mid-write, see the guarantees above.
//! * **Secrets.** [`FileProjection`] and [`Payload`] redact file contents in `Debug`; tracing
//!   events carry paths, counts and byte totals only.
//! * **Ownership.** `fs_user` is applied with `chown` (uid only) to the file, and with `lchown`
//!   to its user-visible symlink when the file is at the top level. Changing to another uid needs
//!   `CAP_CHOWN`; tests use the current uid, and another uid only when they run as root.
//!
//! # Reading
//!
//! [`read_visible`] returns what a container sees through the visible names (path → bytes and
//! mode); it is the oracle of this crate's tests and handy in callers' tests.
//!
//! # Command line
//!
//! The `atomic-write` example replaces a directory's contents from a JSON payload on stdin, for
//! scripts: `cargo run -p nodelet-atomic-writer --example atomic-write -- DIR [--no-fsync]`
//! (see the README for the format).
//!
//! # Testing seam
//!
//! `WriterConfig::fault_hook` (hidden from the docs, not a stable API) lets crash tests fail
//! or abort the writer at every disk mutation; see `tests/writer/crash.rs`. `probe` (hidden
//! too) counts every file-system call the writer makes on the current thread, by kind; see
//! `tests/writer/counts.rs`.
//!
//! The `volume-ops` example writes one payload shape into many fresh directories and prints the
//! free-inode delta, for measuring with `strace -f -c` (README, "Inodes and syscalls per
//! volume").

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![cfg(unix)]

mod config;
mod detect;
mod error;
mod fsops;
mod layout;
mod payload;
mod target;
mod validate;
mod writer;

#[doc(hidden)]
pub use config::fault;
pub use config::{SwitchHook, WriterConfig};
pub use error::{Error, InvalidPath};
#[doc(hidden)]
pub use fsops::probe;
pub use layout::{DATA_DIR_NAME, DATA_TMP_NAME, MANIFEST_NAME, read_visible};
pub use payload::{FileProjection, Payload};
pub use validate::{MAX_FILE_NAME_LEN, MAX_MODE, MAX_PATH_LEN, clean_path, validate_path};
pub use writer::{AtomicWriter, SetPerms, WriteOutcome};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
