//! The environment follows a change (nodelet's own, FC-10 … FC-14): when a ConfigMap or
//! Secret that a container's `env` or `envFrom` reads changes so that the container's resolved
//! environment changes, that container gets the new environment: under the process runtime
//! by a restart of that container alone, under the env-file runtime by its env files
//! replaced. Opt-in per container (`nodelet.io/follow-env`, or the node's
//! `followChange.env`); without it nothing changes for the container, as with the kubelet.
//!
//! 1. The agent hands over each change of an object with each pod that references it
//!    ([`EnvFollow::object_changed`]). For each app container and sidecar of the pod whose
//!    `env` or `envFrom` names the object, the running instance's view of it is no longer
//!    current (FC-15); one that asks to follow records the change in its burst (FC-11: the
//!    pod's quiet time `env-debounce`, 200 ms by default; a burst is delivered at the latest
//!    5 s after it opened).
//! 2. When the burst ends, the instance running then is checked: its environment is resolved
//!    again, exactly as a start resolves it, and compared with the one it was started with
//!    (each variable by a digest of its value; no value is kept). The same: nothing happens,
//!    and its view is current again. Not resolvable (a key removed, an object deleted, by the
//!    kubelet's rules for `optional`): it keeps running with the environment it has, and a
//!    Warning event [`reasons::FAILED_ENV_UPDATE`] gives the resolution's error, which names
//!    the object and the key, once per error (FC-13).
//! 3. Different: under the env-file runtime the container's env files are replaced
//!    ([`RuntimeHook::update_env`]) and a Normal event [`reasons::ENV_UPDATED`] names the
//!    objects and keys that changed. Under the process runtime a restart is queued and the
//!    pod synced ([`EnvFollow::syncs`]); SyncPod takes it ([`EnvFollow::take_restarts`]),
//!    has the runtime mark the instance ([`RuntimeHook::restart_for_new_env`]: its end shows
//!    [`CONFIG_CHANGED`](nodelet_core::runtime::CONFIG_CHANGED)) and asks its planner for a
//!    restart that is not a crash (PW-70): the instance is stopped as the kubelet stops one (a
//!    Normal `Killing` event naming the objects and keys, `preStop`, SIGTERM, the grace
//!    period) and started again at once, no back-off, with the environment resolved then
//!    (FC-12).
//! 4. A change seen while the container had no running instance to check (it was starting,
//!    being restarted, or in back-off) is checked again once its next instance started
//!    ([`EnvFollow::started`]), so a start that read an object just before it changed is
//!    caught. [`EnvFollow::recheck`] checks every following container again (the agent
//!    calls it every minute: it also keeps the object managers' watches of objects only
//!    environments read from going idle).
//!
//! Regular init containers (they ran to completion) and ephemeral containers (started once,
//! PW-57) never follow.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::Container;
use nodelet_core::runtime::{ContainerStatus, is_sidecar};
use nodelet_core::{AdmittedPod, EventType, ObjectKind, ObjectRef, PodUid};
use parking_lot::Mutex;
use tokio::sync::broadcast;

use super::options::{FollowDefaults, PodFollow, pod_follow};
use super::reload::Bursts;
use crate::env::{ContainerEnv, EnvSource, EnvSources, digest, resolve_env};
use crate::runtime::RuntimeHook;
use crate::seams::EventSink;
use crate::sync::SyncerConfig;

/// The reasons of the events this module records (nodelet's own).
pub mod reasons {
    /// A container's new environment could not be resolved: it keeps the one it has
    /// (Warning).
    pub const FAILED_ENV_UPDATE: &str = "FailedEnvUpdate";
    /// A container's env files were replaced with its new environment (Normal, env-file
    /// runtime).
    pub const ENV_UPDATED: &str = "EnvUpdated";
}

