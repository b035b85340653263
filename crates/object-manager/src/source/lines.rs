//! Watch responses decoded from the body's own chunks: one JSON event per line, parsed in
//! place from each chunk, with a carry-over buffer only for a line split across chunks.
//!
//! kube's `Api::watch` reads through a line codec whose buffer starts at 8 KiB per stream
//! and stays allocated for the watch's life. A node holds one watch per referenced object
//! (a thousand is ordinary), and a watch of one ConfigMap is idle nearly always: here an idle
//! watch holds no buffer at all, and an event that arrives in one chunk (the usual case, an
//! HTTP/2 DATA frame or a chunk of the chunked encoding) is parsed without a copy.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use kube::core::Status;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::api::{SourceError, WatchEvent, WatchStream};

/// The annotation of the BOOKMARK that ends a watch-list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Sends the WATCH `request` and streams its events. An error status (4xx/5xx) is returned
/// as [`SourceError::Status`] with the server's `Status` (or the body's text when it is not
/// one).
///
/// # Errors
/// [`SourceError`] when the request fails or the server refuses it.
pub(crate) async fn watch<K>(
    client: &Client,
    mut request: http::Request<Vec<u8>>,
) -> Result<WatchStream<K>, SourceError>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + fmt::Debug + Send + 'static,
{
    // Watch events are small and frequent: no compression, as kube asks for watches.
    request
        .headers_mut()
        .entry(http::header::ACCEPT_ENCODING)
        .or_insert(http::HeaderValue::from_static("identity"));
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .map_err(transport)?;
    let code = response.status();
    if code.is_client_error() || code.is_server_error() {
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(transport)?
            .to_bytes();
        return Err(status_error(code.as_u16(), &body));
    }
    let decoder = Decoder::<K> {
        body: response.into_body(),
        partial: Vec::new(),
        ready: VecDeque::new(),
        done: false,
    };
    Ok(futures::stream::unfold(decoder, |mut d| async move {
        let item = d.next_event().await?;
        Some((item, d))
    })
    .boxed())
}

fn transport(e: kube::Error) -> SourceError {
    SourceError::Transport {
        source: Arc::new(e),
    }
}

/// A `Status` body (or any text) answered with HTTP `code` as a [`SourceError::Status`].
fn status_error(code: u16, body: &[u8]) -> SourceError {
    match serde_json::from_slice::<Status>(body) {
        Ok(status) => SourceError::Status {
            code: if status.code == 0 { code } else { status.code },
            reason: status.reason,
            message: status.message,
        },
        Err(_) => SourceError::Status {
            code,
            reason: String::new(),
            message: String::from_utf8_lossy(body).trim().to_owned(),
        },
    }
}

struct Decoder<K> {
    body: kube::client::Body,
    /// The start of a line whose end has not arrived yet (empty, unallocated, between events).
    partial: Vec<u8>,
    /// Events of a chunk that held several lines, not yet handed out (unallocated when empty).
    ready: VecDeque<Result<WatchEvent<K>, SourceError>>,
    done: bool,
}

impl<K> Decoder<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    async fn next_event(&mut self) -> Option<Result<WatchEvent<K>, SourceError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                if self.ready.is_empty() {
                    // An event is several hundred bytes inline: a queue kept for the watch's
                    // life after its first chunk (object + bookmark) was ~1.8 KB per watch.
                    self.ready = VecDeque::new();
                }
                return Some(event);
            }
            if self.done {
                return None;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.push(data);
                    }
                }
                Some(Err(e)) if ends_the_watch(&e) => self.done = true,
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(transport(e)));
                }
                None => {
                    // A last line without its newline (the server closed mid-event) is
                    // dropped: the watch resumes from the last complete event.
                    self.done = true;
                    self.partial = Vec::new();
                }
            }
        }
    }

    /// Splits `data` into lines, completing the carried-over one first.
    fn push(&mut self, data: Bytes) {
        let mut rest: &[u8] = &data;
        if !self.partial.is_empty() {
            match memchr(rest) {
                Some(end) => {
                    self.partial.extend_from_slice(&rest[..end]);
                    let line = std::mem::take(&mut self.partial);
                    self.decode(&line);
                    rest = &rest[end + 1..];
                }
                None => {
                    self.partial.extend_from_slice(rest);
                    return;
                }
            }
        }
        while let Some(end) = memchr(rest) {
            self.decode(&rest[..end]);
            rest = &rest[end + 1..];
        }
        if !rest.is_empty() {
            self.partial.extend_from_slice(rest);
        }
    }

    fn decode(&mut self, line: &[u8]) {
        let line = line.trim_ascii();
        if line.is_empty() {
            return;
        }
        self.ready.push_back(decode_line(line));
    }
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// One watch event line as the source's event; an `ERROR` event (or a bare `Status`) as a
/// status error.
fn decode_line<K: Resource<DynamicType = ()> + DeserializeOwned>(
    line: &[u8],
) -> Result<WatchEvent<K>, SourceError> {
    match serde_json::from_slice::<kube::api::WatchEvent<K>>(line) {
        Ok(kube::api::WatchEvent::Added(mut o) | kube::api::WatchEvent::Modified(mut o)) => {
            super::slim::for_node(&mut o);
            Ok(WatchEvent::Applied(o))
        }
        Ok(kube::api::WatchEvent::Deleted(mut o)) => {
            super::slim::for_node(&mut o);
            Ok(WatchEvent::Deleted(o))
        }
        Ok(kube::api::WatchEvent::Bookmark(b)) => {
            let resource_version = b.metadata.resource_version;
            let end = b
                .metadata
                .annotations
                .get(INITIAL_EVENTS_END)
                .map(String::as_str);
            Ok(if end == Some("true") {
                WatchEvent::InitialEventsEnd { resource_version }
            } else {
                WatchEvent::Bookmark { resource_version }
            })
        }
        Ok(kube::api::WatchEvent::Error(status)) => Err(SourceError::Status {
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        }),
        Err(e) => match serde_json::from_slice::<Status>(line) {
            Ok(status) if status.code != 0 => Err(SourceError::Status {
                code: status.code,
                reason: status.reason,
                message: status.message,
            }),
            _ => Err(transport(kube::Error::SerdeError(e))),
        },
    }
}

