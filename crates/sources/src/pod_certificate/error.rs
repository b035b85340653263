//! [`PodCertificateError`]: why a `podCertificate` source has no credential bundle, with the
//! kubelet's texts; [`ApiError`]: what the API answered.

use super::keys::KeyError;

/// What the API server answered a PodCertificate-related request with. `Display` is the
/// server's message or the transport failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The server refused the request.
    #[error("{message}")]
    Status {
        /// HTTP status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// No usable answer (connection, decoding, …).
    #[error("{message}")]
    Request {
        /// What went wrong.
        message: String,
    },
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => ApiError::Status {
                code: status.code,
                message: status.message,
            },
            other => ApiError::Request {
                message: other.to_string(),
            },
        }
    }
}

/// Why a `podCertificate` source could not be projected (PL-21, PL-22). The text follows
/// `MountVolume.SetUp failed for volume "<vol>" : ` in the `FailedMount` event; it never
/// contains key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PodCertificateError {
    /// A request was created (or is being refreshed for the first time) and has no answer yet;
    /// the pod waits.
    #[error("credential bundle is not issued yet")]
    NotIssued,
    /// The signer denied the request: terminal for this pod.
    #[error("PodCertificateRequest was permanently denied: reason={reason:?} message={message:?}")]
    Denied {
        /// The `Denied` condition's reason.
        reason: String,
        /// The `Denied` condition's message.
        message: String,
    },
    /// The signer failed the request: terminal for this pod.
    #[error("PodCertificateRequest was permanently failed: reason={reason:?} message={message:?}")]
    Failed {
        /// The `Failed` condition's reason.
        reason: String,
        /// The `Failed` condition's message.
        message: String,
    },
    /// The pod's service account could not be read (its UID goes into the request).
    #[error("while fetching service account: {0}")]
    ServiceAccount(ApiError),
    /// The node object could not be read (its UID goes into the request).
    #[error("while getting node object: {0}")]
    Node(ApiError),
    /// `keyType` is unknown or the key could not be generated.
    #[error("while generating keypair: {0}")]
    Key(#[from] KeyError),
    /// Creating the request failed (`refresh`: a refresh of an issued credential).
    #[error(
        "while creating {} PodCertificateRequest: while creating on API: {cause}",
        if *refresh { "refresh" } else { "initial" }
    )]
    Create {
        /// Whether this was a refresh request.
        refresh: bool,
        /// The API's answer.
        cause: ApiError,
    },
    /// The API answered a create without a name.
    #[error("the API answered the PodCertificateRequest create without a name")]
    Unnamed,
    /// The key generation task did not complete.
    #[error("the key generation task did not complete")]
    TaskFailed,
}
