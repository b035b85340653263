//! A container's security context as a CRI runtime applies it (PW-42 … PW-44, PW-46): its
//! capabilities (containerd's default set, `add`/`drop`, all of them when `privileged`),
//! `no_new_privs` (`allowPrivilegeEscalation: false`), a read-only root
//! (`readOnlyRootFilesystem`) and the `RuntimeDefault` seccomp filter (PW-46). [`Security::resolve`] computes them for the
//! [`LaunchSpec`](crate::spec::LaunchSpec); the sandbox applies them.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::error::StartError;

/// The capabilities a container that is not privileged starts with: containerd's default set
/// (runc's and Docker's too).
pub const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// What a container's `securityContext` asks of its process and root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Security {
    /// `privileged: true`: every capability, the host's devices, `/proc` and `/sys` writable.
    pub privileged: bool,
    /// The capabilities (`CAP_…` names, sorted) a process running as root keeps; `None` when
    /// privileged (all the kernel has). A process of another user has none once it runs.
    pub capabilities: Option<Vec<String>>,
    /// `no_new_privs` is set before the program runs (PW-43).
    pub no_new_privs: bool,
    /// The container's root is read-only; its volumes are as mounted (PW-42).
    pub read_only_root: bool,
    /// `seccompProfile: RuntimeDefault` (container, else pod): the runtime's default filter
    /// (PW-46).
    pub seccomp_runtime_default: bool,
}

impl Security {
    /// The security of `container` of `pod` (the container's own `securityContext`; only
    /// `seccompProfile` falls back to the pod's):
    /// 1. `privileged: true`: every capability, `add`/`drop` ignored (containerd's
    ///    `WithPrivileged`);
    /// 2. otherwise the default set; an `add` of `ALL` (any case) makes it every capability
    ///    the kernel knows, a `drop` of `ALL` empties it; then each other `add` (as
    ///    `CAP_<NAME>`, upper case) is added and each other `drop` removed;
    /// 3. `allowPrivilegeEscalation: false` sets `no_new_privs`; unset or true does not (the
    ///    kubelet's `AddNoNewPrivileges`);
    /// 4. `readOnlyRootFilesystem: true` makes the root read-only;
    /// 5. `seccompProfile` (the container's, else the pod's): `RuntimeDefault` installs the
    ///    runtime's default filter, unless privileged (containerd runs privileged containers
    ///    unconfined); unset or `Unconfined` installs none (the kubelet's default without
    ///    `SeccompDefault`); `Localhost` is refused.
    ///
    /// # Errors
    /// [`StartError::Config`] naming a capability the kernel does not know, as runc refuses
    /// it, or a `Localhost` seccomp profile.
    pub fn resolve(pod: &Pod, container: &Container) -> Result<Self, StartError> {
        let sc = container.security_context.as_ref();
        // (5)
        let profile = sc.and_then(|s| s.seccomp_profile.as_ref()).or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|s| s.seccomp_profile.as_ref())
        });
        let seccomp_runtime_default = match profile.map(|p| p.type_.as_str()) {
            None | Some("Unconfined") => false,
            Some("RuntimeDefault") => true,
            Some(other) => {
                return Err(StartError::Config {
                    message: format!(
                        "seccomp profile type {other:?} is not supported by nodelet's process \
                         runtime: only RuntimeDefault and Unconfined are"
                    ),
                });
            }
        };
        let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
        // (1), (2)
        let capabilities = if privileged {
            None
        } else {
            let mut set: Vec<String> = DEFAULT_CAPABILITIES.iter().map(|&c| c.into()).collect();
            let caps = sc.and_then(|s| s.capabilities.as_ref());
            let add = caps.and_then(|c| c.add.as_deref()).unwrap_or_default();
            let drop = caps.and_then(|c| c.drop.as_deref()).unwrap_or_default();
            let is_all = |c: &String| c.eq_ignore_ascii_case("ALL");
            if add.iter().any(is_all) {
                set = known_capabilities();
            }
            if drop.iter().any(is_all) {
                set.clear();
            }
            for name in add.iter().filter(|c| !is_all(c)) {
                let name = format!("CAP_{}", name.to_ascii_uppercase());
                if name.parse::<caps::Capability>().is_err() {
                    return Err(StartError::Config {
                        message: format!("unknown capability {name:?}"),
                    });
                }
                if !set.contains(&name) {
                    set.push(name);
                }
            }
            for name in drop.iter().filter(|c| !is_all(c)) {
                let name = format!("CAP_{}", name.to_ascii_uppercase());
                set.retain(|c| *c != name);
            }
            set.sort();
            Some(set)
        };
        Ok(Self {
            privileged,
            capabilities,
            // (3)
            no_new_privs: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
            // (4)
            read_only_root: sc
                .and_then(|s| s.read_only_root_filesystem)
                .unwrap_or(false),
            seccomp_runtime_default: seccomp_runtime_default && !privileged,
        })
    }
}

