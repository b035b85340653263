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

use std::fmt;
use std::future::Future;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::fs::{self, File};
use tokio::io::{
    AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncSeekExt as _, AsyncWrite,
    AsyncWriteExt as _, BufReader,
};
use tokio::sync::Mutex;

/// The default [`LogConfig::max_size`]: 10 MiB, the kubelet's `containerLogMaxSize`.
pub const DEFAULT_MAX_SIZE: u64 = 10 * 1024 * 1024;
/// The default [`LogConfig::max_files`]: 5, the kubelet's `containerLogMaxFiles`.
pub const DEFAULT_MAX_FILES: usize = 5;
/// The default [`LogConfig::max_line_size`]: 16 KiB, containerd's
/// `max_container_log_line_size`.
pub const DEFAULT_MAX_LINE_SIZE: usize = 16 * 1024;

/// How often a following reader looks for new records at the end of the file.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// The size of one read from a container's pipe.
const PIPE_READ_SIZE: usize = 32 * 1024;
/// A record longer than this is malformed: the reader drops it instead of buffering it.
const MAX_RECORD_SIZE: usize = 1024 * 1024;
/// The reader writes its output in pieces of about this size.
const OUTPUT_CHUNK: usize = 64 * 1024;
/// The mode of a log file (before the umask).
const FILE_MODE: u32 = 0o640;
/// The mode of the directories created for log files (before the umask).
const DIR_MODE: u32 = 0o755;
/// How many `.<k>` suffixes rotation tries when a rotated name exists.
const MAX_NAME_CLASHES: u32 = 1000;

/// One of a container's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// How the container log files are written. Defaults are the kubelet's and containerd's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// A file of this size or more is rotated ([`DEFAULT_MAX_SIZE`]). Must be positive.
    pub max_size: u64,
    /// The most files of one container instance: the current one and `max_files - 1` rotated
    /// ones ([`DEFAULT_MAX_FILES`]). At least 2, as the kubelet requires.
    pub max_files: usize,
    /// The longest record content; longer lines are cut into `P` chunks
    /// ([`DEFAULT_MAX_LINE_SIZE`]). Must be positive.
    pub max_line_size: usize,
}

/// One parsed CRI log record. `Debug` shows the size of the content, never the bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// When the runtime read the bytes.
    pub timestamp: DateTime<Utc>,
    /// The stream the bytes came from.
    pub stream: Stream,
    /// `P`: a chunk of a line that goes on in the next record of the stream.
    pub partial: bool,
    /// The bytes, without the record's own `\n`.
    pub content: &'a [u8],
}

/// What [`read_logs`] writes: the kubelet's `containerLogs` options. The default reads
/// everything once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Keep reading as the container writes, until it has exited (`follow`).
    pub follow: bool,
    /// Only the last `n` messages (`tailLines`); with `follow`, those and all new ones.
    pub tail_lines: Option<usize>,
    /// Prefix each message with its RFC 3339 timestamp, nine fractional digits, UTC, and a
    /// space (`timestamps`).
    pub timestamps: bool,
    /// Skip messages older than this (`sinceTime`, or now minus `sinceSeconds`).
    pub since: Option<DateTime<Utc>>,
    /// Stop after this many bytes of output, cutting the last message (`limitBytes`).
    pub limit_bytes: Option<u64>,
    /// Only this stream (`stream`); `None` for both.
    pub stream: Option<Stream>,
}

