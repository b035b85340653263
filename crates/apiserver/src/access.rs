//! Who may do what: authentication (bearer tokens) and the authorization seams, the Node
//! authorizer with the pod graph it answers from (seen with its lag), NodeRestriction, and the
//! review APIs.

pub(crate) mod auth;
pub(crate) mod lagged_graph;
pub(crate) mod node_authorizer;
pub(crate) mod node_restriction;
pub(crate) mod pod_refs;
pub(crate) mod reviews;
pub(crate) mod token_auth;
