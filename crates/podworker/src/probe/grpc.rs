//! The `grpc` check (the kubelet's `pkg/probe/grpc`): one unary call of the gRPC health
//! checking protocol, `grpc.health.v1.Health/Check` with the probe's `service`, over a plain
//! (no TLS) HTTP/2 connection to the pod's IP. `SERVING` passes; any other answer, an error
//! status, a connection that cannot be made or a call that outlives the timeout fails, with
//! the kubelet's texts.
//!
//! The call, by hand on `h2` (two protobuf messages of one field each need no gRPC library):
//! 1. connect within the timeout, trying again (as grpc-go's blocking dial) while the port
//!    refuses; past the timeout: `timeout: failed to connect service "<addr>" within <t>: …`;
//! 2. `POST /grpc.health.v1.Health/Check` with `content-type: application/grpc`,
//!    `te: trailers`, `grpc-timeout`, `user-agent: kube-probe/1.36`, and the request as one
//!    length-prefixed message (`HealthCheckRequest { string service = 1; }`);
//! 3. read the response's messages and its trailers' `grpc-status` / `grpc-message` (or the
//!    headers', for a trailers-only answer); a non-zero status is an error (`Unimplemented` and
//!    `DeadlineExceeded` with texts of their own);
//! 4. decode `HealthCheckResponse { ServingStatus status = 1; }`: `SERVING` (1) passes, else
//!    `service unhealthy (responded with "NOT_SERVING")`.

use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::net::TcpStream;
use tokio::time::Instant;

use nodelet_core::go;

use super::tcp::join_host_port;
use super::types::Verdict;

/// The method the probe calls.
const PATH: &str = "/grpc.health.v1.Health/Check";

/// The `User-Agent` of the kubelet's probes.
const USER_AGENT: &str = "kube-probe/1.36";

/// The largest response message read (grpc-go's default receive limit).
const MAX_MESSAGE: usize = 4 << 20;

/// gRPC status codes with texts of their own.
const DEADLINE_EXCEEDED: u32 = 4;
const UNIMPLEMENTED: u32 = 12;
const UNAVAILABLE: u32 = 14;
const INTERNAL: u32 = 13;
const UNKNOWN: u32 = 2;

/// Calls `Check` for `service` on `host:port`, all within `timeout`.
pub(crate) async fn check(host: &str, port: i32, service: &str, timeout: Duration) -> Verdict {
    // A port out of range never connects (grpc-go then dials until the timeout).
    let addr = join_host_port(host, port);
    let deadline = Instant::now() + timeout;
    let timed_out = || {
        Verdict::Failure(format!(
            "timeout: health rpc did not complete within {}",
            go::format(timeout)
        ))
    };
    // (1)
    let Some(stream) = connect(&addr, deadline).await else {
        return Verdict::Failure(format!(
            "timeout: failed to connect service {} within {}: context deadline exceeded",
            go::quote(&addr),
            go::format(timeout)
        ));
    };
    // (2) … (4)
    match tokio::time::timeout_at(deadline, call(stream, &addr, service, deadline)).await {
        Ok(Ok(1)) => Verdict::Success,
        Ok(Ok(status)) => Verdict::Failure(format!(
            "service unhealthy (responded with {})",
            go::quote(&serving_status_name(status))
        )),
        Err(_) => timed_out(),
        Ok(Err(error)) if error.code == DEADLINE_EXCEEDED => timed_out(),
        Ok(Err(error)) if error.code == UNIMPLEMENTED => Verdict::Failure(format!(
            "error: this server does not implement the grpc health protocol \
             (grpc.health.v1.Health): {}",
            error.message
        )),
        Ok(Err(error)) => Verdict::Failure(format!(
            "error: health rpc probe failed: rpc error: code = {} desc = {}",
            code_name(error.code),
            error.message
        )),
    }
}

/// A gRPC status other than OK.
#[derive(Debug)]
struct RpcError {
    code: u32,
    message: String,
}

/// A TCP connection to `addr` before `deadline`, tried again after a failure (1 s, growing by
/// 1.6 as grpc-go's reconnect back-off) while time is left.
async fn connect(addr: &str, deadline: Instant) -> Option<TcpStream> {
    let mut pause = Duration::from_secs(1);
    loop {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Some(stream),
            Ok(Err(_)) => {}
            Err(_) => return None,
        }
        if Instant::now() + pause >= deadline {
            tokio::time::sleep_until(deadline).await;
            return None;
        }
        tokio::time::sleep(pause).await;
        pause = pause.mul_f64(1.6);
    }
}

