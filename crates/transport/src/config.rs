//! What a transport user configures: [`TransportConfig`] and its [`Protocol`] policy, and
//! [`Negotiated`], the protocol one connection speaks.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::TransportError;

/// Which HTTP version the transport speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// HTTP/2 wherever the server offers it by ALPN (`https://`), else HTTP/1.1; `http://`
    /// URLs use HTTP/1.1 (no prior knowledge). The default.
    #[default]
    Auto,
    /// HTTP/1.1 only: one connection per watch, as kube's default stack.
    Http1,
    /// HTTP/2 only: ALPN must pick `h2`; on `http://`, HTTP/2 with prior knowledge.
    Http2,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Auto => "auto",
            Protocol::Http1 => "http1",
            Protocol::Http2 => "http2",
        })
    }
}

impl FromStr for Protocol {
    type Err = TransportError;

    /// `auto`, `http1` (also `http/1.1`, `1.1`) or `http2` (also `h2`, `2`).
    fn from_str(s: &str) -> Result<Self, TransportError> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Protocol::Auto),
            "http1" | "http/1.1" | "1.1" | "h1" => Ok(Protocol::Http1),
            "http2" | "h2" | "2" => Ok(Protocol::Http2),
            _ => Err(TransportError::UnknownProtocol {
                value: s.to_owned(),
            }),
        }
    }
}

/// The protocol one connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Negotiated {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2.
    Http2,
}

impl fmt::Display for Negotiated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Negotiated::Http1 => "HTTP/1.1",
            Negotiated::Http2 => "HTTP/2",
        })
    }
}

/// Default [`TransportConfig::stream_window`]: 64 KiB.
pub const DEFAULT_STREAM_WINDOW: u32 = 64 * 1024;

/// The smallest stream window used: one DATA frame of the largest size a peer may send
/// without being asked (`SETTINGS_MAX_FRAME_SIZE`'s initial value, 16 KiB).
const MIN_STREAM_WINDOW: u32 = 16 * 1024;

/// The largest HTTP/2 flow-control window (RFC 9113 §6.9.1): 2³¹ − 1 bytes.
const MAX_WINDOW: u32 = (1 << 31) - 1;

/// The window every HTTP/2 connection starts with, which can only grow (RFC 9113 §6.9.2).
const SPEC_WINDOW: u32 = 65_535;

/// Options of the transport. Start from `TransportConfig::default()`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransportConfig {
    /// HTTP version policy (default [`Protocol::Auto`]).
    pub protocol: Protocol,
    /// Most watches one HTTP/2 connection carries (default 95). The effective limit is the
    /// smaller of this and the server's advertised `SETTINGS_MAX_CONCURRENT_STREAMS` less 5 %
    /// headroom (kube-apiserver's default 100 → 95); this cap alone applies to a server that
    /// advertises no limit.
    pub max_streams_per_connection: usize,
    /// A connection with no open stream for this long is closed (default 60 s).
    pub idle_timeout: Duration,
    /// HTTP/2 PING interval that detects a dead connection (default 30 s; `None`: off).
    pub keep_alive_interval: Option<Duration>,
    /// How long a PING may go unanswered before the connection is closed (default 20 s).
    pub keep_alive_timeout: Duration,
    /// HTTP/2 receive window of each stream, in bytes (default [`DEFAULT_STREAM_WINDOW`],
    /// 64 KiB; at least 16 KiB, at most 2³¹ − 1): how much of a response the server may send
    /// before the reader takes it. It reserves no memory; it bounds what a watch whose reader
    /// stopped holds, and how much of a large event is in flight per round trip (an event
    /// larger than the window arrives in several). Each connection's window follows from it:
    /// [`connection_window`](Self::connection_window).
    pub stream_window: u32,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            protocol: Protocol::Auto,
            max_streams_per_connection: 95,
            idle_timeout: Duration::from_secs(60),
            keep_alive_interval: Some(Duration::from_secs(30)),
            keep_alive_timeout: Duration::from_secs(20),
            stream_window: DEFAULT_STREAM_WINDOW,
        }
    }
}

impl TransportConfig {
    /// The defaults with `protocol`.
    pub fn new(protocol: Protocol) -> Self {
        TransportConfig {
            protocol,
            ..TransportConfig::default()
        }
    }

    /// Sets [`max_streams_per_connection`](Self::max_streams_per_connection) (at least 1).
    #[must_use]
    pub fn with_max_streams_per_connection(mut self, n: usize) -> Self {
        self.max_streams_per_connection = n.max(1);
        self
    }

    /// Sets [`stream_window`](Self::stream_window) (16 KiB to 2³¹ − 1 bytes).
    #[must_use]
    pub fn with_stream_window(mut self, bytes: u32) -> Self {
        self.stream_window = bytes.clamp(MIN_STREAM_WINDOW, MAX_WINDOW);
        self
    }

    /// The stream window connections use: [`stream_window`](Self::stream_window) within its
    /// bounds.
    pub(crate) fn effective_stream_window(&self) -> u32 {
        self.stream_window.clamp(MIN_STREAM_WINDOW, MAX_WINDOW)
    }

    /// HTTP/2 receive window of each connection, shared by its streams: room for every
    /// stream's window, [`max_streams_per_connection`](Self::max_streams_per_connection) ×
    /// [`stream_window`](Self::stream_window) (at least 65,535, at most 2³¹ − 1 bytes). With less, a few streams whose readers stopped would hold the whole
    /// connection window and every other stream on the connection would stop receiving
    /// (95 × 64 KiB ≈ 5.9 MiB by default).
    pub fn connection_window(&self) -> u32 {
        let streams = u64::try_from(self.max_streams_per_connection.max(1)).unwrap_or(u64::MAX);
        let window = streams.saturating_mul(u64::from(self.effective_stream_window()));
        u32::try_from(window.clamp(u64::from(SPEC_WINDOW), u64::from(MAX_WINDOW)))
            .unwrap_or(MAX_WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_window_has_room_for_every_streams_window() {
        let config = TransportConfig::default();
        assert_eq!(config.effective_stream_window(), 64 * 1024);
        assert_eq!(config.connection_window(), 95 * 64 * 1024);
        let config = TransportConfig::default()
            .with_max_streams_per_connection(8)
            .with_stream_window(1024 * 1024);
        assert_eq!(config.connection_window(), 8 * 1024 * 1024);
    }

    #[test]
    fn windows_stay_within_what_http2_allows() {
        let config = TransportConfig::default()
            .with_max_streams_per_connection(1)
            .with_stream_window(1);
        assert_eq!(config.stream_window, 16 * 1024);
        // A connection window never shrinks below its initial 65,535 bytes.
        assert_eq!(config.connection_window(), 65_535);
        let mut config = TransportConfig::default().with_max_streams_per_connection(usize::MAX);
        config.stream_window = u32::MAX;
        assert_eq!(config.effective_stream_window(), (1 << 31) - 1);
        assert_eq!(config.connection_window(), (1 << 31) - 1);
        config.stream_window = 0;
        assert_eq!(config.effective_stream_window(), 16 * 1024);
    }

    #[test]
    fn protocol_parses_its_names_and_rejects_others_naming_the_value() {
        assert_eq!("auto".parse::<Protocol>().ok(), Some(Protocol::Auto));
        assert_eq!("http1".parse::<Protocol>().ok(), Some(Protocol::Http1));
        assert_eq!("HTTP2".parse::<Protocol>().ok(), Some(Protocol::Http2));
        let err = "spdy".parse::<Protocol>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unknown HTTP protocol \"spdy\": expected auto, http1 or http2")
        );
    }
}
