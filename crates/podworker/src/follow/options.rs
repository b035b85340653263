//! What a pod asks of configuration-following (FC-1, FC-2): its `nodelet.io/` annotations read
//! over the node's defaults, per container, with each bad value a [`AnnotationError`] naming
//! the annotation and the value.
//!
//! | annotation | value | default |
//! | --- | --- | --- |
//! | `nodelet.io/follow-subpath` (`.<container>`) | `true` / `false` | node `followChange.subPath` |
//! | `nodelet.io/reload-signal` (`.<container>`) | a signal (`SIGHUP`, `HUP`, `USR1`, …) or `none` | node `followChange.reloadSignal` |
//! | `nodelet.io/reload-url` (`.<container>`) | `http://` URL on `localhost`, `127.0.0.1` or `[::1]`, or `none` | none |
//! | `nodelet.io/reload-debounce` | a duration (`20ms`, `1s`), at most 1m | node `followChange.reloadDebounce` (20ms) |
//! | `nodelet.io/follow-env` (`.<container>`) | `true` / `false` | node `followChange.env` |
//! | `nodelet.io/env-debounce` | a duration (`200ms`, `1s`), at most 1m | node `followChange.envDebounce` (200ms) |
//!
//! A `.<container>` annotation wins over the pod-wide one for that container; it must name a
//! container or init container of the pod.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nix::sys::signal::Signal;

/// The prefix of every annotation read here.
pub const PREFIX: &str = "nodelet.io/";
/// subPath mounts follow updates (FC-3).
pub const FOLLOW_SUBPATH: &str = "nodelet.io/follow-subpath";
/// A signal to the main process after a volume update (FC-5).
pub const RELOAD_SIGNAL: &str = "nodelet.io/reload-signal";
/// A POST to a local URL after a volume update (FC-5).
pub const RELOAD_URL: &str = "nodelet.io/reload-url";
/// The quiet time that ends a burst of updates (FC-6).
pub const RELOAD_DEBOUNCE: &str = "nodelet.io/reload-debounce";

/// The environment follows changes of the objects it reads, by a restart (FC-10).
pub const FOLLOW_ENV: &str = "nodelet.io/follow-env";
/// The quiet time that ends a burst of changes of a container's environment (FC-11).
pub const ENV_DEBOUNCE: &str = "nodelet.io/env-debounce";

/// The default quiet time that ends a burst (FC-6).
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(20);
/// The default quiet time that ends a burst of environment changes (FC-11): longer than a
/// reload's, as a restart costs more than a signal.
pub const DEFAULT_ENV_DEBOUNCE: Duration = Duration::from_millis(200);
/// The longest quiet time a pod may ask for.
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(60);

/// The node-wide defaults (the KubeletConfiguration's `followChange`): what a pod without
/// annotations gets. The default is the kubelet's behaviour: nothing follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowDefaults {
    /// Every container's subPath mounts follow updates.
    pub sub_path: bool,
    /// Every container that mounts an updated volume gets this signal.
    pub reload_signal: Option<Signal>,
    /// The quiet time that ends a burst.
    pub debounce: Duration,
    /// Every container's environment follows changes of the objects it reads (FC-10).
    pub env: bool,
    /// The quiet time that ends a burst of environment changes (FC-11).
    pub env_debounce: Duration,
}

impl Default for FollowDefaults {
    fn default() -> Self {
        Self {
            sub_path: false,
            reload_signal: None,
            debounce: DEFAULT_DEBOUNCE,
            env: false,
            env_debounce: DEFAULT_ENV_DEBOUNCE,
        }
    }
}

/// What one container gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFollow {
    /// Its subPath mounts of configMap, secret, projected and downwardAPI volumes follow.
    pub sub_path: bool,
    /// The signal its main process gets after an update of a volume it mounts.
    pub signal: Option<Signal>,
    /// The local URL POSTed after an update of a volume it mounts.
    pub url: Option<ReloadUrl>,
    /// Its environment follows changes of the ConfigMaps and Secrets it reads (FC-10).
    pub env: bool,
}

impl ContainerFollow {
    /// Whether it asks for a reload (a signal or a URL).
    pub fn reloads(&self) -> bool {
        self.signal.is_some() || self.url.is_some()
    }
}

/// What a pod gets: its containers' settings (every container and init container named) and
/// its quiet time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFollow {
    /// By container name.
    pub containers: BTreeMap<String, ContainerFollow>,
    /// The quiet time that ends a burst of updates.
    pub debounce: Duration,
    /// The quiet time that ends a burst of environment changes (FC-11).
    pub env_debounce: Duration,
}

