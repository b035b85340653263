//! Container log files: a container's stdout and stderr written in the CRI log format, rotated
//! by size, and read back as `kubectl logs` shows them.
//!
//! # On disk
//!
//! ```text
//! <root>/logs/pods/<namespace>_<name>_<uid>/   the pod log dir (`PodDirs::pod_logs`)
//!     <container>/                              one directory per container
//!         0.log                                 instance 0 (restart count 0), kept while 1 runs
//!         1.log.20250102-030405                 instance 1, rotated, oldest first
//!         1.log.20250102-030405.1               rotated again within the same second
//!         1.log                                 instance 1, the file being written
//! ```
//!
//! # Format
//!
//! One record per line, as containerd's CRI logger writes it:
//!
//! ```text
//! 2016-10-06T00:17:09.669794202Z stdout F a whole line
//! 2016-10-06T00:17:09.669794203Z stderr P the first 16 KiB of a longer line
//! 2016-10-06T00:17:09.669794203Z stderr F the rest of it
//! ```
//!
//! The timestamp (UTC, nine fractional digits) is when the agent read the bytes; the stream is
//! `stdout` or `stderr`; the tag is `F` for the end of a line (its content without the `\n`, and
//! without a `\r` right before it) or `P` for a partial chunk. A line longer than
//! [`LogConfig::max_line_size`] becomes `P` chunks of exactly that size followed by an `F`;
//! output that ends without a newline is written as a last `P`, as containerd does. A reader
//! gets the bytes back by appending `\n` to the content of `F` records only.
//!
//! # Writing ([`copy_streams`])
//!
//! 1. Both pipes are read concurrently until both reach end of file.
//! 2. Each read is cut into records; the whole records of one read go to the file in one write,
//!    under a lock, stamped with one timestamp taken under that lock: records never interleave
//!    and timestamps never go backwards within a file.
//! 3. A write that leaves the file at `max_size` bytes or more rotates it (below).
//! 4. A failed write or rotation does not stop the copy: the output is drained, so that the
//!    container never blocks on a full pipe, and the first error is returned at the end.
//!
//! # Rotation
//!
//! 1. The current file `<n>.log` is hard-linked to `<n>.log.<YYYYMMDD-HHMMSS>` (UTC). Rotated
//!    files sort by stamp, then `k` in `.<k>`: a rotation within the second of the newest rotated
//!    file (or with the clock set back) takes that stamp with the next `k`.
//! 2. A new empty `<n>.log.tmp` is renamed over `<n>.log`: a reader never finds it missing.
//! 3. The oldest rotated files of the instance are deleted until `max_files - 1` remain.
//!
//! When instance `n + 1` starts, [`prune_instances`] deletes the files of instances below `n`:
//! the previous instance stays for `kubectl logs --previous`.
//!
//! # Reading ([`read_logs`])
//!
//! 1. The current file is opened, then the instance's rotated files, oldest first; reading open
//!    handles keeps the result consistent while the writer rotates.
//! 2. With `tail_lines`, a first pass counts the messages so that the second skips all but the
//!    last `n`.
//! 3. Records are parsed ([`parse_line`]); the `P` chunks of a stream and their `F` are one
//!    message, written as they come with at most one timestamp; messages of the other stream or
//!    before `since` are skipped; the output stops at `limit_bytes`.
//! 4. With `follow`, at the end of the current file the reader polls every 200 ms for new
//!    records and for a new `<n>.log`. After a rotation it finishes the old file, reads the files
//!    rotated in between, and goes on with the new one. It returns once `container_exited` has
//!    resolved and everything is read.
//!
//! # Differences from the kubelet and containerd
//!
//! - The kubelet gzips every rotated file but the newest (`<n>.log.<stamp>.gz`); nodelet keeps
//!   them uncompressed (and its reader ignores `.gz` files).
//! - The kubelet rotates from a periodic check and names rotated files in local time; nodelet
//!   rotates right after the write that reaches `max_size` and names them in UTC.
//! - The kubelet's `ReadLogs` reads the current file only; nodelet first reads the instance's
//!   rotated files.
//! - `tail_lines` counts messages (a `P`…`F` run is one line), where the kubelet counts records;
//!   `timestamps` prefixes a message once, where the kubelet prefixes every chunk.
//! - Malformed records are skipped, as the kubelet does; Docker's JSON format is not read.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use nodelet_runtime::logs::{self, LogConfig, ReadOptions, Stream};
//!
//! let pod_log_dir = tempfile::tempdir()?;
//! let path = logs::container_log_path(pod_log_dir.path(), "app", 0);
//! logs::copy_streams(&b"hello\n"[..], &b"oops\n"[..], path.clone(), LogConfig::default()).await?;
//!
//! let options = ReadOptions { stream: Some(Stream::Stdout), ..ReadOptions::default() };
//! let mut out = Vec::new();
//! logs::read_logs(&path, &options, std::future::ready(()), &mut out).await?;
//! assert_eq!(out, b"hello\n");
//! # Ok(())
//! # }
//! ```

mod error;
mod files;
mod format;
mod reader;
mod stream;
mod writer;

pub use error::LogError;
pub use files::{container_log_path, instances, prune_instances};
pub use format::{LogLine, parse_line};
pub use reader::{ReadOptions, read_logs};
pub use stream::Stream;
pub use writer::{
    DEFAULT_MAX_FILES, DEFAULT_MAX_LINE_SIZE, DEFAULT_MAX_SIZE, LogConfig, copy_streams,
};