/// Steps 2 to 4 on `stream`: the health status number.
async fn call(
    stream: TcpStream,
    addr: &str,
    service: &str,
    deadline: Instant,
) -> Result<u64, RpcError> {
    let unavailable = |message: String| RpcError {
        code: UNAVAILABLE,
        message,
    };
    let (client, connection) = h2::client::handshake(stream)
        .await
        .map_err(|e| unavailable(format!("connection error: {e}")))?;
    let rpc = async move {
        let mut client = client
            .ready()
            .await
            .map_err(|e| unavailable(format!("connection error: {e}")))?;
        let millis = deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}{PATH}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", format!("{millis}m"))
            .header("user-agent", USER_AGENT)
            .body(())
            .map_err(|e| RpcError {
                code: INTERNAL,
                message: e.to_string(),
            })?;
        let (response, mut send) = client
            .send_request(request, false)
            .map_err(|e| unavailable(e.to_string()))?;
        send.send_data(frame(&request_message(service)), true)
            .map_err(|e| unavailable(e.to_string()))?;
        let response = response.await.map_err(|e| unavailable(e.to_string()))?;
        let (parts, mut body) = response.into_parts();
        if let Some(status) = grpc_status(&parts.headers) {
            // A trailers-only answer: the call's status is in the headers.
            return Err(status.err().unwrap_or(RpcError {
                code: INTERNAL,
                message: "server closed the stream without sending a response".to_owned(),
            }));
        }
        if parts.status != http::StatusCode::OK {
            return Err(http_status_error(parts.status));
        }
        let mut data: Vec<u8> = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| unavailable(e.to_string()))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
            if data.len() > MAX_MESSAGE + 5 {
                return Err(RpcError {
                    code: 8,
                    message: "grpc: received message larger than max".to_owned(),
                });
            }
        }
        let trailers = body
            .trailers()
            .await
            .map_err(|e| unavailable(e.to_string()))?
            .unwrap_or_default();
        match grpc_status(&trailers) {
            Some(Ok(())) => {}
            Some(Err(error)) => return Err(error),
            None => {
                return Err(RpcError {
                    code: INTERNAL,
                    message: "server closed the stream without sending trailers".to_owned(),
                });
            }
        }
        let message = unframe(&data)?;
        Ok(serving_status(&message))
    };
    tokio::pin!(connection);
    tokio::select! {
        biased;
        result = rpc => result,
        ended = &mut connection => Err(unavailable(match ended {
            Ok(()) => "connection closed".to_owned(),
            Err(e) => format!("connection error: {e}"),
        })),
    }
}

/// `HealthCheckRequest { service }`: field 1, a string (nothing for the empty one).
fn request_message(service: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if !service.is_empty() {
        out.push(0x0a);
        put_varint(&mut out, service.len() as u64);
        out.extend_from_slice(service.as_bytes());
    }
    out
}

/// A gRPC length-prefixed message: not compressed, 4-byte big-endian length.
fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// The first message of a response body.
fn unframe(data: &[u8]) -> Result<Vec<u8>, RpcError> {
    let internal = |message: &str| RpcError {
        code: INTERNAL,
        message: message.to_owned(),
    };
    let mut buf = data;
    if buf.len() < 5 {
        return Err(internal("grpc: the response holds no message"));
    }
    let compressed = buf.get_u8();
    let len = buf.get_u32() as usize;
    if compressed != 0 {
        return Err(internal(
            "grpc: compressed flag set with identity or empty encoding",
        ));
    }
    buf.get(..len)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| internal("grpc: the response's message is cut short"))
}

/// Field 1 (`status`, a varint) of a `HealthCheckResponse`; 0 (`UNKNOWN`) when absent.
fn serving_status(mut message: &[u8]) -> u64 {
    let mut status = 0;
    while !message.is_empty() {
        let Some(key) = get_varint(&mut message) else {
            break;
        };
        let skip = match (key >> 3, key & 7) {
            (1, 0) => {
                status = get_varint(&mut message).unwrap_or(0);
                0
            }
            (_, 0) => {
                let _ = get_varint(&mut message);
                0
            }
            (_, 1) => 8,
            (_, 2) => get_varint(&mut message).unwrap_or(u64::MAX) as usize,
            (_, 5) => 4,
            _ => usize::MAX,
        };
        if skip > message.len() {
            break;
        }
        message = &message[skip..];
    }
    status
}