impl PodFollow {
    /// The settings of `container` (none for a name the pod does not have).
    pub fn container(&self, container: &str) -> Option<&ContainerFollow> {
        self.containers.get(container)
    }

    /// Whether any container asks for anything.
    pub fn any(&self) -> bool {
        self.containers
            .values()
            .any(|c| c.sub_path || c.reloads() || c.env)
    }
}

/// A local reload URL: `http://<loopback host>:<port><path>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadUrl {
    /// The host as written (`localhost`, `127.0.0.1`, `[::1]`).
    pub host: String,
    /// The port (80 when not given).
    pub port: u16,
    /// The path and query (`/` when empty).
    pub path: String,
}

impl fmt::Display for ReloadUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

impl FromStr for ReloadUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let rest = text
            .strip_prefix("http://")
            .ok_or("must start with http://")?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or("unclosed [ in the host")?;
            (format!("[{host}]"), after.strip_prefix(':'))
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (authority.to_owned(), None),
            }
        };
        if !matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]") {
            return Err(format!(
                "host {host:?} is not local (localhost, 127.0.0.1 or [::1])"
            ));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("port {p:?} is not a number from 1 to 65535"))?,
        };
        if path.chars().any(|c| c.is_ascii_control() || c == ' ') {
            return Err("the path has a space or a control character".into());
        }
        Ok(Self {
            host,
            port,
            path: path.to_owned(),
        })
    }
}

/// One bad annotation: its name, its value and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: invalid value {value:?}: {reason}")]
pub struct AnnotationError {
    /// The annotation's name.
    pub annotation: String,
    /// Its value.
    pub value: String,
    /// Why it is refused.
    pub reason: String,
}

/// The pod's settings: `defaults` overridden by its annotations; a bad annotation is left
/// out (the default applies) and reported in the second value, in annotation order.
pub fn pod_follow(pod: &Pod, defaults: &FollowDefaults) -> (PodFollow, Vec<AnnotationError>) {
    let names = container_names(pod);
    let mut errors = Vec::new();
    let mut pod_wide = ContainerFollow {
        sub_path: defaults.sub_path,
        signal: defaults.reload_signal,
        url: None,
        env: defaults.env,
    };
    let mut debounce = defaults.debounce;
    let mut env_debounce = defaults.env_debounce;
    let mut per_container: BTreeMap<&str, Vec<(&str, &str, &str)>> = BTreeMap::new();
    let annotations = pod.metadata.annotations.iter().flatten();
    for (name, value) in annotations {
        let Some(key) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let (setting, container) = match key.split_once('.') {
            Some((s, c)) => (s, Some(c)),
            None => (key, None),
        };
        let known = [
            "follow-subpath",
            "reload-signal",
            "reload-url",
            "reload-debounce",
            "follow-env",
            "env-debounce",
        ];
        if !known.contains(&setting) {
            continue;
        }
        let fail = |reason: String| AnnotationError {
            annotation: name.clone(),
            value: value.clone(),
            reason,
        };
        match (setting, container) {
            ("reload-debounce" | "env-debounce", Some(_)) => {
                errors.push(fail(
                    "the quiet time is the pod's, for every container".into(),
                ));
            }
            ("reload-debounce", None) => match parse_debounce(value) {
                Ok(d) => debounce = d,
                Err(reason) => errors.push(fail(reason)),
            },
            ("env-debounce", None) => match parse_debounce(value) {
                Ok(d) => env_debounce = d,
                Err(reason) => errors.push(fail(reason)),
            },
            (setting, Some(container)) => {
                if names.iter().any(|n| n == container) {
                    per_container
                        .entry(container)
                        .or_default()
                        .push((setting, name, value));
                } else {
                    errors.push(fail(format!(
                        "the pod has no container or init container {container:?}"
                    )));
                }
            }
            (setting, None) => {
                if let Err(reason) = apply(&mut pod_wide, setting, value) {
                    errors.push(fail(reason));
                }
            }
        }
    }
    let mut containers = BTreeMap::new();
    for name in names {
        let mut settings = pod_wide.clone();
        for (setting, annotation, value) in per_container.get(name.as_str()).into_iter().flatten() {
            if let Err(reason) = apply(&mut settings, setting, value) {
                errors.push(AnnotationError {
                    annotation: (*annotation).to_owned(),
                    value: (*value).to_owned(),
                    reason,
                });
            }
        }
        containers.insert(name, settings);
    }
    (
        PodFollow {
            containers,
            debounce,
            env_debounce,
        },
        errors,
    )
}

