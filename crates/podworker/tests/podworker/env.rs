//! Environment resolution (spec PW-8 … PW-11; E2E-23, E2E-24, E2E-26, E2E-27).

use nodelet_core::{NodeAllocatable, PodDirs};
use nodelet_object_manager::Strategy;
use nodelet_object_manager::source::Verb;
use nodelet_podworker::{
    ContainerEnv, EnvError, EnvFromNameCheck, EnvOptions, INVALID_ENV_NAMES, PodVolumes,
    resolve_env,
};
use nodelet_testutil::ConfigMapBuilder;
use serde_json::{Value, json};

use crate::support::{admit, api, first_container, pod, pod_with};

async fn resolve(strategy: Strategy, container: Value) -> Result<ContainerEnv, EnvError> {
    resolve_with(strategy, container, &EnvOptions::default()).await
}

async fn resolve_with(
    strategy: Strategy,
    container: Value,
    options: &EnvOptions,
) -> Result<ContainerEnv, EnvError> {
    let api = api(strategy).with_fixtures("ns");
    let p = pod(container);
    api.register(&p);
    resolve_env(&p, &first_container(&p), &api.sources, options).await
}

fn text(env: &ContainerEnv, name: &str) -> Option<String> {
    env.get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn names(env: &ContainerEnv) -> Vec<&str> {
    env.vars.iter().map(|v| v.name.as_str()).collect()
}

#[tokio::test]
async fn e2e23_config_map_key_ref_is_consumable_via_an_environment_variable() {
    let env = resolve(
        Strategy::Watch,
        json!({"env": [{"name": "CONFIG_DATA_1",
            "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-1"}}}]}),
    )
    .await
    .unwrap_or_default();
    assert_eq!(text(&env, "CONFIG_DATA_1").as_deref(), Some("value-1"));
}

#[tokio::test]
async fn e2e26_secret_key_ref_keeps_the_trailing_newline_of_the_secret_value() {
    let env = resolve(
        Strategy::Watch,
        json!({"env": [{"name": "SECRET_DATA",
            "valueFrom": {"secretKeyRef": {"name": "sec", "key": "data-1"}}}]}),
    )
    .await
    .unwrap_or_default();
    assert_eq!(text(&env, "SECRET_DATA").as_deref(), Some("value-1\n"));
}

#[tokio::test]
async fn e2e24_e2e27_env_from_twice_with_a_prefix_exports_every_key() {
    for source in ["configMapRef", "secretRef"] {
        let name = if source == "configMapRef" {
            "cm"
        } else {
            "sec"
        };
        let env = resolve(
            Strategy::Watch,
            json!({"envFrom": [{source: {"name": name}}, {source: {"name": name}, "prefix": "p-"}]}),
        )
        .await
        .unwrap_or_default();
        assert_eq!(
            names(&env),
            [
                "data-1", "data-2", "data-3", "p-data-1", "p-data-2", "p-data-3"
            ]
        );
        assert!(text(&env, "p-data-3").is_some_and(|v| v.starts_with("value-3")));
    }
}

#[tokio::test]
async fn pw9_later_env_from_sources_overwrite_earlier_ones_and_env_overrides_env_from() {
    let api = api(Strategy::Watch).with_fixtures("ns");
    api.configmap("ns", "other", json!({"data-1": "other-1"}));
    let p = pod(json!({
        "envFrom": [{"configMapRef": {"name": "cm"}}, {"configMapRef": {"name": "other"}}],
        "env": [{"name": "data-2", "value": "from-env"}, {"name": "data-2", "value": "last-wins"}],
    }));
    api.register(&p);
    let env = resolve_env(
        &p,
        &first_container(&p),
        &api.sources,
        &EnvOptions::default(),
    )
    .await
    .unwrap_or_default();
    assert_eq!(text(&env, "data-1").as_deref(), Some("other-1"));
    assert_eq!(text(&env, "data-2").as_deref(), Some("last-wins"));
}

