//! Agent-level integration tests: the real `nodelet` agent, in-process, against
//! `nodelet-apiserver` over real HTTP (authentication and the Node authorizer on; the agent
//! runs as `system:node:<node>`).

// The shared conformance scenario suite (nodelet-e2e, spec E2E-1 … E2E-28 as they apply to
// files and env files), one test per scenario.
mod suite;
// /healthz, /readyz, /metrics, /pods.
mod endpoints;
// The agent makes only requests a node identity is allowed (no 403s), and registers its Node
// and Lease.
mod node_identity;
// Pod events: core/v1 Events aggregated by message like the kubelet's correlator (PL-9, VM-10),
// created and patched under the node identity.
mod events;
// `--manifests` mode: a file edit reaches the volume (needs the `embedded` feature).
#[cfg(feature = "embedded")]
mod manifests;
// A pod whose sync failed is retried as soon as an object it references changes.
mod retry;
// Restarts: pods deleted while the agent was down are cleaned up.
mod restart;
// The binary: bad configuration exits with code 64.
mod cli;
mod disk_full; // A full root directory (tmpfs, needs root): events, `/pods`, one WARN.
// Two agents on one root directory: the second exits naming the directory and the pid (the
// binary runs with `--manifests`: needs the `embedded` feature).
#[cfg(feature = "embedded")]
mod lock;
// The binary runs itself again with glibc's per-thread caches off (glibc's allocator only).
#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(
        feature = "dhat-heap",
        not(any(feature = "jemalloc", feature = "mimalloc"))
    )
))]
mod thread_caches;
// The agent over HTTP/2 (TLS): its watches share a few connections; /metrics shows them.
mod transport;
// A server that fails as kube-apiserver does: restart with the watch history forgotten,
// GOAWAY, 429 with Retry-After, no watch-lists.
mod api_failures;
// env[].valueFrom.fileKeyRef: an env file in the pod's emptyDir.
mod env_files;
// One node allocatable: env vars, downwardAPI volumes and the Node status agree.
mod allocatable;
// The podCertificate projected source: gate from a --config file, the pod starts only once the
// test signer issued its certificate; gate off: unsupported (PL-21, PL-22). With the
// `pod-certificates` feature; without it the mount fails naming the volume.
mod pod_certificates;
// `nodelet reset`: unmount and remove what the agent left in its root directory, and with
// `--delete-node` its Lease and Node (a node identity may delete only the Lease).
mod reset;
// The agent under systemd: READY=1 after the first pod sync, STOPPING=1, journal logs, and
// the unit in contrib/systemd.
mod service;
// The clusterTrustBundle projected source: gates from a --config file, a bundle projected
// and its changes reaching the file (PL-17, PL-20).
mod trust_bundles;
// The process runtime (`--runtime process`, needs root): containers as local processes, their
// logs, status, events, restarts, deletion, users and mounts, nothing left on the host, and
// the binary killed hard and started again.
mod process_runtime;
// Configuration that follows a change under the process runtime (needs root, FC-1 … FC-8):
// subPath binds replaced in place, reload signals and URLs per burst, bad annotations.
mod follow_change;
// Environments that follow a change (FC-10 … FC-14): a restart of that container alone under
// the process runtime (needs root), env files replaced under the env-file runtime.
mod follow_env;
// The pod condition `nodelet.io/ConfigCurrent` of a pod that follows changes (needs root,
// FC-20): present and True after start and updates, False naming the object a subPath could
// not follow, absent without opt-in.
mod follow_condition;
// Lifecycle hooks (postStart, preStop: exec, httpGet, sleep) and termination messages under
// the process runtime (needs root), PW-20 … PW-25.
mod lifecycle;
// Sidecar containers (restartable init containers) under the process runtime (needs root):
// start order, restarts under `Never`, stop order, phase (PW-60 … PW-65).
mod sidecars;
// The service environment in running containers and an in-cluster kube-rs client (PW-15 … PW-17).
mod service_env;
// emptyDir (a sized tmpfs for medium Memory), hostPath types, readOnlyRootFilesystem,
// no_new_privs, pods for another OS and pods naming a RuntimeClass (process runtime, needs
// root).
mod volumes_security;
// Probes under the process runtime (needs root): exec, httpGet, tcpSocket and grpc against
// loopback servers; readiness in the status (readiness gates too), liveness restarts.
mod probes;
// The kubelet API (process runtime, needs root): the Node names it, `pods/log` and `kubectl
// logs` reach it through the API server (tail, timestamps, follow, previous), and only the
// cluster CA's authorized users get in.
mod kubelet_api;
// Sysctls (needs root): IPC ones in the pod's own IPC namespace, which its containers share;
// the others reject the pod as the kubelet's admission does.
mod sysctls;
// Declared ports on the shared host network: the kubelet's host port admission (needs root).
mod host_ports;
// The image table's `files` (needs root): an image's own file at its absolute path.
mod image_files;
// Starting an API server and an agent for one test.
mod support;