/// What an [`EnvFollow`] reads and drives.
#[derive(Clone)]
pub struct EnvFollowParts {
    /// The node's defaults (the annotations are read over them).
    pub defaults: FollowDefaults,
    /// Where environments read ConfigMaps, Secrets and Services (the syncer's).
    pub sources: EnvSources,
    /// The syncer's configuration: environments are resolved as a start resolves them.
    pub config: SyncerConfig,
    /// Whether the runtime gives pods a sandbox on the host's network (the process runtime):
    /// the environment then sees the node's addresses as the pod's.
    pub sandbox: bool,
    /// The runtime: its containers' states, restarts, env files.
    pub runtime: Arc<dyn RuntimeHook>,
    /// Pod events.
    pub events: Arc<dyn EventSink>,
}

/// A restart SyncPod is to make ([`EnvFollow::take_restarts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvRestart {
    /// The container.
    pub container: String,
    /// The instance to stop.
    pub container_id: String,
    /// The `Killing` event's message: the objects and keys that changed.
    pub message: String,
}

/// What one running container sees of one object through its environment (FC-15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvFreshness {
    /// The ConfigMap or Secret.
    pub object: ObjectRef,
    /// The resourceVersion its environment comes from (`None`: an optional object that did
    /// not exist).
    pub resource_version: Option<String>,
    /// No change of the object was seen since, or the change left its environment as it is.
    pub current: bool,
}

/// Follows the environments of a runtime's containers. Cloning shares it.
#[derive(Clone)]
pub struct EnvFollow {
    inner: Arc<Inner>,
}

struct Inner {
    parts: EnvFollowParts,
    state: Mutex<State>,
    bursts: Bursts<ContainerKey>,
    syncs: broadcast::Sender<PodUid>,
}

type ContainerKey = (PodUid, String);

#[derive(Default)]
struct State {
    /// What each running instance was started with.
    seen: HashMap<ContainerKey, Seen>,
    /// Containers to check once their next instance started (step 4).
    dirty: HashSet<ContainerKey>,
    /// Restarts queued for SyncPod.
    pending: HashMap<ContainerKey, EnvRestart>,
    /// The last error reported per container (each reported once).
    warned: HashMap<ContainerKey, String>,
}

/// One instance's environment, as digests.
struct Seen {
    container_id: String,
    vars: BTreeMap<String, u64>,
    sources: Vec<EnvSource>,
    /// Objects changed since, not checked yet (or not followed).
    stale: BTreeSet<(u8, String, String)>,
}

impl std::fmt::Debug for EnvFollow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvFollow")
            .field("defaults", &self.inner.parts.defaults)
            .finish_non_exhaustive()
    }
}

