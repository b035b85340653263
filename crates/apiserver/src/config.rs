//! [`Config`]: the server's options and their builder methods.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::access::auth::{AllowAll, Authenticator, Authorizer};
use crate::cost::CostModel;
use crate::error::Error;
use crate::resources::{Served, ServedError};

/// Server options. `Config::default()` suits tests.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Address to bind. Default `127.0.0.1:0` (a free loopback port).
    pub listen: SocketAddr,
    /// Events kept for watch resumption and exact reads. Default 10 000: enough for any test
    /// and for an offline node, small enough (a few MiB) to keep memory flat.
    pub history_limit: usize,
    /// Interval of the periodic BOOKMARK sent to watches with `allowWatchBookmarks=true`.
    /// Default 60 s, as a real server sends them about once a minute.
    pub bookmark_interval: Duration,
    /// Watch duration when the client gives no `timeoutSeconds`. Default 30 min.
    pub default_watch_timeout: Duration,
    /// Namespaces created at start. Default `default`, `kube-system`, `kube-public`,
    /// `kube-node-lease`.
    pub initial_namespaces: Vec<String>,
    /// Who a request is. Default [`AllowAll`] (everyone is `system:admin`);
    /// [`Config::with_auth`] sets [`Authentication::BearerTokens`].
    pub authenticator: Authentication,
    /// What a user may do. Default [`AllowAll`]; [`Config::with_auth`] sets
    /// [`Authorization::Node`].
    pub authorizer: Authorization,
    /// Serve HTTPS with a CA and server certificate generated at start (see
    /// [`Config::with_tls`]). Default off (plain HTTP).
    pub tls: bool,
    /// Create the `default` ServiceAccount in every new namespace, as the controller manager
    /// does. Default on.
    pub auto_service_accounts: bool,
    /// `iss` of service account tokens and the OIDC discovery issuer. Default
    /// `https://kubernetes.default.svc`.
    pub service_account_issuer: String,
    /// Publish ConfigMap `kube-root-ca.crt` (key `ca.crt`) in every namespace, as a cluster's
    /// root-ca-cert-publisher does: the cluster CA generated at start, which signs the TLS
    /// certificate with [`Config::tls`] and the client certificate shown to kubelets
    /// ([`ApiServer::kubelet_client_ca_pem`](crate::ApiServer::kubelet_client_ca_pem)).
    /// Default off (existing tests count the objects in their namespaces).
    pub publish_root_ca: bool,
    /// Publish Service `default/kubernetes` at start, as kube-apiserver does for itself:
    /// cluster IP 10.96.0.1 (the first address of the service range 10.96.0.0/12), port 443
    /// named `https`, target port the server's own. Default off (existing tests count the
    /// objects in their namespaces); [`Config::like_a_cluster`] turns it on.
    pub master_service: bool,
    /// With [`Config::with_auth`]: a service account may read and write the namespaced
    /// objects of its own namespace (this server has no RBAC; a cluster would need a
    /// RoleBinding of the `edit` role), so an in-cluster client in a pod works offline.
    /// Default off; [`Config::like_a_cluster`] turns it on.
    pub service_account_access: bool,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` advertised on every connection: how many
    /// requests (watches included) one connection may have open at once; further streams wait
    /// in the client. Default 100, kube-apiserver's `--http2-max-streams-per-connection`.
    pub http2_max_streams_per_connection: u32,
    /// ServiceAccount admission on pod create: the pod's account must exist, and the
    /// `kube-api-access-*` token volume and its mounts are injected unless
    /// `automountServiceAccountToken: false` (pod, else account) says otherwise. Default off:
    /// a bare server keeps a created pod's spec as the test wrote it (many tests assert on
    /// volumes and mounts); the binary and the agent's embedded mode turn it on.
    pub service_account_admission: bool,
    /// Probability, after the response to each HTTP/2 API request (watches included; not
    /// `/nodelet/...`), that the server sends GOAWAY (`NO_ERROR`) on that connection: its open
    /// streams finish, new ones are not processed, and it closes once idle; the client
    /// reconnects. Default 0.0 (never).
    /// kube-apiserver's `--goaway-chance` accepts 0 to 0.02; any value in 0..=1 is taken here
    /// (1.0: after every HTTP/2 response). Changed at run time with
    /// [`ServerHandle::set_goaway_chance`](crate::ServerHandle::set_goaway_chance).
    pub goaway_chance: f64,
    /// Requests the server handles at once before it answers **429** `TooManyRequests`
    /// (`Retry-After: 1`), as API Priority and Fairness does under load. A request holds its
    /// seat until its response is ready (a watch only while it is set up); `/healthz`,
    /// `/livez`, `/readyz` and `/nodelet/...` never need one. Default 0 (unlimited). Changed at
    /// run time with
    /// [`ServerHandle::set_max_requests_in_flight`](crate::ServerHandle::set_max_requests_in_flight).
    pub max_requests_in_flight: usize,
    /// Serve streaming lists (`watch` with `sendInitialEvents`, the WatchList feature). Off,
    /// such a watch is refused with 422 `Invalid` (`sendInitialEvents is forbidden for watch
    /// unless the WatchList feature gate is enabled`), as a server without the feature answers.
    /// Default on. Changed at run time with
    /// [`ServerHandle::set_watch_list`](crate::ServerHandle::set_watch_list).
    pub watch_list: bool,
    /// Group/versions switched on or off, as kube-apiserver's `--runtime-config GV=BOOL`
    /// (later entries win). Every group/version is on by default except the beta
    /// `certificates.k8s.io/v1beta1`. A key naming no group/version this server has makes
    /// [`ApiServer::start`](crate::ApiServer::start) fail with
    /// [`Error::UnknownGroupVersion`](crate::Error::UnknownGroupVersion).
    pub runtime_config: Vec<(String, bool)>,
    /// Feature gates, as kube-apiserver's `--feature-gates NAME=BOOL` (later entries win). Known:
    /// `ClusterTrustBundle` (serves ClusterTrustBundles; a node may read them),
    /// `PodCertificateRequest` (serves PodCertificateRequests; a node may create them and read
    /// those naming it, and read the service accounts of its pods) and
    /// `ClusterTrustBundleProjection` (the kubelet's; accepted, no effect here). All off by
    /// default; an unknown name makes [`ApiServer::start`](crate::ApiServer::start) fail with
    /// [`Error::UnknownFeatureGate`](crate::Error::UnknownFeatureGate)
    /// (`unrecognized feature gate: X`).
    pub feature_gates: Vec<(String, bool)>,
    /// How long after a pod write the Node authorizer ([`Config::with_auth`]) sees it: a node
    /// is refused the pod and the Secrets, ConfigMaps and service-account tokens it references
    /// ("no relationship found") for that long after the pod is bound to it, and still allowed
    /// them for that long after it is deleted, as a real kube-apiserver's authorizer, whose
    /// graph its own informers fill, behaves. Default 50 ms, to imitate a real server under a
    /// node's burst of requests (a quiet v1.36 server: a median of about 1 ms, at most about
    /// 30 ms). 0 is immediately consistent. Changed at run time with
    /// [`ServerHandle::set_node_authorizer_lag`](crate::ServerHandle::set_node_authorizer_lag).
    pub node_authorizer_lag: Duration,
    /// What answers cost ([`CostModel`]): a read's time on one of the server's places, a
    /// consistent read's wait for the watch cache to catch up, a commit's before a write
    /// answers. Default off (tests stay fast); [`CostModel::like_kube_apiserver`] is
    /// the measured v1.36.2 server, for benchmarks.
    pub cost_model: CostModel,
    /// Bind every pod that names no node to this node, as kube-scheduler would with one node,
    /// with the `Scheduled` event it writes (`scheduler.rs`): what offline mode's one-node
    /// cluster needs. Default `None`: nothing binds a pod but a client (a test, a real
    /// scheduler) through `pods/binding`.
    pub schedule_to: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
            initial_namespaces: ["default", "kube-system", "kube-public", "kube-node-lease"]
                .map(String::from)
                .to_vec(),
            authenticator: Authentication::Given(Arc::new(AllowAll)),
            authorizer: Authorization::Given(Arc::new(AllowAll)),
            tls: false,
            auto_service_accounts: true,
            service_account_issuer: "https://kubernetes.default.svc".into(),
            publish_root_ca: false,
            master_service: false,
            service_account_access: false,
            http2_max_streams_per_connection: 100,
            service_account_admission: false,
            goaway_chance: 0.0,
            max_requests_in_flight: 0,
            watch_list: true,
            runtime_config: Vec::new(),
            feature_gates: Vec::new(),
            node_authorizer_lag: Duration::from_millis(50),
            cost_model: CostModel::default(),
            schedule_to: None,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("history_limit", &self.history_limit)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("default_watch_timeout", &self.default_watch_timeout)
            .field("initial_namespaces", &self.initial_namespaces)
            .field(
                "http2_max_streams_per_connection",
                &self.http2_max_streams_per_connection,
            )
            .field("goaway_chance", &self.goaway_chance)
            .field("max_requests_in_flight", &self.max_requests_in_flight)
            .field("watch_list", &self.watch_list)
            .field("runtime_config", &self.runtime_config)
            .field("feature_gates", &self.feature_gates)
            .field("node_authorizer_lag", &self.node_authorizer_lag)
            .field("cost_model", &self.cost_model)
            .field("schedule_to", &self.schedule_to)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Switches the group/version `gv` (`certificates.k8s.io/v1beta1`, `v1`, ...) on or off
    /// (appends to [`Config::runtime_config`]).
    #[must_use]
    pub fn runtime_config(mut self, gv: &str, on: bool) -> Self {
        self.runtime_config.push((gv.to_string(), on));
        self
    }

    /// Turns the feature gate `name` on or off (appends to [`Config::feature_gates`]).
    #[must_use]
    pub fn feature_gate(mut self, name: &str, on: bool) -> Self {
        self.feature_gates.push((name.to_string(), on));
        self
    }

    /// Checks [`Config::runtime_config`] and [`Config::feature_gates`] as
    /// [`ApiServer::start`](crate::ApiServer::start) does, without starting anything.
    ///
    /// # Errors
    /// [`Error::UnknownFeatureGate`] (`unrecognized feature gate: X`) or
    /// [`Error::UnknownGroupVersion`].
    pub fn check(&self) -> Result<(), Error> {
        self.served().map(|_| ())
    }

    /// What this configuration serves.
    pub(crate) fn served(&self) -> Result<Served, Error> {
        Served::new(&self.runtime_config, &self.feature_gates).map_err(|e| match e {
            ServedError::UnknownGate(name) => Error::UnknownFeatureGate { name },
            ServedError::UnknownGroupVersion(group_version) => {
                Error::UnknownGroupVersion { group_version }
            }
        })
    }

    /// Serves `certificates.k8s.io/v1beta1` ClusterTrustBundles and PodCertificateRequests:
    /// the group/version and the `ClusterTrustBundle`, `ClusterTrustBundleProjection` and
    /// `PodCertificateRequest` gates, all on.
    #[must_use]
    pub fn with_certificates(self) -> Self {
        self.runtime_config("certificates.k8s.io/v1beta1", true)
            .feature_gate("ClusterTrustBundle", true)
            .feature_gate("ClusterTrustBundleProjection", true)
            .feature_gate("PodCertificateRequest", true)
    }

    /// Sets [`Config::master_service`].
    #[must_use]
    pub fn master_service(mut self, on: bool) -> Self {
        self.master_service = on;
        self
    }

    /// Sets [`Config::publish_root_ca`].
    #[must_use]
    pub fn publish_root_ca(mut self, on: bool) -> Self {
        self.publish_root_ca = on;
        self
    }

    /// Sets [`Config::http2_max_streams_per_connection`] (at least 1).
    #[must_use]
    pub fn http2_max_streams_per_connection(mut self, n: u32) -> Self {
        self.http2_max_streams_per_connection = n.max(1);
        self
    }

    /// Sets [`Config::goaway_chance`], clamped to 0..=1 (NaN is 0).
    #[must_use]
    pub fn goaway_chance(mut self, p: f64) -> Self {
        self.goaway_chance = clamp_chance(p);
        self
    }

    /// Sets [`Config::max_requests_in_flight`] (0: unlimited).
    #[must_use]
    pub fn max_requests_in_flight(mut self, n: usize) -> Self {
        self.max_requests_in_flight = n;
        self
    }

    /// Sets [`Config::watch_list`].
    #[must_use]
    pub fn watch_list(mut self, on: bool) -> Self {
        self.watch_list = on;
        self
    }

    /// Sets [`Config::node_authorizer_lag`] (0: immediately consistent).
    #[must_use]
    pub fn node_authorizer_lag(mut self, d: Duration) -> Self {
        self.node_authorizer_lag = d;
        self
    }

    /// Sets [`Config::cost_model`].
    #[must_use]
    pub fn cost_model(mut self, model: CostModel) -> Self {
        self.cost_model = model;
        self
    }

    /// Sets [`Config::service_account_admission`].
    #[must_use]
    pub fn service_account_admission(mut self, on: bool) -> Self {
        self.service_account_admission = on;
        self
    }

    /// What a cluster's controllers and admission do for pods: [`Config::auto_service_accounts`],
    /// [`Config::publish_root_ca`], [`Config::service_account_admission`],
    /// [`Config::master_service`] and [`Config::service_account_access`], all on.
    #[must_use]
    pub fn like_a_cluster(mut self) -> Self {
        self.master_service = true;
        self.service_account_access = true;
        self.auto_service_accounts = true;
        self.publish_root_ca = true;
        self.service_account_admission = true;
        self
    }

    /// Sets [`Config::schedule_to`]: pods that name no node are bound to `node`.
    #[must_use]
    pub fn schedule_to(mut self, node: &str) -> Self {
        self.schedule_to = Some(node.to_string());
        self
    }

    /// Sets [`Config::listen`].
    #[must_use]
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Sets [`Config::history_limit`].
    #[must_use]
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Sets [`Config::bookmark_interval`].
    #[must_use]
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Sets [`Config::authenticator`].
    #[must_use]
    pub fn authenticator(mut self, a: Arc<dyn Authenticator>) -> Self {
        self.authenticator = Authentication::Given(a);
        self
    }

    /// Sets [`Config::authorizer`].
    #[must_use]
    pub fn authorizer(mut self, a: Arc<dyn Authorizer>) -> Self {
        self.authorizer = Authorization::Given(a);
        self
    }

    /// Serves HTTPS with a CA generated at start (sets [`Config::tls`](crate::Config::tls)).
    #[must_use]
    pub fn with_tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Turns on bearer-token authentication ([`TokenAuthenticator`](crate::TokenAuthenticator)) and the Node authorizer
    /// ([`NodeAuthorizer`](crate::NodeAuthorizer)): `system:masters` may do everything,
    /// `system:node:<name>` what a kubelet may, everyone else nothing. Sets
    /// [`Config::authenticator`] to [`Authentication::BearerTokens`] and [`Config::authorizer`]
    /// to [`Authorization::Node`].
    #[must_use]
    pub fn with_auth(mut self) -> Self {
        self.authenticator = Authentication::BearerTokens;
        self.authorizer = Authorization::Node;
        self
    }
}

/// A GOAWAY probability in 0..=1; NaN counts as 0.
pub(crate) fn clamp_chance(p: f64) -> f64 {
    if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) }
}

/// Who a request is ([`Config::authenticator`]).
#[derive(Clone)]
#[non_exhaustive]
pub enum Authentication {
    /// This authenticator.
    Given(Arc<dyn Authenticator>),
    /// Bearer tokens: the server builds a [`TokenAuthenticator`](crate::TokenAuthenticator)
    /// at start that accepts the tokens it mints ([`ApiServer::token_for`](crate::ApiServer::token_for))
    /// and the service-account tokens it issues; the admin kube config carries an admin token.
    BearerTokens,
}

/// What a user may do ([`Config::authorizer`]).
#[derive(Clone)]
#[non_exhaustive]
pub enum Authorization {
    /// This authorizer.
    Given(Arc<dyn Authorizer>),
    /// The server builds a [`NodeAuthorizer`](crate::NodeAuthorizer) over its store at start;
    /// node users' TokenRequests also get the NodeRestriction checks.
    Node,
}
