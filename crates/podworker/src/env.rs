//! Environment variables of a container (spec PW-8 … PW-11, PW-15 … PW-17): `envFrom`, `env`
//! with `configMapKeyRef` / `secretKeyRef` / `fieldRef` / `resourceFieldRef` / `fileKeyRef`,
//! `$(VAR)` expansion, and the service variables.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVarSource, FileKeySelector, Pod, Secret,
};
use nodelet_core::downward::{env_field_ref_value, resource_field_ref_value};
use nodelet_core::{AdmittedPod, NodeAllocatable, ObjectRef, PodDirs};
use nodelet_object_manager::{
    ConfigMapManager, SecretManager, ServiceInfo, ServiceLister, ServicePortInfo,
};

use crate::error::EnvError;
use crate::expand::expand;

/// How `envFrom` keys are checked as variable names (spec PW-9): three generations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EnvFromNameCheck {
    /// Current kubelets: every key is exported, nothing is checked (the default).
    #[default]
    None,
    /// v1.30+ with `RelaxedEnvironmentVariableValidation`: printable ASCII except `=`.
    Relaxed,
    /// ≤ v1.29: `[-._a-zA-Z][-._a-zA-Z0-9]*`, not `.`, `..` or starting with `..`.
    Legacy,
}

/// Options of environment resolution. Start from `EnvOptions::default()`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnvOptions {
    /// How `envFrom` keys are checked (default [`EnvFromNameCheck::None`]).
    pub name_check: EnvFromNameCheck,
    /// The node's allocatable: the value of a `resourceFieldRef` to a limit neither the
    /// container nor the pod sets. Default: zero (such a reference resolves to `0`).
    pub node_allocatable: NodeAllocatable,
    /// The pod's volumes, where a `fileKeyRef` finds the pod's emptyDir volumes (which names
    /// are emptyDir volumes, and their [`PodDirs::volume`] of `kubernetes.io/empty-dir`; the
    /// `pod` given to [`resolve_env`] is not read for them). Default `None`: every `fileKeyRef`
    /// fails with [`EnvError::FileKeyVolumeMissing`]. [`ConfigSyncer`](crate::ConfigSyncer)
    /// sets it for each pod.
    pub pod_volumes: Option<PodVolumes>,
    /// Whether `fileKeyRef` is followed: Kubernetes' `EnvFiles` gate (default on, as in
    /// v1.36). Off, a `fileKeyRef` is not read and its variable is set to the empty string, as
    /// a kubelet with the gate off does (its environment switch has no case for the field).
    pub env_files: bool,
    /// Where the `kubernetes` service's variables point. `None` (the default, the kubelet's):
    /// the cluster IP and ports of `default/kubernetes`. `Some`: this host and port instead
    /// (one port, named `https`), for processes that share a node's network from which the
    /// cluster IP is not routable; nodelet's agent can give the address it uses itself for
    /// the API server. A service of the pod's namespace named `kubernetes` still takes the
    /// master service's place (PW-15).
    pub kubernetes_service: Option<ServiceEndpoint>,
}

impl Default for EnvOptions {
    fn default() -> Self {
        Self {
            name_check: EnvFromNameCheck::default(),
            node_allocatable: NodeAllocatable::default(),
            pod_volumes: None,
            env_files: true,
            kubernetes_service: None,
        }
    }
}

/// A host and port the `kubernetes` service's variables point at
/// ([`EnvOptions::kubernetes_service`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEndpoint {
    /// An IP address or a host name.
    pub host: String,
    /// The port.
    pub port: u16,
}

/// One pod's volumes on the node: the node's [`PodDirs`] and the admitted pod (its
/// [`volumes`](AdmittedPod::volumes) say which are emptyDir volumes).
#[derive(Debug, Clone)]
pub struct PodVolumes {
    dirs: PodDirs,
    pod: AdmittedPod,
}

impl PodVolumes {
    /// The volumes of `pod` under the node's pod directories `dirs`.
    pub fn new(dirs: PodDirs, pod: &AdmittedPod) -> Self {
        Self {
            dirs,
            pod: pod.clone(),
        }
    }