impl EnvFollow {
    /// Follows environments with `parts`.
    pub fn new(parts: EnvFollowParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                parts,
                state: Mutex::default(),
                bursts: Bursts::new(),
                syncs: broadcast::channel(256).0,
            }),
        }
    }

    /// What `pod` asks for (its annotations over the node's defaults).
    pub fn settings(&self, pod: &AdmittedPod) -> PodFollow {
        pod_follow(pod, &self.inner.parts.defaults).0
    }

    /// The pods with a restart queued (step 3): the agent syncs each.
    pub fn syncs(&self) -> broadcast::Receiver<PodUid> {
        self.inner.syncs.subscribe()
    }

    /// Instance `container_id` of `container` of `pod` started with `env` (SyncPod, after
    /// the runtime took it); a change seen meanwhile is checked now (step 4).
    pub fn started(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        container_id: &str,
        env: &ContainerEnv,
    ) {
        if !follows_kind(pod, &container.name) {
            return;
        }
        let key = (pod.uid().clone(), container.name.clone());
        let recheck = {
            let mut state = self.inner.state.lock();
            state.seen.insert(
                key.clone(),
                Seen {
                    container_id: container_id.to_owned(),
                    vars: digests(env),
                    sources: env.sources.clone(),
                    stale: BTreeSet::new(),
                },
            );
            state.warned.remove(&key);
            state.pending.remove(&key);
            state.dirty.remove(&key)
        };
        if recheck {
            self.schedule(pod, &container.name);
        }
    }

    /// `object` changed, and `pod` references it (step 1).
    pub fn object_changed(&self, pod: &AdmittedPod, object: &ObjectRef) {
        let settings = self.settings(pod);
        let readers: Vec<&Container> = followed(pod)
            .into_iter()
            .filter(|c| reads(c, object))
            .collect();
        if readers.is_empty() {
            return;
        }
        {
            let mut state = self.inner.state.lock();
            for c in &readers {
                let key = (pod.uid().clone(), c.name.clone());
                if let Some(seen) = state.seen.get_mut(&key) {
                    seen.stale.insert(object_key(object));
                }
            }
        }
        for c in readers {
            if settings.container(&c.name).is_some_and(|f| f.env) {
                self.schedule(pod, &c.name);
            }
        }
    }

    /// Checks every following container of `pod` again (step 4).
    pub fn recheck(&self, pod: &AdmittedPod) {
        let settings = self.settings(pod);
        let names: Vec<String> = {
            let state = self.inner.state.lock();
            followed(pod)
                .into_iter()
                .filter(|c| settings.container(&c.name).is_some_and(|f| f.env))
                .filter(|c| {
                    let key = (pod.uid().clone(), c.name.clone());
                    state.seen.contains_key(&key)
                })
                .map(|c| c.name.clone())
                .collect()
        };
        for name in names {
            self.schedule(pod, &name);
        }
    }

    /// The restarts queued for `pod` whose instance still runs (`statuses`, the runtime's);
    /// each is handed out once. A queued restart whose instance ended is dropped: the next
    /// instance is checked once it started.
    pub fn take_restarts(
        &self,
        pod: &AdmittedPod,
        statuses: &[ContainerStatus],
    ) -> Vec<EnvRestart> {
        let mut state = self.inner.state.lock();
        let keys: Vec<ContainerKey> = state
            .pending
            .keys()
            .filter(|(uid, _)| uid == pod.uid())
            .cloned()
            .collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(restart) = state.pending.remove(&key) else {
                continue;
            };
            let runs = statuses.iter().any(|s| {
                s.name == restart.container
                    && s.is_running()
                    && s.container_id == restart.container_id
            });
            if runs {
                out.push(restart);
            } else {
                state.dirty.insert(key);
            }
        }
        out
    }

    /// What the running instance of `container` of pod `uid` sees through its environment,
    /// one entry per ConfigMap or Secret it read (FC-15); empty when none.
    pub fn freshness(&self, uid: &PodUid, container: &str) -> Vec<EnvFreshness> {
        let state = self.inner.state.lock();
        let key = (uid.clone(), container.to_owned());
        let Some(seen) = state.seen.get(&key) else {
            return Vec::new();
        };
        let pending = state.pending.contains_key(&key);
        seen.sources
            .iter()
            .map(|s| EnvFreshness {
                object: s.object.clone(),
                resource_version: s.resource_version.clone(),
                current: !pending && !seen.stale.contains(&object_key(&s.object)),
            })
            .collect()
    }

    /// Forgets pod `uid` (it is gone).
    pub fn forget_pod(&self, uid: &PodUid) {
        let mut state = self.inner.state.lock();
        state.seen.retain(|(u, _), _| u != uid);
        state.dirty.retain(|(u, _)| u != uid);
        state.pending.retain(|(u, _), _| u != uid);
        state.warned.retain(|(u, _), _| u != uid);
    }

    /// Records a change for `container` in its burst; its end checks it (step 2).
    fn schedule(&self, pod: &AdmittedPod, container: &str) {
        let key = (pod.uid().clone(), container.to_owned());
        let quiet = self.settings(pod).env_debounce;
        let this: Weak<Inner> = Arc::downgrade(&self.inner);
        let (pod, container) = (pod.clone(), container.to_owned());
        self.inner.bursts.update(key, quiet, async move {
            if let Some(inner) = this.upgrade() {
                check(&inner, &pod, &container).await;
            }
        });
    }
}

