//! A real kube-apiserver and etcd for the benches that measure the server's side
//! (`SCALE_SERVER=realk8s`): started and stopped through the `realk8s` scripts of a checkout of
//! the project's Kubernetes test tools (`REALK8S_DIR`: the folder holding `start.sh`,
//! `node.sh`, `cluster-objects.sh` and `stop.sh`), never part of `cargo test`. What the server
//! did is read from its own `/metrics` (`apiserver_request_total` by verb, resource and code;
//! API Priority and Fairness's queue waits and rejections) and its CPU time from
//! `/proc/<pid>/stat` (kube-apiserver and etcd, pids from the scripts' state directory).
//!
//! `REALK8S_STATE` set: that state directory is used (started if down) and left running;
//! unset: a fresh one under the system's temporary folder, stopped and deleted at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::cpu_time;

/// A running control plane (see the module docs); stopped on drop when the bench started it.
pub(crate) struct RealK8s {
    scripts: PathBuf,
    state: PathBuf,
    /// Whether the state directory is the bench's own (stopped and wiped on drop).
    owned: bool,
    /// The admin kubeconfig (`system:masters`).
    pub(crate) admin_kubeconfig: PathBuf,
    /// kube-apiserver's port on 127.0.0.1.
    pub(crate) port: u16,
}

/// `apiserver_request_total` and the flow-control series, summed by their labels of interest.
#[derive(Debug, Default, Clone)]
pub(crate) struct ServerCounts {
    /// Requests by `(verb, resource[/subresource], code)`.
    pub(crate) requests: BTreeMap<(String, String, String), f64>,
    /// APF: seconds requests waited in a queue, by priority level (sum).
    pub(crate) queue_wait: BTreeMap<String, f64>,
    /// APF: requests rejected (429), by priority level and reason.
    pub(crate) rejected: BTreeMap<String, f64>,
    /// APF: requests dispatched, by flow schema (every request that reached authorization,
    /// refused ones included: `apiserver_request_total` counts a watch only when it ends and
    /// a refused request not at all).
    pub(crate) dispatched: BTreeMap<String, f64>,
    /// Authorization decisions by authorizer and decision.
    pub(crate) decisions: BTreeMap<String, f64>,
    /// Open long-running requests (watches) by resource, a gauge.
    pub(crate) watches_open: BTreeMap<String, f64>,
}

