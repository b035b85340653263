//! Pod IPC namespaces (PW-58): the containers of a pod that does not ask for `hostIPC` share
//! an IPC namespace of their own, as a CRI runtime's sandbox gives them, and the pod's IPC
//! sysctls (`kernel.shm*`, `kernel.msg*`, `kernel.sem`, `fs.mqueue.*`) are set in it, not on
//! the host.
//!
//! No process holds the namespace: [`PodIpc::prepare`] makes it on a short-lived thread of the
//! agent (`unshare(CLONE_NEWIPC)` changes only the calling thread), writes the sysctls from
//! that thread (`/proc/sys` shows the writer's IPC namespace), and keeps the thread's
//! `/proc/thread-self/ns/ipc` open; the open file keeps the namespace alive after the thread
//! ends. A container's init process joins it (`setns`) through the agent's descriptor,
//! `/proc/<agent pid>/fd/<n>`, before it builds its root. The file is closed when the pod is
//! removed; a restarted agent makes new namespaces (its previous containers were killed).
//!
//! Only an agent running as root does this: joining a namespace the host's user namespace
//! owns takes `CAP_SYS_ADMIN` there. Without root, and for `hostIPC` pods, containers keep the
//! host's IPC namespace, and the admission refuses IPC sysctls (PW-56).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;

use nix::sched::{CloneFlags, unshare};
use nodelet_core::{AdmittedPod, PodUid};
use parking_lot::Mutex;

/// Why a pod's IPC namespace could not be made: the kubelet's `FailedCreatePodSandBox`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PodSandboxError {
    /// `unshare(CLONE_NEWIPC)` failed.
    #[error("creating the pod's IPC namespace: {0}")]
    Unshare(#[source] nix::Error),
    /// A sysctl could not be written in the new namespace.
    #[error("setting sysctl {name}={value:?} in the pod's IPC namespace: {source}")]
    Sysctl {
        /// The sysctl, dotted.
        name: String,
        /// The value asked for.
        value: String,
        /// What failed underneath.
        #[source]
        source: io::Error,
    },
    /// The namespace file could not be opened.
    #[error("opening the pod's IPC namespace: {0}")]
    Open(#[source] io::Error),
    /// The thread that makes the namespace could not run.
    #[error("starting the thread that makes the pod's IPC namespace: {0}")]
    Thread(#[source] io::Error),
    /// That thread panicked.
    #[error("the thread that makes the pod's IPC namespace panicked")]
    ThreadPanicked,
}

/// The IPC namespaces of the pods, by UID.
#[derive(Debug, Default)]
pub(crate) struct PodIpc {
    /// Whether pods get namespaces of their own (the agent runs as root).
    enabled: bool,
    namespaces: Mutex<HashMap<PodUid, File>>,
}

impl PodIpc {
    /// Namespaces of their own for pods when `enabled`.
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            namespaces: Mutex::default(),
        }
    }

    /// Makes `pod`'s IPC namespace with its IPC sysctls, unless it exists, the pod shares the
    /// host's (`hostIPC`), or pods get none here. Idempotent.
    ///
    /// # Errors
    /// [`PodSandboxError`]: the pod's containers cannot start until it is made.
    pub(crate) fn prepare(&self, pod: &AdmittedPod) -> Result<(), PodSandboxError> {
        if !self.wanted(pod) || self.namespaces.lock().contains_key(pod.uid()) {
            return Ok(());
        }
        let sysctls = ipc_sysctls(pod);
        let file = std::thread::Builder::new()
            .name("pod-ipc".into())
            .spawn(move || make_namespace(&sysctls))
            .map_err(PodSandboxError::Thread)?
            .join()
            .map_err(|_| PodSandboxError::ThreadPanicked)??;
        self.namespaces
            .lock()
            .entry(pod.uid().clone())
            .or_insert(file);
        Ok(())
    }

    /// The path a container's init process joins `pod`'s namespace by
    /// (`/proc/<agent pid>/fd/<n>`); `None`: the host's.
    pub(crate) fn path(&self, pod: &AdmittedPod) -> Option<PathBuf> {
        let namespaces = self.namespaces.lock();
        let file = namespaces.get(pod.uid())?;
        Some(PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            file.as_raw_fd()
        )))
    }

    /// Whether pods get namespaces of their own at all.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `pod`'s containers get a namespace of their own.
    pub(crate) fn wanted(&self, pod: &AdmittedPod) -> bool {
        let host_ipc = pod.spec.as_ref().and_then(|s| s.host_ipc).unwrap_or(false);
        self.enabled && !host_ipc
    }

    /// Closes pod `uid`'s namespace (it ends with the last container in it).
    pub(crate) fn remove(&self, uid: &PodUid) {
        self.namespaces.lock().remove(uid);
    }
}

/// The pod's sysctls that an IPC namespace holds, dotted (the admission refused the others).
fn ipc_sysctls(pod: &AdmittedPod) -> Vec<(String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| s.security_context.iter())
        .flat_map(|sc| sc.sysctls.iter().flatten())
        .map(|s| (dotted(&s.name), s.value.clone()))
        .filter(|(name, _)| is_ipc_sysctl(name))
        .collect()
}