/// `ServingStatus`'s names (a number the enum does not know prints as the number).
fn serving_status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".to_owned(),
        1 => "SERVING".to_owned(),
        2 => "NOT_SERVING".to_owned(),
        3 => "SERVICE_UNKNOWN".to_owned(),
        n => n.to_string(),
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// `grpc-status` (and `grpc-message`, percent-decoded) of a header block, if present.
fn grpc_status(headers: &http::HeaderMap) -> Option<Result<(), RpcError>> {
    let code = headers.get("grpc-status")?;
    let code = code
        .to_str()
        .ok()
        .and_then(|c| c.parse::<u32>().ok())
        .unwrap_or(UNKNOWN);
    if code == 0 {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(Err(RpcError { code, message }))
}

/// grpc-go's reading of an HTTP status other than 200 on a gRPC call.
fn http_status_error(status: http::StatusCode) -> RpcError {
    let code = match status.as_u16() {
        400 => INTERNAL,
        401 => 16,
        403 => 7,
        404 => UNIMPLEMENTED,
        429 | 502..=504 => UNAVAILABLE,
        _ => UNKNOWN,
    };
    RpcError {
        code,
        message: format!(
            "unexpected HTTP status code received from server: {} ({})",
            status.as_u16(),
            status.canonical_reason().unwrap_or("unknown")
        ),
    }
}

fn percent_decode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push(((hex(h).unwrap_or(0) << 4) | hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// gRPC's code names, as grpc-go prints them.
fn code_name(code: u32) -> String {
    let name = match code {
        0 => "OK",
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        n => return format!("Code({n})"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    /// How the test server answers `Check`.
    #[derive(Clone, Copy)]
    enum Answer {
        Status(u8),
        Unimplemented,
    }

    /// A gRPC health server on a loopback port answering every `Check` with `answer`; the
    /// `service` of each request goes to the returned receiver.
    async fn serve(answer: Answer) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{e}"))
            .port();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(socket).await else {
                        return;
                    };
                    while let Some(Ok((request, mut respond))) = conn.accept().await {
                        let mut body = request.into_body();
                        let mut data = Vec::new();
                        while let Some(Ok(chunk)) = body.data().await {
                            data.extend_from_slice(&chunk);
                        }
                        let message = unframe(&data).unwrap_or_default();
                        let service = match message.as_slice() {
                            [0x0a, _, rest @ ..] => String::from_utf8_lossy(rest).into_owned(),
                            _ => String::new(),
                        };
                        let _ = tx.send(service);
                        let mut response = http::Response::builder()
                            .status(200)
                            .header("content-type", "application/grpc");
                        if let Answer::Unimplemented = answer {
                            response = response
                                .header("grpc-status", "12")
                                .header("grpc-message", "unknown%20service");
                        }
                        let response = response.body(()).unwrap_or_default();
                        let end = matches!(answer, Answer::Unimplemented);
                        let Ok(mut stream) = respond.send_response(response, end) else {
                            continue;
                        };
                        if let Answer::Status(status) = answer {
                            let _ = stream.send_data(frame(&[0x08, status]), false);
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                            let _ = stream.send_trailers(trailers);
                        }
                    }
                });
            }
        });
        (port, rx)
    }

    #[tokio::test]
    async fn serving_passes_and_sends_the_service() {
        let (port, mut services) = serve(Answer::Status(1)).await;
        let verdict = check("127.0.0.1", port.into(), "db", Duration::from_secs(5)).await;
        assert_eq!(verdict, Verdict::Success);
        assert_eq!(services.recv().await.as_deref(), Some("db"));
        let verdict = check("127.0.0.1", port.into(), "", Duration::from_secs(5)).await;
        assert_eq!(verdict, Verdict::Success);
        assert_eq!(services.recv().await.as_deref(), Some(""));
    }

    #[tokio::test]
    async fn not_serving_and_unimplemented_fail_with_the_kubelets_texts() {
        let (port, _services) = serve(Answer::Status(2)).await;
        assert_eq!(
            check("127.0.0.1", port.into(), "", Duration::from_secs(5)).await,
            Verdict::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        let (port, _services) = serve(Answer::Unimplemented).await;
        assert_eq!(
            check("127.0.0.1", port.into(), "", Duration::from_secs(5)).await,
            Verdict::Failure(
                "error: this server does not implement the grpc health protocol \
                 (grpc.health.v1.Health): unknown service"
                    .into()
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_port_nobody_listens_on_times_out_connecting() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{e}"))
            .port();
        drop(listener);
        assert_eq!(
            check("127.0.0.1", port.into(), "", Duration::from_secs(5)).await,
            Verdict::Failure(format!(
                "timeout: failed to connect service \"127.0.0.1:{port}\" within 5s: context \
                 deadline exceeded"
            ))
        );
    }

    #[test]
    fn messages_and_durations_are_spelled_as_go_spells_them() {
        assert_eq!(request_message(""), Vec::<u8>::new());
        assert_eq!(request_message("db"), [0x0a, 2, b'd', b'b']);
        assert_eq!(serving_status(&[0x08, 1]), 1);
        assert_eq!(
            serving_status(&[0x12, 1, b'x', 0x08, 2]),
            2,
            "unknown field skipped"
        );
        assert_eq!(serving_status(&[]), 0);
        assert_eq!(serving_status_name(7), "7");
        assert_eq!(percent_decode(b"a%20b%zz"), "a b%zz");
        assert_eq!(go::format(Duration::from_secs(1)), "1s");
        assert_eq!(go::format(Duration::from_secs(90)), "1m30s");
        assert_eq!(code_name(5), "NotFound");
    }
}