#[tokio::test]
async fn pw9_env_from_ignores_binary_data_and_pw10_key_refs_do_not_consult_it() {
    let api = api(Strategy::Watch);
    api.configmaps.apply(
        "ns",
        ConfigMapBuilder::new("", "bin")
            .data("text", "t")
            .binary_data("blob", &[0xde, 0xad, 0xbe, 0xef])
            .build(),
    );
    let p = pod(json!({"envFrom": [{"configMapRef": {"name": "bin"}}]}));
    api.register(&p);
    let env = resolve_env(
        &p,
        &first_container(&p),
        &api.sources,
        &EnvOptions::default(),
    )
    .await
    .unwrap_or_default();
    assert_eq!(names(&env), ["text"]);

    let p = pod(json!({"env": [{"name": "B",
        "valueFrom": {"configMapKeyRef": {"name": "bin", "key": "blob"}}}]}));
    api.register(&p);
    let err = resolve_env(
        &p,
        &first_container(&p),
        &api.sources,
        &EnvOptions::default(),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some("couldn't find key blob in ConfigMap ns/bin")
    );
}

#[tokio::test]
async fn pw9_a_missing_optional_source_is_skipped_and_a_missing_required_one_is_an_error() {
    let env = resolve(
        Strategy::Watch,
        json!({"envFrom": [{"configMapRef": {"name": "nope", "optional": true}},
                           {"secretRef": {"name": "nope", "optional": true}},
                           {"configMapRef": {"name": "cm"}}]}),
    )
    .await;
    assert_eq!(env.map(|e| e.vars.len()).ok(), Some(3));
    let err = resolve(
        Strategy::Watch,
        json!({"envFrom": [{"configMapRef": {"name": "nope"}}]}),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some(r#"configmap "nope" not found"#),
        "the Watch store's singular text (OM-18)"
    );
    let err = resolve(
        Strategy::Get,
        json!({"envFrom": [{"secretRef": {"name": "nope"}}]}),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some(r#"secrets "nope" not found"#)
    );
}

#[tokio::test]
async fn pw10_missing_keys_are_errors_unless_optional_and_optional_ones_leave_the_variable_unset() {
    let err = resolve(
        Strategy::Watch,
        json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-4"}}}]}),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some("couldn't find key data-4 in ConfigMap ns/cm")
    );
    let err = resolve(
        Strategy::Watch,
        json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "data_4"}}}]}),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some("couldn't find key data_4 in Secret ns/sec")
    );
    let env = resolve(
        Strategy::Watch,
        json!({"env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-4", "optional": true}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}},
            {"name": "C", "value": ""},
        ]}),
    )
    .await
    .unwrap_or_default();
    assert_eq!(
        names(&env),
        ["C"],
        "optional misses are not set, not even empty"
    );
}

#[tokio::test]
async fn pw10_values_expand_references_to_earlier_variables_and_keep_unknown_ones() {
    let env = resolve(
        Strategy::Watch,
        json!({
            "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
            "env": [
                {"name": "A", "value": "a"},
                {"name": "B", "value": "$(A)-$(CM_data-1)-$(LATER)-$$(A)"},
                {"name": "LATER", "value": "late"},
            ],
        }),
    )
    .await
    .unwrap_or_default();
    assert_eq!(text(&env, "B").as_deref(), Some("a-value-1-$(LATER)-$(A)"));
}

#[tokio::test]
async fn pw10_field_refs_read_the_pod_and_unknown_paths_are_errors() {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let env = resolve(
        Strategy::Watch,
        json!({"env": [
            field("NAME", "metadata.name"), field("NS", "metadata.namespace"),
            field("UID", "metadata.uid"), field("NODE", "spec.nodeName"),
            field("APP", "metadata.labels['app']"), field("NOTE", "metadata.annotations['note']"),
            field("HOST", "status.hostIP"), field("IP", "status.podIP"),
        ]}),
    )
    .await
    .unwrap_or_default();
    let got: Vec<String> = ["NAME", "NS", "UID", "NODE", "APP", "NOTE", "HOST", "IP"]
        .iter()
        .map(|n| text(&env, n).unwrap_or_default())
        .collect();
    assert_eq!(
        got,
        [
            "web", "ns", "u1", "node-1", "web", "hi", "10.0.0.1", "10.1.0.5"
        ]
    );
    let err = resolve(Strategy::Watch, json!({"env": [field("X", "spec.bogus")]})).await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some("field label not supported: spec.bogus")
    );
}

