//! The agent's flags ([`RunArgs`]) over the config file, resolved into [`Settings`] with errors
//! that name the field or flag.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use nodelet_object_manager::Strategy;
use nodelet_transport::Protocol;

use crate::agent::{
    AgentConfig, DEFAULT_EMBEDDED_NODE_NAME, DEFAULT_EMBEDDED_ROOT_DIR, DEFAULT_LISTEN,
    DEFAULT_ROOT_DIR, KubernetesServiceEnv, RuntimeKind, parse_taints,
};
use crate::file::{FileConfig, FileFollowChange, check_kind, read_file_config};
use crate::{ConfigError, invalid};

/// Why `--manifests` is refused by an agent built without the `embedded` feature.
pub const NO_EMBEDDED: &str = "this nodelet was built without the `embedded` feature \
     (no embedded API server); connect to a cluster with --kubeconfig, or build with default \
     features";

/// Where the agent's API server is.
#[derive(Debug, Clone)]
pub enum ApiSource {
    /// `--kubeconfig PATH` (with `KUBECONFIG`, in-cluster config and `~/.kube/config` as kube-rs
    /// infers them when no path is given).
    Cluster {
        /// The kubeconfig file, if given.
        kubeconfig: Option<PathBuf>,
    },
    /// `--manifests DIR`: an embedded API server seeded from and synced with DIR (only with the
    /// `embedded` feature; without it [`RunArgs::settings`] refuses `--manifests` and `run` fails).
    Embedded {
        /// The manifests directory.
        manifests: PathBuf,
    },
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `journal` when standard output is the systemd journal (`JOURNAL_STREAM` names it),
    /// else `text`.
    Auto,
    /// Human-readable lines with timestamps.
    Text,
    /// One JSON object per line.
    Json,
    /// For the systemd journal: no timestamps (the journal adds them), no colours, each line
    /// prefixed with its syslog priority (`<3>` error … `<7>` debug).
    Journal,
}

/// The agent's flags: what `nodelet` without a subcommand runs with (flattened into the
/// binary's command line). Parsed on their own ([`clap::Parser`]), they are the agent's
/// command line without subcommands, as a program embedding the agent takes them.
#[derive(Debug, clap::Parser)]
#[command(name = "nodelet")]
pub struct RunArgs {
    /// Kubeconfig file (default: `KUBECONFIG`, in-cluster config, `~/.kube/config`).
    #[arg(long, value_name = "PATH", conflicts_with = "manifests")]
    pub kubeconfig: Option<PathBuf>,
    /// Run an embedded API server seeded from (and kept in sync with) the YAML files in DIR
    /// (needs the default `embedded` feature).
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// This node's name (default with --manifests: `nodelet`; otherwise required).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// Root directory for pod files (default: `/var/lib/nodelet`; with --manifests:
    /// `./nodelet-data`); a relative path is made absolute against the current directory at
    /// start.
    #[arg(long, value_name = "DIR")]
    pub root_dir: Option<PathBuf>,
    /// A KubeletConfiguration YAML file (subset, see the README); flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Create/update this node's Node object and renew its Lease (default on with --manifests).
    #[arg(long)]
    pub register_node: Option<Option<bool>>,
    /// Address for /healthz, /readyz, /metrics, /pods, e.g. `127.0.0.1:10271`; `none` to
    /// disable (default with --manifests: 127.0.0.1:10271, a port no Kubernetes component
    /// uses; otherwise none).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// `Watch`, `Cache` or `Get` (overrides configMapAndSecretChangeDetectionStrategy).
    #[arg(long, value_name = "STRATEGY")]
    pub change_detection_strategy: Option<String>,
    /// Pod resync interval, e.g. `1m`, `30s` (overrides syncFrequency).
    #[arg(long, value_name = "DURATION")]
    pub sync_frequency: Option<String>,
    /// Log format: `auto` is `journal` when standard output is the systemd journal
    /// (`JOURNAL_STREAM`), else `text`.
    #[arg(long, value_enum, default_value = "auto")]
    pub log_format: LogFormat,
    /// HTTP version to the API server: `auto` (HTTP/2 where the server offers it, watches
    /// multiplexed), `http1` (one connection per watch) or `http2`.
    #[arg(long, value_name = "PROTOCOL", default_value = "auto")]
    pub api_protocol: String,
    /// With --manifests: at shutdown, unmount and remove the pods' directories (what
    /// `nodelet reset` would remove under `pods/`) instead of leaving them for the next start.
    #[arg(long, requires = "manifests")]
    pub cleanup_on_exit: bool,
    /// What runs containers: `config` (default: no processes, each container's environment
    /// written to files) or `process` (containers as local processes, images mapped to host
    /// programs by the config file's `images`; needs root). Overrides the config file's
    /// `runtime`.
    #[arg(long, value_name = "RUNTIME")]
    pub runtime: Option<String>,
    /// Let the process runtime run containers as root (uid 0). Without it a container that
    /// would run as root does not start.
    #[arg(long)]
    pub allow_root_containers: bool,
    /// The node's IP address: the pods' IPs under the process runtime (default: the local
    /// address the agent uses to reach the API server).
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<String>,
    /// Taints the Node is registered with, as the kubelet's flag: `key[=value]:Effect,...`;
    /// empty for none (default: `nodelet.io/agent=true:NoSchedule`).
    #[arg(long, value_name = "TAINTS")]
    pub register_with_taints: Option<String>,
    /// The kubelet API's port (TLS; `kubectl logs` reaches containers through it); 0 turns it
    /// off. Default 10250; with --manifests a free loopback port (overrides the config file's
    /// `port`).
    #[arg(long, value_name = "PORT")]
    pub kubelet_port: Option<u16>,
    /// The kubelet API's serving certificate (PEM); with --tls-private-key-file. Default: a
    /// self-signed certificate made at start for the node's name and address.
    #[arg(long, value_name = "FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of --tls-cert-file (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA (PEM) whose client certificates the kubelet API accepts (the cluster's CA);
    /// without it only bearer tokens (TokenReview) authenticate.
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Where containers' `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT` point:
    /// `cluster` (the cluster IP of `default/kubernetes`, as the kubelet; the default against
    /// a cluster) or `api-server` (the address the agent uses for the API server, for
    /// in-cluster clients in local processes; the default with --manifests). Overrides the
    /// config file's `kubernetesService`.
    #[arg(long, value_name = "WHERE")]
    pub kubernetes_service: Option<String>,
    /// Reads per second the node's first reads of ConfigMaps and Secrets keep to once the
    /// burst is spent (overrides the config file's `kubeAPIQPS`; 0: 5).
    #[arg(long, value_name = "QPS")]
    pub kube_api_qps: Option<i32>,
    /// First reads sent at once before --kube-api-qps paces them (overrides the config
    /// file's `kubeAPIBurst`; 0: 10).
    #[arg(long, value_name = "N")]
    pub kube_api_burst: Option<i32>,
}

