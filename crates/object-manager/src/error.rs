//! The crate's error type, with `Display` texts that match the kubelet's.

use std::sync::Arc;

use crate::source::SourceError;

/// Everything a manager call can fail with.
///
/// Where the kubelet has an exact text (spec OM-5, OM-11, OM-18), `Display` reproduces it so
/// events read the same as a kubelet's. Classify with [`Error::is_not_found`] or by matching the
/// variant, never by the message.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `get` for an object that no registered pod references (OM-11 step 1, OM-18 step 1).
    #[error("object {namespace:?}/{name:?} not registered")]
    NotRegistered {
        /// Namespace of the requested object.
        namespace: String,
        /// Name of the requested object.
        name: String,
    },

    /// The object does not exist.
    ///
    /// `resource` is the singular group-resource (`configmap`, `secret`) for the Watch store
    /// (OM-18 step 5) and the plural resource (`configmaps`, `secrets`) as the API server says it
    /// for the Get and Cache strategies (OM-18: the two texts differ upstream too).
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// `configmap` / `secret` (Watch) or `configmaps` / `secrets` (Get, Cache).
        resource: &'static str,
        /// Namespace of the requested object.
        namespace: String,
        /// Name of the requested object.
        name: String,
    },

    /// The per-object watch did not complete its first list within the sync timeout (1 s by
    /// default, OM-18 step 4).
    #[error("failed to sync {resource} cache: timed out waiting for the condition")]
    SyncTimeout {
        /// `configmap` or `secret`.
        resource: &'static str,
        /// Namespace of the requested object.
        namespace: String,
        /// Name of the requested object.
        name: String,
    },

    /// The API server answered the GET with an error status other than 404. `Display` is the
    /// server's message, passed through unchanged as the kubelet does.
    #[error("{message}")]
    Api {
        /// Namespace of the requested object.
        namespace: String,
        /// Name of the requested object.
        name: String,
        /// HTTP status code.
        code: u16,
        /// The server's `Status.message`.
        message: String,
    },

    /// The GET never got an answer from the API server (connection refused, reset, bad body).
    #[error("failed to get {namespace}/{name} from the API server")]
    Request {
        /// Namespace of the requested object.
        namespace: String,
        /// Name of the requested object.
        name: String,
        /// What went wrong underneath.
        #[source]
        source: Arc<SourceError>,
    },

    /// The manager was shut down ([`Manager::shutdown`](crate::Manager::shutdown)); no watch is
    /// (re)started any more (OM-21).
    #[error("object {namespace:?}/{name:?} cannot be read: the object manager is shut down")]
    ShutDown {
        /// Namespace of the requested object.
        namespace: String,
        /// Name of the requested object.
        name: String,
    },

    /// The Watch store keeps an object as the JSON text of what the server sent and decodes it
    /// on each read; this one did not decode (a bug: the text was encoded from the same kind).
    /// The decoder's message is left out, for it may quote a value.
    #[error("object {namespace:?}/{name:?} as kept by the watch store does not decode")]
    Kept {
        /// Namespace of the requested object.
        namespace: String,
        /// Name of the requested object.
        name: String,
    },

    /// [`Strategy`](crate::Strategy) parsing failed (OM-5's text).
    #[error("unknown configmap and secret manager mode: {mode}")]
    UnknownStrategy {
        /// The rejected value.
        mode: String,
    },

    /// A manager was built outside a tokio runtime; it needs one for its background tasks.
    #[error("an object manager must be created inside a tokio runtime")]
    NoRuntime,
}

impl Error {
    /// `true` when the object does not exist on the API server (or in the watch store).
    ///
    /// Consumers with `optional: true` references skip the object on this (spec PW-9, PW-10).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Map a source error for `namespace/name` to the error a Get/Cache caller sees.
    pub(crate) fn from_source(
        err: SourceError,
        plural: &'static str,
        namespace: &str,
        name: &str,
    ) -> Self {
        match err {
            SourceError::Status { code: 404, .. } => Error::NotFound {
                resource: plural,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
            SourceError::Status { code, message, .. } => Error::Api {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                code,
                message,
            },
            other @ SourceError::Transport { .. } => Error::Request {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source: Arc::new(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_registered_reads_like_the_kubelet() {
        let e = Error::NotRegistered {
            namespace: "ns2".into(),
            name: "name2".into(),
        };
        assert_eq!(e.to_string(), r#"object "ns2"/"name2" not registered"#);
    }

    #[test]
    fn watch_store_not_found_is_singular_and_api_not_found_is_plural() {
        let watch = Error::NotFound {
            resource: "configmap",
            namespace: "ns".into(),
            name: "cm-a".into(),
        };
        assert_eq!(watch.to_string(), r#"configmap "cm-a" not found"#);
        let api = Error::from_source(
            SourceError::Status {
                code: 404,
                reason: "NotFound".into(),
                message: "whatever".into(),
            },
            "configmaps",
            "ns",
            "cm-a",
        );
        assert_eq!(api.to_string(), r#"configmaps "cm-a" not found"#);
        assert!(api.is_not_found() && watch.is_not_found());
    }

    #[test]
    fn sync_timeout_reads_like_the_kubelet() {
        let e = Error::SyncTimeout {
            resource: "secret",
            namespace: "ns".into(),
            name: "s1".into(),
        };
        assert_eq!(
            e.to_string(),
            "failed to sync secret cache: timed out waiting for the condition"
        );
        assert!(!e.is_not_found());
    }

    #[test]
    fn other_api_errors_pass_the_server_message_through() {
        let e = Error::from_source(
            SourceError::Status {
                code: 403,
                reason: "Forbidden".into(),
                message: "no way".into(),
            },
            "secrets",
            "ns",
            "s",
        );
        assert_eq!(e.to_string(), "no way");
        assert!(!e.is_not_found());
    }
}
