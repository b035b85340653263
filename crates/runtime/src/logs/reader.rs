//! Reading a container instance's log files back as `kubectl logs` shows them: [`read_logs`]
//! with the kubelet's `containerLogs` options ([`ReadOptions`]), following the file as it grows
//! and is rotated.

use std::future::Future;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::fs::{self, File};
use tokio::io::{
    AsyncBufReadExt as _, AsyncSeekExt as _, AsyncWrite, AsyncWriteExt as _, BufReader,
};

use super::error::LogError;
use super::files::rotated_files;
use super::format::parse_line;
use super::stream::Stream;

/// How often a following reader looks for new records at the end of the file.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// A record longer than this is malformed: the reader drops it instead of buffering it.
const MAX_RECORD_SIZE: usize = 1024 * 1024;
/// The reader writes its output in pieces of about this size.
const OUTPUT_CHUNK: usize = 64 * 1024;

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

/// Writes the logs of the container instance whose current file is `path` to `out`, as the
/// kubelet's `containerLogs` does with `options`: the rotated files of the instance first,
/// oldest first, then the current file. Returns the number of bytes written.
///
/// Without `follow`, `container_exited` is not polled (pass `std::future::ready(())`). With
/// `follow`, the reader keeps reading as the file grows and is rotated, and returns once
/// `container_exited` has resolved and everything is read. Resolve it when
/// [`copy_streams`](super::copy_streams) has returned, not merely when the process exited, or
/// the last records may be missed; `std::future::pending()` follows until the future is
/// dropped. To stop on another signal (a client that went away), race this future against it.
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _, ReadBuf};
    use tokio::sync::oneshot;

    use super::*;
    use crate::logs::files::{container_log_path, file_name, rotation_key};
    use crate::logs::writer::{LogConfig, copy_streams};

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
}