/// One setting of `follow` from `value`.
fn apply(follow: &mut ContainerFollow, setting: &str, value: &str) -> Result<(), String> {
    match setting {
        "follow-subpath" => {
            follow.sub_path = parse_bool(value)?;
        }
        "reload-signal" => {
            follow.signal = parse_signal(value)?;
        }
        "follow-env" => {
            follow.env = parse_bool(value)?;
        }
        _ => {
            follow.url = if value == "none" {
                None
            } else {
                Some(value.parse()?)
            };
        }
    }
    Ok(())
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("must be true or false".into()),
    }
}

/// A reload signal by name, with or without `SIG` (`SIGHUP`, `HUP`); `none` for none.
/// `SIGKILL` and `SIGSTOP` are refused: they cannot be a reload.
///
/// # Errors
/// Why the value is refused.
pub fn parse_signal(value: &str) -> Result<Option<Signal>, String> {
    if value == "none" {
        return Ok(None);
    }
    let name = if value.starts_with("SIG") {
        value.to_owned()
    } else {
        format!("SIG{value}")
    };
    let signal = Signal::from_str(&name)
        .map_err(|_| "not a signal name such as SIGHUP, HUP or SIGUSR1".to_owned())?;
    if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
        return Err(format!(
            "{signal} cannot be caught, so it cannot ask for a reload"
        ));
    }
    Ok(Some(signal))
}

/// A quiet time: a Go duration from 0 to [`MAX_DEBOUNCE`].
///
/// # Errors
/// Why the value is refused.
pub fn parse_debounce(value: &str) -> Result<Duration, String> {
    let d = nodelet_core::go::parse_duration(value)
        .ok_or_else(|| "not a duration such as 20ms or 1s".to_owned())?;
    if d > MAX_DEBOUNCE {
        return Err("must be at most 1m".into());
    }
    Ok(d)
}

