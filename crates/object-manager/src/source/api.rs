//! The trait the managers read objects through, [`ObjectSource`], and what it returns.

use std::fmt;
use std::sync::Arc;

use futures::stream::BoxStream;

/// How a read may be served: a GET (OM-11 step 4), and the first state of a watch-list or
/// LIST (the reflector's choice, `reflector.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// A quorum-consistent read (the API's default: no resourceVersion).
    Quorum,
    /// `resourceVersion=0`: the API server may answer from its watch cache as it is.
    WatchCache,
}

/// The result of listing one object by name (`fieldSelector=metadata.name=<name>`).
#[derive(Clone)]
pub struct Listed<K> {
    /// The object, if it exists.
    pub object: Option<K>,
    /// The list's resourceVersion: where the following watch starts.
    pub resource_version: String,
}

/// One event of a per-object watch.
#[derive(Clone)]
pub enum WatchEvent<K> {
    /// The object was created or modified.
    Applied(K),
    /// The object was deleted (the payload is its last state).
    Deleted(K),
    /// A bookmark: nothing changed, the stream is at `resource_version`.
    Bookmark {
        /// The resourceVersion the watch has reached.
        resource_version: String,
    },
    /// The end of a watch-list's initial events (a BOOKMARK annotated
    /// `k8s.io/initial-events-end`): what came before is the object's state at
    /// `resource_version`, as a LIST at that resourceVersion would have returned it.
    InitialEventsEnd {
        /// The resourceVersion of that state.
        resource_version: String,
    },
}

/// A per-object watch: events until the server ends the watch (`None`) or an error item.
pub type WatchStream<K> = BoxStream<'static, Result<WatchEvent<K>, SourceError>>;

/// Why a source request failed.
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The API server answered with an error status (404, 410 Gone, 403, 500, ...).
    #[error("the API server answered {code} {reason}: {message}")]
    Status {
        /// HTTP status code.
        code: u16,
        /// `Status.reason`, e.g. `NotFound`, `Expired`.
        reason: String,
        /// `Status.message`.
        message: String,
    },
    /// No usable answer: connection refused or reset, time-out, undecodable body.
    #[error("the API server could not be reached")]
    Transport {
        /// The client's error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl SourceError {
    /// A status error with `code`, `reason` and `message`.
    pub fn status(code: u16, reason: &str, message: &str) -> Self {
        SourceError::Status {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// The server answered (with an API status), as opposed to not being reached at all.
    pub fn is_answer(&self) -> bool {
        matches!(self, SourceError::Status { .. })
    }

    /// `410 Gone`: the requested resourceVersion is too old; the reflector must relist.
    pub fn is_gone(&self) -> bool {
        matches!(self, SourceError::Status { code: 410, .. })
    }

    /// A `403` from the Node authorizer saying it knows no pod of this node that references the
    /// object (`... no relationship found between node '<node>' and this object`). The
    /// authorizer answers from a graph that trails the API — right after a pod is bound, and
    /// after a server restart until the graph is rebuilt — so for an object a registered pod
    /// references this is usually transient; reflectors retry it on a short schedule for a
    /// while before taking it for a denial. The server gives no other mark than its message.
    pub fn is_no_relationship(&self) -> bool {
        matches!(
            self,
            SourceError::Status { code, message, .. } if is_no_relationship(*code, message)
        )
    }
}

/// Whether an API answer of HTTP status `code` with `message` is the Node authorizer's
/// refusal for want of a link in its graph ([`SourceError::is_no_relationship`]): the one
/// place the server's text is matched, for every caller that gets such an answer.
pub fn is_no_relationship(code: u16, message: &str) -> bool {
    code == 403 && message.contains("no relationship found between node")
}

impl fmt::Debug for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the payload: status errors carry only the server's message.
        match self {
            SourceError::Status {
                code,
                reason,
                message,
            } => f
                .debug_struct("Status")
                .field("code", code)
                .field("reason", reason)
                .field("message", message)
                .finish(),
            SourceError::Transport { source } => f
                .debug_struct("Transport")
                .field("source", &source.to_string())
                .finish(),
        }
    }
}

/// Where the managers read objects of kind `K` from.
///
/// `namespace` is empty for cluster-scoped kinds (the Node whose TTL annotation the Cache
/// strategy reads). Every request names exactly one object, the only shape the Node
/// authorizer permits for a node identity.
#[async_trait::async_trait]
pub trait ObjectSource<K>: Send + Sync + 'static {
    /// GET one object.
    async fn get(&self, namespace: &str, name: &str, read: ReadFrom) -> Result<K, SourceError>;

    /// LIST with `fieldSelector=metadata.name=<name>`, served as `read` says: the object if it
    /// exists, and the list's resourceVersion.
    async fn list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Listed<K>, SourceError>;

    /// WATCH with `fieldSelector=metadata.name=<name>` from `resource_version`. A `410 Gone`
    /// (as the request's answer or as an error item of the stream) means "relist".
    async fn watch(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<WatchStream<K>, SourceError>;

    /// A watch-list (a WATCH with `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`,
    /// bookmarks, and the resourceVersion `read` says: none for [`ReadFrom::Quorum`], `0` for
    /// [`ReadFrom::WatchCache`]), in place of LIST + WATCH: the object's state as
    /// [`WatchEvent::Applied`] (nothing when it does not exist), then
    /// [`WatchEvent::InitialEventsEnd`], then its changes, all on one request.
    ///
    /// `Ok(None)` when this source does not do watch-lists, or its server refused one (a
    /// server without the feature answers 400/422): the caller lists and watches instead.
    /// A wrapping source forwards it (no default: a wrapper that forgot would silently turn
    /// every watch-list into LIST + WATCH).
    async fn watch_list(
        &self,
        namespace: &str,
        name: &str,
        read: ReadFrom,
    ) -> Result<Option<WatchStream<K>>, SourceError>;
}