// PW-10 / PL-13: env vars and downwardAPI volumes share one rendering
// (nodelet_core::downward): whole maps as Go-quoted lines, validated subscripts.
#[tokio::test]
async fn pw10_field_refs_render_maps_like_downward_api_volumes_and_validate_subscripts() {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let env = resolve(
        Strategy::Watch,
        json!({"env": [
            field("LABELS", "metadata.labels"), field("NOTES", "metadata.annotations"),
            field("MISSING", "metadata.labels['nope']"),
        ]}),
    )
    .await
    .unwrap_or_default();
    assert_eq!(text(&env, "LABELS").as_deref(), Some("app=\"web\""));
    assert_eq!(text(&env, "NOTES").as_deref(), Some("note=\"hi\""));
    assert_eq!(text(&env, "MISSING").as_deref(), Some(""));
    let err = resolve(
        Strategy::Watch,
        json!({"env": [field("X", "metadata.labels['']")]}),
    )
    .await;
    assert!(matches!(err, Err(EnvError::DownwardApi(_))), "{err:?}");
    assert!(
        err.err()
            .map(|e| e.to_string())
            .is_some_and(|e| e.starts_with("invalid key subscript in metadata.labels['']: ")),
    );
}

#[tokio::test]
async fn pw10_resource_field_refs_divide_and_round_up_and_unset_limits_use_node_allocatable() {
    let res = |name: &str, resource: &str, divisor: Option<&str>| {
        let mut r = json!({"resource": resource});
        if let Some(d) = divisor {
            r["divisor"] = json!(d);
        }
        json!({"name": name, "valueFrom": {"resourceFieldRef": r}})
    };
    let mut options = EnvOptions::default();
    options.node_allocatable = NodeAllocatable {
        memory_bytes: 8 << 30,
        ..NodeAllocatable::default()
    };
    let env = resolve_with(
        Strategy::Watch,
        json!({
            "resources": {"limits": {"cpu": "250m"}, "requests": {"memory": "64Mi"}},
            "env": [
                res("CPU", "limits.cpu", None), res("CPU_M", "limits.cpu", Some("1m")),
                res("MEM_REQ_MI", "requests.memory", Some("1Mi")),
                res("MEM_LIMIT", "limits.memory", Some("1Gi")),
            ],
        }),
        &options,
    )
    .await
    .unwrap_or_default();
    let got: Vec<String> = ["CPU", "CPU_M", "MEM_REQ_MI", "MEM_LIMIT"]
        .iter()
        .map(|n| text(&env, n).unwrap_or_default())
        .collect();
    assert_eq!(got, ["1", "250", "64", "8"]);
    let err = resolve(
        Strategy::Watch,
        json!({"env": [res("X", "limits.gpu", None)]}),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some("unsupported container resource : limits.gpu")
    );
}

#[tokio::test]
async fn pw8_a_pod_without_enable_service_links_cannot_construct_envvars() {
    let api = api(Strategy::Watch);
    let mut p = pod(json!({}));
    if let Some(s) = p.spec.as_mut() {
        s.enable_service_links = None;
    }
    let err = resolve_env(
        &p,
        &first_container(&p),
        &api.sources,
        &EnvOptions::default(),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some("nil pod.spec.enableServiceLinks encountered, cannot construct envvars")
    );
}

#[tokio::test]
async fn pw13_resolving_for_an_unregistered_pod_fails_with_not_registered() {
    let api = api(Strategy::Watch).with_fixtures("ns");
    let p = pod(json!({"envFrom": [{"configMapRef": {"name": "cm"}}]}));
    let err = resolve_env(
        &p,
        &first_container(&p),
        &api.sources,
        &EnvOptions::default(),
    )
    .await;
    assert_eq!(
        err.err().map(|e| e.to_string()).as_deref(),
        Some(r#"object "ns"/"cm" not registered"#)
    );
}

#[tokio::test]
async fn pw8_each_object_is_fetched_once_per_container_build() {
    let api = api(Strategy::Get).with_fixtures("ns");
    let p = pod(json!({
        "envFrom": [{"configMapRef": {"name": "cm"}}],
        "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-1"}}},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "data-2"}}},
        ],
    }));
    let env = resolve_env(
        &p,
        &first_container(&p),
        &api.sources,
        &EnvOptions::default(),
    )
    .await;
    assert!(env.is_ok());
    assert_eq!(api.configmaps.count(Verb::Get, "ns", "cm"), 1);
}