    /// The host directory of the pod's emptyDir volume `name`; `None` when the pod has no
    /// emptyDir volume of that name.
    pub fn empty_dir(&self, name: &str) -> Option<PathBuf> {
        self.pod
            .volume(name)
            .and_then(|v| v.empty_dir())
            .map(|_| self.dirs.volume(self.pod.uid(), EMPTY_DIR_PLUGIN, name))
    }
}

/// The emptyDir plugin's name.
const EMPTY_DIR_PLUGIN: &str = "kubernetes.io/empty-dir";

/// Where environment resolution reads ConfigMaps, Secrets and Services: the node's shared
/// managers (spec PW-13) and its service watch (PW-15).
#[derive(Debug, Clone)]
pub struct EnvSources {
    /// The ConfigMap manager.
    pub configmaps: ConfigMapManager,
    /// The Secret manager.
    pub secrets: SecretManager,
    /// The node's service watch; `None`: no service variables at all (a kubelet without an
    /// API server).
    pub services: Option<ServiceLister>,
}

/// One resolved variable. `Debug` shows the name and the value's length only: values may come
/// from Secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct EnvValue {
    /// The variable name.
    pub name: String,
    /// The value's bytes (Secret values need not be UTF-8).
    pub value: Vec<u8>,
}

impl fmt::Debug for EnvValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<{} bytes>", self.name, self.value.len())
    }
}

/// A container's resolved environment plus warnings the caller publishes as events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerEnv {
    /// Variables sorted by name (upstream map order is unspecified, PW-11).
    pub vars: Vec<EnvValue>,
    /// `(reason, message)` of Warning events to record (legacy name checks, PW-9).
    pub warnings: Vec<(String, String)>,
    /// The ConfigMaps and Secrets read, in the order first read (what follows a change of
    /// the environment compares, FC-10, and what freshness shows, FC-8).
    pub sources: Vec<EnvSource>,
}

/// A ConfigMap or Secret an environment read: the version read and, for each key read, a
/// digest of its value. `Debug` shows the object, its version and the key names only.
#[derive(Clone, PartialEq, Eq)]
pub struct EnvSource {
    /// The object.
    pub object: ObjectRef,
    /// Its resourceVersion as read; `None` for an optional object that did not exist.
    pub resource_version: Option<String>,
    /// Each key read (`envFrom`: every key of its data) → a digest of its value, `None` for
    /// a key the object did not have.
    pub keys: BTreeMap<String, Option<u64>>,
}

impl fmt::Debug for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvSource")
            .field("object", &self.object)
            .field("resource_version", &self.resource_version)
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A digest of `value`, to tell a change without keeping the value.
pub(crate) fn digest(value: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hash as _, Hasher as _};
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

impl ContainerEnv {
    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.vars
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_slice())
    }
}

/// Event reason of skipped `envFrom` keys under the legacy and relaxed name checks (PW-9).
pub const INVALID_ENV_NAMES: &str = "InvalidEnvironmentVariableNames";

