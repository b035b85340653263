//! Watch streams: newline-delimited `{"type","object"}` events over a chunked response.
//!
//! Starting a watch, under the store lock:
//! 1. `sendInitialEvents=true`: ADDED for every current object, then a BOOKMARK annotated
//!    `k8s.io/initial-events-end`; else `resourceVersion` unset or `"0"`: ADDED for every
//!    current object; else replay history after `resourceVersion`, or a single ERROR event
//!    (410 `Expired`) when that part of history has been compacted.
//! 2. Subscribe to the broadcast; later events with a resourceVersion already covered by (1)
//!    are skipped, so nothing is missed or duplicated.
//!
//! The stream then forwards matching events (with selector transitions turned into ADDED /
//! DELETED, as upstream does), sends bookmarks when asked, and ends on `timeoutSeconds`,
//! `close_watches`, a lagging receiver, listener stop or shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::list_options::list_options;
use super::request_info::RequestInfo;
use super::response::Body;
use crate::control::OpenWatchGuard;
use crate::registry::{ListOptions, parse_rv};
use crate::resources::ResourceId;
use crate::state::Shared;
use crate::status::{ApiError, FieldError};
use crate::store::{Event, Notice, WatchEventType};

struct Filter {
    res: ResourceId,
    namespace: Option<String>,
    opts: ListOptions,
    /// Send `PartialObjectMetadata` instead of full objects (metadata-only watches).
    partial: bool,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.opts.labels.matches(obj) && self.opts.fields.matches(self.res.info(), obj)
    }

    /// The watch line for `ev` seen as `kind`.
    fn line(&self, kind: WatchEventType, ev: &Event) -> Bytes {
        if self.partial {
            line(
                kind.as_str(),
                &super::response::partial_metadata(&ev.object),
            )
        } else {
            event_line(kind, ev)
        }
    }

    /// The event this watch sees for a committed change, if any.
    fn translate(&self, ev: &Event) -> Option<WatchEventType> {
        if ev.key.resource != self.res
            || self
                .namespace
                .as_deref()
                .is_some_and(|n| n != ev.key.namespace)
        {
            return None;
        }
        let now = self.matches(&ev.object);
        let before = ev.prev.as_deref().is_some_and(|p| self.matches(p));
        match ev.kind {
            WatchEventType::Added => now.then_some(WatchEventType::Added),
            WatchEventType::Modified => match (before, now) {
                (true, true) => Some(WatchEventType::Modified),
                (false, true) => Some(WatchEventType::Added),
                (true, false) => Some(WatchEventType::Deleted),
                (false, false) => None,
            },
            WatchEventType::Deleted => before.then_some(WatchEventType::Deleted),
        }
    }
}

fn line(kind: &str, obj: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// A watch line for a committed event, reusing the event's shared JSON encoding.
fn event_line(kind: WatchEventType, ev: &Event) -> Bytes {
    let obj = ev.object_json();
    let mut v = Vec::with_capacity(obj.len() + 32);
    v.extend_from_slice(b"{\"type\":\"");
    v.extend_from_slice(kind.as_str().as_bytes());
    v.extend_from_slice(b"\",\"object\":");
    v.extend_from_slice(obj);
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

fn bookmark(res: ResourceId, rv: u64, initial_end: bool) -> Bytes {
    let info = res.info();
    let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta}),
    )
}

fn is_true(info: &RequestInfo, key: &str) -> bool {
    info.query.get(key).is_some_and(|v| v == "true" || v == "1")
}

