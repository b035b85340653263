//! Authentication and authorization seams of the request pipeline.
//!
//! Every request is authenticated to a [`User`] and then checked by an [`Authorizer`]. Auth is
//! off by default: [`AllowAll`] plays both roles (everyone is [`User::admin`]).
//! [`Config::with_auth`](crate::Config::with_auth) turns it on with the bearer-token
//! authenticator (`token_auth.rs`) and the Node authorizer (`node_authorizer.rs`); any other
//! implementation of the two traits can be set with
//! [`Config::authenticator`](crate::Config::authenticator) /
//! [`Config::authorizer`](crate::Config::authorizer).

use std::fmt;

/// The identity a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    /// User name, e.g. `system:admin` or `system:node:dev-1`.
    pub name: String,
    /// Groups, e.g. `system:masters`, `system:nodes`, `system:authenticated`.
    pub groups: Vec<String>,
}

impl User {
    /// A cluster admin (`system:admin` in `system:masters`): the identity every request gets
    /// from [`AllowAll`], and the user of admin tokens and kubeconfigs.
    pub fn admin() -> Self {
        User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    /// A kubelet's identity: `system:node:<name>` in `system:nodes`.
    pub fn node(name: &str) -> Self {
        User {
            name: format!("system:node:{name}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
        }
    }

    /// A service account's identity: `system:serviceaccount:<ns>:<name>`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// The node name of a `system:node:<name>` user in `system:nodes`.
    pub fn node_name(&self) -> Option<&str> {
        if !self.groups.iter().any(|g| g == "system:nodes") {
            return None;
        }
        self.name.strip_prefix("system:node:")
    }
}

/// The request headers an authenticator sees.
pub type Headers = http::HeaderMap;

/// Why a request could not be authenticated (answered 401 `Unauthorized`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unauthenticated;

/// Maps request credentials to a [`User`].
pub trait Authenticator: Send + Sync + 'static {
    /// Returns the user, or `Err` for a 401.
    ///
    /// # Errors
    /// [`Unauthenticated`] when credentials are present but invalid, or required but missing.
    fn authenticate(&self, headers: &Headers) -> Result<User, Unauthenticated>;

    /// Authenticates a bare bearer token, as a TokenReview asks (the server's own minted and
    /// service-account tokens are reviewed whatever this says). The default asks
    /// [`Authenticator::authenticate`] with `Authorization: Bearer <token>`.
    ///
    /// # Errors
    /// [`Unauthenticated`] when the token is not valid.
    fn authenticate_token(&self, token: &str) -> Result<User, Unauthenticated> {
        let value =
            http::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Unauthenticated)?;
        let mut headers = Headers::new();
        headers.insert(http::header::AUTHORIZATION, value);
        self.authenticate(&headers)
    }
}

/// What is being attempted, as the upstream authorizer attributes describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// The caller.
    pub user: User,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for
    /// non-resource requests the lower-case HTTP method.
    pub verb: String,
    /// Whether the path names an API resource (else a non-resource path such as `/version`).
    pub resource_request: bool,
    /// API group (`""` for core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Plural resource, e.g. `configmaps`.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Object name, from the path or from a `metadata.name=` field selector on list/watch.
    pub name: Option<String>,
    /// The raw `fieldSelector` of a list/watch (the Node authorizer allows pod list/watch only
    /// with `spec.nodeName=<its node>`).
    pub field_selector: Option<String>,
    /// The request path.
    pub path: String,
}

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// Answer 403; the string (may be empty) is appended to the upstream Forbidden message.
    Deny(String),
}

/// Decides whether a request may proceed.
pub trait Authorizer: Send + Sync + 'static {
    /// Returns the decision for `attrs`.
    fn authorize(&self, attrs: &Attributes) -> Decision;
}

/// Authenticates everyone as [`User::admin`] and allows everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Authenticator for AllowAll {
    fn authenticate(&self, _headers: &Headers) -> Result<User, Unauthenticated> {
        Ok(User::admin())
    }

    /// Lets every request in as an admin whatever it carries, but vouches for no token: a
    /// TokenReview through it authenticates only the server's own tokens.
    fn authenticate_token(&self, _token: &str) -> Result<User, Unauthenticated> {
        Err(Unauthenticated)
    }
}

impl Authorizer for AllowAll {
    fn authorize(&self, _attrs: &Attributes) -> Decision {
        Decision::Allow
    }
}

impl fmt::Display for Attributes {
    /// The upstream Forbidden reason body:
    /// `User "u" cannot get resource "configmaps" in API group "" in the namespace "default"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.resource_request {
            return write!(
                f,
                "User {:?} cannot {} path {:?}",
                self.user.name, self.verb, self.path
            );
        }
        let resource = match &self.subresource {
            Some(s) => format!("{}/{s}", self.resource),
            None => self.resource.clone(),
        };
        write!(
            f,
            "User {:?} cannot {} resource {:?} in API group {:?}",
            self.user.name, self.verb, resource, self.api_group
        )?;
        match &self.namespace {
            Some(ns) => write!(f, " in the namespace {ns:?}"),
            None => write!(f, " at the cluster scope"),
        }
    }
}