impl RealK8s {
    /// Starts (or joins, with `REALK8S_STATE`) the control plane; panics naming what is
    /// missing, so a bench asked for the real server never measures something else.
    pub(crate) fn start() -> RealK8s {
        let scripts = PathBuf::from(std::env::var_os("REALK8S_DIR").unwrap_or_else(|| {
            panic!(
                "SCALE_SERVER=realk8s needs REALK8S_DIR: the realk8s folder (start.sh, node.sh, cluster-objects.sh, stop.sh)"
            )
        }));
        for script in ["start.sh", "node.sh", "cluster-objects.sh", "stop.sh"] {
            assert!(
                scripts.join(script).is_file(),
                "REALK8S_DIR={}: {script} is missing",
                scripts.display()
            );
        }
        let (state, owned) = match std::env::var_os("REALK8S_STATE") {
            Some(s) => (PathBuf::from(s), false),
            None => {
                let dir = std::env::temp_dir()
                    .join(format!("nodelet-bench-realk8s-{}", std::process::id()));
                (dir, true)
            }
        };
        let out = script(&scripts, &state, "start.sh", &[]);
        let value = |key: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim_matches('\'').to_owned())
                .unwrap_or_else(|| panic!("start.sh printed no {key}: {out}"))
        };
        let admin_kubeconfig = PathBuf::from(value("KUBECONFIG_ADMIN="));
        let ports = std::fs::read_to_string(state.join("ports"))
            .unwrap_or_else(|e| panic!("{}: {e}", state.join("ports").display()));
        let port = ports
            .lines()
            .find_map(|l| l.strip_prefix("APISERVER_PORT="))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no APISERVER_PORT in {ports}"));
        let k8s = RealK8s {
            scripts,
            state,
            owned,
            admin_kubeconfig,
            port,
        };
        // The default ServiceAccount and kube-root-ca.crt, as the controller manager makes them.
        script(&k8s.scripts, &k8s.state, "cluster-objects.sh", &["default"]);
        k8s
    }

    /// The kubeconfig of `system:node:<node>` (made once).
    pub(crate) fn node_kubeconfig(&self, node: &str) -> PathBuf {
        PathBuf::from(script(&self.scripts, &self.state, "node.sh", &[node]).trim())
    }

    /// An admin client with `user_agent`.
    pub(crate) async fn admin_client(&self, user_agent: &'static str) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(&self.admin_kubeconfig)
            .unwrap_or_else(|e| panic!("{}: {e}", self.admin_kubeconfig.display()));
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap_or_else(|e| panic!("admin kubeconfig: {e}"));
        config.headers.push((
            hyper::header::USER_AGENT,
            hyper::header::HeaderValue::from_static(user_agent),
        ));
        // Many pod POSTs at once, as a deployment controller's burst.
        config.read_timeout = Some(Duration::from_secs(60));
        kube::Client::try_from(config).unwrap_or_else(|e| panic!("admin client: {e}"))
    }

    /// The pid recorded for `name` (`kube-apiserver`, `etcd`).
    fn pid(&self, name: &str) -> u32 {
        let f = self.state.join("run").join(format!("{name}.pid"));
        std::fs::read_to_string(&f)
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{}: no pid", f.display()))
    }

    /// CPU time (user + system) kube-apiserver and etcd used so far.
    pub(crate) fn cpu(&self) -> (Duration, Duration) {
        (
            cpu_time(self.pid("kube-apiserver")),
            cpu_time(self.pid("etcd")),
        )
    }

    /// The server's request and flow-control counters now (read with `client`, an admin).
    pub(crate) async fn counts(&self, client: &kube::Client) -> ServerCounts {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .unwrap_or_else(|e| panic!("{e}"));
        let text = client
            .request_text(request)
            .await
            .unwrap_or_else(|e| panic!("GET /metrics: {e}"));
        parse_counts(&text)
    }

    /// `seconds` of kube-apiserver's CPU profile from now (`/debug/pprof/profile`, on by
    /// default: `--profiling`), as the server sends it (gzipped `profile.proto`, the functions
    /// named: `go tool pprof -top FILE` reads it without the server's binary).
    pub(crate) async fn cpu_profile(client: kube::Client, seconds: u64) -> Vec<u8> {
        use futures::AsyncReadExt as _;
        let request = http::Request::get(format!("/debug/pprof/profile?seconds={seconds}"))
            .body(Vec::new())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut body = client
            .request_stream(request)
            .await
            .unwrap_or_else(|e| panic!("GET /debug/pprof/profile: {e}"));
        let mut bytes = Vec::new();
        body.read_to_end(&mut bytes)
            .await
            .unwrap_or_else(|e| panic!("GET /debug/pprof/profile: {e}"));
        bytes
    }
}

impl Drop for RealK8s {
    fn drop(&mut self) {
        if self.owned {
            let _ = Command::new(self.scripts.join("stop.sh"))
                .arg("--wipe")
                .env("REALK8S_STATE", &self.state)
                .status();
        }
    }
}

/// Runs `name` of the realk8s scripts for `state`: its stdout (stderr passes through).
fn script(scripts: &Path, state: &Path, name: &str, args: &[&str]) -> String {
    let out = Command::new(scripts.join(name))
        .args(args)
        .env("REALK8S_STATE", state)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(out.status.success(), "{name} failed: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of label `key` in a sample's `{…}`.
fn label<'a>(labels: &'a str, key: &str) -> &'a str {
    labels
        .split("\",")
        .find_map(|kv| {
            kv.trim_start_matches(',')
                .strip_prefix(key)?
                .strip_prefix("=\"")
        })
        .map_or("", |v| v.trim_end_matches('"'))
}

