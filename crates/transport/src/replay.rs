//! Which failed requests may be sent again (step (6) of the crate docs): one never written to
//! its connection always, one the server refused unprocessed a bounded number of times, any
//! other never; and how a request is copied to be sent again.

use http::Request;
use hyper::client::conn::TrySendError;
use kube::client::Body;

/// How many times a request the server refused unprocessed is sent again, each time on a
/// connection that has not sent GOAWAY. Once is enough against a server that sends GOAWAY on
/// a small fraction of its responses; a few more cover a server that sends it on every
/// response while many requests are in flight (each new connection may be told to go away
/// before this request reaches it). Go's client retries such requests without a bound.
pub(crate) const REFUSED_RETRIES: u32 = 8;

/// How many connections may close under one request before it was written to any of them.
/// Not a retry budget — such a request is sent again whatever it is and however often the
/// server refused it — only the bound that keeps a server that closes every connection at
/// once from being reconnected to forever. Each attempt uses another connection.
pub(crate) const UNSENT_RETRIES: u32 = 32;

/// Why hyper failed a request, as far as sending it again goes.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Never written to its connection: the connection closed (or was not ready) before hyper
    /// handed the request to it. hyper gives the request back (`TrySendError::take_message`:
    /// "if there was an error before trying to serialize the request to the connection, the
    /// message will be returned"); `None` when it reported a cancellation without it.
    Unsent {
        request: Option<Box<Request<Body>>>,
        error: hyper::Error,
    },
    /// Written, and refused by the server without being processed: its stream above the last
    /// stream of a graceful GOAWAY, or reset with `REFUSED_STREAM` (RFC 9113 §8.7).
    Refused { error: hyper::Error },
    /// Anything else: the server may have processed it.
    Failed { error: hyper::Error },
}

/// What one request may still spend on being sent again.
#[derive(Debug)]
pub(crate) struct Retries {
    /// Times it was sent again after a refusal, and how many are allowed.
    refused: u32,
    max_refused: u32,
    /// Connections that closed before it was written.
    unsent: u32,
}

impl Failure {
    /// Classifies a failed `try_send_request` by hyper's own account: whether it handed the
    /// request back, else by the HTTP/2 error that ended its stream.
    pub(crate) fn of(error: TrySendError<Request<Body>>) -> Failure {
        let mut error = error;
        if let Some(request) = error.take_message() {
            return Failure::Unsent {
                request: Some(Box::new(request)),
                error: error.into_error(),
            };
        }
        let error = error.into_error();
        if error.is_canceled() {
            Failure::Unsent {
                request: None,
                error,
            }
        } else if refused_unprocessed(&error) {
            Failure::Refused { error }
        } else {
            Failure::Failed { error }
        }
    }
}

impl Retries {
    /// A fresh budget allowing `max_refused` retries after refusals.
    pub(crate) fn new(max_refused: u32) -> Self {
        Retries {
            refused: 0,
            max_refused,
            unsent: 0,
        }
    }

    /// Whether a request the server refused unprocessed may be sent again; spends one retry.
    pub(crate) fn after_refusal(&mut self) -> bool {
        if self.refused >= self.max_refused {
            return false;
        }
        self.refused += 1;
        true
    }

    /// Whether a request never written may be sent again on another connection; spends
    /// nothing from the refusal budget, only from [`UNSENT_RETRIES`].
    pub(crate) fn after_unsent(&mut self) -> bool {
        if self.unsent >= UNSENT_RETRIES {
            return false;
        }
        self.unsent += 1;
        true
    }

    /// Connections that closed under this request before it was written, so far.
    pub(crate) fn connections_lost(&self) -> u32 {
        self.unsent
    }
}

/// A copy of `req` to send again, when its body can be replayed (kube's bodies are bytes).
pub(crate) fn clone_request(req: &Request<Body>) -> Option<Request<Body>> {
    let body = req.body().try_clone()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

/// Whether the HTTP/2 error behind `error` says the server refused the stream unprocessed:
/// above the last stream of a graceful GOAWAY, or reset with `REFUSED_STREAM`.
fn refused_unprocessed(error: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            // A graceful GOAWAY fails only the streams above its last stream; one with an error
            // code may end processed streams too, so only NO_ERROR counts.
            return h2.is_remote()
                && match h2.reason() {
                    Some(h2::Reason::NO_ERROR) => h2.is_go_away(),
                    Some(h2::Reason::REFUSED_STREAM) => h2.is_reset(),
                    _ => false,
                };
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_never_written_are_sent_again_without_spending_the_refusal_budget() {
        let mut retries = Retries::new(0);
        for _ in 0..UNSENT_RETRIES {
            assert!(retries.after_unsent());
        }
        assert!(!retries.after_refusal(), "no refusal budget was given");
        assert!(
            !retries.after_unsent(),
            "the bound on lost connections holds"
        );
        assert_eq!(retries.connections_lost(), UNSENT_RETRIES);
    }

    #[test]
    fn refusals_stop_at_their_budget_whatever_connections_were_lost() {
        let mut retries = Retries::new(2);
        assert!(retries.after_unsent());
        assert!(retries.after_refusal());
        assert!(retries.after_unsent());
        assert!(retries.after_refusal());
        assert!(!retries.after_refusal());
        assert!(
            retries.after_unsent(),
            "losing connections has its own bound"
        );
    }
}
