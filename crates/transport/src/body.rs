//! [`TrackedBody`]: a response body that holds its stream's slot in the pool until it ends or
//! is dropped, and enforces the read time-out between chunks.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::error::BoxError;
use crate::slot::StreamSlot;

/// A response body counted against its connection's stream limit while it is open.
pub(crate) struct TrackedBody {
    inner: Incoming,
    /// Released at the end of the body (or on drop).
    slot: Option<StreamSlot>,
    read_timeout: Option<Duration>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl TrackedBody {
    pub(crate) fn new(inner: Incoming, slot: StreamSlot, read_timeout: Option<Duration>) -> Self {
        TrackedBody {
            inner,
            slot: Some(slot),
            read_timeout,
            deadline: read_timeout.map(|t| Box::pin(tokio::time::sleep(t))),
        }
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.slot = None;
                this.deadline = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.slot = None;
                this.deadline = None;
                Poll::Ready(Some(Err(Box::new(e))))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(d), Some(t)) = (this.deadline.as_mut(), this.read_timeout) {
                    d.as_mut().reset(tokio::time::Instant::now() + t);
                }
                if this.inner.is_end_stream() {
                    this.slot = None;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                if let Some(d) = this.deadline.as_mut()
                    && d.as_mut().poll(cx).is_ready()
                {
                    this.slot = None;
                    this.deadline = None;
                    let timeout = this.read_timeout.unwrap_or_default();
                    return Poll::Ready(Some(Err(Box::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no data from the API server within {timeout:?}"),
                    )))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