#[tokio::test]
async fn pw9_the_legacy_name_check_skips_invalid_keys_with_one_warning_per_source() {
    let api = api(Strategy::Watch);
    api.configmap(
        "ns",
        "keys",
        json!({"1bad": "x", "good": "y", "..dots": "z"}),
    );
    let p = pod_with(
        json!({}),
        json!({"envFrom": [{"configMapRef": {"name": "keys"}}]}),
    );
    api.register(&p);
    let mut options = EnvOptions::default();
    options.name_check = EnvFromNameCheck::Legacy;
    let env = resolve_env(&p, &first_container(&p), &api.sources, &options)
        .await
        .unwrap_or_default();
    assert_eq!(names(&env), ["good"]);
    assert_eq!(
        env.warnings,
        vec![(
            INVALID_ENV_NAMES.to_owned(),
            "Keys [..dots, 1bad] from the EnvFrom configMap ns/keys were skipped since they are considered invalid environment variable names.".to_owned()
        )]
    );
    let current = resolve_env(
        &p,
        &first_container(&p),
        &api.sources,
        &EnvOptions::default(),
    )
    .await
    .unwrap_or_default();
    assert_eq!(current.vars.len(), 3, "current kubelets export every key");
    assert!(current.warnings.is_empty());
}

#[test]
fn env_values_never_show_in_debug_output() {
    let env = nodelet_podworker::EnvValue {
        name: "PASSWORD".into(),
        value: b"hunter2".to_vec(),
    };
    assert_eq!(format!("{env:?}"), "PASSWORD=<7 bytes>");
}

/// A temporary root holding the directory of pod `u1` with its emptyDir `envfiles`, `files`
/// written into it; returns the root and the volume's directory.
fn pod_dir_with(files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let volume = tmp
        .path()
        .join("pods/u1/volumes/kubernetes.io~empty-dir/envfiles");
    std::fs::create_dir_all(&volume).unwrap_or_else(|e| panic!("{e}"));
    for (name, content) in files {
        std::fs::write(volume.join(name), content).unwrap_or_else(|e| panic!("{e}"));
    }
    (tmp, volume)
}

/// Resolves `env` for a pod with emptyDir `envfiles` and configMap volume `cfg` whose directory
/// is in `root`.
async fn resolve_in(root: &std::path::Path, env: Value) -> Result<ContainerEnv, EnvError> {
    let api = api(Strategy::Watch).with_fixtures("ns");
    let p = pod_with(
        json!({"volumes": [{"name": "envfiles", "emptyDir": {}},
                           {"name": "cfg", "configMap": {"name": "cm"}}]}),
        json!({"env": env}),
    );
    api.register(&p);
    let mut options = EnvOptions::default();
    options.pod_volumes = Some(PodVolumes::new(PodDirs::new(root), &admit(p.clone())));
    resolve_env(&p, &first_container(&p), &api.sources, &options).await
}

/// [`pod_dir_with`] then [`resolve_in`].
async fn resolve_file_refs(
    files: &[(&str, &str)],
    env: Value,
) -> (
    Result<ContainerEnv, EnvError>,
    std::path::PathBuf,
    tempfile::TempDir,
) {
    let (tmp, volume) = pod_dir_with(files);
    let resolved = resolve_in(tmp.path(), env).await;
    (resolved, volume, tmp)
}

fn file_ref(name: &str, path: &str, key: &str, optional: Option<bool>) -> Value {
    let mut r = json!({"volumeName": "envfiles", "path": path, "key": key});
    if let Some(o) = optional {
        r["optional"] = json!(o);
    }
    json!({"name": name, "valueFrom": {"fileKeyRef": r}})
}

#[tokio::test]
async fn pw10_file_key_ref_reads_the_key_from_an_env_file_in_the_pods_empty_dir() {
    let file = "# written by an init container\nDB='db.internal'\nMOTD='two\nlines' # note\n";
    let (env, _, _tmp) = resolve_file_refs(
        &[("vars.env", file)],
        json!([
            file_ref("DB_HOST", "vars.env", "DB", None),
            file_ref("MOTD", "vars.env", "MOTD", None),
            {"name": "GREETING", "value": "at $(DB_HOST)"},
        ]),
    )
    .await;
    let env = env.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text(&env, "DB_HOST").as_deref(), Some("db.internal"));
    assert_eq!(text(&env, "MOTD").as_deref(), Some("two\nlines"));
    assert_eq!(text(&env, "GREETING").as_deref(), Some("at db.internal"));
}

