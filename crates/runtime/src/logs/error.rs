//! [`LogError`]: why writing, rotating, pruning or reading container log files failed.

use std::io;
use std::path::PathBuf;

use super::stream::Stream;

/// A failure to write, rotate, prune or read container log files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The [`LogConfig`](super::LogConfig) is out of range.
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
    /// A record is not in the CRI log format. [`parse_line`](super::parse_line) sees no path;
    /// the reader skips
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