/// Resolves the environment of `container` (any of the pod's containers, init or regular) of
/// `pod` (spec PW-8 … PW-11).
///
/// Steps, mirrored by `// (n)` in the code:
/// 1. PW-8 preconditions; then the service variables, kept aside (PW-15, PW-16): from
///    [`EnvSources::services`], waiting for its first list; none without it.
/// 2. PW-9 `envFrom` in order: every `data` key of the ConfigMap / Secret, with the prefix,
///    into a name → value map; later sources overwrite earlier ones; a missing optional source
///    is skipped.
/// 3. PW-10 `env` in order: `value` with `$(VAR)` expansion against the map so far, then the
///    service variables (PW-17); `fieldRef`;
///    `resourceFieldRef`; `configMapKeyRef` / `secretKeyRef` (missing optional object or key →
///    the variable is not set at all); `fileKeyRef` (an env file in one of the pod's emptyDir
///    volumes; format in `env_file.rs`; see [`EnvOptions::pod_volumes`]); ignored, the
///    variable empty, with the `EnvFiles` gate off ([`EnvOptions::env_files`]).
/// 4. PW-11 output, sorted by name: the map, then every service variable it does not define.
///
/// Each ConfigMap / Secret is read once per call (memoised by name).
///
/// # Errors
/// The first [`EnvError`]; its `Display` is the kubelet's text.
///
/// # Cancel safety
/// Cancel-safe: it only reads.
pub async fn resolve_env(
    pod: &Pod,
    container: &Container,
    sources: &EnvSources,
    options: &EnvOptions,
) -> Result<ContainerEnv, EnvError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    // (1)
    let Some(enable_service_links) = spec.and_then(|s| s.enable_service_links) else {
        return Err(EnvError::NilEnableServiceLinks);
    };
    let service_vars = service_env(namespace, enable_service_links, sources, options).await?;
    let mut fetch = Fetcher {
        sources,
        namespace,
        configmaps: HashMap::new(),
        secrets: HashMap::new(),
        read: Vec::new(),
    };
    let mut vars: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut warnings = Vec::new();

    // (2)
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.as_deref().unwrap_or_default();
        if let Some(r) = &source.config_map_ref {
            let optional = r.optional.unwrap_or(false);
            let Some(cm) = fetch.config_map(&r.name, optional).await? else {
                continue;
            };
            let keys = cm.data.iter().flatten();
            fetch.read_keys(
                ObjectRef::config_map(namespace, &r.name),
                keys.map(|(k, v)| (k.as_str(), Some(v.as_bytes()))),
            );
            let pairs = cm
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()));
            let invalid = insert_checked(&mut vars, prefix, pairs, options.name_check);
            if !invalid.is_empty() {
                warnings.push(invalid_names_warning(
                    &invalid,
                    "configMap",
                    namespace,
                    &r.name,
                ));
            }
        }
        if let Some(r) = &source.secret_ref {
            let optional = r.optional.unwrap_or(false);
            let Some(secret) = fetch.secret(&r.name, optional).await? else {
                continue;
            };
            let keys = secret.data.iter().flatten();
            fetch.read_keys(
                ObjectRef::secret(namespace, &r.name),
                keys.map(|(k, v)| (k.as_str(), Some(v.0.as_slice()))),
            );
            let pairs = secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()));
            let invalid = insert_checked(&mut vars, prefix, pairs, options.name_check);
            if !invalid.is_empty() {
                warnings.push(invalid_names_warning(
                    &invalid, "secret", namespace, &r.name,
                ));
            }
        }
    }

    // (3)
    for env in container.env.iter().flatten() {
        let value = match (&env.value, &env.value_from) {
            (Some(v), _) if !v.is_empty() => expand(v.as_bytes(), |name| {
                vars.get(name).or_else(|| service_vars.get(name)).cloned()
            }),
            (_, Some(from)) => match value_from(pod, container, from, &mut fetch, options).await? {
                Some(v) => v,
                None => continue,
            },
            _ => Vec::new(),
        };
        vars.insert(env.name.clone(), value);
    }

    // (4)
    for (name, value) in service_vars {
        vars.entry(name).or_insert(value);
    }
    Ok(ContainerEnv {
        vars: vars
            .into_iter()
            .map(|(name, value)| EnvValue { name, value })
            .collect(),
        warnings,
        sources: fetch.read,
    })
}

/// PW-15, PW-16: the service variables of a container of a pod in `namespace`.
async fn service_env(
    namespace: &str,
    enable_service_links: bool,
    sources: &EnvSources,
    options: &EnvOptions,
) -> Result<BTreeMap<String, Vec<u8>>, EnvError> {
    let Some(lister) = &sources.services else {
        return Ok(BTreeMap::new());
    };
    let namespaces: &[&str] = if enable_service_links && namespace != MASTER_NAMESPACE {
        &[MASTER_NAMESPACE, namespace]
    } else {
        &[MASTER_NAMESPACE]
    };
    let listed = lister
        .services(namespaces)
        .await
        .map_err(|e| EnvError::ServicesNotSynced {
            detail: e.to_string(),
        })?;
    let master = options
        .kubernetes_service
        .as_ref()
        .map(|endpoint| Arc::new(master_at(endpoint)))
        .or_else(|| {
            listed
                .iter()
                .find(|s| s.namespace == MASTER_NAMESPACE && s.name == MASTER_SERVICE)
                .cloned()
        });
    let mut chosen: BTreeMap<&str, &ServiceInfo> = BTreeMap::new();
    if let Some(master) = &master {
        chosen.insert(MASTER_SERVICE, master);
    }
    if enable_service_links {
        for service in listed.iter().filter(|s| s.namespace == namespace) {
            // The master service keeps its place unless the pod's own namespace has a
            // `kubernetes` of its own.
            if namespace == MASTER_NAMESPACE && service.name == MASTER_SERVICE {
                continue;
            }
            chosen.insert(&service.name, service);
        }
    }
    let mut vars = BTreeMap::new();
    for service in chosen.values() {
        for (name, value) in service_variables(service) {
            vars.insert(name, value.into_bytes());
        }
    }
    Ok(vars)
}

