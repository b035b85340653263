//! Writing a container's log file: [`copy_streams`] cuts both output streams into CRI records,
//! appends them and rotates the file by size ([`LogConfig`]).

use std::io;
use std::path::{Path, PathBuf};
use std::pin::pin;

use chrono::{SecondsFormat, Utc};
use tokio::fs::{self, File};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::Mutex;

use super::error::LogError;
use super::files::{file_name, remove_file, rotated_entries, rotated_files};
use super::stream::Stream;

/// The default [`LogConfig::max_size`]: 10 MiB, the kubelet's `containerLogMaxSize`.
pub const DEFAULT_MAX_SIZE: u64 = 10 * 1024 * 1024;
/// The default [`LogConfig::max_files`]: 5, the kubelet's `containerLogMaxFiles`.
pub const DEFAULT_MAX_FILES: usize = 5;
/// The default [`LogConfig::max_line_size`]: 16 KiB, containerd's
/// `max_container_log_line_size`.
pub const DEFAULT_MAX_LINE_SIZE: usize = 16 * 1024;

/// The size of one read from a container's pipe.
const PIPE_READ_SIZE: usize = 32 * 1024;
/// The mode of a log file (before the umask).
const FILE_MODE: u32 = 0o640;
/// The mode of the directories created for log files (before the umask).
const DIR_MODE: u32 = 0o755;
/// How many `.<k>` suffixes rotation tries when a rotated name exists.
const MAX_NAME_CLASHES: u32 = 1000;

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

/// Copies a container's `stdout` and `stderr` into the log file `path` (appending if it exists;
/// created 0640, its directories 0755) until both reach end of file, rotating the file as
/// `config` says. See the [`logs`](super) module docs for the steps.
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

    /// The rotation steps of the [`logs`](super) module docs.
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::logs::files::container_log_path;
    use crate::logs::format::parse_line;

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
}
