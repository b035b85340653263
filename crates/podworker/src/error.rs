//! The crate's errors: [`EnvError`] (texts of spec PW-8 … PW-10, PW-15), [`SyncError`] (a failed
//! pod sync, by step) and the seam errors [`VolumeError`] and [`RuntimeError`].

use std::path::PathBuf;

/// Why a container's environment could not be built (spec PW-8 … PW-10).
///
/// `Display` is the kubelet's text; the pod worker publishes it as the `Failed` event
/// `Error: <text>` and the container waits with reason `CreateContainerConfigError` (PW-12).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// PW-8: `spec.enableServiceLinks` unset (the API server defaults it to `true`).
    #[error("nil pod.spec.enableServiceLinks encountered, cannot construct envvars")]
    NilEnableServiceLinks,

    /// PW-15: the node's service watch has not completed its first list (or was shut down);
    /// `detail` is why, for logs (not part of the kubelet's text).
    #[error("services have not yet been read at least once, cannot construct envvars")]
    ServicesNotSynced {
        /// The lister's error.
        detail: String,
    },

    /// Reading a ConfigMap failed (not found and not optional, not registered, API error).
    /// `Display` is the manager's text, e.g. `configmap "cm" not found`.
    #[error("{error}")]
    GetConfigMap {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// The manager's error.
        error: Box<nodelet_object_manager::Error>,
    },

    /// Reading a Secret failed; `Display` is the manager's text, e.g. `secret "s" not found`.
    #[error("{error}")]
    GetSecret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The manager's error.
        error: Box<nodelet_object_manager::Error>,
    },

    /// PW-10: a non-optional `configMapKeyRef` names a key absent from `data`.
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKeyMissing {
        /// The key.
        key: String,
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
    },

    /// PW-10: a non-optional `secretKeyRef` names a key absent from `data`.
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKeyMissing {
        /// The key.
        key: String,
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
    },

    /// PW-10: a `fileKeyRef` names a volume that is not a set-up emptyDir of the pod (not an
    /// emptyDir, mounted by no container, or the pod's directory is unknown).
    #[error("cannot find the volume {volume:?} referenced by FileKeyRef")]
    FileKeyVolumeMissing {
        /// The `volumeName`.
        volume: String,
    },

    /// PW-10: a `fileKeyRef`'s env file could not be opened or does not follow the format —
    /// an error even when the reference is optional, as in the kubelet. `Display` is the
    /// kubelet's text; the reason is in `detail`.
    #[error("couldn't parse env file")]
    EnvFileUnreadable {
        /// The file, inside the volume.
        path: PathBuf,
        /// Why (I/O error or the malformed line).
        detail: String,
    },

    /// PW-10: a non-optional `fileKeyRef` names a key the file does not set, or sets empty.
    #[error("environment variable key {key:?} not found in file {path:?}")]
    FileKeyMissing {
        /// The key.
        key: String,
        /// The file, inside the volume.
        path: PathBuf,
    },

    /// PW-10: a `fieldRef` or `resourceFieldRef` could not be resolved (unsupported field path
    /// or resource, unknown container, invalid quantity). `Display` is the kubelet's text, e.g.
    /// `unsupported container resource : limits.gpu`.
    #[error(transparent)]
    DownwardApi(#[from] nodelet_core::downward::DownwardError),
}

/// An error of the volume seam ([`Volumes`](crate::Volumes)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// The wait was interrupted (cancelled or timed out; spec PW-4: no summary event).
    #[error("the wait for volumes was interrupted")]
    Interrupted,
    /// Volumes failed to mount or unmount: the volume manager's error, unchanged (`Display`
    /// is its text, e.g. `unmounted volumes=[cfg], …: timed out waiting for the condition`).
    #[error(transparent)]
    Failed(nodelet_volume_manager::Error),
}