/// A failure to write, rotate, prune or read container log files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The [`LogConfig`] is out of range.
    #[error("invalid log configuration for {}: {reason}", path.display())]
    InvalidConfig {
        /// The log file it was given for.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// Creating the directories of a log file failed.
    #[error("failed to create log directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Opening or creating a log file failed.
    #[error("failed to open log file {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Appending records to a log file failed.
    #[error("failed to write log file {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading a container's output stream failed; what was read before is in the file.
    #[error("failed to read container {stream} for log file {}", path.display())]
    ReadStream {
        /// The log file the stream goes to.
        path: PathBuf,
        /// The stream.
        stream: Stream,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Rotating a log file failed; the writer goes on appending to it.
    #[error("failed to rotate log file {} to {}", path.display(), rotated.display())]
    Rotate {
        /// The current file.
        path: PathBuf,
        /// The name it was to get (or the temporary file that was to replace it).
        rotated: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Listing a log directory failed.
    #[error("failed to list log directory {}", path.display())]
    ListDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Deleting an old log file failed.
    #[error("failed to remove log file {}", path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading a log file failed.
    #[error("failed to read log file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A record is not in the CRI log format. [`parse_line`] sees no path; the reader skips
    /// such records.
    #[error("malformed CRI log record: {reason}")]
    ParseLine {
        /// What is missing or wrong.
        reason: &'static str,
    },
    /// Writing the logs to the reader's output failed (the client went away).
    #[error("failed to write the logs of {} to the output", path.display())]
    WriteOutput {
        /// The log file being read.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// `<pod_log_dir>/<container>/<restart_count>.log`: the current log file of one container
/// instance, as the kubelet names it. `pod_log_dir` comes from `PodDirs::pod_logs`; the
/// previous instance (`previous`) is `restart_count - 1`.
pub fn container_log_path(pod_log_dir: &Path, container: &str, restart_count: u32) -> PathBuf {
    pod_log_dir
        .join(container)
        .join(format!("{restart_count}.log"))
}

/// Copies a container's `stdout` and `stderr` into the log file `path` (appending if it exists;
/// created 0640, its directories 0755) until both reach end of file, rotating the file as
/// `config` says. See the module docs for the steps.
///
/// # Errors
///
/// [`LogError::InvalidConfig`], [`LogError::CreateDir`] or [`LogError::Open`] before anything is
/// read. Later failures (writing, rotating, reading a stream) do not stop the copy: the streams
/// are drained to their end and the first failure is returned then.
///
/// # Cancel safety
///
/// Dropping the future stops the copy; records already written stay, a line not yet complete is
/// lost.
pub async fn copy_streams(
    stdout: impl AsyncRead,
    stderr: impl AsyncRead,
    path: PathBuf,
    config: LogConfig,
) -> Result<(), LogError> {
    config.validate(&path)?;
    let max_line_size = config.max_line_size;
    let sink = Mutex::new(LogFile::open(path, config).await?);
    // (1) both pipes at once, to their end.
    let stdout = pin!(stdout);
    let stderr = pin!(stderr);
    let (out, err) = tokio::join!(
        pump(stdout, Stream::Stdout, &sink, max_line_size),
        pump(stderr, Stream::Stderr, &sink, max_line_size),
    );
    let file = sink.into_inner();
    tracing::debug!(
        path = %file.path.display(),
        stdout_bytes = out.bytes,
        stderr_bytes = err.bytes,
        "container output streams closed"
    );
    let read_error = |pumped: Pumped, stream| {
        pumped.error.map(|source| LogError::ReadStream {
            path: file.path.clone(),
            stream,
            source,
        })
    };
    let first = read_error(out, Stream::Stdout).or_else(|| read_error(err, Stream::Stderr));
    match file.error.or(first) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// The restart counts of the container instances that have a current log file in
/// `container_dir` (`<pod log dir>/<container>`), in ascending order; empty if the directory
/// does not exist. The last is the newest instance, the one before it the `previous` one.
/// Blocking (one directory listing).
///
/// # Errors
///
/// [`LogError::ListDir`] when the directory cannot be read.
pub fn instances(container_dir: &Path) -> Result<Vec<u32>, LogError> {
    let mut found: Vec<u32> = list_dir_blocking(container_dir)?
        .into_iter()
        .filter_map(|name| name.strip_suffix(".log")?.parse().ok())
        .collect();
    found.sort_unstable();
    Ok(found)
}

/// Deletes the log files (current and rotated) in `container_dir` of every instance below
/// `keep_from`. When instance `n + 1` starts, pass `n`: the previous instance's files stay for
/// `kubectl logs --previous`, as the kubelet keeps them. Other files are left alone. Returns how
/// many files were deleted. Idempotent; blocking (a directory listing and the deletions).
///
/// # Errors
///
/// [`LogError::ListDir`] or [`LogError::Remove`]; a file that is already gone is no error.
pub fn prune_instances(container_dir: &Path, keep_from: u32) -> Result<usize, LogError> {
    let mut removed = 0;
    for name in list_dir_blocking(container_dir)? {
        if instance_of(&name).is_none_or(|instance| instance >= keep_from) {
            continue;
        }
        let path = container_dir.join(&name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(LogError::Remove { path, source }),
        }
    }
    Ok(removed)
}

/// Parses one CRI log record (`<timestamp> <stream> <tag> <content>`), with or without its
/// trailing `\n`. Like the kubelet: the timestamp is RFC 3339 with any number of fractional
/// digits and any offset, the tag may be a `:`-separated list whose first element is `P` for a
/// partial record (anything else is a full one).
///
/// # Errors
///
/// [`LogError::ParseLine`] naming the field that is missing or wrong.
pub fn parse_line(line: &[u8]) -> Result<LogLine<'_>, LogError> {
    let malformed = |reason| LogError::ParseLine { reason };
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (timestamp, rest) = split_field(line).ok_or(malformed("timestamp is not found"))?;
    let timestamp = std::str::from_utf8(timestamp)
        .ok()
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .ok_or(malformed("timestamp is not RFC 3339"))?
        .with_timezone(&Utc);
    let (stream, rest) = split_field(rest).ok_or(malformed("stream type is not found"))?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return Err(malformed("unexpected stream type")),
    };
    let (tags, content) = split_field(rest).ok_or(malformed("log tag is not found"))?;
    let partial = tags.split(|&byte| byte == b':').next() == Some(b"P".as_slice());
    Ok(LogLine {
        timestamp,
        stream,
        partial,
        content,
    })
}

/// Writes the logs of the container instance whose current file is `path` to `out`, as the
/// kubelet's `containerLogs` does with `options`: the rotated files of the instance first,
/// oldest first, then the current file. Returns the number of bytes written.
///
/// Without `follow`, `container_exited` is not polled (pass `std::future::ready(())`). With
/// `follow`, the reader keeps reading as the file grows and is rotated, and returns once
/// `container_exited` has resolved and everything is read. Resolve it when [`copy_streams`]
/// has returned, not merely when the process exited, or the last records may be missed;
/// `std::future::pending()` follows until the future is dropped. To stop on another signal
/// (a client that went away), race this future against it.
///
/// # Errors
///
/// [`LogError::Open`] when `path` does not exist; [`LogError::ListDir`], [`LogError::Read`],
/// [`LogError::WriteOutput`]. Malformed records are skipped, not errors.
///
/// # Cancel safety
///
/// Dropping the future stops reading; `out` may end in the middle of a message.
pub async fn read_logs<W>(
    path: &Path,
    options: &ReadOptions,
    container_exited: impl Future<Output = ()>,
    out: &mut W,
) -> Result<u64, LogError>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut render = Render::new(options, path);
    if options.limit_bytes == Some(0) || (!options.follow && options.tail_lines == Some(0)) {
        return Ok(0);
    }
    // (1) the current file first, so that a rotation in between shows as a rotated file with
    // its identity, and is not read twice.
    let mut current = Source::open(path).await?;
    let mut queue = open_rotated(path, None, current.id).await?;
    // (2) count the messages, to skip all but the last `n`.
    if let Some(tail) = options.tail_lines {
        let mut count = Render::new(options, path);
        count.skip = u64::MAX;
        for source in queue.iter_mut().chain(std::iter::once(&mut current)) {
            while source.next_record().await? {
                count.record(&source.line);
                source.line.clear();
            }
            // An unfinished record is a message too: the second pass writes it once complete.
            if !source.line.is_empty() && !source.discarding {
                count.record(&source.line);
            }
            source.rewind().await?;
        }
        render.skip = count.seen.saturating_sub(tail as u64);
    }
    // (3) the rotated files, oldest first.
    for mut source in queue {
        if !drain(&mut source, &mut render, out, true).await? {
            return Ok(render.finish());
        }
    }
    // (4) the current file; with `follow`, as it grows and is rotated.
    let mut exited_signal = pin!(container_exited);
    let mut exited = false;
    loop {
        // Once the container has exited, the writer is done: an unfinished record is all there is.
        let last = !options.follow || exited;
        if !drain(&mut current, &mut render, out, last).await? {
            return Ok(render.finish());
        }
        if options.follow
            && let Some(next) = rotated_away(path, &current).await?
        {
            if !drain(&mut current, &mut render, out, true).await? {
                return Ok(render.finish());
            }
            for mut between in open_rotated(path, Some(current.id), next.id).await? {
                if !drain(&mut between, &mut render, out, true).await? {
                    return Ok(render.finish());
                }
            }
            current = next;
            continue;
        }
        if last {
            return Ok(render.finish());
        }
        tokio::select! {
            () = &mut exited_signal, if !exited => exited = true,
            () = tokio::time::sleep(POLL_INTERVAL) => {}
        }
    }
}

impl Stream {
    /// `stdout` or `stderr`, as in a record.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Stdout => 0,
            Self::Stderr => 1,
        }
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            max_size: DEFAULT_MAX_SIZE,
            max_files: DEFAULT_MAX_FILES,
            max_line_size: DEFAULT_MAX_LINE_SIZE,
        }
    }
}

