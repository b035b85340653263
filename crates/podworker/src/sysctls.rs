//! The kubelet's sysctl admission (its allowlist admit handler, PW-56), for a node whose
//! containers are host processes: a pod's `securityContext.sysctls` are admitted only when
//! each is allowlisted and can be set in a namespace of the pod's own, never on the host.
//!
//! 1. A name is read with `.` as its separator (`kernel/shm_rmid_forced` is
//!    `kernel.shm_rmid_forced`: the first separator decides, as `sysctl` reads it).
//! 2. The allowlist is the kubelet's safe sysctls (one IPC sysctl, `kernel.shm_rmid_forced`,
//!    and network ones) and the node's `allowedUnsafeSysctls` (names, or prefixes ending in
//!    `*`), each of which must live in a namespace the kernel keeps per pod: IPC
//!    (`kernel.shm*`, `kernel.msg*`, `kernel.sem`, `fs.mqueue.*`) or network (`net.*`).
//! 3. A name not on it: `"<name>" not allowlisted`.
//! 4. A network sysctl: `"<name>" not allowed with host net enabled` — for every pod, since
//!    here every pod shares the node's network namespace (its addresses and ports), so the
//!    value could only be set on the host's.
//! 5. An IPC sysctl of a pod in the host's IPC namespace (`hostIPC`, or a node whose pods get
//!    no IPC namespace of their own: an agent without root, or the env-file runtime):
//!    `"<name>" not allowed with host ipc enabled`.
//!
//! The pod is rejected with reason `SysctlForbidden` and `forbidden sysctl: <text>` (the
//! first offending sysctl), before the operating-system checks, as the kubelet orders its
//! admit handlers.

use k8s_openapi::api::core::v1::Pod;

use crate::admission::Rejection;

/// The reason of a pod refused for its sysctls.
pub const SYSCTL_FORBIDDEN: &str = "SysctlForbidden";

/// The kubelet's safe sysctls (all of them: the kernels the process runtime needs have them
/// namespaced).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// The kernel namespace a sysctl lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    /// The namespace of dotted `name`, if the kernel keeps it per namespace.
    fn of(name: &str) -> Option<Self> {
        if name == "kernel.sem"
            || ["kernel.shm", "kernel.msg", "fs.mqueue."]
                .iter()
                .any(|p| name.starts_with(p))
        {
            Some(Self::Ipc)
        } else if name.starts_with("net.") {
            Some(Self::Net)
        } else {
            None
        }
    }

    fn host_word(self) -> &'static str {
        match self {
            Self::Ipc => "ipc",
            Self::Net => "net",
        }
    }
}

/// An `allowedUnsafeSysctls` entry the kubelet refuses at start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SysctlPatternError {
    /// Not a sysctl name or a prefix ending in `*`.
    #[error(
        "sysctl {0:?} must have at most 253 characters and match regex \
         ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\\*)?$"
    )]
    Invalid(String),
    /// Not in a namespace the kernel keeps per pod.
    #[error("the sysctl {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// What this node admits (PW-56).
#[derive(Debug, Clone, Default)]
pub struct SysctlPolicy {
    /// Exact allowlisted names, dotted, with their namespace.
    names: Vec<(String, Namespace)>,
    /// Allowlisted prefixes (patterns without their `*`).
    prefixes: Vec<(String, Namespace)>,
    /// Whether a pod that does not ask for `hostIPC` gets an IPC namespace of its own.
    pod_ipc_namespaces: bool,
}

impl SysctlPolicy {
    /// The safe sysctls and `allowed_unsafe` (the node's `allowedUnsafeSysctls`); pods get
    /// IPC namespaces of their own when `pod_ipc_namespaces`.
    ///
    /// # Errors
    /// [`SysctlPatternError`] for the first entry the kubelet would refuse.
    pub fn new(
        allowed_unsafe: &[String],
        pod_ipc_namespaces: bool,
    ) -> Result<Self, SysctlPatternError> {
        let mut policy = Self {
            pod_ipc_namespaces,
            ..Self::default()
        };
        let safe = SAFE_SYSCTLS.iter().map(|s| (*s).to_owned());
        for pattern in safe.chain(allowed_unsafe.iter().cloned()) {
            if !valid_pattern(&pattern) {
                return Err(SysctlPatternError::Invalid(pattern));
            }
            let pattern = dotted(&pattern);
            match pattern.strip_suffix('*') {
                Some(prefix) => {
                    let ns = Namespace::of(prefix)
                        .ok_or_else(|| SysctlPatternError::NotNamespaced(pattern.clone()))?;
                    policy.prefixes.push((prefix.to_owned(), ns));
                }
                None => {
                    let ns = Namespace::of(&pattern)
                        .ok_or_else(|| SysctlPatternError::NotNamespaced(pattern.clone()))?;
                    policy.names.push((pattern, ns));
                }
            }
        }
        Ok(policy)
    }

    /// Steps 3–5 for one sysctl: `Err` with the kubelet's text.
    fn check(&self, name: &str, host_ipc: bool) -> Result<(), String> {
        let name = dotted(name);
        let ns = self
            .names
            .iter()
            .find(|(n, _)| *n == name)
            .or_else(|| {
                self.prefixes
                    .iter()
                    .find(|(p, _)| name.starts_with(p.as_str()))
            })
            .map(|(_, ns)| *ns);
        match ns {
            // (3)
            None => Err(format!("{name:?} not allowlisted")),
            // (4), (5)
            Some(ns @ Namespace::Net) => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.host_word()
            )),
            Some(ns @ Namespace::Ipc) if host_ipc || !self.pod_ipc_namespaces => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.host_word()
            )),
            Some(Namespace::Ipc) => Ok(()),
        }
    }
}

