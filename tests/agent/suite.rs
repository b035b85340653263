//! The shared scenario suite (`nodelet-e2e`), one test per scenario, each against its own API
//! server and agent. `cargo xtask e2e` runs the same scenarios against real clusters.

use crate::support::World;

async fn run(name: &str) {
    // As `cargo xtask e2e --embedded`: the server serves ClusterTrustBundles and the agent
    // runs with the gates of the clusterTrustBundle source on; with the process runtime (the
    // in-process tests' settings, needs root) for a scenario that needs processes.
    let server = nodelet_apiserver::Config::default().with_certificates();
    let gates = |c: &mut nodelet::AgentConfig| {
        c.feature_gates
            .set(nodelet_core::Feature::ClusterTrustBundle, true)
            .set(nodelet_core::Feature::ClusterTrustBundleProjection, true);
    };
    let (world, reaper) = match nodelet_e2e::scenario_runtime(name) {
        Some(nodelet_e2e::AgentRuntime::Process) => {
            let (world, reaper) =
                crate::process_runtime::start_on(server, false, |c, _| gates(c)).await;
            (world, Some(reaper))
        }
        _ => (World::start_on(server, |_| {}, gates).await, None),
    };
    let outcome = nodelet_e2e::run_scenario(&world.target(), name).await;
    world.stop().await;
    drop(reaper);
    if let Err(e) = outcome.result {
        panic!("scenario {name} failed: {e}");
    }
    // The embedded server serves everything the scenarios need: a skip here checked nothing.
    if let Some(reason) = outcome.skipped {
        panic!("scenario {name} was skipped: {reason}");
    }
}

macro_rules! scenarios {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                run($name).await;
            }
        )*

        #[test]
        fn every_shared_scenario_has_a_test_here() {
            let here: Vec<&str> = vec![$($name),*];
            let missing: Vec<&str> = nodelet_e2e::scenario_names()
                .into_iter()
                .filter(|n| !here.contains(n))
                .collect();
            assert!(missing.is_empty(), "scenarios without a test: {missing:?}");
        }
    };
}

scenarios! {
    e2e1_configmap_volume_files_appear_with_default_mode => "configmap-volume",
    e2e6_configmap_items_map_keys_to_paths_and_modes => "configmap-volume-mappings",
    e2e10_configmap_binary_data_is_byte_exact => "configmap-binary-data",
    e2e12_the_same_configmap_in_two_volumes => "configmap-multiple-volumes",
    e2e15_secret_volume_files_appear => "secret-volume",
    e2e16_same_name_secrets_in_two_namespaces_do_not_mix => "secret-same-name-other-namespace",
    e2e21_projected_volume_sources_combine => "projected-volume",
    downward_api_volume_files_appear => "downwardapi-volume",
    pl17_cluster_trust_bundles_are_projected_and_follow_changes => "cluster-trust-bundle",
    e2e9_configmap_updates_reach_the_volume => "configmap-update",
    e2e9_secret_updates_reach_the_volume => "secret-update",
    e2e11_optional_configmaps_created_updated_deleted => "configmap-optional-updates",
    e2e18_optional_secrets_created_updated_deleted => "secret-optional-updates",
    e2e13_immutable_configmap => "immutable-configmap",
    e2e14_missing_configmap_keeps_the_pod_pending_with_events => "missing-configmap",
    e2e14_missing_configmap_key_keeps_the_pod_pending => "missing-configmap-key",
    e2e20_missing_secret_keeps_the_pod_pending => "missing-secret",
    e2e23_e2e26_env_from_keys => "env-from-keys",
    e2e24_e2e27_env_from_sources_with_prefix => "env-from-sources",
    pw10_env_file_key_ref_reads_an_env_file_in_the_pods_empty_dir => "env-file-key-ref",
    pw12_env_missing_key_waits_with_create_container_config_error => "env-missing-key",
    pw7_missing_image_pull_secret_event => "image-pull-secret-missing",
    fc10_fc14_an_env_file_follows_a_change_for_a_pod_that_asks => "env-follow",
    pod_deletion_removes_its_directories_and_the_pod => "pod-deletion-cleanup",
    agent_restart_adopts_volumes_without_rewriting_them => "agent-restart-adoption",
    fc3_fc20_a_sub_path_follows_updates_and_the_condition_says_who_is_stale => "follow-subpath",
    fc5_fc6_a_reload_signal_per_update_and_one_per_burst => "follow-reload-signal",
}