/// Steps 2 and 3 for one container.
async fn check(inner: &Inner, pod: &AdmittedPod, name: &str) {
    let parts = &inner.parts;
    let key = (pod.uid().clone(), name.to_owned());
    let settings = pod_follow(pod, &parts.defaults).0;
    if !settings.container(name).is_some_and(|f| f.env) {
        return;
    }
    let Some(container) = followed(pod).into_iter().find(|c| c.name == name) else {
        return;
    };
    let (container_id, old_vars, old_sources) = {
        let mut state = inner.state.lock();
        let seen = state
            .seen
            .get(&key)
            .filter(|_| !state.pending.contains_key(&key))
            .map(|s| (s.container_id.clone(), s.vars.clone(), s.sources.clone()));
        match seen {
            Some(seen) => seen,
            None => {
                state.dirty.insert(key);
                return;
            }
        }
    };
    let runs = parts
        .runtime
        .statuses(pod.uid())
        .iter()
        .any(|s| s.name == name && s.is_running() && s.container_id == container_id);
    if !runs {
        inner.state.lock().dirty.insert(key);
        return;
    }
    let (env_pod, options) = crate::sync::env_context(&parts.config, pod, parts.sandbox);
    let env = match resolve_env(&env_pod, container, &parts.sources, &options).await {
        Ok(env) => env,
        Err(error) => {
            let message = format!("Container {name} keeps its environment: {error}");
            return warn_once(inner, pod, &key, message);
        }
    };
    let vars = digests(&env);
    if vars == old_vars {
        let mut state = inner.state.lock();
        if let Some(seen) = state
            .seen
            .get_mut(&key)
            .filter(|s| s.container_id == container_id)
        {
            seen.sources = env.sources;
            seen.stale.clear();
        }
        state.warned.remove(&key);
        return;
    }
    let what = describe(&old_sources, &env.sources, &old_vars, &vars);
    match parts.runtime.update_env(pod, container, &env).await {
        Ok(true) => {
            {
                let mut state = inner.state.lock();
                state.seen.insert(
                    key.clone(),
                    Seen {
                        container_id,
                        vars,
                        sources: env.sources.clone(),
                        stale: BTreeSet::new(),
                    },
                );
                state.warned.remove(&key);
            }
            tracing::info!(
                pod.namespace = pod.namespace(),
                pod.name = pod.name(),
                container = name,
                changed = %what,
                "env files updated"
            );
            parts.events.event(
                pod,
                EventType::Normal,
                reasons::ENV_UPDATED,
                format!("Environment of container {name} updated ({what})"),
            );
        }
        Ok(false) => {
            tracing::info!(
                pod.namespace = pod.namespace(),
                pod.name = pod.name(),
                container = name,
                changed = %what,
                "environment changed; restart queued"
            );
            let restart = EnvRestart {
                container: name.to_owned(),
                container_id,
                message: format!(
                    "Container {name} environment changed ({what}), will be restarted"
                ),
            };
            inner.state.lock().pending.insert(key, restart);
            let _ = inner.syncs.send(pod.uid().clone());
        }
        Err(error) => {
            let message = format!("Environment of container {name} not updated: {error}");
            warn_once(inner, pod, &key, message);
        }
    }
}

/// A Warning [`reasons::FAILED_ENV_UPDATE`], unless the same was the last for `key`.
fn warn_once(inner: &Inner, pod: &AdmittedPod, key: &ContainerKey, message: String) {
    {
        let mut state = inner.state.lock();
        if state.warned.get(key) == Some(&message) {
            return;
        }
        state.warned.insert(key.clone(), message.clone());
    }
    tracing::warn!(
        pod.namespace = pod.namespace(),
        pod.name = pod.name(),
        container = %key.1,
        %message,
        "environment not updated"
    );
    inner
        .parts
        .events
        .event(pod, EventType::Warning, reasons::FAILED_ENV_UPDATE, message);
}

