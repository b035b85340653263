//! [`ThrottleRetry`]: the transport's answer to a server that sheds load — a 429, 503 or 504
//! carrying `Retry-After` is sent again after that delay, a bounded number of times, as
//! client-go does; anything else goes back to the caller unchanged.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;

use crate::counters::Counters;

/// How many times one request is sent again after a `Retry-After` answer (client-go: 10).
pub(crate) const MAX_RETRIES: u32 = 10;
/// The longest `Retry-After` honoured; a longer one is waited this long.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(10);

/// A tower retry policy for `Retry-After` answers; one per request (tower clones it).
#[derive(Debug, Clone, Default)]
pub(crate) struct ThrottleRetry {
    retries: u32,
    /// Where each retry is counted (shared by the clones).
    counters: Counters,
}

impl ThrottleRetry {
    /// A policy counting its retries in `counters`.
    pub(crate) fn new(counters: Counters) -> Self {
        ThrottleRetry {
            retries: 0,
            counters,
        }
    }

    /// The delay a response asks for, if it is a retryable answer with `Retry-After`
    /// (whole seconds, as kube-apiserver sends them).
    fn delay<B>(response: &Response<B>) -> Option<Duration> {
        if !matches!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT
        ) {
            return None;
        }
        let secs: u64 = response
            .headers()
            .get(http::header::RETRY_AFTER)?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(Duration::from_secs(secs).min(MAX_DELAY))
    }
}

impl<B, E> tower::retry::Policy<Request<Body>, Response<B>, E> for ThrottleRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut Request<Body>,
        result: &mut Result<Response<B>, E>,
    ) -> Option<Self::Future> {
        let delay = Self::delay(result.as_ref().ok()?)?;
        if self.retries >= MAX_RETRIES {
            return None;
        }
        self.retries += 1;
        self.counters.count_throttled_retry();
        tracing::debug!(
            ?delay,
            attempt = self.retries,
            "API server asked to retry later"
        );
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        crate::replay::clone_request(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::retry::Policy as _;

    fn answer(status: u16, retry_after: Option<&str>) -> Result<Response<()>, ()> {
        let mut r = Response::builder().status(status);
        if let Some(v) = retry_after {
            r = r.header("Retry-After", v);
        }
        r.body(()).map_err(|_| ())
    }

    fn retries(p: &mut ThrottleRetry, mut result: Result<Response<()>, ()>) -> bool {
        let mut req = Request::new(Body::empty());
        p.retry(&mut req, &mut result).is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn only_shed_load_answers_with_retry_after_are_retried() {
        let mut p = ThrottleRetry::default();
        assert!(retries(&mut p, answer(429, Some("1"))));
        assert!(retries(&mut p, answer(503, Some("2"))));
        assert!(retries(&mut p, answer(504, Some("1"))));
        assert!(!retries(&mut p, answer(429, None)), "no Retry-After");
        assert!(!retries(&mut p, answer(503, Some("soon"))));
        assert!(!retries(&mut p, answer(500, Some("1"))));
        assert!(!retries(&mut p, answer(200, Some("1"))));
        assert!(!retries(&mut p, Err(())));
        assert_eq!(p.counters.retries().throttled, 3, "each retry counted once");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_after_the_bound_and_delays_are_capped() {
        let mut p = ThrottleRetry::default();
        for _ in 0..MAX_RETRIES {
            assert!(retries(&mut p, answer(429, Some("1"))));
        }
        assert!(!retries(&mut p, answer(429, Some("1"))));
        let long = answer(429, Some("3600")).unwrap_or_default();
        assert_eq!(ThrottleRetry::delay(&long), Some(MAX_DELAY));
    }
}