impl LogConfig {
    fn validate(&self, path: &Path) -> Result<(), LogError> {
        let invalid = |reason| {
            Err(LogError::InvalidConfig {
                path: path.to_path_buf(),
                reason,
            })
        };
        if self.max_size == 0 {
            return invalid("max_size must be positive");
        }
        if self.max_files < 2 {
            return invalid("max_files must be at least 2");
        }
        if self.max_line_size == 0 {
            return invalid("max_line_size must be positive");
        }
        Ok(())
    }
}

impl fmt::Debug for LogLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogLine")
            .field("timestamp", &self.timestamp)
            .field("stream", &self.stream)
            .field("partial", &self.partial)
            .field("content_bytes", &self.content.len())
            .finish()
    }
}

// ---- writing ----

/// One record's tag and content, before it gets its timestamp.
struct Chunk {
    partial: bool,
    content: Vec<u8>,
}

/// Cuts a stream's bytes into records as containerd does.
struct LineSplitter {
    pending: Vec<u8>,
    max: usize,
}

/// What one stream's copy did.
struct Pumped {
    bytes: u64,
    error: Option<io::Error>,
}

/// The log file being written, shared by the two streams under a lock.
struct LogFile {
    path: PathBuf,
    file: File,
    size: u64,
    config: LogConfig,
    record: Vec<u8>,
    /// The first failure since the copy started.
    error: Option<LogError>,
}

/// Copies one stream into the shared file until its end (or a read error).
async fn pump<R: AsyncRead + ?Sized>(
    mut reader: std::pin::Pin<&mut R>,
    stream: Stream,
    sink: &Mutex<LogFile>,
    max_line_size: usize,
) -> Pumped {
    let mut buffer = vec![0; PIPE_READ_SIZE];
    let mut splitter = LineSplitter::new(max_line_size);
    let mut chunks = Vec::new();
    let mut pumped = Pumped {
        bytes: 0,
        error: None,
    };
    loop {
        let read = match reader.read(&mut buffer).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) => {
                pumped.error = Some(error);
                break;
            }
        };
        pumped.bytes += read as u64;
        // (2) whole records of this read, in one write.
        splitter.push(&buffer[..read], &mut chunks);
        if !chunks.is_empty() {
            sink.lock().await.append(stream, &chunks).await;
            chunks.clear();
        }
    }
    splitter.finish(&mut chunks);
    if !chunks.is_empty() {
        sink.lock().await.append(stream, &chunks).await;
    }
    pumped
}

impl LineSplitter {
    fn new(max: usize) -> Self {
        Self {
            pending: Vec::new(),
            max,
        }
    }

    /// Adds `data`, moving every complete record to `chunks`.
    fn push(&mut self, mut data: &[u8], chunks: &mut Vec<Chunk>) {
        while let Some(end) = data.iter().position(|&byte| byte == b'\n') {
            self.pending.extend_from_slice(&data[..end]);
            data = &data[end + 1..];
            if self.pending.last() == Some(&b'\r') {
                self.pending.pop();
            }
            self.cut_partials(chunks, false);
            chunks.push(Chunk {
                partial: false,
                content: std::mem::take(&mut self.pending),
            });
        }
        self.pending.extend_from_slice(data);
        self.cut_partials(chunks, true);
    }

    /// The stream ended: what is left is a partial record, as containerd writes it.
    fn finish(&mut self, chunks: &mut Vec<Chunk>) {
        self.cut_partials(chunks, false);
        if !self.pending.is_empty() {
            chunks.push(Chunk {
                partial: true,
                content: std::mem::take(&mut self.pending),
            });
        }
    }

    /// Moves `P` chunks of `max` bytes out while more than `max` bytes are pending. With
    /// `line_open`, a `\r` that may precede the next `\n` is not cut off alone.
    fn cut_partials(&mut self, chunks: &mut Vec<Chunk>, line_open: bool) {
        while self.pending.len() > self.max {
            if line_open
                && self.pending.len() == self.max + 1
                && self.pending.last() == Some(&b'\r')
            {
                break;
            }
            let rest = self.pending.split_off(self.max);
            chunks.push(Chunk {
                partial: true,
                content: std::mem::replace(&mut self.pending, rest),
            });
        }
    }
}

impl LogFile {
    async fn open(path: PathBuf, config: LogConfig) -> Result<Self, LogError> {
        if let Some(dir) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .await
                .map_err(|source| LogError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        let file = open_for_append(&path, false)
            .await
            .map_err(|source| LogError::Open {
                path: path.clone(),
                source,
            })?;
        let size = file
            .metadata()
            .await
            .map_err(|source| LogError::Open {
                path: path.clone(),
                source,
            })?
            .len();
        Ok(Self {
            path,
            file,
            size,
            config,
            record: Vec::new(),
            error: None,
        })
    }

    /// Appends `chunks` as records of `stream`, then rotates if the file is full.
    async fn append(&mut self, stream: Stream, chunks: &[Chunk]) {
        let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Nanos, true);
        self.record.clear();
        for chunk in chunks {
            self.record.extend_from_slice(timestamp.as_bytes());
            self.record.push(b' ');
            self.record.extend_from_slice(stream.as_str().as_bytes());
            self.record
                .extend_from_slice(if chunk.partial { b" P " } else { b" F " });
            self.record.extend_from_slice(&chunk.content);
            self.record.push(b'\n');
        }
        let written = async {
            self.file.write_all(&self.record).await?;
            self.file.flush().await
        }
        .await;
        match written {
            Ok(()) => self.size += self.record.len() as u64,
            Err(source) => {
                let path = self.path.clone();
                self.fail(LogError::Write { path, source });
            }
        }
        // (3)
        if self.size >= self.config.max_size
            && let Err(error) = self.rotate().await
        {
            self.fail(error);
        }
    }

