//! An in-memory Kubernetes API server for the core/v1 subset a node agent uses, spoken to over
//! real HTTP by the real kube client: nodelet's tests and its offline mode run against it.
//!
//! # Principal types
//! - [`ApiServer`]: binds a loopback port and serves the API in background tasks; [`Config`]
//!   holds the options (history size, bookmark interval, address, authn/authz seams).
//! - [`ServerHandle`]: a cloneable remote control — direct store access for seeding (create,
//!   update, delete, get without HTTP), fault injection, latency, watch closing, history
//!   compaction, listener stop/restart, and a record of every request ([`RequestRecord`]).
//! - Failures a real kube-apiserver shows by itself, all off by default and switchable at run
//!   time through the handle: a process restart ([`ServerHandle::restart`] with a [`Restart`]:
//!   connections refused, then `/readyz` failing while requests are served, watch history
//!   forgotten, the Node authorizer's graph empty until rebuilt), GOAWAY on HTTP/2
//!   connections ([`Config::goaway_chance`]), 429 over an in-flight limit
//!   ([`Config::max_requests_in_flight`]) and a server without streaming lists
//!   ([`Config::watch_list`]). One is on by default: the Node authorizer sees pod writes
//!   [`Config::node_authorizer_lag`] late (50 ms), as upstream's informer-fed graph does.
//! - [`CostModel`] ([`Config::cost_model`], off by default): what answers cost a real server
//!   (a read's time on one of a bounded number of places, a consistent read's wait for the
//!   watch cache to catch up, a commit before a write's answer), for benchmarks that should
//!   match a real one.
//! - [`Authenticator`] / [`Authorizer`]: the request-pipeline seams. Auth is off by default
//!   ([`AllowAll`]: everyone is `system:admin`); [`Config::with_auth`] installs
//!   [`TokenAuthenticator`] (bearer tokens) and [`NodeAuthorizer`] (the Node authorizer and
//!   NodeRestriction rules a kubelet meets).
//! - What a kubelet's own API leans on: TokenReview and (Local/Self)SubjectAccessReview,
//!   answered by the server's own token authentication and [`Authorizer`], and `pods/log`,
//!   `pods/exec` and `pods/attach` (upgrades), proxied over HTTPS to the kubelet at the pod's Node address with a client certificate of
//!   the server's cluster CA ([`ApiServer::kubelet_client_ca_pem`]; more client certificates
//!   from [`ApiServer::issue_client_certificate`]).
//! - [`ManifestSync`]: offline mode's object source, a directory of YAML manifests kept in sync
//!   with the store; [`Config::schedule_to`] binds the pods that name no node to offline
//!   mode's one node, as a scheduler would.
//! - `certificates.k8s.io/v1beta1` ClusterTrustBundles and PodCertificateRequests, served only
//!   with [`Config::with_certificates`] (or [`Config::runtime_config`] plus
//!   [`Config::feature_gate`]), as upstream; with the `testing` feature,
//!   `testing::PodCertificateSigner` answers PodCertificateRequests for other crates' tests.
//!
//! # How a request flows
//! 1. The listener accepts a connection and serves HTTP/1.1 or HTTP/2 on it (after an HTTP/2
//!    response it may send GOAWAY, per [`Config::goaway_chance`]).
//! 2. The pipeline classifies the request (verb, group, resource, subresource, namespace, name),
//!    authenticates a [`User`], takes a seat under [`Config::max_requests_in_flight`] (429
//!    without one), applies injected latency, answers an injected fault if one is queued, and
//!    asks the [`Authorizer`].
//! 3. Resource requests go to the verb handlers over the store; watches stream from the event
//!    history and a broadcast of new events.
//! 4. The request is recorded with its final HTTP status.
//!
//! # Invariants
//! - One global, strictly increasing resourceVersion (decimal string) across all resources.
//! - The store keeps the last [`Config::history_limit`] events; watching or reading exactly from
//!   an older resourceVersion answers `410 Expired` (`too old resource version: X (Y)`).
//! - Objects are stored as JSON: fields this server does not know are preserved. Every body
//!   that is stored (create, update, patch result) decodes as its k8s-openapi type; one that
//!   does not is a 400 BadRequest, so typed clients can always decode lists and watches.
//! - Error bodies are `Status` objects with upstream codes, reasons and message texts.
//!
//! # Example
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), nodelet_apiserver::Error> {
//! use nodelet_apiserver::{ApiServer, Config};
//! use serde_json::json;
//!
//! let server = ApiServer::start(Config::default()).await?;
//! let handle = server.handle();
//! handle.create(json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "app", "namespace": "default"},
//!     "data": {"key": "value"},
//! }))?;
//! let cm = handle.get("v1", "ConfigMap", Some("default"), "app");
//! assert_eq!(cm.map(|c| c["data"]["key"].clone()), Some(json!("value")));
//! assert!(server.url().starts_with("http://127.0.0.1:"));
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! See the crate README for what is and is not implemented compared with a real API server.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod access;
mod certificates;
#[cfg(feature = "client")]
mod client;
mod config;
mod control;
mod cost;
mod credentials;
mod error;
mod extras;
mod handle;
mod http;
mod kubelet;
#[cfg(test)]
mod model_tests;
mod objects;
mod offline;
mod openapi;
mod protobuf;
mod registry;
mod resources;
mod server;
mod state;
mod status;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use access::auth::{
    AllowAll, Attributes, Authenticator, Authorizer, Decision, Headers, Unauthenticated, User,
};
pub use access::node_authorizer::NodeAuthorizer;
pub use access::token_auth::TokenAuthenticator;
pub use config::{Authentication, Authorization, Config};
pub use control::{OpenConnections, RequestRecord, Restart};
pub use cost::CostModel;
pub use error::Error;
pub use handle::ServerHandle;
pub use offline::manifests::{FileProblem, ManifestError, ManifestSync, SyncReport};
pub use server::ApiServer;
pub use status::{ApiError, Cause};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