/// Whether dotted `name` lives in the IPC namespace (the kubelet's list).
pub(crate) fn is_ipc_sysctl(name: &str) -> bool {
    name == "kernel.sem"
        || ["kernel.shm", "kernel.msg", "fs.mqueue."]
            .iter()
            .any(|p| name.starts_with(p))
}

/// A sysctl name with `.` as its separator: a name whose first separator is `/` has its `/`
/// and `.` swapped (`kernel/shm_rmid_forced` → `kernel.shm_rmid_forced`), as `sysctl` reads it.
pub(crate) fn dotted(name: &str) -> String {
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

/// `/proc/sys/...` of dotted `name` (its `.` are the directories, a `/` in a component a `.`).
fn proc_path(name: &str) -> PathBuf {
    let path: String = name
        .chars()
        .map(|c| match c {
            '.' => '/',
            '/' => '.',
            c => c,
        })
        .collect();
    PathBuf::from("/proc/sys").join(path)
}

/// On the calling thread (which it changes for good: run it on a thread of its own): a new
/// IPC namespace, `sysctls` written in it, and its file.
fn make_namespace(sysctls: &[(String, String)]) -> Result<File, PodSandboxError> {
    unshare(CloneFlags::CLONE_NEWIPC).map_err(PodSandboxError::Unshare)?;
    for (name, value) in sysctls {
        fs::write(proc_path(name), value).map_err(|source| PodSandboxError::Sysctl {
            name: name.clone(),
            value: value.clone(),
            source,
        })?;
    }
    File::open("/proc/thread-self/ns/ipc").map_err(PodSandboxError::Open)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    fn pod(spec: serde_json::Value) -> AdmittedPod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([{"name": "c"}]);
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn slashes_and_dots_swap_when_the_first_separator_is_a_slash() {
        assert_eq!(dotted("kernel/shm_rmid_forced"), "kernel.shm_rmid_forced");
        assert_eq!(
            dotted("net/ipv4/conf/eno2.100/rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
        assert_eq!(dotted("kernel.shm_rmid_forced"), "kernel.shm_rmid_forced");
        assert_eq!(
            proc_path("net.ipv4.conf.eno2/100.rp_filter"),
            PathBuf::from("/proc/sys/net/ipv4/conf/eno2.100/rp_filter")
        );
        assert!(is_ipc_sysctl("kernel.shm_rmid_forced"));
        assert!(is_ipc_sysctl("fs.mqueue.msg_max"));
        assert!(is_ipc_sysctl("kernel.sem"));
        assert!(!is_ipc_sysctl("kernel.semx"));
        assert!(!is_ipc_sysctl("net.ipv4.ip_local_port_range"));
    }

    #[test]
    fn host_ipc_pods_and_agents_without_root_keep_the_hosts_namespace() {
        let private = pod(serde_json::json!({}));
        let host = pod(serde_json::json!({"hostIPC": true}));
        assert!(PodIpc::new(true).wanted(&private));
        assert!(!PodIpc::new(true).wanted(&host));
        assert!(!PodIpc::new(false).wanted(&private));
        let off = PodIpc::new(false);
        assert!(off.prepare(&private).is_ok());
        assert_eq!(off.path(&private), None);
    }

    // Needs root (CAP_SYS_ADMIN for unshare(CLONE_NEWIPC)); CI runs as root.
    #[test]
    fn a_pods_namespace_has_its_sysctls_and_the_hosts_keeps_its_own() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test needs root (uid 0) to make IPC namespaces; CI runs as root"
        );
        let host_value = fs::read_to_string("/proc/sys/kernel/shm_rmid_forced")
            .unwrap_or_else(|e| panic!("{e}"));
        let wanted = if host_value.trim() == "1" { "0" } else { "1" };
        let p = pod(serde_json::json!({"securityContext": {"sysctls": [
            {"name": "kernel/shm_rmid_forced", "value": wanted},
            {"name": "net.ipv4.tcp_syncookies", "value": "0"},
        ]}}));
        let ipc = PodIpc::new(true);
        ipc.prepare(&p).unwrap_or_else(|e| panic!("{e}"));
        let path = ipc.path(&p).unwrap_or_else(|| panic!("no namespace"));
        let own = fs::metadata("/proc/self/ns/ipc").unwrap_or_else(|e| panic!("{e}"));
        let pods = fs::metadata(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(own.ino(), pods.ino(), "a namespace of its own");
        // Read the value from inside: a thread that joins it.
        let seen = std::thread::spawn(move || {
            let file = File::open(&path).unwrap_or_else(|e| panic!("{e}"));
            nix::sched::setns(&file, CloneFlags::CLONE_NEWIPC).unwrap_or_else(|e| panic!("{e}"));
            fs::read_to_string("/proc/sys/kernel/shm_rmid_forced").unwrap_or_else(|e| panic!("{e}"))
        })
        .join()
        .unwrap_or_else(|_| panic!("the reader panicked"));
        assert_eq!(seen.trim(), wanted);
        assert_eq!(
            fs::read_to_string("/proc/sys/kernel/shm_rmid_forced")
                .unwrap_or_else(|e| panic!("{e}")),
            host_value,
            "the host's value is untouched"
        );
        let first = ipc.path(&p);
        ipc.prepare(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ipc.path(&p), first, "made once");
        ipc.remove(p.uid());
        assert_eq!(ipc.path(&p), None);
    }
}