    /// The rotation steps of the module docs.
    async fn rotate(&mut self) -> Result<(), LogError> {
        let name = file_name(&self.path);
        // (1) the current file gets its rotated name as a second link: a name that sorts after
        // every rotated file there is, even within one second or with a clock set back.
        let now = Utc::now().format("%Y%m%d-%H%M%S").to_string();
        let (stamp, mut clash) = match rotated_entries(&self.path).await?.pop() {
            Some(((newest, clash), _)) if newest >= now => (newest, clash + 1),
            _ => (now, 0),
        };
        let rotated = loop {
            let candidate = if clash == 0 {
                self.path.with_file_name(format!("{name}.{stamp}"))
            } else {
                self.path.with_file_name(format!("{name}.{stamp}.{clash}"))
            };
            match fs::hard_link(&self.path, &candidate).await {
                Ok(()) => break candidate,
                Err(error)
                    if error.kind() == io::ErrorKind::AlreadyExists && clash < MAX_NAME_CLASHES =>
                {
                    clash += 1;
                }
                Err(source) => {
                    return Err(LogError::Rotate {
                        path: self.path.clone(),
                        rotated: candidate,
                        source,
                    });
                }
            }
        };
        // (2) a new empty file replaces the current name in one step.
        let temporary = self.path.with_file_name(format!("{name}.tmp"));
        let replaced = async {
            let file = open_for_append(&temporary, true).await?;
            fs::rename(&temporary, &self.path).await?;
            Ok::<_, io::Error>(file)
        }
        .await;
        let file = match replaced {
            Ok(file) => file,
            Err(source) => {
                // The old file stays current: without its second name, nothing is read twice.
                let _ = fs::remove_file(&rotated).await;
                let _ = fs::remove_file(&temporary).await;
                return Err(LogError::Rotate {
                    path: self.path.clone(),
                    rotated: temporary,
                    source,
                });
            }
        };
        tracing::debug!(path = %self.path.display(), bytes = self.size, "rotated container log");
        self.file = file;
        self.size = 0;
        // (3) the oldest rotated files go.
        let rotated = rotated_files(&self.path).await?;
        let excess = rotated
            .len()
            .saturating_sub(self.config.max_files.saturating_sub(1));
        for old in &rotated[..excess] {
            remove_file(old).await?;
        }
        Ok(())
    }

    fn fail(&mut self, error: LogError) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }
}