/// PW-56: whether `pod`'s sysctls are admitted (module docs).
///
/// # Errors
/// The [`Rejection`] (`SysctlForbidden`) naming the first sysctl refused.
pub fn admit_sysctls(pod: &Pod, policy: &SysctlPolicy) -> Result<(), Rejection> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let host_ipc = spec.host_ipc.unwrap_or(false);
    let sysctls = spec
        .security_context
        .iter()
        .flat_map(|sc| sc.sysctls.iter().flatten());
    for sysctl in sysctls {
        if let Err(text) = policy.check(&sysctl.name, host_ipc) {
            return Err(Rejection {
                reason: SYSCTL_FORBIDDEN,
                message: format!("forbidden sysctl: {text}"),
            });
        }
    }
    Ok(())
}

/// Step 1: `name` with `.` as its separator.
fn dotted(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '/' => '.',
                '.' => '/',
                c => c,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

/// The API's sysctl pattern: segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?` separated by `.` or
/// `/`, an optional final `*`, at most 253 characters.
fn valid_pattern(pattern: &str) -> bool {
    if pattern.len() > 253 {
        return false;
    }
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    let segment = |s: &str| {
        let bytes = s.as_bytes();
        let inner =
            |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_';
        let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        match bytes {
            [] => false,
            [only] => edge(only),
            [first, middle @ .., last] => edge(first) && edge(last) && middle.iter().all(inner),
        }
    };
    // A prefix pattern may end with a separator (`kernel.msg*`, `fs.mqueue.*`).
    let body = if pattern.ends_with('*') {
        body.strip_suffix(['.', '/']).unwrap_or(body)
    } else {
        body
    };
    !body.is_empty() && body.split(['.', '/']).all(segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(host_ipc: bool, sysctls: &[(&str, &str)]) -> Pod {
        let list: Vec<serde_json::Value> = sysctls
            .iter()
            .map(|(n, v)| serde_json::json!({"name": n, "value": v}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"hostIPC": host_ipc, "containers": [{"name": "c"}],
                     "securityContext": {"sysctls": list}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn verdict(policy: &SysctlPolicy, pod: &Pod) -> Result<(), String> {
        admit_sysctls(pod, policy).map_err(|r| {
            assert_eq!(r.reason, "SysctlForbidden");
            r.message
        })
    }

    #[test]
    fn pw56_a_safe_ipc_sysctl_is_admitted_in_a_pods_own_ipc_namespace_with_either_separator() {
        let policy = SysctlPolicy::new(&[], true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdict(&policy, &pod(false, &[("kernel.shm_rmid_forced", "1")])),
            Ok(())
        );
        assert_eq!(
            verdict(&policy, &pod(false, &[("kernel/shm_rmid_forced", "1")])),
            Ok(())
        );
        assert_eq!(verdict(&policy, &pod(false, &[])), Ok(()));
    }

    #[test]
    fn pw56_an_unsafe_sysctl_not_allowed_on_the_node_is_forbidden_with_the_kubelets_text() {
        let policy = SysctlPolicy::new(&[], true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdict(&policy, &pod(false, &[("kernel.msgmax", "10000000000")])),
            Err("forbidden sysctl: \"kernel.msgmax\" not allowlisted".to_owned())
        );
        let allowed =
            SysctlPolicy::new(&["kernel.msg*".to_owned()], true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdict(&allowed, &pod(false, &[("kernel.msgmax", "1")])),
            Ok(())
        );
    }

    #[test]
    fn pw56_network_sysctls_are_forbidden_as_every_pod_shares_the_hosts_network() {
        let policy = SysctlPolicy::new(&["net.core.somaxconn".to_owned()], true)
            .unwrap_or_else(|e| panic!("{e}"));
        for name in ["net.ipv4.ip_local_port_range", "net/core/somaxconn"] {
            let dotted_name = dotted(name);
            assert_eq!(
                verdict(&policy, &pod(false, &[(name, "1")])),
                Err(format!(
                    "forbidden sysctl: {dotted_name:?} not allowed with host net enabled"
                ))
            );
        }
    }

    #[test]
    fn pw56_ipc_sysctls_are_forbidden_in_the_hosts_ipc_namespace() {
        let host = "forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled";
        let own = SysctlPolicy::new(&[], true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdict(&own, &pod(true, &[("kernel.shm_rmid_forced", "1")])),
            Err(host.to_owned())
        );
        let none = SysctlPolicy::new(&[], false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdict(&none, &pod(false, &[("kernel.shm_rmid_forced", "1")])),
            Err(host.to_owned())
        );
    }

    #[test]
    fn allowed_unsafe_sysctls_must_be_valid_namespaced_patterns() {
        for ok in [
            "kernel.msg*",
            "fs.mqueue.*",
            "kernel.sem",
            "net.core.somaxconn",
            "kernel/shm_next_id",
        ] {
            assert!(SysctlPolicy::new(&[ok.to_owned()], true).is_ok(), "{ok}");
        }
        assert_eq!(
            SysctlPolicy::new(&["vm.swappiness".to_owned()], true).err(),
            Some(SysctlPatternError::NotNamespaced("vm.swappiness".into()))
        );
        assert_eq!(
            SysctlPolicy::new(&["Kernel.msgmax".to_owned()], true).err(),
            Some(SysctlPatternError::Invalid("Kernel.msgmax".into()))
        );
        assert!(matches!(
            SysctlPolicy::new(&["foo-".to_owned()], true),
            Err(SysctlPatternError::Invalid(_))
        ));
    }
}