/// `kubeAPIQPS` / `kubeAPIBurst`, flags first, checked as the kubelet checks them; 0 is
/// client-go's default (5 and 10), an unset one keeps `default`'s.
fn first_reads(
    args: &RunArgs,
    (file_qps, file_burst): (Option<i32>, Option<i32>),
    default: nodelet_object_manager::ReadLimits,
) -> Result<nodelet_object_manager::ReadLimits, ConfigError> {
    let pick = |flag: Option<i32>, field: Option<i32>, names: (&str, &str)| match (flag, field) {
        (Some(v), _) | (None, Some(v)) if v < 0 => Err(invalid(
            &format!("{} ({})", names.0, names.1),
            format!("{v} must not be a negative number"),
        )),
        (Some(v), _) | (None, Some(v)) => Ok(Some(v.unsigned_abs())),
        (None, None) => Ok(None),
    };
    let qps = pick(
        args.kube_api_qps,
        file_qps,
        ("kubeAPIQPS", "--kube-api-qps"),
    )?;
    let burst = pick(
        args.kube_api_burst,
        file_burst,
        ("kubeAPIBurst", "--kube-api-burst"),
    )?;
    Ok(nodelet_object_manager::ReadLimits {
        qps: qps.map_or(default.qps, |q| if q == 0 { 5.0 } else { f64::from(q) }),
        burst: burst.map_or(default.burst, |b| if b == 0 { 10 } else { b }),
    })
}

/// The agent's full settings from the command line and the config file.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The agent configuration.
    pub agent: AgentConfig,
    /// Where the API server is.
    pub api: ApiSource,
    /// The log format.
    pub log_format: LogFormat,
    /// HTTP version policy towards the API server (`--api-protocol`, default auto).
    pub api_protocol: Protocol,
    /// Unmount and remove the pods' directories at shutdown (`--cleanup-on-exit`).
    pub cleanup_on_exit: bool,
    /// Where the master service's variables point; the agent's `run` resolves
    /// [`KubernetesServiceEnv::ApiServer`] into [`AgentConfig::kubernetes_service`].
    pub kubernetes_service: KubernetesServiceEnv,
}