// A kubelet with the `EnvFiles` gate off has no case for `fileKeyRef`: the file is not read
// (a missing one fails nothing) and the variable is set, empty.
#[tokio::test]
async fn with_the_env_files_gate_off_a_file_key_ref_is_not_read_and_its_variable_is_empty() {
    let (tmp, _volume) = pod_dir_with(&[("vars.env", "DB='db.internal'\n")]);
    let api = api(Strategy::Watch).with_fixtures("ns");
    let p = pod_with(
        json!({"volumes": [{"name": "envfiles", "emptyDir": {}}]}),
        json!({"env": [
            file_ref("DB_HOST", "vars.env", "DB", None),
            file_ref("MISSING", "nope.env", "X", None),
        ]}),
    );
    api.register(&p);
    let mut options = EnvOptions::default();
    assert!(options.env_files, "on by default, as in v1.36");
    options.env_files = false;
    options.pod_volumes = Some(PodVolumes::new(PodDirs::new(tmp.path()), &admit(p.clone())));
    let env = resolve_env(&p, &first_container(&p), &api.sources, &options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text(&env, "DB_HOST").as_deref(), Some(""));
    assert_eq!(text(&env, "MISSING").as_deref(), Some(""));
}

#[tokio::test]
async fn pw10_a_missing_or_empty_key_is_skipped_when_optional_and_an_error_otherwise() {
    let file = "OTHER='1'\nEMPTY= 'ignored'\n";
    let (env, _, _tmp) = resolve_file_refs(
        &[("vars.env", file)],
        json!([
            file_ref("ABSENT", "vars.env", "ABSENT", Some(true)),
            file_ref("EMPTY", "vars.env", "EMPTY", Some(true)),
        ]),
    )
    .await;
    let env = env.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(names(&env), Vec::<&str>::new());
    for key in ["ABSENT", "EMPTY"] {
        let (err, volume, _tmp) = resolve_file_refs(
            &[("vars.env", file)],
            json!([file_ref("X", "vars.env", key, None)]),
        )
        .await;
        let path = volume.join("vars.env");
        assert_eq!(
            err.err().map(|e| e.to_string()),
            Some(format!(
                "environment variable key {key:?} not found in file {path:?}"
            ))
        );
    }
}

#[tokio::test]
async fn pw10_an_unreadable_or_malformed_env_file_fails_even_when_optional() {
    for (files, path) in [
        (&[("vars.env", "KEY = 'spaced'\n")][..], "vars.env"),
        (&[("vars.env", "KEY=unquoted\n")][..], "vars.env"),
        (&[][..], "absent.env"),
    ] {
        let (err, _, _tmp) =
            resolve_file_refs(files, json!([file_ref("K", path, "KEY", Some(true))])).await;
        assert_eq!(
            err.err().map(|e| e.to_string()).as_deref(),
            Some("couldn't parse env file"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn pw10_a_file_key_ref_to_a_volume_that_is_no_empty_dir_of_the_pod_fails() {
    for volume in ["other", "cfg"] {
        let (err, _, _tmp) = resolve_file_refs(
            &[("vars.env", "KEY='v'\n")],
            json!([{"name": "K", "valueFrom": {"fileKeyRef":
                {"volumeName": volume, "path": "vars.env", "key": "KEY"}}}]),
        )
        .await;
        assert_eq!(
            err.err().map(|e| e.to_string()),
            Some(format!(
                "cannot find the volume {volume:?} referenced by FileKeyRef"
            ))
        );
    }
}

#[tokio::test]
async fn pw10_the_env_file_path_cannot_leave_the_volume() {
    let (tmp, volume) = pod_dir_with(&[("secret.env", "KEY='inside'\n")]);
    // The same names outside the volume hold another value, never read.
    std::fs::write(tmp.path().join("secret.env"), "KEY='outside'\n")
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(tmp.path().join("pods/u1/secret.env"), "KEY='outside'\n")
        .unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("/../secret.env", volume.join("link.env"))
        .unwrap_or_else(|e| panic!("{e}"));
    let env = resolve_in(
        tmp.path(),
        json!([
            file_ref("UP", "../../secret.env", "KEY", None),
            file_ref("LINK", "link.env", "KEY", None),
        ]),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text(&env, "UP").as_deref(), Some("inside"));
    assert_eq!(text(&env, "LINK").as_deref(), Some("inside"));
}
