//! The CRI log record format: one parsed record ([`LogLine`]) and its parser ([`parse_line`]).

use std::fmt;

use chrono::{DateTime, Utc};

use super::error::LogError;
use super::stream::Stream;

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

fn split_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&byte| byte == b' ')?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
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
}