/// A body error that only means "the server ended the watch" (an unexpected EOF in the
/// chunked encoding or the TLS stream, as after the server's time-out): the stream ends and
/// the reflector watches again from the last resourceVersion.
fn ends_the_watch(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::UnexpectedEof
        {
            return true;
        }
        if err.to_string().contains("unexpected EOF during chunk") {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn decoder(chunks: &[&str]) -> Vec<Result<WatchEvent<ConfigMap>, SourceError>> {
        let mut d = Decoder::<ConfigMap> {
            body: kube::client::Body::from(Vec::new()),
            partial: Vec::new(),
            ready: VecDeque::new(),
            done: false,
        };
        for c in chunks {
            d.push(Bytes::copy_from_slice(c.as_bytes()));
        }
        d.ready.into_iter().collect()
    }

    fn name(e: &Result<WatchEvent<ConfigMap>, SourceError>) -> String {
        match e {
            Ok(WatchEvent::Applied(o) | WatchEvent::Deleted(o)) => {
                o.metadata.name.clone().unwrap_or_default()
            }
            Ok(WatchEvent::Bookmark { resource_version }) => format!("bookmark@{resource_version}"),
            Ok(WatchEvent::InitialEventsEnd { resource_version }) => {
                format!("end@{resource_version}")
            }
            Err(e) => format!("error: {e}"),
        }
    }

    const ADDED: &str = r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"1"}}}"#;
    const MODIFIED: &str = r#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","resourceVersion":"2"}}}"#;
    const END: &str = r#"{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"3","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;

    #[test]
    fn lines_are_decoded_whole_split_across_chunks_and_several_per_chunk() {
        let whole = format!("{ADDED}\n");
        let (head, tail) = MODIFIED.split_at(40);
        let events = decoder(&[
            &whole,
            head,
            &format!("{tail}\n{END}\n"),
            "\n",
            &END[..10],
            &END[10..],
            "\n",
        ]);
        let names: Vec<String> = events.iter().map(name).collect();
        assert_eq!(names, ["a", "b", "end@3", "end@3"]);
    }

    #[test]
    fn an_error_event_is_a_status_error_and_garbage_a_transport_error() {
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        let events = decoder(&[&format!("{gone}\nnot json\n")]);
        assert!(
            matches!(&events[0], Err(e) if e.is_gone()),
            "{}",
            name(&events[0])
        );
        assert!(matches!(&events[1], Err(SourceError::Transport { .. })));
    }

    #[test]
    fn an_idle_decoder_holds_no_buffer() {
        let mut d = Decoder::<ConfigMap> {
            body: kube::client::Body::from(Vec::new()),
            partial: Vec::new(),
            ready: VecDeque::new(),
            done: false,
        };
        d.push(Bytes::from(format!("{ADDED}\n")));
        assert_eq!(d.partial.capacity(), 0);
        assert_eq!(d.ready.len(), 1);
    }

    // A watch-list's first chunk holds the object and the end bookmark: once both are handed
    // out, the decoder keeps no queue for the rest of the watch's life.
    #[tokio::test]
    async fn a_drained_decoder_keeps_no_event_queue() {
        let mut d = Decoder::<ConfigMap> {
            body: kube::client::Body::from(Vec::new()),
            partial: Vec::new(),
            ready: VecDeque::new(),
            done: false,
        };
        d.push(Bytes::from(format!("{ADDED}\n{END}\n")));
        assert!(d.ready.capacity() >= 2);
        let first = d.next_event().await.expect("an event");
        assert_eq!(name(&first), "a");
        assert!(d.ready.capacity() >= 1, "one event still queued");
        let second = d.next_event().await.expect("an event");
        assert_eq!(name(&second), "end@3");
        assert_eq!(d.ready.capacity(), 0);
    }

    #[test]
    fn an_error_answer_keeps_the_servers_status() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden: no","reason":"Forbidden","code":403}"#;
        let e = status_error(403, body);
        assert_eq!(
            e.to_string(),
            "the API server answered 403 Forbidden: forbidden: no"
        );
        let e = status_error(502, b"Bad Gateway\n");
        assert_eq!(e.to_string(), "the API server answered 502 : Bad Gateway");
    }
}