/// Opens `path` for appending, creating it with [`FILE_MODE`]; with `fresh`, a file left at
/// `path` is deleted first and a new one is created.
async fn open_for_append(path: &Path, fresh: bool) -> io::Result<File> {
    let mut options = fs::OpenOptions::new();
    options.append(true).mode(FILE_MODE);
    if fresh {
        match fs::remove_file(path).await {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        options.create_new(true);
    } else {
        options.create(true);
    }
    options.open(path).await
}

// ---- files of an instance ----

/// The rotated files of the current file `path`, oldest first: `<name>.<YYYYMMDD-HHMMSS>` and
/// `<name>.<YYYYMMDD-HHMMSS>.<k>`, ordered by stamp, then `k`.
async fn rotated_files(path: &Path) -> Result<Vec<PathBuf>, LogError> {
    Ok(rotated_entries(path)
        .await?
        .into_iter()
        .map(|(_, path)| path)
        .collect())
}

/// [`rotated_files`] with their sort keys.
async fn rotated_entries(path: &Path) -> Result<Vec<((String, u32), PathBuf)>, LogError> {
    let name = file_name(path);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut found: Vec<_> = list_dir(dir)
        .await?
        .into_iter()
        .filter_map(|entry| {
            let key = rotation_key(&entry, &name)?;
            Some((key, dir.join(entry)))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The sort key of a rotated file name of `current`, or `None` for any other name (`.gz`,
/// `.tmp`, other instances).
fn rotation_key(file_name: &str, current: &str) -> Option<(String, u32)> {
    let suffix = file_name.strip_prefix(current)?.strip_prefix('.')?;
    let (stamp, clash) = match suffix.split_once('.') {
        Some((stamp, clash)) => (stamp, clash.parse().ok()?),
        None => (suffix, 0),
    };
    let valid = stamp.len() == 15
        && stamp.bytes().enumerate().all(|(at, byte)| {
            if at == 8 {
                byte == b'-'
            } else {
                byte.is_ascii_digit()
            }
        });
    valid.then(|| (stamp.to_owned(), clash))
}

/// The instance a file of a container directory belongs to: `<n>.log` or `<n>.log.<anything>`.
fn instance_of(file_name: &str) -> Option<u32> {
    let (instance, rest) = file_name.split_once(".log")?;
    if !(rest.is_empty() || rest.starts_with('.')) {
        return None;
    }
    instance.parse().ok()
}

/// The UTF-8 names in `dir`; none if it does not exist.
fn list_dir_blocking(dir: &Path) -> Result<Vec<String>, LogError> {
    let list_error = |source| LogError::ListDir {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(list_error(error)),
    };
    let mut names = Vec::new();
    for entry in entries {
        if let Ok(name) = entry.map_err(list_error)?.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// [`list_dir_blocking`] on the blocking pool.
async fn list_dir(dir: &Path) -> Result<Vec<String>, LogError> {
    let owned = dir.to_path_buf();
    tokio::task::spawn_blocking(move || list_dir_blocking(&owned))
        .await
        .unwrap_or_else(|join| {
            Err(LogError::ListDir {
                path: dir.to_path_buf(),
                source: io::Error::other(join),
            })
        })
}

/// Deletes `path`; `false` if it was already gone.
async fn remove_file(path: &Path) -> Result<bool, LogError> {
    match fs::remove_file(path).await {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(LogError::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

// ---- reading ----

/// A file's identity, which its hard links share and a rename keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

/// An open log file read record by record.
struct Source {
    path: PathBuf,
    id: FileId,
    reader: BufReader<File>,
    /// The record being read, without its `\n`.
    line: Vec<u8>,
    /// The record being read is too long and is being skipped.
    discarding: bool,
}

/// Turns records into output as [`ReadOptions`] say.
struct Render<'a> {
    options: &'a ReadOptions,
    path: &'a Path,
    /// Messages (of the selected streams) to skip for `tail_lines`.
    skip: u64,
    /// Messages started so far.
    seen: u64,
    /// Per stream: a `P` record left its message open.
    open: [bool; 2],
    /// Per stream: the open message is written.
    shown: [bool; 2],
    remaining: Option<u64>,
    buffer: Vec<u8>,
    written: u64,
    malformed: u64,
}

impl Source {
    async fn open(path: &Path) -> Result<Self, LogError> {
        let file = File::open(path).await.map_err(|source| LogError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let metadata = file.metadata().await.map_err(|source| LogError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            id: FileId {
                dev: metadata.dev(),
                ino: metadata.ino(),
            },
            reader: BufReader::new(file),
            line: Vec::new(),
            discarding: false,
        })
    }

    /// Back to the start, for the second pass.
    async fn rewind(&mut self) -> Result<(), LogError> {
        self.reader
            .seek(io::SeekFrom::Start(0))
            .await
            .map_err(|source| self.read_error(source))?;
        self.line.clear();
        self.discarding = false;
        Ok(())
    }

    /// Reads up to the next `\n`: `true` when `line` holds a complete record, `false` at the
    /// end of the file (an incomplete record stays in `line`, to be completed by the next call).
    async fn next_record(&mut self) -> Result<bool, LogError> {
        loop {
            let available = match self.reader.fill_buf().await {
                Ok(available) => available,
                Err(source) => return Err(self.read_error(source)),
            };
            if available.is_empty() {
                return Ok(false);
            }
            let (take, complete) = match available.iter().position(|&byte| byte == b'\n') {
                Some(end) => (end, true),
                None => (available.len(), false),
            };
            if !self.discarding {
                self.line.extend_from_slice(&available[..take]);
            }
            self.reader.consume(take + usize::from(complete));
            if self.line.len() > MAX_RECORD_SIZE {
                self.line.clear();
                self.discarding = true;
            }
            if complete {
                if std::mem::take(&mut self.discarding) {
                    tracing::debug!(path = %self.path.display(), "skipped an overlong log record");
                    continue;
                }
                return Ok(true);
            }
        }
    }

    fn read_error(&self, source: io::Error) -> LogError {
        LogError::Read {
            path: self.path.clone(),
            source,
        }
    }
}

/// Writes the records of `source` until its end: `Ok(false)` once `limit_bytes` is reached.
/// With `last`, an incomplete record at the end is taken as it is (the writer is done with the
/// file).
async fn drain<W>(
    source: &mut Source,
    render: &mut Render<'_>,
    out: &mut W,
    last: bool,
) -> Result<bool, LogError>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut more = true;
    while more && source.next_record().await? {
        more = render.record(&source.line);
        source.line.clear();
        if render.buffer.len() >= OUTPUT_CHUNK {
            render.flush(out).await?;
        }
    }
    if more && last && !source.line.is_empty() && !source.discarding {
        more = render.record(&source.line);
        source.line.clear();
    }
    render.flush(out).await?;
    Ok(more)
}

/// The files rotated from `path` that come after the file `after` (all of them if it is not
/// among them, or `None`) and before the file `before` (the current file), opened.
async fn open_rotated(
    path: &Path,
    after: Option<FileId>,
    before: FileId,
) -> Result<Vec<Source>, LogError> {
    let mut opened = Vec::new();
    for rotated in rotated_files(path).await? {
        match Source::open(&rotated).await {
            Ok(source) if source.id == before => break,
            Ok(source) => opened.push(source),
            // Deleted by rotation since it was listed.
            Err(LogError::Open { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    if let Some(after) = after
        && let Some(at) = opened.iter().position(|source| source.id == after)
    {
        opened.drain(..=at);
    }
    Ok(opened)
}

/// The new file at `path` if it is no longer the file `current` reads (rotated).
async fn rotated_away(path: &Path, current: &Source) -> Result<Option<Source>, LogError> {
    match fs::metadata(path).await {
        Ok(metadata)
            if (FileId {
                dev: metadata.dev(),
                ino: metadata.ino(),
            }) == current.id =>
        {
            return Ok(None);
        }
        Ok(_) => {}
        // Removed (the pod's logs are being deleted): read what is open.
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LogError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    match Source::open(path).await {
        Ok(next) if next.id != current.id => Ok(Some(next)),
        Ok(_) => Ok(None),
        Err(LogError::Open { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

impl<'a> Render<'a> {
    fn new(options: &'a ReadOptions, path: &'a Path) -> Self {
        Self {
            options,
            path,
            skip: 0,
            seen: 0,
            open: [false; 2],
            shown: [false; 2],
            remaining: options.limit_bytes,
            buffer: Vec::new(),
            written: 0,
            malformed: 0,
        }
    }

    /// Adds one record to the output; `false` once `limit_bytes` is reached.
    fn record(&mut self, record: &[u8]) -> bool {
        let Ok(line) = parse_line(record) else {
            self.malformed += 1;
            return true;
        };
        if self.options.stream.is_some_and(|only| only != line.stream) {
            return true;
        }
        let stream = line.stream.index();
        let starts = !self.open[stream];
        if starts {
            self.shown[stream] = self.seen >= self.skip
                && self
                    .options
                    .since
                    .is_none_or(|since| line.timestamp >= since);
            self.seen += 1;
        }
        self.open[stream] = line.partial;
        if !self.shown[stream] {
            return true;
        }
        let start = self.buffer.len();
        if starts && self.options.timestamps {
            let timestamp = line.timestamp.to_rfc3339_opts(SecondsFormat::Nanos, true);
            self.buffer.extend_from_slice(timestamp.as_bytes());
            self.buffer.push(b' ');
        }
        self.buffer.extend_from_slice(line.content);
        if !line.partial {
            self.buffer.push(b'\n');
        }
        if let Some(remaining) = self.remaining.as_mut() {
            let added = (self.buffer.len() - start) as u64;
            if added >= *remaining {
                self.buffer
                    .truncate(start + usize::try_from(*remaining).unwrap_or(usize::MAX));
                *remaining = 0;
                return false;
            }
            *remaining -= added;
        }
        true
    }

    async fn flush<W>(&mut self, out: &mut W) -> Result<(), LogError>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let write_error = |source| LogError::WriteOutput {
            path: self.path.to_path_buf(),
            source,
        };
        out.write_all(&self.buffer).await.map_err(write_error)?;
        out.flush().await.map_err(write_error)?;
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    fn finish(self) -> u64 {
        tracing::debug!(
            path = %self.path.display(),
            bytes = self.written,
            malformed_records = self.malformed,
            "read container log"
        );
        self.written
    }
}

fn split_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&byte| byte == b' ')?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::os::unix::fs::PermissionsExt as _;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, ReadBuf};
    use tokio::sync::oneshot;

    use super::*;

    /// Gives one queued piece per read, so that every piece is a batch of its own.
    struct PiecePerRead(VecDeque<Vec<u8>>);

    impl AsyncRead for PiecePerRead {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(piece) = self.0.pop_front() {
                buf.put_slice(&piece);
            }
            Poll::Ready(Ok(()))
        }
    }

    fn pieces(lines: &[String]) -> PiecePerRead {
        PiecePerRead(lines.iter().map(|line| line.clone().into_bytes()).collect())
    }

    fn numbered(count: usize) -> Vec<String> {
        (0..count).map(|n| format!("line {n:03}\n")).collect()
    }

    /// Every record of a file as (stream, partial, content).
    fn records(path: &Path) -> Vec<(Stream, bool, Vec<u8>)> {
        let text = std::fs::read(path).unwrap();
        assert!(text.is_empty() || text.ends_with(b"\n"));
        text.split_inclusive(|&byte| byte == b'\n')
            .map(|record| {
                let line = parse_line(record).unwrap();
                (line.stream, line.partial, line.content.to_vec())
            })
            .collect()
    }

    fn rotated_on_disk(path: &Path) -> Vec<String> {
        let name = file_name(path);
        let mut found: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|entry| rotation_key(entry, &name).is_some())
            .collect();
        found.sort();
        found
    }

    async fn read_all(path: &Path, options: &ReadOptions) -> Vec<u8> {
        let mut out = Vec::new();
        let written = read_logs(path, options, std::future::ready(()), &mut out)
            .await
            .unwrap();
        assert_eq!(written, out.len() as u64);
        out
    }

    /// A hand-written log file: the messages below, with known timestamps.
    fn sample_log(dir: &Path) -> PathBuf {
        let path = container_log_path(dir, "app", 0);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            "2024-01-01T00:00:01Z stdout F one\n\
             2024-01-01T00:00:02.5Z stderr F two\n\
             2024-01-01T01:00:03+01:00 stdout P thr\n\
             2024-01-01T00:00:04.000000001Z stdout F ee\n\
             2024-01-01T00:00:05Z stdout F four\n",
        )
        .unwrap();
        path
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    /// Reads `output` until it holds `expected` in total.
    async fn read_until(
        output: &mut (impl AsyncRead + Unpin),
        seen: &mut Vec<u8>,
        expected: &[u8],
    ) {
        let wait = async {
            while seen.len() < expected.len() {
                let mut buffer = [0; 1024];
                let read = output.read(&mut buffer).await.unwrap();
                assert_ne!(read, 0, "the reader ended early");
                seen.extend_from_slice(&buffer[..read]);
            }
        };
        tokio::time::timeout(Duration::from_secs(600), wait)
            .await
            .unwrap();
        assert_eq!(seen.as_slice(), expected);
    }

    /// Waits until a file in the directory of `path` (current or rotated) holds `needle`.
    async fn wait_for_file(path: &Path, needle: &[u8]) {
        let wait = async {
            loop {
                let entries = std::fs::read_dir(path.parent().unwrap())
                    .into_iter()
                    .flatten();
                for entry in entries {
                    let text = std::fs::read(entry.unwrap().path()).unwrap_or_default();
                    if text.windows(needle.len()).any(|window| window == needle) {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(600), wait)
            .await
            .unwrap();
    }

    #[test]
    fn the_log_path_is_the_kubelets() {
        assert_eq!(
            container_log_path(Path::new("/var/log/pods/ns_web_u-1"), "app", 3),
            Path::new("/var/log/pods/ns_web_u-1/app/3.log")
        );
    }

    #[tokio::test]
    async fn stdout_and_stderr_lines_are_tagged_with_their_stream_and_f() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        copy_streams(
            &b"out 1\nout 2\n"[..],
            &b"err 1\n"[..],
            path.clone(),
            LogConfig::default(),
        )
        .await
        .unwrap();

        let all = records(&path);
        let of = |stream| -> Vec<_> { all.iter().filter(|r| r.0 == stream).cloned().collect() };
        assert_eq!(
            of(Stream::Stdout),
            [
                (Stream::Stdout, false, b"out 1".to_vec()),
                (Stream::Stdout, false, b"out 2".to_vec())
            ]
        );
        assert_eq!(
            of(Stream::Stderr),
            [(Stream::Stderr, false, b"err 1".to_vec())]
        );
        assert_eq!(all.len(), 3);
        let text = std::fs::read_to_string(&path).unwrap();
        let timestamp = text.split(' ').next().unwrap();
        assert_eq!(timestamp.len(), "2016-10-06T00:17:09.669794202Z".len());
        assert!(timestamp.ends_with('Z'));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[tokio::test]
    async fn a_line_longer_than_the_maximum_becomes_p_chunks_and_a_final_f() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let mut long = vec![b'x'; 2 * DEFAULT_MAX_LINE_SIZE + 100];
        long.push(b'\n');
        let exact = vec![b'y'; DEFAULT_MAX_LINE_SIZE];
        let input = [long.as_slice(), &exact, b"\n"].concat();
        copy_streams(&input[..], &b""[..], path.clone(), LogConfig::default())
            .await
            .unwrap();

        let tags: Vec<_> = records(&path)
            .into_iter()
            .map(|(_, partial, content)| (partial, content.len()))
            .collect();
        assert_eq!(
            tags,
            [
                (true, DEFAULT_MAX_LINE_SIZE),
                (true, DEFAULT_MAX_LINE_SIZE),
                (false, 100),
                (false, DEFAULT_MAX_LINE_SIZE)
            ]
        );
    }

    #[tokio::test]
    async fn output_ending_without_a_newline_is_written_as_a_last_p_record_as_containerd_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        copy_streams(
            &b"done\nno newline"[..],
            &b""[..],
            path.clone(),
            LogConfig::default(),
        )
        .await
        .unwrap();
        assert_eq!(
            records(&path),
            [
                (Stream::Stdout, false, b"done".to_vec()),
                (Stream::Stdout, true, b"no newline".to_vec())
            ]
        );
    }

    #[tokio::test]
    async fn carriage_returns_before_newlines_are_dropped_and_empty_lines_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        copy_streams(
            &b"dos\r\n\nmid\rdle\n"[..],
            &b""[..],
            path.clone(),
            LogConfig::default(),
        )
        .await
        .unwrap();
        let contents: Vec<_> = records(&path).into_iter().map(|r| r.2).collect();
        assert_eq!(
            contents,
            [b"dos".to_vec(), Vec::new(), b"mid\rdle".to_vec()]
        );
    }

    #[tokio::test]
    async fn the_reader_gives_back_the_exact_bytes_of_each_stream() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let long: Vec<u8> = (0..40_000u32).map(|n| b'a' + (n % 26) as u8).collect();
        let stdout = [
            b"first\n".as_slice(),
            &long,
            b"\n\n",
            &long,
            b"\nlast without newline",
        ]
        .concat();
        let stderr = b"warning: \xff not UTF-8\n".to_vec();
        let config = LogConfig {
            max_line_size: 1000,
            ..LogConfig::default()
        };
        copy_streams(&stdout[..], &stderr[..], path.clone(), config)
            .await
            .unwrap();

        for (stream, expected) in [(Stream::Stdout, &stdout), (Stream::Stderr, &stderr)] {
            let options = ReadOptions {
                stream: Some(stream),
                ..ReadOptions::default()
            };
            assert_eq!(&read_all(&path, &options).await, expected);
        }
        assert_eq!(
            read_all(&path, &ReadOptions::default()).await.len(),
            stdout.len() + stderr.len()
        );
    }

    #[tokio::test]
    async fn rotation_past_max_size_leaves_at_most_max_files_minus_one_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let lines = numbered(30);
        let config = LogConfig {
            max_size: 100,
            max_files: 3,
            ..LogConfig::default()
        };
        copy_streams(pieces(&lines), &b""[..], path.clone(), config)
            .await
            .unwrap();

        // Records of about 50 bytes: every third one fills a file.
        assert_eq!(rotated_on_disk(&path).len(), 2);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        // What remains is the end of the output, in order.
        let out = read_all(&path, &ReadOptions::default()).await;
        assert_eq!(out, lines[24..].concat().into_bytes());
    }

    #[tokio::test]
    async fn the_reader_returns_every_line_across_rotated_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let lines = numbered(40);
        let config = LogConfig {
            max_size: 100,
            max_files: 100,
            ..LogConfig::default()
        };
        copy_streams(pieces(&lines), &b""[..], path.clone(), config)
            .await
            .unwrap();

        assert!(rotated_on_disk(&path).len() >= 10);
        assert_eq!(
            read_all(&path, &ReadOptions::default()).await,
            lines.concat().into_bytes()
        );
        let tail = ReadOptions {
            tail_lines: Some(3),
            ..ReadOptions::default()
        };
        assert_eq!(
            read_all(&path, &tail).await,
            lines[37..].concat().into_bytes()
        );
    }

    #[test]
    fn rotated_names_sort_by_stamp_then_clash_and_other_names_are_not_rotated_files() {
        assert_eq!(
            rotation_key("0.log.20240101-000000", "0.log"),
            Some(("20240101-000000".to_owned(), 0))
        );
        assert_eq!(
            rotation_key("0.log.20240101-000000.12", "0.log"),
            Some(("20240101-000000".to_owned(), 12))
        );
        for other in [
            "0.log",
            "0.log.tmp",
            "0.log.20240101-000000.gz",
            "10.log.20240101-000000",
            "0.log.2024010-0000000",
        ] {
            assert_eq!(rotation_key(other, "0.log"), None, "{other}");
        }
    }

    #[tokio::test]
    async fn an_invalid_configuration_is_refused_before_anything_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let config = LogConfig {
            max_files: 1,
            ..LogConfig::default()
        };
        let error = copy_streams(&b"x\n"[..], &b""[..], path.clone(), config)
            .await
            .unwrap_err();
        assert!(matches!(error, LogError::InvalidConfig { .. }), "{error}");
        assert!(!path.exists());
    }

    #[test]
    fn parse_line_reads_every_field_and_rejects_malformed_records() {
        let line =
            parse_line(b"2016-10-06T00:17:09.669794202Z stderr P:x some content \n").unwrap();
        assert_eq!(line.timestamp, at("2016-10-06T00:17:09.669794202Z"));
        assert_eq!(line.stream, Stream::Stderr);
        assert!(line.partial);
        assert_eq!(line.content, b"some content ");
        let empty = parse_line(b"2016-10-06T02:17:09+02:00 stdout F ").unwrap();
        assert_eq!(empty.timestamp, at("2016-10-06T00:17:09Z"));
        assert!(!empty.partial);
        assert_eq!(empty.content, b"");

        for (bad, reason) in [
            (&b"no-spaces"[..], "timestamp is not found"),
            (b"yesterday stdout F x", "timestamp is not RFC 3339"),
            (b"2016-10-06T00:17:09Z stdout", "stream type is not found"),
            (b"2016-10-06T00:17:09Z stdin F x", "unexpected stream type"),
            (b"2016-10-06T00:17:09Z stdout F", "log tag is not found"),
        ] {
            match parse_line(bad) {
                Err(LogError::ParseLine { reason: got }) => assert_eq!(got, reason),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_log_line_debug_shows_the_size_of_the_content_not_the_bytes() {
        let line = parse_line(b"2016-10-06T00:17:09Z stdout F password=hunter2").unwrap();
        let debug = format!("{line:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("content_bytes: 16"), "{debug}");
    }

    #[tokio::test]
    async fn the_reader_joins_split_lines_and_skips_malformed_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample_log(dir.path());
        let mut text = std::fs::read(&path).unwrap();
        text.extend_from_slice(b"garbage\n2024-01-01T00:00:06Z stdout F five\n");
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            read_all(&path, &ReadOptions::default()).await,
            b"one\ntwo\nthree\nfour\nfive\n"
        );
    }

    #[tokio::test]
    async fn tail_lines_keeps_the_last_messages_counting_a_split_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample_log(dir.path());
        let tail = |n| ReadOptions {
            tail_lines: Some(n),
            ..ReadOptions::default()
        };
        assert_eq!(read_all(&path, &tail(2)).await, b"three\nfour\n");
        assert_eq!(read_all(&path, &tail(4)).await, b"one\ntwo\nthree\nfour\n");
        assert_eq!(read_all(&path, &tail(10)).await, b"one\ntwo\nthree\nfour\n");
        assert_eq!(read_all(&path, &tail(0)).await, b"");
        let stderr_tail = ReadOptions {
            stream: Some(Stream::Stderr),
            ..tail(1)
        };
        assert_eq!(read_all(&path, &stderr_tail).await, b"two\n");
    }

    #[tokio::test]
    async fn timestamps_prefix_each_message_once_in_utc_with_nine_digits() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample_log(dir.path());
        let options = ReadOptions {
            timestamps: true,
            ..ReadOptions::default()
        };
        assert_eq!(
            String::from_utf8(read_all(&path, &options).await).unwrap(),
            "2024-01-01T00:00:01.000000000Z one\n\
             2024-01-01T00:00:02.500000000Z two\n\
             2024-01-01T00:00:03.000000000Z three\n\
             2024-01-01T00:00:05.000000000Z four\n"
        );
    }

    #[tokio::test]
    async fn since_skips_older_messages_and_keeps_those_of_that_instant() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample_log(dir.path());
        let since = |text| ReadOptions {
            since: Some(at(text)),
            ..ReadOptions::default()
        };
        assert_eq!(
            read_all(&path, &since("2024-01-01T00:00:02.5Z")).await,
            b"two\nthree\nfour\n"
        );
        // A message is judged by its first chunk.
        assert_eq!(
            read_all(&path, &since("2024-01-01T00:00:03.5Z")).await,
            b"four\n"
        );
        assert_eq!(read_all(&path, &since("2025-01-01T00:00:00Z")).await, b"");
    }

    #[tokio::test]
    async fn limit_bytes_cuts_the_output_at_that_many_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample_log(dir.path());
        let limit = |n| ReadOptions {
            limit_bytes: Some(n),
            ..ReadOptions::default()
        };
        assert_eq!(read_all(&path, &limit(6)).await, b"one\ntw");
        assert_eq!(read_all(&path, &limit(8)).await, b"one\ntwo\n");
        assert_eq!(read_all(&path, &limit(11)).await, b"one\ntwo\nthr");
        assert_eq!(
            read_all(&path, &limit(1000)).await,
            b"one\ntwo\nthree\nfour\n"
        );
        let with_timestamps = ReadOptions {
            timestamps: true,
            ..limit(10)
        };
        assert_eq!(read_all(&path, &with_timestamps).await, b"2024-01-01");
    }

    #[tokio::test]
    async fn reading_a_missing_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let mut out = Vec::new();
        let error = read_logs(
            &path,
            &ReadOptions::default(),
            std::future::ready(()),
            &mut out,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&error, LogError::Open { path: p, .. } if *p == path),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn follow_sees_lines_appended_after_it_started_and_ends_when_told_the_container_exited() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let (mut stdout, stdout_pipe) = tokio::io::duplex(1024);
        let (mut stderr, stderr_pipe) = tokio::io::duplex(1024);
        let writer = tokio::spawn(copy_streams(
            stdout_pipe,
            stderr_pipe,
            path.clone(),
            LogConfig::default(),
        ));
        stdout.write_all(b"before\n").await.unwrap();
        wait_for_file(&path, b"before").await;

        let (exited, exited_signal) = oneshot::channel::<()>();
        let (mut output, mut output_pipe) = tokio::io::duplex(64 * 1024);
        let follow_path = path.clone();
        let reader = tokio::spawn(async move {
            let options = ReadOptions {
                follow: true,
                ..ReadOptions::default()
            };
            let exited = async {
                let _ = exited_signal.await;
            };
            read_logs(&follow_path, &options, exited, &mut output).await
        });
        let mut seen = Vec::new();
        read_until(&mut output_pipe, &mut seen, b"before\n").await;
        stdout.write_all(b"after\n").await.unwrap();
        read_until(&mut output_pipe, &mut seen, b"before\nafter\n").await;
        stderr.write_all(b"unfinished").await.unwrap();
        drop((stdout, stderr));
        writer.await.unwrap().unwrap();
        assert!(!reader.is_finished());

        exited.send(()).unwrap();
        let written = reader.await.unwrap().unwrap();
        read_until(&mut output_pipe, &mut seen, b"before\nafter\nunfinished").await;
        assert_eq!(written, seen.len() as u64);
    }

    #[tokio::test(start_paused = true)]
    async fn follow_goes_on_in_the_new_file_after_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let path = container_log_path(dir.path(), "app", 0);
        let (mut stdout, stdout_pipe) = tokio::io::duplex(1024);
        let config = LogConfig {
            max_size: 1,
            max_files: 100,
            ..LogConfig::default()
        };
        let writer = tokio::spawn(copy_streams(stdout_pipe, &b""[..], path.clone(), config));
        let lines = numbered(12);
        stdout.write_all(lines[0].as_bytes()).await.unwrap();
        wait_for_file(&path, b"line 000").await;

        let (exited, exited_signal) = oneshot::channel::<()>();
        let (mut output, mut output_pipe) = tokio::io::duplex(64 * 1024);
        let follow_path = path.clone();
        let reader = tokio::spawn(async move {
            let options = ReadOptions {
                follow: true,
                ..ReadOptions::default()
            };
            let exited = async {
                let _ = exited_signal.await;
            };
            read_logs(&follow_path, &options, exited, &mut output).await
        });
        let mut seen = Vec::new();
        for (n, line) in lines.iter().enumerate().skip(1) {
            stdout.write_all(line.as_bytes()).await.unwrap();
            // Several rotations between two looks of the reader, and one after each.
            wait_for_file(&path, line.trim_end().as_bytes()).await;
            if n % 4 == 0 {
                read_until(&mut output_pipe, &mut seen, lines[..=n].concat().as_bytes()).await;
            }
        }
        drop(stdout);
        writer.await.unwrap().unwrap();
        exited.send(()).unwrap();
        reader.await.unwrap().unwrap();
        read_until(&mut output_pipe, &mut seen, lines.concat().as_bytes()).await;
        assert!(rotated_on_disk(&path).len() >= 11);
    }

    #[test]
    fn prune_instances_keeps_the_previous_and_current_instances() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "0.log",
            "0.log.20240101-000000",
            "1.log",
            "1.log.20240101-000000.1",
            "2.log",
            "3.log",
            "notes.txt",
            "4.logfile",
        ] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        assert_eq!(instances(dir.path()).unwrap(), [0, 1, 2, 3]);
        // Instance 3 started: 2 is the previous one.
        assert_eq!(prune_instances(dir.path(), 2).unwrap(), 4);
        assert_eq!(prune_instances(dir.path(), 2).unwrap(), 0);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["2.log", "3.log", "4.logfile", "notes.txt"]);
        assert_eq!(
            instances(&dir.path().join("missing")).unwrap(),
            Vec::<u32>::new()
        );
    }
}