impl RunArgs {
    /// Resolves flags, the config file and mode defaults into [`Settings`]; a relative
    /// `--root-dir` (the offline default `./nodelet-data` is one) is made absolute against the
    /// current directory, once, here.
    ///
    /// # Errors
    /// [`ConfigError`] naming the field or flag.
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        let cwd = std::env::current_dir();
        self.resolve(|| {
            cwd.as_deref().map_err(|e| {
                invalid(
                    "--root-dir",
                    format!("a relative path needs the current directory: {e}"),
                )
            })
        })
    }

    /// [`RunArgs::settings`] with a relative `--root-dir` resolved against `base` instead of
    /// the current directory (`base` should be absolute).
    ///
    /// # Errors
    /// As [`RunArgs::settings`].
    pub fn settings_in(&self, base: &Path) -> Result<Settings, ConfigError> {
        self.resolve(|| Ok(base))
    }

    /// [`RunArgs::settings`], with `base` giving the directory relative paths are taken from
    /// (asked only when one is relative).
    fn resolve<'b>(
        &self,
        base: impl FnOnce() -> Result<&'b Path, ConfigError>,
    ) -> Result<Settings, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file_config(path)?,
            None => FileConfig::default(),
        };
        check_kind(&file)?;
        let embedded = self.manifests.is_some();
        if embedded && !cfg!(feature = "embedded") {
            return Err(invalid("--manifests", NO_EMBEDDED));
        }
        let node_name = match (&self.node_name, embedded) {
            (Some(n), _) => n.clone(),
            (None, true) => DEFAULT_EMBEDDED_NODE_NAME.to_owned(),
            (None, false) => return Err(invalid("--node-name", "required without --manifests")),
        };
        if node_name.is_empty()
            || !node_name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        {
            return Err(invalid(
                "--node-name",
                format!("{node_name:?} is not a valid DNS subdomain name"),
            ));
        }
        let root_dir = match (&self.root_dir, embedded) {
            (Some(d), _) => d.clone(),
            (None, true) => PathBuf::from(DEFAULT_EMBEDDED_ROOT_DIR),
            (None, false) => PathBuf::from(DEFAULT_ROOT_DIR),
        };
        // Everything downstream (volume mounts in a container's namespace, the lock, the
        // admin kubeconfig, logs) sees the one absolute path.
        let root_dir = if root_dir.is_relative() {
            absolute_path(&root_dir, base()?)
        } else {
            root_dir
        };
        let mut agent = AgentConfig::new(node_name, root_dir);

        self.sync_options(&file, &mut agent)?;
        agent.first_reads = first_reads(
            self,
            (file.kube_api_qps, file.kube_api_burst),
            agent.first_reads,
        )?;
        self.node_options(&file, embedded, &mut agent)?;
        self.listen_options(&file, embedded, &mut agent)?;
        self.runtime_options(&file, &mut agent)?;
        self.kubelet_api_options(&file, embedded, &mut agent)?;
        if let Some(taints) = &self.register_with_taints {
            agent.register_with_taints =
                Some(parse_taints(taints).map_err(|e| invalid("--register-with-taints", e))?);
        }
        if let Some(ip) = &self.node_ip {
            agent.node_ip = Some(
                ip.parse()
                    .map_err(|e| invalid("--node-ip", format!("{ip:?}: {e}")))?,
            );
        }
        let api = match &self.manifests {
            Some(dir) => ApiSource::Embedded {
                manifests: dir.clone(),
            },
            None => ApiSource::Cluster {
                kubeconfig: self.kubeconfig.clone(),
            },
        };
        let api_protocol = Protocol::from_str(&self.api_protocol)
            .map_err(|e| invalid("--api-protocol", e.to_string()))?;
        let kubernetes_service =
            match (&self.kubernetes_service, &file.kubernetes_service) {
                (Some(v), _) => KubernetesServiceEnv::from_str(v)
                    .map_err(|e| invalid("--kubernetes-service", e))?,
                (None, Some(v)) => KubernetesServiceEnv::from_str(v)
                    .map_err(|e| invalid("kubernetesService", e))?,
                (None, None) if embedded => KubernetesServiceEnv::ApiServer,
                (None, None) => KubernetesServiceEnv::Cluster,
            };
        Ok(Settings {
            agent,
            api,
            log_format: self.log_format,
            api_protocol,
            cleanup_on_exit: self.cleanup_on_exit,
            kubernetes_service,
        })
    }

    /// `--change-detection-strategy` and `--sync-frequency`, else the file's.
    fn sync_options(&self, file: &FileConfig, agent: &mut AgentConfig) -> Result<(), ConfigError> {
        let (strategy_field, strategy) = match (
            &self.change_detection_strategy,
            &file.config_map_and_secret_change_detection_strategy,
        ) {
            (Some(s), _) => ("--change-detection-strategy", Some(s)),
            (None, Some(s)) => ("configMapAndSecretChangeDetectionStrategy", Some(s)),
            (None, None) => ("", None),
        };
        if let Some(s) = strategy {
            agent.strategy =
                Strategy::from_str(s).map_err(|e| invalid(strategy_field, e.to_string()))?;
        }
        let (sync_field, sync) = match (&self.sync_frequency, &file.sync_frequency) {
            (Some(s), _) => ("--sync-frequency", Some(s)),
            (None, Some(s)) => ("syncFrequency", Some(s)),
            (None, None) => ("", None),
        };
        if let Some(s) = sync {
            let d = nodelet_core::go::parse_duration(s).ok_or_else(|| {
                invalid(sync_field, format!("{s:?} is not a duration such as 1m0s"))
            })?;
            if d.is_zero() {
                return Err(invalid(sync_field, "must be greater than 0"));
            }
            agent.sync_frequency = d;
        }
        Ok(())
    }

    /// Node registration: whether, with which labels, the feature gates, the Lease.
    fn node_options(
        &self,
        file: &FileConfig,
        embedded: bool,
        agent: &mut AgentConfig,
    ) -> Result<(), ConfigError> {
        agent.register_node = match self.register_node {
            Some(v) => v.unwrap_or(true),
            None => file.register_node.unwrap_or(embedded),
        };
        agent.node_labels = file.node_labels.clone().unwrap_or_default();
        agent.feature_gates =
            nodelet_core::FeatureGates::from_map(file.feature_gates.clone().unwrap_or_default());
        // As the kubelet: a gate on whose dependency is off refuses to start.
        if let Some((feature, off)) = agent.feature_gates.unmet_dependencies().first() {
            let off: Vec<&str> = off.iter().map(|f| f.name()).collect();
            return Err(invalid(
                "featureGates",
                format!(
                    "{feature} is enabled, but depends on features that are disabled: [{}]",
                    off.join(" ")
                ),
            ));
        }
        // As the kubelet: a label NodeRestriction refuses would stall registration forever.
        let refused: Vec<&str> = agent
            .node_labels
            .keys()
            .map(String::as_str)
            .filter(|k| !nodelet_core::node_labels::node_may_set_label(k))
            .collect();
        if !refused.is_empty() {
            return Err(invalid(
                "nodeLabels",
                format!(
                    "a node may not set {refused:?}: labels in the kubernetes.io and k8s.io \
                     namespaces must be under kubelet.kubernetes.io or node.kubernetes.io or one \
                     of the well-known node labels (NodeRestriction)"
                ),
            ));
        }
        if let Some(secs) = file.node_lease_duration_seconds {
            if secs <= 0 {
                return Err(invalid(
                    "nodeLeaseDurationSeconds",
                    "must be greater than 0",
                ));
            }
            agent.lease_duration_seconds = secs;
        }
        Ok(())
    }

    /// The endpoints' address (`--listen`, else the file's healthz address and port).
    fn listen_options(
        &self,
        file: &FileConfig,
        embedded: bool,
        agent: &mut AgentConfig,
    ) -> Result<(), ConfigError> {
        let listen = match (
            self.listen.as_deref(),
            &file.healthz_bind_address,
            file.healthz_port,
        ) {
            (Some("none" | ""), _, _) => None,
            (Some(l), _, _) => Some(("--listen", l.to_owned())),
            (None, Some(addr), port) => Some((
                "healthzBindAddress",
                format!("{addr}:{}", port.unwrap_or(10248)),
            )),
            (None, None, Some(port)) => Some(("healthzPort", format!("127.0.0.1:{port}"))),
            (None, None, None) if embedded => Some(("--listen", DEFAULT_LISTEN.to_owned())),
            (None, None, None) => None,
        };
        agent.listen = match listen {
            None => None,
            Some((field, text)) => Some(
                text.parse::<SocketAddr>()
                    .map_err(|e| invalid(field, format!("{text:?}: {e}")))?,
            ),
        };
        Ok(())
    }

    /// What runs containers: the runtime, its images, root, sysctls, configuration following.
    fn runtime_options(
        &self,
        file: &FileConfig,
        agent: &mut AgentConfig,
    ) -> Result<(), ConfigError> {
        let (runtime_field, runtime) = match (&self.runtime, &file.runtime) {
            (Some(r), _) => ("--runtime", Some(r)),
            (None, Some(r)) => ("runtime", Some(r)),
            (None, None) => ("", None),
        };
        if let Some(r) = runtime {
            agent.runtime = RuntimeKind::from_str(r).map_err(|e| invalid(runtime_field, e))?;
        }
        if let Some(entries) = &file.images {
            for (i, e) in entries.iter().enumerate() {
                if e.image.is_empty() {
                    return Err(invalid(&format!("images[{i}].image"), "must not be empty"));
                }
            }
            agent.images = nodelet_runtime::ImageTable::new(entries.clone());
        }
        agent.allow_root_containers =
            self.allow_root_containers || file.allow_root_containers.unwrap_or(false);
        if let Some(list) = &file.allowed_unsafe_sysctls {
            nodelet_podworker::SysctlPolicy::new(list, true)
                .map_err(|e| invalid("allowedUnsafeSysctls", e.to_string()))?;
            agent.allowed_unsafe_sysctls = list.clone();
        }
        if let Some(follow) = &file.follow_change {
            agent.follow = follow_defaults(follow)?;
        }
        Ok(())
    }

    /// The kubelet API: its address and port, serving certificate, client CA.
    fn kubelet_api_options(
        &self,
        file: &FileConfig,
        embedded: bool,
        agent: &mut AgentConfig,
    ) -> Result<(), ConfigError> {
        let kubelet_address = match &file.address {
            Some(address) => address
                .parse()
                .map_err(|e| invalid("address", format!("{address:?}: {e}")))?,
            None => std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        };
        agent.kubelet_listen = match self.kubelet_port.or(file.port) {
            Some(0) => None,
            Some(port) => Some(SocketAddr::new(kubelet_address, port)),
            // Offline, only the in-process API server calls it: any free loopback port (the
            // Node publishes it), never a real kubelet's 10250 on the same machine.
            None if embedded && file.address.is_none() => Some(SocketAddr::new(
                std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                0,
            )),
            None => Some(SocketAddr::new(
                kubelet_address,
                nodelet_kubelet_api::DEFAULT_PORT,
            )),
        };
        agent.tls_cert_file = self
            .tls_cert_file
            .clone()
            .or_else(|| file.tls_cert_file.clone());
        agent.tls_private_key_file = self
            .tls_private_key_file
            .clone()
            .or_else(|| file.tls_private_key_file.clone());
        if agent.tls_cert_file.is_some() != agent.tls_private_key_file.is_some() {
            return Err(invalid(
                "tlsCertFile",
                "tlsCertFile and tlsPrivateKeyFile must be given together",
            ));
        }
        agent.client_ca_file = self.client_ca_file.clone().or_else(|| {
            file.authentication
                .as_ref()
                .and_then(|a| a.x509.as_ref())
                .and_then(|x| x.client_ca_file.clone())
        });
        Ok(())
    }
}