/// The namespace of the master service.
const MASTER_NAMESPACE: &str = "default";
/// The master service's name.
const MASTER_SERVICE: &str = "kubernetes";

/// The master service pointed at `endpoint` ([`EnvOptions::kubernetes_service`]).
fn master_at(endpoint: &ServiceEndpoint) -> ServiceInfo {
    ServiceInfo {
        namespace: MASTER_NAMESPACE.to_owned(),
        name: MASTER_SERVICE.to_owned(),
        cluster_ip: endpoint.host.clone(),
        ports: vec![ServicePortInfo {
            name: "https".to_owned(),
            port: i32::from(endpoint.port),
            protocol: "TCP".to_owned(),
        }],
    }
}

/// PW-16: one service's variables, in the kubelet's order.
pub fn service_variables(service: &ServiceInfo) -> Vec<(String, String)> {
    let prefix = env_name(&service.name);
    let ip = &service.cluster_ip;
    let mut out = vec![(format!("{prefix}_SERVICE_HOST"), ip.clone())];
    let Some(first) = service.ports.first() else {
        return out;
    };
    out.push((format!("{prefix}_SERVICE_PORT"), first.port.to_string()));
    for port in service.ports.iter().filter(|p| !p.name.is_empty()) {
        out.push((
            format!("{prefix}_SERVICE_PORT_{}", env_name(&port.name)),
            port.port.to_string(),
        ));
    }
    let host_port = |port: i32| {
        if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        }
    };
    for (i, port) in service.ports.iter().enumerate() {
        let proto = port.protocol.to_ascii_lowercase();
        let url = format!("{proto}://{}", host_port(port.port));
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!(
            "{prefix}_PORT_{}_{}",
            port.port,
            port.protocol.to_ascii_uppercase()
        );
        out.push((port_prefix.clone(), url));
        out.push((format!("{port_prefix}_PROTO"), proto));
        out.push((format!("{port_prefix}_PORT"), port.port.to_string()));
        out.push((format!("{port_prefix}_ADDR"), ip.clone()));
    }
    out
}

/// A service or port name as a variable name: upper case, `-` as `_`.
fn env_name(name: &str) -> String {
    name.replace('-', "_").to_ascii_uppercase()
}