/// Every container and init container name of the pod.
fn container_names(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.iter();
    spec.flat_map(|s| {
        let init = s.init_containers.iter().flatten().map(|c| c.name.clone());
        init.chain(s.containers.iter().map(|c| c.name.clone()))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": annotations},
            "spec": {
                "initContainers": [{"name": "setup"}],
                "containers": [{"name": "app"}, {"name": "side"}],
            },
        }))
        .unwrap()
    }

    fn follow(annotations: serde_json::Value) -> (PodFollow, Vec<AnnotationError>) {
        pod_follow(&pod(annotations), &FollowDefaults::default())
    }

    #[test]
    fn a_pod_without_annotations_follows_nothing_as_the_kubelet() {
        let (f, errors) = follow(json!({}));
        assert!(errors.is_empty());
        assert!(!f.any());
        assert_eq!(f.containers.len(), 3);
        assert_eq!(f.debounce, DEFAULT_DEBOUNCE);
    }

    #[test]
    fn a_pod_wide_annotation_applies_to_every_container_and_a_named_one_wins() {
        let (f, errors) = follow(json!({
            "nodelet.io/follow-subpath": "true",
            "nodelet.io/follow-subpath.side": "false",
            "nodelet.io/reload-signal.app": "HUP",
            "nodelet.io/reload-url.side": "http://127.0.0.1:9090/-/reload",
            "nodelet.io/reload-debounce": "250ms",
        }));
        assert!(errors.is_empty(), "{errors:?}");
        let app = f.container("app").unwrap();
        assert!(app.sub_path);
        assert_eq!(app.signal, Some(Signal::SIGHUP));
        assert_eq!(app.url, None);
        let side = f.container("side").unwrap();
        assert!(!side.sub_path);
        assert_eq!(side.signal, None);
        assert_eq!(
            side.url.as_ref().unwrap().to_string(),
            "http://127.0.0.1:9090/-/reload"
        );
        assert!(f.container("setup").unwrap().sub_path);
        assert_eq!(f.debounce, Duration::from_millis(250));
    }

    #[test]
    fn node_defaults_apply_and_an_annotation_turns_them_off() {
        let defaults = FollowDefaults {
            sub_path: true,
            reload_signal: Some(Signal::SIGUSR1),
            debounce: Duration::from_millis(5),
            ..FollowDefaults::default()
        };
        let p = pod(
            json!({"nodelet.io/reload-signal.app": "none", "nodelet.io/follow-subpath.app": "false"}),
        );
        let (f, errors) = pod_follow(&p, &defaults);
        assert!(errors.is_empty());
        assert_eq!(f.container("app").unwrap(), &ContainerFollow::default());
        let side = f.container("side").unwrap();
        assert!(side.sub_path);
        assert_eq!(side.signal, Some(Signal::SIGUSR1));
        assert_eq!(f.debounce, Duration::from_millis(5));
    }

    #[test]
    fn each_bad_value_is_reported_naming_the_annotation_and_the_value() {
        let (f, errors) = follow(json!({
            "nodelet.io/follow-subpath": "yes",
            "nodelet.io/reload-signal.app": "SIGKILL",
            "nodelet.io/reload-signal.nope": "HUP",
            "nodelet.io/reload-url": "http://example.com/reload",
            "nodelet.io/reload-debounce": "soon",
            "nodelet.io/other": "ignored",
        }));
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "annotation nodelet.io/follow-subpath: invalid value \"yes\": must be true or false",
                "annotation nodelet.io/reload-debounce: invalid value \"soon\": not a duration such as 20ms or 1s",
                "annotation nodelet.io/reload-signal.nope: invalid value \"HUP\": the pod has no container or init container \"nope\"",
                "annotation nodelet.io/reload-url: invalid value \"http://example.com/reload\": host \"example.com\" is not local (localhost, 127.0.0.1 or [::1])",
                "annotation nodelet.io/reload-signal.app: invalid value \"SIGKILL\": SIGKILL cannot be caught, so it cannot ask for a reload",
            ]
        );
        assert!(!f.any(), "a bad value leaves the default (nothing)");
    }

    #[test]
    fn the_environment_follows_per_container_with_a_quiet_time_of_the_pod() {
        let (f, errors) = follow(json!({
            "nodelet.io/follow-env": "true",
            "nodelet.io/follow-env.side": "false",
            "nodelet.io/env-debounce": "1s",
            "nodelet.io/env-debounce.app": "2s",
        }));
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "annotation nodelet.io/env-debounce.app: invalid value \"2s\": the quiet time is the pod's, for every container"
            ]
        );
        assert!(f.container("app").unwrap().env);
        assert!(!f.container("side").unwrap().env);
        assert!(f.any());
        assert_eq!(f.env_debounce, Duration::from_secs(1));
        let (f, _) = follow(json!({}));
        assert_eq!(f.env_debounce, DEFAULT_ENV_DEBOUNCE);
        assert!(!f.container("app").unwrap().env, "the kubelet's default");
        let defaults = FollowDefaults {
            env: true,
            ..FollowDefaults::default()
        };
        let (f, _) = pod_follow(
            &pod(json!({"nodelet.io/follow-env.app": "false"})),
            &defaults,
        );
        assert!(!f.container("app").unwrap().env);
        assert!(f.container("side").unwrap().env);
    }

    #[test]
    fn signals_are_read_with_or_without_their_prefix() {
        assert_eq!(parse_signal("SIGHUP"), Ok(Some(Signal::SIGHUP)));
        assert_eq!(parse_signal("USR2"), Ok(Some(Signal::SIGUSR2)));
        assert_eq!(parse_signal("none"), Ok(None));
        assert!(parse_signal("sighup").is_err());
        assert!(parse_signal("SIGSTOP").is_err());
    }

    #[test]
    fn reload_urls_are_local_http_with_a_port_and_a_path() {
        let url: ReloadUrl = "http://localhost:8080".parse().unwrap();
        assert_eq!(url.to_string(), "http://localhost:8080/");
        let url: ReloadUrl = "http://[::1]/-/reload?x=1".parse().unwrap();
        assert_eq!((url.host.as_str(), url.port), ("[::1]", 80));
        assert_eq!(url.path, "/-/reload?x=1");
        assert!("https://127.0.0.1/".parse::<ReloadUrl>().is_err());
        assert!("http://127.0.0.1:0/".parse::<ReloadUrl>().is_err());
        assert!("http://127.0.0.1:99999/".parse::<ReloadUrl>().is_err());
        assert!("http://127.0.0.1/a b".parse::<ReloadUrl>().is_err());
    }

    #[test]
    fn a_quiet_time_is_a_duration_of_at_most_a_minute() {
        assert_eq!(parse_debounce("0"), Ok(Duration::ZERO));
        assert_eq!(parse_debounce("1m"), Ok(MAX_DEBOUNCE));
        assert!(parse_debounce("61s").is_err());
        assert!(parse_debounce("-1s").is_err());
        assert!(parse_debounce("reload-debounce.app").is_err());
    }
}