/// The node-wide `followChange` defaults, each bad value named (FC-2).
fn follow_defaults(
    file: &FileFollowChange,
) -> Result<nodelet_podworker::follow::FollowDefaults, ConfigError> {
    use nodelet_podworker::follow::options;
    let mut defaults = nodelet_podworker::follow::FollowDefaults {
        sub_path: file.sub_path.unwrap_or(false),
        env: file.env.unwrap_or(false),
        ..Default::default()
    };
    if let Some(quiet) = &file.env_debounce {
        defaults.env_debounce = options::parse_debounce(quiet)
            .map_err(|e| invalid("followChange.envDebounce", format!("{quiet:?}: {e}")))?;
    }
    if let Some(signal) = &file.reload_signal {
        defaults.reload_signal = options::parse_signal(signal)
            .map_err(|e| invalid("followChange.reloadSignal", format!("{signal:?}: {e}")))?;
    }
    if let Some(quiet) = &file.reload_debounce {
        defaults.debounce = options::parse_debounce(quiet)
            .map_err(|e| invalid("followChange.reloadDebounce", format!("{quiet:?}: {e}")))?;
    }
    Ok(defaults)
}

/// `path` made absolute against `base` (itself absolute), lexically: `.` components are
/// dropped, `..` and symbolic links are kept as they are (the directory need not exist yet).
fn absolute_path(path: &Path, base: &Path) -> PathBuf {
    base.join(path).components().collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::*;
    use crate::{NodeTaint, default_images, service_endpoint_of};

    fn cli(args: &[&str]) -> RunArgs {
        let mut all = vec!["nodelet"];
        all.extend_from_slice(args);
        RunArgs::try_parse_from(all).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_kubelet_api_listens_on_10250_against_a_cluster_and_port_0_turns_it_off() {
        let s = cli(&["--node-name", "n"]).settings();
        assert_eq!(
            s.ok().and_then(|s| s.agent.kubelet_listen),
            Some("0.0.0.0:10250".parse().unwrap_or_else(|e| panic!("{e}")))
        );
        let s = cli(&["--node-name", "n", "--kubelet-port", "0"]).settings();
        assert_eq!(s.ok().and_then(|s| s.agent.kubelet_listen), None);
        let s = cli(&["--node-name", "n", "--kubelet-port", "11250"]).settings();
        assert_eq!(
            s.ok()
                .and_then(|s| s.agent.kubelet_listen)
                .map(|a| a.port()),
            Some(11250)
        );
    }

    #[test]
    fn follow_change_defaults_come_from_the_config_file_and_bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("config.yaml");
        let f = file.to_str().unwrap_or_default();
        let args = ["--node-name", "n1", "--root-dir", "/r", "--config", f];
        std::fs::write(&file, "kind: KubeletConfiguration\n").unwrap_or_else(|e| panic!("{e}"));
        let s = cli(&args).settings().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.agent.follow,
            nodelet_podworker::follow::FollowDefaults::default()
        );
        assert!(!s.agent.follow.sub_path);

        let yaml = "followChange:\n  subPath: true\n  reloadSignal: HUP\n  reloadDebounce: 50ms\n  env: true\n  envDebounce: 1s\n";
        std::fs::write(&file, yaml).unwrap_or_else(|e| panic!("{e}"));
        let s = cli(&args).settings().unwrap_or_else(|e| panic!("{e}"));
        assert!(s.agent.follow.sub_path);
        assert_eq!(
            s.agent.follow.reload_signal,
            Some(nix::sys::signal::Signal::SIGHUP)
        );
        assert_eq!(s.agent.follow.debounce, Duration::from_millis(50));
        assert!(s.agent.follow.env);
        assert_eq!(s.agent.follow.env_debounce, Duration::from_secs(1));

        std::fs::write(&file, "followChange:\n  reloadSignal: SIGKILL\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let err = cli(&args).settings().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid configuration: followChange.reloadSignal: \"SIGKILL\": SIGKILL cannot \
                 be caught, so it cannot ask for a reload"
            )
        );
        std::fs::write(&file, "followChange:\n  subpath: true\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(cli(&args).settings().is_err(), "unknown fields are refused");
    }

    #[test]
    fn the_kubernetes_service_follows_the_cluster_unless_asked_and_bad_values_are_named() {
        let s = cli(&["--node-name", "n"]).settings();
        assert_eq!(
            s.ok().map(|s| s.kubernetes_service),
            Some(KubernetesServiceEnv::Cluster)
        );
        let s = cli(&["--node-name", "n", "--kubernetes-service", "api-server"]).settings();
        assert_eq!(
            s.ok().map(|s| s.kubernetes_service),
            Some(KubernetesServiceEnv::ApiServer)
        );
        let err = cli(&["--node-name", "n", "--kubernetes-service", "nearby"])
            .settings()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid configuration: --kubernetes-service: \"nearby\" is not one of \
                 cluster, api-server"
            )
        );
    }

    #[test]
    fn an_api_server_url_gives_its_host_and_port_or_the_schemes() {
        let at = |url: &str| service_endpoint_of(url).map(|e| (e.host, e.port));
        assert_eq!(
            at("https://10.0.0.1:6443/"),
            Some(("10.0.0.1".to_owned(), 6443))
        );
        assert_eq!(
            at("https://api.example.com"),
            Some(("api.example.com".to_owned(), 443))
        );
        assert_eq!(
            at("https://[fd00::1]:6443"),
            Some(("fd00::1".to_owned(), 6443))
        );
        assert_eq!(at("not a url"), None);
    }

    #[cfg(feature = "embedded")]
    #[test]
    fn offline_the_kubernetes_service_is_the_api_servers_address() {
        let s = cli(&["--manifests", "./examples"]).settings();
        assert_eq!(
            s.ok().map(|s| s.kubernetes_service),
            Some(KubernetesServiceEnv::ApiServer)
        );
    }

    #[cfg(feature = "embedded")]
    #[test]
    fn offline_the_kubelet_api_takes_a_free_loopback_port() {
        let s = cli(&["--manifests", "./examples"]).settings();
        assert_eq!(
            s.ok().and_then(|s| s.agent.kubelet_listen),
            Some("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
        );
    }

    #[test]
    fn runtime_taints_and_node_ip_flags_are_checked_and_named_when_bad() {
        let s = cli(&[
            "--node-name",
            "n",
            "--runtime",
            "process",
            "--allow-root-containers",
            "--register-with-taints",
            "a=b:NoSchedule,c:NoExecute",
            "--node-ip",
            "10.1.2.3",
        ])
        .settings()
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.runtime, RuntimeKind::Process);
        assert!(s.agent.allow_root_containers);
        assert_eq!(
            s.agent.register_with_taints,
            Some(vec![
                NodeTaint {
                    key: "a".into(),
                    value: Some("b".into()),
                    effect: "NoSchedule".into()
                },
                NodeTaint {
                    key: "c".into(),
                    value: None,
                    effect: "NoExecute".into()
                },
            ])
        );
        assert_eq!(
            s.agent.node_ip.map(|ip| ip.to_string()).as_deref(),
            Some("10.1.2.3")
        );
        let s = cli(&["--node-name", "n", "--register-with-taints", ""]).settings();
        assert_eq!(
            s.ok().and_then(|s| s.agent.register_with_taints),
            Some(vec![])
        );
        for (flag, value) in [
            ("--runtime", "docker"),
            ("--register-with-taints", "a=b:Sometimes"),
            ("--node-ip", "not-an-ip"),
        ] {
            let err = cli(&["--node-name", "n", flag, value])
                .settings()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(flag), "{flag}: {err}");
        }
    }

    #[test]
    fn the_image_table_comes_from_the_config_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("kubelet.yaml");
        std::fs::write(
            &file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             runtime: process\nimages:\n  - image: \"example.com/app:*\"\n    \
             entrypoint: [\"/opt/app\"]\n    user: 1000\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let s = cli(&[
            "--node-name",
            "n",
            "--config",
            file.to_str().unwrap_or_default(),
        ])
        .settings()
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.runtime, RuntimeKind::Process);
        let entry = s.agent.images.find("example.com/app:1");
        assert_eq!(
            entry.map(|e| e.entrypoint.clone()),
            Some(vec!["/opt/app".to_owned()])
        );
        assert_eq!(entry.and_then(|e| e.user), Some(1000));
        assert!(
            s.agent.images.find("busybox").is_none(),
            "the file's table replaces the default"
        );
        assert!(default_images().find("busybox:1.36").is_some());
    }

    #[cfg(feature = "embedded")]
    #[test]
    fn manifests_mode_has_a_default_node_name_root_dir_and_registers_the_node() {
        let s = cli(&["--manifests", "./examples"]).settings_in(Path::new("/home/dev/nodelet"));
        let s = s.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.node_name, "nodelet");
        assert_eq!(
            s.agent.root_dir,
            PathBuf::from("/home/dev/nodelet/nodelet-data")
        );
        assert!(s.agent.register_node);
        assert_eq!(
            s.agent.listen.map(|a| a.to_string()).as_deref(),
            Some(DEFAULT_LISTEN)
        );
        assert!(matches!(s.api, ApiSource::Embedded { .. }));
        let s = cli(&["--node-name", "n", "--root-dir", "/r"]).settings();
        assert_eq!(
            s.ok().and_then(|s| s.agent.listen),
            None,
            "cluster mode: opt-in"
        );
    }

    #[test]
    fn against_a_cluster_the_root_dir_defaults_to_var_lib_nodelet() {
        let s = cli(&["--node-name", "n"])
            .settings()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.root_dir, PathBuf::from("/var/lib/nodelet"));
        let s = cli(&["--node-name", "n", "--root-dir", "./var"])
            .settings_in(Path::new("/srv"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.root_dir, PathBuf::from("/srv/var"));
    }

    #[test]
    fn a_relative_root_dir_is_made_absolute_against_the_current_directory_once() {
        let cwd = std::env::current_dir().unwrap_or_else(|e| panic!("{e}"));
        let s = cli(&["--node-name", "n", "--root-dir", "data"])
            .settings()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.root_dir, cwd.join("data"));
        assert!(s.agent.root_dir.is_absolute());
        let s = cli(&["--node-name", "n", "--root-dir", "/abs/x"])
            .settings_in(Path::new("/elsewhere"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.agent.root_dir,
            PathBuf::from("/abs/x"),
            "absolute: as given"
        );
    }

    #[test]
    fn absolute_path_joins_a_relative_path_to_the_base_and_drops_dot_components() {
        let base = Path::new("/work/tree");
        assert_eq!(
            absolute_path(Path::new("./nodelet-data"), base),
            PathBuf::from("/work/tree/nodelet-data")
        );
        assert_eq!(
            absolute_path(Path::new("a/./b/"), base),
            PathBuf::from("/work/tree/a/b")
        );
        // `..` stays: through a symbolic link it need not mean the lexical parent.
        assert_eq!(
            absolute_path(Path::new("../x"), base),
            PathBuf::from("/work/tree/../x")
        );
        assert_eq!(absolute_path(Path::new("/y"), base), PathBuf::from("/y"));
        assert_eq!(
            absolute_path(Path::new("."), base),
            PathBuf::from("/work/tree")
        );
    }

    #[cfg(not(feature = "embedded"))]
    #[test]
    fn manifests_is_refused_naming_the_missing_embedded_feature() {
        let err = cli(&["--manifests", "./examples"])
            .settings()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with("invalid configuration: --manifests: this nodelet was built without the `embedded` feature"),
            "{err:?}"
        );
    }

    #[test]
    fn cluster_mode_requires_a_node_name() {
        let err = cli(&["--root-dir", "/x"])
            .settings()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid configuration: --node-name: required without --manifests")
        );
    }

    #[test]
    fn feature_gates_are_read_from_the_config_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("kubelet.yaml");
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                    featureGates:\n  ClusterTrustBundle: true\n  ClusterTrustBundleProjection: true\n\
                    \x20 GracefulNodeShutdown: false\n";
        std::fs::write(&file, yaml).unwrap_or_else(|e| panic!("{e}"));
        let f = file.to_str().unwrap_or_default();
        let s = cli(&["--node-name", "n1", "--root-dir", "/r", "--config", f])
            .settings()
            .unwrap_or_else(|e| panic!("{e}"));
        let gates = &s.agent.feature_gates;
        assert!(gates.enabled(nodelet_core::Feature::ClusterTrustBundleProjection));
        assert!(!gates.enabled(nodelet_core::Feature::PodCertificateRequest));
        assert_eq!(gates.ignored(), ["GracefulNodeShutdown"]);

        // As the kubelet: the projection gate without the API gate is refused.
        std::fs::write(
            &file,
            "featureGates:\n  ClusterTrustBundleProjection: true\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let err = cli(&["--node-name", "n1", "--root-dir", "/r", "--config", f])
            .settings()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "invalid configuration: featureGates: ClusterTrustBundleProjection is enabled, but \
             depends on features that are disabled: [ClusterTrustBundle]"
        );

        std::fs::write(&file, "featureGates:\n  EnvFiles: maybe\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let err = cli(&["--node-name", "n1", "--root-dir", "/r", "--config", f])
            .settings()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("featureGates"), "{err}");
    }

    #[test]
    fn the_first_read_bucket_comes_from_kube_api_qps_and_burst_flags_first() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("kubelet.yaml");
        std::fs::write(&file, "kubeAPIQPS: 40\nkubeAPIBurst: 80\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let f = file.to_str().unwrap_or_default();
        let limits = |extra: &[&str]| {
            let mut args = vec!["--node-name", "n1", "--root-dir", "/r"];
            args.extend_from_slice(extra);
            cli(&args).settings().map(|s| s.agent.first_reads)
        };
        let default = limits(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((default.qps, default.burst), (500.0, 250));
        let file_only = limits(&["--config", f]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((file_only.qps, file_only.burst), (40.0, 80));
        let flag =
            limits(&["--config", f, "--kube-api-qps", "7"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((flag.qps, flag.burst), (7.0, 80));
        // 0 is client-go's default, as the kubelet's client gets it.
        let zero = limits(&["--kube-api-qps", "0", "--kube-api-burst", "0"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((zero.qps, zero.burst), (5.0, 10));
        let err = limits(&["--kube-api-qps=-1"]).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid configuration: kubeAPIQPS (--kube-api-qps): -1 must not be a negative number"
            )
        );
        let err = limits(&["--kube-api-burst=-2"])
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid configuration: kubeAPIBurst (--kube-api-burst): -2 must not be a negative number"
            )
        );
    }

    #[test]
    fn the_config_file_is_read_and_flags_override_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("kubelet.yaml");
        let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                    configMapAndSecretChangeDetectionStrategy: Cache\nsyncFrequency: 30s\n";
        std::fs::write(&file, yaml).unwrap_or_else(|e| panic!("{e}"));
        let f = file.to_str().unwrap_or_default();
        let s = cli(&["--node-name", "n1", "--root-dir", "/r", "--config", f])
            .settings()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.strategy, Strategy::Cache);
        assert_eq!(s.agent.sync_frequency, Duration::from_secs(30));
        let s = cli(&[
            "--node-name",
            "n1",
            "--root-dir",
            "/r",
            "--config",
            f,
            "--sync-frequency",
            "2m",
        ])
        .settings()
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.agent.sync_frequency, Duration::from_secs(120));
    }

    #[test]
    fn invalid_configuration_names_the_field() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("kubelet.yaml");
        let f = file.to_str().unwrap_or_default().to_owned();
        let check = |yaml: &str, needle: &str| {
            std::fs::write(&file, yaml).unwrap_or_else(|e| panic!("{e}"));
            let err = cli(&["--node-name", "n1", "--root-dir", "/r", "--config", &f])
                .settings()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(needle), "{err:?} should contain {needle:?}");
        };
        check(
            "configMapAndSecretChangeDetectionStrategy: Sometimes\n",
            "configMapAndSecretChangeDetectionStrategy: unknown configmap and secret manager mode: Sometimes",
        );
        check("syncFrequency: soon\n", "syncFrequency:");
        check("syncFrequency: [1]\n", "syncFrequency: line 1 column 16");
        check(
            "syncFrequency: 0s\n",
            "syncFrequency: must be greater than 0",
        );
        check("bogusField: 1\n", "bogusField");
        check(
            "nodeLabels: {node-role.kubernetes.io/worker: \"\", team: a}\n",
            "nodeLabels: a node may not set [\"node-role.kubernetes.io/worker\"]",
        );
        check("kind: Pod\n", "kind: must be KubeletConfiguration");
    }
}
