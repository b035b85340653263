//! The node's kubelet as the server reaches it: the client, `pods/log` (with its options) and
//! `pods/exec`/`attach` passed through.

pub(crate) mod kubelet_client;
pub(crate) mod log_options;
pub(crate) mod pod_exec;
pub(crate) mod pod_log;