/// PW-10 `valueFrom`; `None` = leave the variable unset.
async fn value_from(
    pod: &Pod,
    container: &Container,
    from: &EnvVarSource,
    fetch: &mut Fetcher<'_>,
    options: &EnvOptions,
) -> Result<Option<Vec<u8>>, EnvError> {
    // The downward API is the volume manager's (one implementation, as in the kubelet).
    if let Some(f) = &from.field_ref {
        return Ok(Some(env_field_ref_value(pod, f)?.into_bytes()));
    }
    if let Some(r) = &from.resource_field_ref {
        return Ok(Some(
            resource_field_ref_value(pod, r, Some(container), &options.node_allocatable)?
                .into_bytes(),
        ));
    }
    if let Some(r) = &from.config_map_key_ref {
        let optional = r.optional.unwrap_or(false);
        let Some(cm) = fetch.config_map(&r.name, optional).await? else {
            return Ok(None);
        };
        let value = cm.data.as_ref().and_then(|d| d.get(&r.key));
        let object = ObjectRef::config_map(fetch.namespace, &r.name);
        fetch.read_keys(object, [(r.key.as_str(), value.map(|v| v.as_bytes()))]);
        return match value {
            Some(v) => Ok(Some(v.as_bytes().to_vec())),
            None if optional => Ok(None),
            None => Err(EnvError::ConfigMapKeyMissing {
                key: r.key.clone(),
                namespace: fetch.namespace.to_owned(),
                name: r.name.clone(),
            }),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        let optional = r.optional.unwrap_or(false);
        let Some(secret) = fetch.secret(&r.name, optional).await? else {
            return Ok(None);
        };
        let value = secret.data.as_ref().and_then(|d| d.get(&r.key));
        let object = ObjectRef::secret(fetch.namespace, &r.name);
        fetch.read_keys(object, [(r.key.as_str(), value.map(|v| v.0.as_slice()))]);
        return match value {
            Some(v) => Ok(Some(v.0.clone())),
            None if optional => Ok(None),
            None => Err(EnvError::SecretKeyMissing {
                key: r.key.clone(),
                namespace: fetch.namespace.to_owned(),
                name: r.name.clone(),
            }),
        };
    }
    if let Some(r) = &from.file_key_ref {
        if !options.env_files {
            return Ok(Some(Vec::new()));
        }
        return file_key_ref(r, options);
    }
    // An empty `valueFrom` (rejected by API validation): an empty value.
    Ok(Some(Vec::new()))
}

/// PW-10 `fileKeyRef`: the key's value in `<emptyDir host path>/<path>` (joined so that it
/// stays inside the volume); the emptyDir must be set up (mounted by a container). An unreadable or malformed file fails even when optional; a key
/// the file does not set, or sets empty, is skipped when optional (the kubelet's rules).
fn file_key_ref(r: &FileKeySelector, options: &EnvOptions) -> Result<Option<Vec<u8>>, EnvError> {
    // The kubelet looks the volume up among the pod's mounted volumes: an emptyDir no container
    // mounts is never set up, and is not found either.
    let volume = options
        .pod_volumes
        .as_ref()
        .and_then(|pod| pod.empty_dir(&r.volume_name))
        .filter(|v| v.is_dir());
    let volume = match volume {
        Some(volume) => volume,
        None => {
            return Err(EnvError::FileKeyVolumeMissing {
                volume: r.volume_name.clone(),
            });
        }
    };
    let unreadable = |path: &Path, detail: String| EnvError::EnvFileUnreadable {
        path: path.to_path_buf(),
        detail,
    };
    let path = crate::env_file::secure_join(&volume, Path::new(&r.path))
        .map_err(|e| unreadable(&volume.join(&r.path), e.to_string()))?;
    let content = std::fs::read(&path).map_err(|e| unreadable(&path, e.to_string()))?;
    let value =
        crate::env_file::lookup(&content, &r.key).map_err(|e| unreadable(&path, e.to_string()))?;
    match value {
        Some(v) if !v.is_empty() => Ok(Some(v)),
        _ if r.optional.unwrap_or(false) => Ok(None),
        _ => Err(EnvError::FileKeyMissing {
            key: r.key.clone(),
            path,
        }),
    }
}

/// Per-call memo of fetched objects; `None` = not found.
struct Fetcher<'a> {
    sources: &'a EnvSources,
    namespace: &'a str,
    configmaps: HashMap<String, Option<Arc<ConfigMap>>>,
    secrets: HashMap<String, Option<Arc<Secret>>>,
    /// What was read, for [`ContainerEnv::sources`].
    read: Vec<EnvSource>,
}

