//! The `tcpSocket` check (the kubelet's `pkg/probe/tcp`): a TCP connection opened within the
//! timeout passes, and is closed at once; anything else fails with Go's dial error text.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpSocket;

use super::types::Verdict;

/// Connects to `host:port` within `timeout`.
pub(crate) async fn check(host: &str, port: u16, timeout: Duration) -> Verdict {
    match dial(host, port, timeout).await {
        Ok(()) => Verdict::Success,
        Err(message) => Verdict::Failure(message),
    }
}

/// `host:port` as Go joins them (brackets around an IPv6 address).
pub(crate) fn join_host_port(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Opens and closes a TCP connection to `host:port` within `timeout`; on failure Go's
/// `net.Dialer` text: `dial tcp <addr>: connect: connection refused`, `dial tcp <addr>: i/o
/// timeout`, `dial tcp: lookup <host>: no such host`.
pub(crate) async fn dial(host: &str, port: u16, timeout: Duration) -> Result<(), String> {
    let addr = join_host_port(host, port);
    let work = async {
        let target = resolve(host, port).await?;
        let socket = match target {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(|e| format!("dial tcp {addr}: socket: {}", os_text(&e)))?;
        let stream = socket
            .connect(target)
            .await
            .map_err(|e| format!("dial tcp {addr}: connect: {}", os_text(&e)))?;
        drop(stream);
        Ok(())
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
    }
}

/// The first address `host` resolves to (an IP address as it is).
async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let no_host = || format!("dial tcp: lookup {host}: no such host");
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| no_host())?
        .next()
        .ok_or_else(no_host)
}

/// An OS error as Go prints it (`connection refused`: the C library's text, lower case,
/// without Rust's ` (os error N)`).
pub(crate) fn os_text(error: &io::Error) -> String {
    let text = error.to_string();
    let text = match error.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_owned(),
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_open_port_passes_and_a_closed_one_fails_with_gos_text() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{e}"))
            .port();
        assert_eq!(
            check("127.0.0.1", port, Duration::from_secs(5)).await,
            Verdict::Success
        );
        drop(listener);
        assert_eq!(
            check("127.0.0.1", port, Duration::from_secs(5)).await,
            Verdict::Failure(format!(
                "dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
    }

    #[test]
    fn an_ipv6_host_is_bracketed() {
        assert_eq!(join_host_port("::1", 80), "[::1]:80");
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
    }
}
