//! A container's security context as a CRI runtime applies it (PW-42 … PW-44): its
//! capabilities (containerd's default set, `add`/`drop`, all of them when `privileged`),
//! `no_new_privs` (`allowPrivilegeEscalation: false`) and a read-only root
//! (`readOnlyRootFilesystem`). [`Security::resolve`] computes them for the
//! [`LaunchSpec`](crate::spec::LaunchSpec); the sandbox applies them.

use k8s_openapi::api::core::v1::Container;

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
}

impl Security {
    /// The security of `container` (its own `securityContext`; none of these fields is
    /// pod-level):
    /// 1. `privileged: true`: every capability, `add`/`drop` ignored (containerd's
    ///    `WithPrivileged`);
    /// 2. otherwise the default set; an `add` of `ALL` (any case) makes it every capability
    ///    the kernel knows, a `drop` of `ALL` empties it; then each other `add` (as
    ///    `CAP_<NAME>`, upper case) is added and each other `drop` removed;
    /// 3. `allowPrivilegeEscalation: false` sets `no_new_privs`; unset or true does not (the
    ///    kubelet's `AddNoNewPrivileges`);
    /// 4. `readOnlyRootFilesystem: true` makes the root read-only.
    ///
    /// # Errors
    /// [`StartError::Config`] naming a capability the kernel does not know, as runc refuses
    /// it.
    pub fn resolve(container: &Container) -> Result<Self, StartError> {
        let sc = container.security_context.as_ref();
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
        Security::resolve(&container(sc))
            .unwrap()
            .capabilities
            .unwrap()
    }

    #[test]
    fn without_a_security_context_the_default_set_and_nothing_else() {
        let s = Security::resolve(&container(json!(null))).unwrap();
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
        let s = Security::resolve(&container(
            json!({"privileged": true, "capabilities": {"drop": ["ALL"]}}),
        ))
        .unwrap();
        assert!(s.privileged);
        assert_eq!(s.capabilities, None);
        let err = Security::resolve(&container(json!({"capabilities": {"add": ["FLY"]}})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown capability \"CAP_FLY\""), "{err}");
    }

    #[test]
    fn no_new_privs_only_when_privilege_escalation_is_refused() {
        let nnp = |v: serde_json::Value| {
            Security::resolve(&container(json!({"allowPrivilegeEscalation": v})))
                .unwrap()
                .no_new_privs
        };
        assert!(nnp(json!(false)));
        assert!(!nnp(json!(true)));
        assert!(!nnp(json!(null)));
        let ro = Security::resolve(&container(json!({"readOnlyRootFilesystem": true}))).unwrap();
        assert!(ro.read_only_root);
    }
}
