//! What the server issues and serves with: the cluster CA, TLS, service-account tokens
//! (the signer, TokenRequest) and kubeconfigs for its users.

pub(crate) mod cluster_ca;
pub(crate) mod kubeconfig;
pub(crate) mod tls;
pub(crate) mod token_request;
pub(crate) mod token_signer;