/// The app containers and sidecars of `pod` (those that can follow).
fn followed(pod: &AdmittedPod) -> Vec<&Container> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_sidecar(c));
    sidecars.chain(&spec.containers).collect()
}

fn follows_kind(pod: &AdmittedPod, name: &str) -> bool {
    followed(pod).iter().any(|c| c.name == name)
}

/// Whether `container`'s `env` or `envFrom` names `object` (of the pod's namespace).
fn reads(container: &Container, object: &ObjectRef) -> bool {
    let from = container
        .env_from
        .iter()
        .flatten()
        .any(|s| match object.kind {
            ObjectKind::ConfigMap => s
                .config_map_ref
                .as_ref()
                .is_some_and(|r| r.name == object.name),
            ObjectKind::Secret => s.secret_ref.as_ref().is_some_and(|r| r.name == object.name),
        });
    from || container.env.iter().flatten().any(|e| {
        let Some(v) = &e.value_from else {
            return false;
        };
        match object.kind {
            ObjectKind::ConfigMap => v
                .config_map_key_ref
                .as_ref()
                .is_some_and(|r| r.name == object.name),
            ObjectKind::Secret => v
                .secret_key_ref
                .as_ref()
                .is_some_and(|r| r.name == object.name),
        }
    })
}

/// An object as a set key.
fn object_key(object: &ObjectRef) -> (u8, String, String) {
    let kind = match object.kind {
        ObjectKind::ConfigMap => 0,
        ObjectKind::Secret => 1,
    };
    (kind, object.namespace.clone(), object.name.clone())
}

fn kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::ConfigMap => "ConfigMap",
        ObjectKind::Secret => "Secret",
    }
}

/// Each variable's digest.
fn digests(env: &ContainerEnv) -> BTreeMap<String, u64> {
    env.vars
        .iter()
        .map(|v| (v.name.clone(), digest(&v.value)))
        .collect()
}

/// The keys whose value differs between `old` and `new`, by object (objects in the order
/// read; keys sorted). A key present on one side only counts as changed.
pub(crate) fn changed_keys(old: &[EnvSource], new: &[EnvSource]) -> Vec<(ObjectRef, Vec<String>)> {
    let mut objects: Vec<&ObjectRef> = old.iter().map(|s| &s.object).collect();
    for s in new {
        if !objects.contains(&&s.object) {
            objects.push(&s.object);
        }
    }
    let empty = BTreeMap::new();
    let keys_of = |list: &[EnvSource], o: &ObjectRef| {
        list.iter().find(|s| &s.object == o).map(|s| s.keys.clone())
    };
    let mut out = Vec::new();
    for o in objects {
        let before = keys_of(old, o).unwrap_or_else(|| empty.clone());
        let after = keys_of(new, o).unwrap_or_else(|| empty.clone());
        let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        let changed: Vec<String> = names
            .into_iter()
            .filter(|k| before.get(*k).copied().flatten() != after.get(*k).copied().flatten())
            .cloned()
            .collect();
        if !changed.is_empty() {
            out.push((o.clone(), changed));
        }
    }
    out
}

