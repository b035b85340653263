//! The scenario list. Each scenario is an async function over a [`Ctx`]; names are stable (the
//! `--filter` of `cargo xtask e2e` and the test names of `tests/suite.rs` use them).

mod env;
mod failures;
mod follow;
mod lifecycle;
mod trust_bundles;
mod updates;
mod volumes;

use futures::future::BoxFuture;

use crate::{AgentRuntime, Ctx};

/// A named scenario.
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    /// How the agent must run containers for it.
    pub(crate) runtime: AgentRuntime,
    pub(crate) run: for<'a> fn(&'a Ctx) -> BoxFuture<'a, Result<(), String>>,
}

macro_rules! scenario {
    ($name:literal, $f:path) => {
        Scenario {
            name: $name,
            runtime: AgentRuntime::EnvFiles,
            run: |ctx| Box::pin($f(ctx)),
        }
    };
    (process $name:literal, $f:path) => {
        Scenario {
            name: $name,
            runtime: AgentRuntime::Process,
            run: |ctx| Box::pin($f(ctx)),
        }
    };
}

/// Every scenario, in run order.
pub(crate) const ALL: &[Scenario] = &[
    scenario!("configmap-volume", volumes::configmap_volume),
    scenario!(
        "configmap-volume-mappings",
        volumes::configmap_volume_mappings
    ),
    scenario!("configmap-binary-data", volumes::configmap_binary_data),
    scenario!(
        "configmap-multiple-volumes",
        volumes::configmap_multiple_volumes
    ),
    scenario!("secret-volume", volumes::secret_volume),
    scenario!(
        "secret-same-name-other-namespace",
        volumes::secret_same_name_other_namespace
    ),
    scenario!("projected-volume", volumes::projected_volume),
    scenario!("downwardapi-volume", volumes::downward_api_volume),
    scenario!("cluster-trust-bundle", trust_bundles::cluster_trust_bundle),
    scenario!("configmap-update", updates::configmap_update),
    scenario!("secret-update", updates::secret_update),
    scenario!(
        "configmap-optional-updates",
        updates::configmap_optional_updates
    ),
    scenario!("secret-optional-updates", updates::secret_optional_updates),
    scenario!("immutable-configmap", updates::immutable_configmap),
    scenario!("missing-configmap", failures::missing_configmap),
    scenario!("missing-configmap-key", failures::missing_configmap_key),
    scenario!("missing-secret", failures::missing_secret),
    scenario!("env-from-keys", env::env_from_keys),
    scenario!("env-from-sources", env::env_from_sources),
    scenario!("env-file-key-ref", env::env_file_key_ref),
    scenario!("env-missing-key", env::env_missing_key),
    scenario!("image-pull-secret-missing", env::image_pull_secret_missing),
    scenario!("env-follow", env::env_follow),
    scenario!("pod-deletion-cleanup", lifecycle::pod_deletion_cleanup),
    scenario!("agent-restart-adoption", lifecycle::agent_restart_adoption),
    scenario!(process "follow-subpath", follow::follow_subpath),
    scenario!(process "follow-reload-signal", follow::follow_reload_signal),
];