/// The watch-list parameters as upstream validates them: `sendInitialEvents` needs
/// `resourceVersionMatch=NotOlderThan` and bookmarks, `resourceVersionMatch` needs
/// `sendInitialEvents`, and a server without the WatchList feature (`watch_list` off)
/// refuses `sendInitialEvents` itself, true or false.
fn check_watch_list(
    info: &RequestInfo,
    send_initial: bool,
    bookmarks: bool,
    watch_list: bool,
) -> Result<(), ApiError> {
    let rv_match = info
        .query
        .get("resourceVersionMatch")
        .filter(|m| !m.is_empty());
    let mut errs = Vec::new();
    if send_initial {
        if rv_match.map(String::as_str) != Some("NotOlderThan") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !bookmarks {
            errs.push(FieldError::forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
    } else if rv_match.is_some() {
        errs.push(FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    // A server without the WatchList feature refuses the parameter itself, true or false.
    let initial_given = info
        .query
        .get("sendInitialEvents")
        .is_some_and(|v| !v.is_empty());
    if initial_given && !watch_list {
        errs.push(FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_list_options(&errs))
    }
}

/// Starts a watch and answers with the streaming response.
pub(crate) fn serve(
    shared: &Arc<Shared>,
    info: &RequestInfo,
    res: ResourceId,
    partial: bool,
    token: CancellationToken,
) -> Result<http::Response<Body>, ApiError> {
    let mut list_info = info.clone();
    let send_initial = info
        .query
        .get("sendInitialEvents")
        .is_some_and(|v| v == "true");
    list_info.query.remove("sendInitialEvents");
    list_info.query.remove("resourceVersionMatch");
    let opts = list_options(&list_info, res)?;
    let bookmarks = is_true(info, "allowWatchBookmarks");
    check_watch_list(info, send_initial, bookmarks, shared.controls.watch_list())?;
    let timeout = match info.query.get("timeoutSeconds").filter(|t| !t.is_empty()) {
        Some(t) => Duration::from_secs(
            t.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
        ),
        None => shared.config.default_watch_timeout,
    };
    let rv = info
        .query
        .get("resourceVersion")
        .filter(|r| !r.is_empty() && *r != "0")
        .map(|r| parse_rv(r))
        .transpose()?;
    let filter = Filter {
        res,
        namespace: info.namespace.clone(),
        opts,
        partial,
    };

    // Collected under the lock as shared references; encoded by the watch task, off the lock.
    let mut initial: Vec<Initial> = Vec::new();
    let (rx, last_rv, gone) = {
        let s = shared.registry.store.inner.lock();
        let rx = s.subscribe();
        let mut gone = false;
        match rv {
            Some(from) if !send_initial => {
                if from < s.history_start {
                    initial.push(Initial::Line(line(
                        "ERROR",
                        &ApiError::too_old(from, s.history_start).to_status(),
                    )));
                    gone = true;
                } else {
                    for ev in s.history.iter().filter(|e| e.rv > from) {
                        if let Some(kind) = filter.translate(ev) {
                            initial.push(Initial::Event(kind, ev.clone()));
                        }
                    }
                }
            }
            _ => {
                let name = filter.opts.fields.exact_name();
                for (_, obj) in s.snapshot_of(res, filter.namespace.as_deref(), name, s.rv) {
                    if filter.matches(&obj) {
                        initial.push(Initial::Added(obj));
                    }
                }
                if send_initial {
                    initial.push(Initial::Line(bookmark(res, s.rv, true)));
                }
            }
        }
        (rx, s.rv, gone)
    };

    let (tx, out) = mpsc::channel::<Bytes>(64);
    let stop = token.clone();
    let open = shared.controls.watch_opened(
        &info.resource,
        info.namespace.as_deref(),
        info.name.as_deref(),
    );
    tokio::spawn(pump(PumpArgs {
        _open: open,
        tx,
        rx,
        filter,
        initial,
        last_rv,
        gone,
        bookmarks,
        timeout,
        stop,
    }));
    let stream = ReceiverStream::new(out).map(|b| Ok::<_, std::io::Error>(Frame::data(b)));
    let mut resp = http::Response::new(StreamBody::new(stream).boxed_unsync());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

/// What a watch sends before following the broadcast.
enum Initial {
    /// An already encoded line (ERROR, the initial-events-end BOOKMARK).
    Line(Bytes),
    /// A replayed history event, seen as this type.
    Event(WatchEventType, Arc<Event>),
    /// A synthetic ADDED for a current object.
    Added(Arc<Value>),
}

struct PumpArgs {
    tx: mpsc::Sender<Bytes>,
    rx: broadcast::Receiver<Notice>,
    filter: Filter,
    initial: Vec<Initial>,
    last_rv: u64,
    gone: bool,
    bookmarks: bool,
    timeout: Duration,
    stop: CancellationToken,
    /// Counts this watch as open until the task ends.
    _open: OpenWatchGuard,
}

async fn pump(mut a: PumpArgs) {
    let deadline = tokio::time::sleep(a.timeout);
    tokio::pin!(deadline);
    for item in std::mem::take(&mut a.initial) {
        let b = match item {
            Initial::Line(b) => b,
            Initial::Event(kind, ev) => a.filter.line(kind, &ev),
            Initial::Added(obj) if a.filter.partial => {
                line("ADDED", &super::response::partial_metadata(&obj))
            }
            Initial::Added(obj) => line("ADDED", &obj),
        };
        tokio::select! {
            r = a.tx.send(b) => if r.is_err() { return },
            () = a.stop.cancelled() => return,
            () = &mut deadline => return,
        }
    }
    if a.gone {
        return;
    }
    let mut last_rv = a.last_rv;
    loop {
        let notice = tokio::select! {
            () = a.tx.closed() => return,
            () = a.stop.cancelled() => return,
            () = &mut deadline => return,
            n = a.rx.recv() => n,
        };
        let out = match notice {
            Ok(Notice::Event(ev)) => {
                if ev.rv <= last_rv {
                    continue;
                }
                last_rv = ev.rv;
                match a.filter.translate(&ev) {
                    Some(kind) => a.filter.line(kind, &ev),
                    None => continue,
                }
            }
            Ok(Notice::Bookmark(rv)) => {
                if !a.bookmarks {
                    continue;
                }
                last_rv = last_rv.max(rv);
                bookmark(a.filter.res, last_rv, false)
            }
            // A lagging watcher is closed, as upstream closes slow watchers; clients resume.
            Ok(Notice::CloseWatches) | Err(_) => return,
        };
        tokio::select! {
            r = a.tx.send(out) => if r.is_err() { return },
            () = a.stop.cancelled() => return,
            () = &mut deadline => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CONFIGMAPS;
    use crate::store::{Key, Store};

    #[test]
    fn a_shared_event_encoding_matches_a_freshly_serialized_line() {
        let store = Store::new(10, 16);
        let mut s = store.inner.lock();
        let obj = json!({"metadata": {"name": "a", "namespace": "d"}, "data": {"k": "v\n\"q\""}});
        s.put(Key::new(CONFIGMAPS, "d", "a"), obj);
        let ev = s.history.back().cloned().expect("event");
        for kind in [
            WatchEventType::Added,
            WatchEventType::Modified,
            WatchEventType::Deleted,
        ] {
            let shared: Value = serde_json::from_slice(&event_line(kind, &ev)).expect("json");
            let fresh: Value =
                serde_json::from_slice(&line(kind.as_str(), &ev.object)).expect("json");
            assert_eq!(shared, fresh);
        }
        assert!(event_line(WatchEventType::Added, &ev).ends_with(b"}\n"));
    }
}
