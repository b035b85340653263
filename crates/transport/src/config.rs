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
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            protocol: Protocol::Auto,
            max_streams_per_connection: 95,
            idle_timeout: Duration::from_secs(60),
            keep_alive_interval: Some(Duration::from_secs(30)),
            keep_alive_timeout: Duration::from_secs(20),
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