impl Fetcher<'_> {
    /// The entry of `object` in `read` (made when it has none, with the version fetched).
    fn source(&mut self, object: ObjectRef, version: Option<String>) -> &mut EnvSource {
        let at = match self.read.iter().position(|s| s.object == object) {
            Some(at) => at,
            None => {
                self.read.push(EnvSource {
                    object,
                    resource_version: version,
                    keys: BTreeMap::new(),
                });
                self.read.len() - 1
            }
        };
        &mut self.read[at]
    }

    /// Notes that `keys` of `object` (fetched before) were read, with their values.
    fn read_keys<'v>(
        &mut self,
        object: ObjectRef,
        keys: impl IntoIterator<Item = (&'v str, Option<&'v [u8]>)>,
    ) {
        let version = self.version(&object);
        let source = self.source(object, version);
        for (key, value) in keys {
            source.keys.insert(key.to_owned(), value.map(digest));
        }
    }

    /// The resourceVersion of `object` as fetched.
    fn version(&self, object: &ObjectRef) -> Option<String> {
        match object.kind {
            nodelet_core::ObjectKind::ConfigMap => self
                .configmaps
                .get(&object.name)?
                .as_ref()?
                .metadata
                .resource_version
                .clone(),
            nodelet_core::ObjectKind::Secret => self
                .secrets
                .get(&object.name)?
                .as_ref()?
                .metadata
                .resource_version
                .clone(),
        }
    }

    /// Notes that `object` was looked for and is missing (optional).
    fn read_missing(&mut self, object: ObjectRef) {
        self.source(object, None);
    }

    /// The ConfigMap, `None` when it is missing and `optional`.
    async fn config_map(
        &mut self,
        name: &str,
        optional: bool,
    ) -> Result<Option<Arc<ConfigMap>>, EnvError> {
        let found = match self.configmaps.get(name) {
            Some(found) => found.clone(),
            None => {
                let found = match self.sources.configmaps.get(self.namespace, name).await {
                    Ok(cm) => Some(cm),
                    Err(e) if e.is_not_found() && optional => None,
                    Err(error) => {
                        return Err(EnvError::GetConfigMap {
                            namespace: self.namespace.to_owned(),
                            name: name.to_owned(),
                            error: Box::new(error),
                        });
                    }
                };
                self.configmaps.insert(name.to_owned(), found.clone());
                if found.is_none() {
                    self.read_missing(ObjectRef::config_map(self.namespace, name));
                }
                found
            }
        };
        Ok(found)
    }

    /// The Secret, `None` when it is missing and `optional`.
    async fn secret(
        &mut self,
        name: &str,
        optional: bool,
    ) -> Result<Option<Arc<Secret>>, EnvError> {
        let found = match self.secrets.get(name) {
            Some(found) => found.clone(),
            None => {
                let found = match self.sources.secrets.get(self.namespace, name).await {
                    Ok(s) => Some(s),
                    Err(e) if e.is_not_found() && optional => None,
                    Err(error) => {
                        return Err(EnvError::GetSecret {
                            namespace: self.namespace.to_owned(),
                            name: name.to_owned(),
                            error: Box::new(error),
                        });
                    }
                };
                self.secrets.insert(name.to_owned(), found.clone());
                if found.is_none() {
                    self.read_missing(ObjectRef::secret(self.namespace, name));
                }
                found
            }
        };
        Ok(found)
    }
}

/// Inserts `prefix + key` for every pair that passes `check`; returns the rejected names,
/// sorted.
fn insert_checked(
    vars: &mut BTreeMap<String, Vec<u8>>,
    prefix: &str,
    pairs: impl Iterator<Item = (String, Vec<u8>)>,
    check: EnvFromNameCheck,
) -> Vec<String> {
    let mut invalid = Vec::new();
    for (key, value) in pairs {
        let name = format!("{prefix}{key}");
        if is_valid_name(&name, check) {
            vars.insert(name, value);
        } else {
            invalid.push(name);
        }
    }
    invalid.sort();
    invalid
}

fn is_valid_name(name: &str, check: EnvFromNameCheck) -> bool {
    match check {
        EnvFromNameCheck::None => true,
        EnvFromNameCheck::Relaxed => {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
        }
        EnvFromNameCheck::Legacy => {
            let mut bytes = name.bytes();
            let first_ok = bytes
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b"-._".contains(&b));
            first_ok
                && bytes.all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                && name != "."
                && name != ".."
                && !name.starts_with("..")
        }
    }
}

fn invalid_names_warning(
    invalid: &[String],
    kind: &str,
    namespace: &str,
    name: &str,
) -> (String, String) {
    (
        INVALID_ENV_NAMES.to_owned(),
        format!(
            "Keys [{}] from the EnvFrom {kind} {namespace}/{name} were skipped since they are considered invalid environment variable names.",
            invalid.join(", ")
        ),
    )
}