/// Every capability this crate's `caps` knows, as `CAP_…` names.
fn known_capabilities() -> Vec<String> {
    caps::all().iter().map(ToString::to_string).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn container(sc: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "securityContext": sc})).unwrap()
    }

    fn caps_of(sc: serde_json::Value) -> Vec<String> {
        Security::resolve(&Pod::default(), &container(sc))
            .unwrap()
            .capabilities
            .unwrap()
    }

    #[test]
    fn without_a_security_context_the_default_set_and_nothing_else() {
        let s = Security::resolve(&Pod::default(), &container(json!(null))).unwrap();
        let mut default: Vec<String> = DEFAULT_CAPABILITIES.iter().map(|&c| c.into()).collect();
        default.sort();
        assert_eq!(s.capabilities, Some(default));
        assert!(!s.privileged && !s.no_new_privs && !s.read_only_root);
    }

    #[test]
    fn add_and_drop_change_the_default_set_and_all_replaces_it() {
        let set =
            caps_of(json!({"capabilities": {"add": ["net_admin"], "drop": ["CHOWN", "KILL"]}}));
        assert!(set.contains(&"CAP_NET_ADMIN".to_owned()));
        assert!(!set.contains(&"CAP_CHOWN".to_owned()));
        assert!(!set.contains(&"CAP_KILL".to_owned()));
        assert_eq!(
            caps_of(json!({"capabilities": {"drop": ["ALL"]}})),
            Vec::<String>::new()
        );
        assert_eq!(
            caps_of(json!({"capabilities": {"drop": ["all"], "add": ["NET_BIND_SERVICE"]}})),
            ["CAP_NET_BIND_SERVICE"]
        );
        let all = caps_of(json!({"capabilities": {"add": ["ALL"], "drop": ["SYS_ADMIN"]}}));
        assert!(all.contains(&"CAP_SYS_MODULE".to_owned()));
        assert!(!all.contains(&"CAP_SYS_ADMIN".to_owned()));
    }

    #[test]
    fn privileged_has_every_capability_and_an_unknown_one_is_refused() {
        let s = Security::resolve(
            &Pod::default(),
            &container(json!({"privileged": true, "capabilities": {"drop": ["ALL"]}})),
        )
        .unwrap();
        assert!(s.privileged);
        assert_eq!(s.capabilities, None);
        let err = Security::resolve(
            &Pod::default(),
            &container(json!({"capabilities": {"add": ["FLY"]}})),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown capability \"CAP_FLY\""), "{err}");
    }

    #[test]
    fn runtime_default_seccomp_comes_from_the_container_or_the_pod_and_localhost_is_refused() {
        let pod = |profile: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"spec": {"containers": [],
                "securityContext": {"seccompProfile": profile}}}))
            .unwrap()
        };
        let resolve = |p: &Pod, sc: serde_json::Value| Security::resolve(p, &container(sc));
        let default = pod(json!({"type": "RuntimeDefault"}));
        assert!(
            resolve(&default, json!(null))
                .unwrap()
                .seccomp_runtime_default
        );
        let unconfined = json!({"seccompProfile": {"type": "Unconfined"}});
        assert!(
            !resolve(&default, unconfined)
                .unwrap()
                .seccomp_runtime_default
        );
        // containerd runs a privileged container unconfined.
        assert!(
            !resolve(&default, json!({"privileged": true}))
                .unwrap()
                .seccomp_runtime_default
        );
        assert!(
            !resolve(&Pod::default(), json!(null))
                .unwrap()
                .seccomp_runtime_default
        );
        let local = json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}});
        let err = resolve(&Pod::default(), local).unwrap_err().to_string();
        assert!(err.contains("seccomp profile type \"Localhost\""), "{err}");
    }

    #[test]
    fn no_new_privs_only_when_privilege_escalation_is_refused() {
        let nnp = |v: serde_json::Value| {
            Security::resolve(
                &Pod::default(),
                &container(json!({"allowPrivilegeEscalation": v})),
            )
            .unwrap()
            .no_new_privs
        };
        assert!(nnp(json!(false)));
        assert!(!nnp(json!(true)));
        assert!(!nnp(json!(null)));
        let ro = Security::resolve(
            &Pod::default(),
            &container(json!({"readOnlyRootFilesystem": true})),
        )
        .unwrap();
        assert!(ro.read_only_root);
    }
}
