//! The handler runner's errors, with the texts a kubelet shows for the same failures.

use std::time::Duration;

/// A handler's port could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PortError {
    /// A port name the container does not declare (and that is no number either).
    #[error("strconv.Atoi: parsing {name:?}: invalid syntax")]
    NotFound {
        /// The name.
        name: String,
    },
    /// A number outside 1..=65535.
    #[error("invalid port number: {port}")]
    Invalid {
        /// The number.
        port: i64,
    },
}

/// An HTTP GET that did not get a response. `Display` is Go's `url.Error` text
/// (`Get "<url>": <cause>`), as the kubelet reports it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The action's port could not be resolved (no request was made).
    #[error(transparent)]
    Port(#[from] PortError),
    /// The request could not be made from the action (a header or URL the HTTP library
    /// refuses).
    #[error("Get {url:?}: {message}")]
    Request {
        /// The URL.
        url: String,
        /// What was wrong.
        message: String,
    },
    /// The host name did not resolve.
    #[error("Get {url:?}: dial tcp: lookup {host}: no such host")]
    Resolve {
        /// The URL.
        url: String,
        /// The host name.
        host: String,
    },
    /// The TCP connection failed.
    #[error("Get {url:?}: dial tcp {addr}: connect: {cause}")]
    Connect {
        /// The URL.
        url: String,
        /// The address dialled.
        addr: String,
        /// The system's reason (`connection refused`, ...).
        cause: String,
    },
    /// An `https` URL was answered in plain HTTP (the kubelet then retries a lifecycle hook
    /// over `http`).
    #[error("Get {url:?}: http: server gave HTTP response to HTTPS client")]
    HttpResponseToHttps {
        /// The URL.
        url: String,
    },
    /// The TLS handshake failed.
    #[error("Get {url:?}: {message}")]
    Tls {
        /// The URL.
        url: String,
        /// rustls' reason.
        message: String,
    },
    /// The connection failed after it was made, or the answer was not HTTP.
    #[error("Get {url:?}: {message}")]
    Protocol {
        /// The URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// Eleven redirects on the same host.
    #[error("Get {url:?}: stopped after 10 redirects")]
    TooManyRedirects {
        /// The URL of the tenth redirect.
        url: String,
    },
    /// No response within the timeout.
    #[error(
        "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    )]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
}

impl HttpError {
    /// Whether an `https` request was answered in plain HTTP (the kubelet's lifecycle runner
    /// then tries again over `http`).
    pub fn is_http_response_to_https(&self) -> bool {
        matches!(self, Self::HttpResponseToHttps { .. })
    }
}

/// A command could not be run in a container (a command that ran and exited non-zero is an
/// [`ExecResult`](super::ExecResult), not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The container has no running instance.
    #[error("container {container:?} is not running")]
    NotRunning {
        /// The container's name.
        container: String,
    },
    /// The runtime was built without a `container-exec` command.
    #[error("the runtime has no container-exec command")]
    NoExecCommand,
    /// The `container-exec` process could not be started.
    #[error("starting container-exec for container {container:?}")]
    Spawn {
        /// The container's name.
        container: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Reading the command's output or waiting for it failed.
    #[error("waiting for the command in container {container:?}")]
    Wait {
        /// The container's name.
        container: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The command ran longer than the timeout; it was killed.
    #[error("command {command:?} timed out")]
    Timeout {
        /// The command, its words joined by spaces.
        command: String,
        /// The timeout.
        timeout: Duration,
    },
}