/// What changed, for an event: `ConfigMap ns/a: k1, k2; Secret ns/b: k3`; the variables
/// that changed when no key of an object did (a Service's variables, say). Never a value.
pub(crate) fn describe(
    old: &[EnvSource],
    new: &[EnvSource],
    old_vars: &BTreeMap<String, u64>,
    new_vars: &BTreeMap<String, u64>,
) -> String {
    let changed = changed_keys(old, new);
    if changed.is_empty() {
        let names: BTreeSet<&String> = old_vars.keys().chain(new_vars.keys()).collect();
        let vars: Vec<&str> = names
            .into_iter()
            .filter(|n| old_vars.get(*n) != new_vars.get(*n))
            .map(String::as_str)
            .collect();
        return format!("variables {}", vars.join(", "));
    }
    changed
        .iter()
        .map(|(o, keys)| format!("{} {o}: {}", kind_name(o.kind), keys.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(kind: ObjectKind, name: &str, rv: &str, keys: &[(&str, Option<&str>)]) -> EnvSource {
        EnvSource {
            object: ObjectRef::new(kind, "ns", name),
            resource_version: Some(rv.to_owned()),
            keys: keys
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(|v| digest(v.as_bytes()))))
                .collect(),
        }
    }

    #[test]
    fn the_keys_that_changed_are_named_by_object_and_a_new_version_alone_is_no_change() {
        let old = vec![
            source(
                ObjectKind::ConfigMap,
                "cfg",
                "1",
                &[("mode", Some("a")), ("level", Some("1"))],
            ),
            source(ObjectKind::Secret, "creds", "5", &[("token", Some("s1"))]),
        ];
        let new = vec![
            source(
                ObjectKind::ConfigMap,
                "cfg",
                "2",
                &[("mode", Some("b")), ("level", Some("1"))],
            ),
            source(
                ObjectKind::Secret,
                "creds",
                "6",
                &[("token", Some("s1")), ("extra", Some("x"))],
            ),
        ];
        let changed = changed_keys(&old, &new);
        assert_eq!(
            changed,
            vec![
                (ObjectRef::config_map("ns", "cfg"), vec!["mode".to_owned()]),
                (ObjectRef::secret("ns", "creds"), vec!["extra".to_owned()]),
            ]
        );
        let text = describe(&old, &new, &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(text, "ConfigMap ns/cfg: mode; Secret ns/creds: extra");
        assert!(!text.contains("s1"), "{text}");
        let same_values = vec![
            source(
                ObjectKind::ConfigMap,
                "cfg",
                "9",
                &[("mode", Some("a")), ("level", Some("1"))],
            ),
            source(ObjectKind::Secret, "creds", "9", &[("token", Some("s1"))]),
        ];
        assert!(changed_keys(&old, &same_values).is_empty());
    }

    #[test]
    fn an_optional_object_that_appears_changes_the_keys_read_from_it() {
        let missing = EnvSource {
            object: ObjectRef::config_map("ns", "opt"),
            resource_version: None,
            keys: BTreeMap::new(),
        };
        let present = source(ObjectKind::ConfigMap, "opt", "3", &[("mode", Some("on"))]);
        assert_eq!(
            changed_keys(&[missing.clone()], &[present.clone()]),
            vec![(ObjectRef::config_map("ns", "opt"), vec!["mode".to_owned()])]
        );
        assert_eq!(
            changed_keys(&[present], &[missing]),
            vec![(ObjectRef::config_map("ns", "opt"), vec!["mode".to_owned()])]
        );
    }

    #[test]
    fn without_a_changed_key_the_changed_variables_are_named_never_their_values() {
        let old: BTreeMap<String, u64> = [
            ("A".to_owned(), digest(b"1")),
            ("B".to_owned(), digest(b"2")),
        ]
        .into();
        let new: BTreeMap<String, u64> = [
            ("A".to_owned(), digest(b"1")),
            ("B".to_owned(), digest(b"3")),
        ]
        .into();
        assert_eq!(describe(&[], &[], &old, &new), "variables B");
    }

    #[test]
    fn an_env_source_debug_shows_keys_never_digests() {
        let s = source(
            ObjectKind::Secret,
            "creds",
            "1",
            &[("token", Some("hunter2"))],
        );
        let text = format!("{s:?}");
        assert!(text.contains("token") && text.contains("creds"), "{text}");
        assert!(!text.contains(&digest(b"hunter2").to_string()), "{text}");
    }
}