/// The counters of [`ServerCounts`] from a `/metrics` text.
fn parse_counts(text: &str) -> ServerCounts {
    let mut counts = ServerCounts::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let labels = labels.trim_end_matches('}');
        match name {
            "apiserver_request_total" => {
                let (resource, sub) = (label(labels, "resource"), label(labels, "subresource"));
                let resource = match (resource, sub) {
                    ("", s) => s.to_owned(),
                    (r, "") => r.to_owned(),
                    (r, s) => format!("{r}/{s}"),
                };
                let key = (
                    label(labels, "verb").to_owned(),
                    resource,
                    label(labels, "code").to_owned(),
                );
                *counts.requests.entry(key).or_default() += value;
            }
            "apiserver_flowcontrol_request_wait_duration_seconds_sum" => {
                *counts
                    .queue_wait
                    .entry(label(labels, "priority_level").to_owned())
                    .or_default() += value;
            }
            "apiserver_flowcontrol_dispatched_requests_total" => {
                *counts
                    .dispatched
                    .entry(label(labels, "flow_schema").to_owned())
                    .or_default() += value;
            }
            "apiserver_authorization_decisions_total" => {
                let key = format!("{} {}", label(labels, "name"), label(labels, "decision"));
                *counts.decisions.entry(key).or_default() += value;
            }
            "apiserver_longrunning_requests" if label(labels, "verb") == "WATCH" => {
                *counts
                    .watches_open
                    .entry(label(labels, "resource").to_owned())
                    .or_default() += value;
            }
            "apiserver_flowcontrol_rejected_requests_total" => {
                let key = format!(
                    "{} ({})",
                    label(labels, "priority_level"),
                    label(labels, "reason")
                );
                *counts.rejected.entry(key).or_default() += value;
            }
            _ => {}
        }
    }
    counts
}

impl ServerCounts {
    /// What changed from `before` to `self`, as one line: requests by verb and code (each with
    /// its resources), then APF's queue waits and rejections.
    pub(crate) fn since(&self, before: &ServerCounts) -> String {
        let diff = |now: f64, then: Option<&f64>| now - then.copied().unwrap_or(0.0);
        let mut by_verb_code: BTreeMap<(String, String), (f64, Vec<String>)> = BTreeMap::new();
        for (key, now) in &self.requests {
            let n = diff(*now, before.requests.get(key));
            if n > 0.0 {
                let (verb, resource, code) = key;
                let e = by_verb_code
                    .entry((verb.clone(), code.clone()))
                    .or_default();
                e.0 += n;
                e.1.push(format!("{resource} {n:.0}"));
            }
        }
        let requests: Vec<String> = by_verb_code
            .iter()
            .map(|((verb, code), (n, each))| format!("{verb} {code}: {n:.0} ({})", each.join(", ")))
            .collect();
        let waits: Vec<String> = self
            .queue_wait
            .iter()
            .filter_map(|(level, now)| {
                let s = diff(*now, before.queue_wait.get(level));
                (s > 0.0005).then(|| format!("{level} {:.0} ms", s * 1e3))
            })
            .collect();
        let rejected: Vec<String> = self
            .rejected
            .iter()
            .filter_map(|(level, now)| {
                let n = diff(*now, before.rejected.get(level));
                (n > 0.0).then(|| format!("{level} {n:.0}"))
            })
            .collect();
        let changed = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            let each: Vec<String> = now
                .iter()
                .filter_map(|(k, v)| {
                    let n = v - then.get(k).copied().unwrap_or(0.0);
                    (n.abs() > 0.0).then(|| format!("{k} {n:+.0}"))
                })
                .collect();
            if each.is_empty() {
                "none".to_owned()
            } else {
                each.join(", ")
            }
        };
        format!(
            "{}; dispatched by flow schema: {}; authorization decisions: {}; open watches: {}; APF queue wait (sum): {}; APF rejected (429): {}",
            requests.join("; "),
            changed(&self.dispatched, &before.dispatched),
            changed(&self.decisions, &before.decisions),
            changed(&self.watches_open, &before.watches_open),
            if waits.is_empty() {
                "none".to_owned()
            } else {
                waits.join(", ")
            },
            if rejected.is_empty() {
                "none".to_owned()
            } else {
                rejected.join(", ")
            },
        )
    }

    /// Requests of `verb` on `resource` answered with a code starting with `code_prefix`.
    pub(crate) fn count_since(
        &self,
        before: &ServerCounts,
        verb: &str,
        resource: &str,
        code_prefix: &str,
    ) -> f64 {
        self.requests
            .iter()
            .filter(|((v, r, c), _)| v == verb && r == resource && c.starts_with(code_prefix))
            .map(|(k, now)| now - before.requests.get(k).copied().unwrap_or(0.0))
            .sum()
    }
}