/// An error of the runtime seam ([`RuntimeHook`](crate::RuntimeHook)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Writing a container's environment failed.
    #[error("writing the environment of container {container:?} to {path}")]
    WriteEnv {
        /// The container.
        container: String,
        /// The directory written to.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },
    /// A filesystem step on a runtime directory failed.
    #[error("{step} {path}")]
    Io {
        /// What was being done, e.g. `creating directory`.
        step: &'static str,
        /// The path.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },
    /// The container did not start: it waits (`CreateContainerConfigError`,
    /// `ErrImageNeverPull`) or ended (`StartError`), as the runtime's typed error says
    /// ([`StartError::reason`](nodelet_runtime::StartError::reason)); `Display` is its text.
    #[error("{error}")]
    NotStarted {
        /// The container.
        container: String,
        /// Why, as the runtime tells.
        error: nodelet_runtime::StartError,
    },
    /// The process runtime could not stop or remove containers.
    #[error(transparent)]
    Process(#[from] nodelet_runtime::Error),
    /// A command could not be run in a container (exec hooks, probes).
    #[error(transparent)]
    Exec(#[from] nodelet_runtime::handlers::ExecError),
    /// The runtime cannot do this (the env-file runtime runs no processes).
    #[error("the runtime does not support {what}")]
    Unsupported {
        /// What was asked.
        what: &'static str,
    },
    /// PW-41, PW-58: the pod's sandbox cannot be made (a RuntimeClass the runtime has no
    /// handler for, its IPC namespace or sysctls): the `FailedCreatePodSandBox` event's text
    /// follows `Failed to create pod sandbox: `.
    #[error("{message}")]
    Sandbox {
        /// Why.
        message: String,
    },
    /// A runtime task failed (panicked or was cancelled).
    #[error("{what} task failed")]
    Task {
        /// Which task.
        what: &'static str,
        /// What failed underneath.
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Why a pod sync failed; the pod worker logs it once, in its span, and retries (PW-3).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The sync was cancelled by a termination request (PW-2).
    #[error("the sync was interrupted")]
    Interrupted,

    /// PW-4: creating `pods/<uid>`, `volumes` or `plugins` failed.
    #[error("making pod data directories {path}")]
    MakePodDirectories {
        /// The directory.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },

    /// PW-4: volumes did not mount.
    #[error("Unable to attach or mount volumes: {error}")]
    Mount {
        /// The volume manager's error.
        error: VolumeError,
    },

    /// PW-12: one or more containers could not be configured.
    #[error("{}", containers_message(.failures))]
    CreateContainerConfig {
        /// `(container, error text)` of each failure (an [`EnvError`], a mount error or the
        /// runtime's configuration error).
        failures: Vec<(String, String)>,
    },

    /// One or more containers did not start (see [`RuntimeError::NotStarted`]).
    #[error("{}", failures.iter().map(|(c, m)| format!("container {c:?}: {m}")).collect::<Vec<_>>().join("; "))]
    StartContainers {
        /// `(container, message)` of each failure.
        failures: Vec<(String, String)>,
    },

    /// The runtime hook failed.
    #[error("runtime hook failed")]
    Runtime {
        /// What failed.
        #[source]
        source: RuntimeError,
    },

    /// PW-6: volumes did not unmount.
    #[error("waiting for volumes to unmount: {error}")]
    Unmount {
        /// The volume manager's error.
        error: VolumeError,
    },

    /// Publishing the pod's status failed.
    #[error("updating pod status: {message}")]
    Status {
        /// What failed.
        message: String,
    },
}

fn containers_message(failures: &[(String, String)]) -> String {
    let parts: Vec<String> = failures
        .iter()
        .map(|(name, err)| {
            format!(
                "failed to \"StartContainer\" for \"{name}\" with CreateContainerConfigError: \"{err}\""
            )
        })
        .collect();
    parts.join(", ")
}

impl SyncError {
    /// Whether this is a cancellation rather than a failure (no event, no error log).
    pub fn is_interrupted(&self) -> bool {
        matches!(
            self,
            SyncError::Interrupted
                | SyncError::Mount {
                    error: VolumeError::Interrupted
                }
                | SyncError::Unmount {
                    error: VolumeError::Interrupted
                }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pw10_missing_key_texts_match_the_kubelet() {
        let e = EnvError::ConfigMapKeyMissing {
            key: "k".into(),
            namespace: "ns".into(),
            name: "cm".into(),
        };
        assert_eq!(e.to_string(), "couldn't find key k in ConfigMap ns/cm");
        let e = EnvError::SecretKeyMissing {
            key: "k".into(),
            namespace: "ns".into(),
            name: "s".into(),
        };
        assert_eq!(e.to_string(), "couldn't find key k in Secret ns/s");
    }

    #[test]
    fn pw4_mount_failure_reads_like_the_kubelet_event() {
        let e = SyncError::Mount {
            error: VolumeError::Failed(nodelet_volume_manager::Error::VolumesNotMounted {
                unmounted: vec!["cfg".into()],
                unattached: Vec::new(),
                failed_to_process: Vec::new(),
                cause: nodelet_volume_manager::WaitCause::Timeout,
            }),
        };
        assert_eq!(
            e.to_string(),
            "Unable to attach or mount volumes: unmounted volumes=[cfg], unattached volumes=[], \
             failed to process volumes=[]: timed out waiting for the condition"
        );
        assert!(!e.is_interrupted());
        assert!(
            SyncError::Mount {
                error: VolumeError::Interrupted
            }
            .is_interrupted()
        );
    }
}

/// `error` followed by each of its sources, joined with `": "` — the one-line form for logs and
/// the agent's `/pods` document (a `Display` shows its own step only; the chain is walked by the caller).
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod causes_tests {
    use super::*;

    #[test]
    fn with_causes_appends_every_source_in_order() {
        let io = std::io::Error::new(std::io::ErrorKind::DirectoryNotEmpty, "directory not empty");
        let error = SyncError::Runtime {
            source: RuntimeError::Io {
                step: "removing directory",
                path: PathBuf::from("/r/pods/u/containers"),
                source: io,
            },
        };
        assert_eq!(
            with_causes(&error),
            "runtime hook failed: removing directory /r/pods/u/containers: directory not empty"
        );
    }
}
