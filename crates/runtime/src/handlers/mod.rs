//! The kubelet's handler runner, shared by lifecycle hooks and probes: a command in a running
//! container ([`ProcessRuntime::exec_sync`](crate::ProcessRuntime::exec_sync), the CRI's
//! `ExecSync`) and an HTTP GET ([`HttpGet`], the kubelet's `pkg/probe/http` request and its
//! lifecycle client), plus [`resolve_container_port`] (a port by number or by the container's
//! port name).
//!
//! What each caller makes of a result is its own business: a lifecycle hook fails only when the
//! exchange fails (any HTTP status will do) or the command exits non-zero; a probe reads the
//! status code and the output. The texts follow the kubelet's (Go's `net/http` errors:
//! `Get "<url>": dial tcp <addr>: connect: connection refused`), so a caller can put them in
//! an event or a probe result as a kubelet would.
//!
//! ```text
//! exec_sync(uid, container, command, timeout)
//!     <exec_command> <pid> <launch.json> -- <command…>     (sandbox::exec_main: the
//!     container's namespaces, user, working directory, environment)
//!     ─► ExecResult { exit_code, stdout, stderr }          (each kept up to 10 KiB)
//! HttpGet::from_action(action, container, pod_ip, purpose) ─► send(timeout)
//!     GET <scheme>://<host or pod IP>:<port><path>, headers as given, `User-Agent:
//!     kube-<purpose>/1.36`, `Accept: */*`; HTTPS without certificate checks; redirects
//!     followed only on the same host (at most 10), else the redirect is the response
//!     ─► HttpResponse { status, body (up to 10 KiB), url }
//! ```

mod error;
mod exec;
mod http;
mod port;
mod tls;

pub use error::{ExecError, HttpError, PortError};
pub use exec::{ExecResult, MAX_EXEC_OUTPUT};
pub use http::{HttpGet, HttpResponse, MAX_BODY};
pub use port::resolve_container_port;
