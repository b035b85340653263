//! What the kubelet API's handlers share: [`ApiState`] and the plain-text answers the kubelet
//! gives (go-restful writes error texts without a content type; Go's server then sends them as
//! `text/plain; charset=utf-8`).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::authn::Authenticator;
use super::authz::Authorizer;
use super::pods::NodePods;

/// The content type of the kubelet's text answers and logs.
pub(super) const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// The server's state, shared by its handlers.
pub(super) struct ApiState {
    pub(super) pods: NodePods,
    pub(super) authn: Authenticator,
    pub(super) authz: Authorizer,
    /// Ends following log streams when the agent stops.
    pub(super) shutdown: CancellationToken,
    /// Log streams run as tasks of the agent's tracker.
    pub(super) tracker: TaskTracker,
}

/// `status` with `text` as a plain-text body.
pub(super) fn text(status: StatusCode, text: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, TEXT_PLAIN)], text.into()).into_response()
}
