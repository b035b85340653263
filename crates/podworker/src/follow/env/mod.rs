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
use nodelet_core::runtime::ContainerStatus;
use nodelet_core::{AdmittedPod, EventType, ObjectRef, PodUid};
use parking_lot::Mutex;
use tokio::sync::broadcast;

mod diff;
mod feed;

use super::options::{FollowDefaults, PodFollow, pod_follow};
use super::reload::Bursts;
use crate::env::{ContainerEnv, EnvSource, EnvSources, resolve_env};
use crate::env_context::EnvContext;
use crate::runtime::RuntimeHook;
use diff::{describe, digests, followed, follows_kind, object_key, reads};
use nodelet_core::events::EventSink;

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
    /// The syncer's context of resolution ([`SyncerConfig::env_context`]): environments are
    /// resolved as a start resolves them.
    ///
    /// [`SyncerConfig::env_context`]: crate::SyncerConfig::env_context
    pub context: EnvContext,
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
        let now = tokio::time::Instant::now();
        self.inner.bursts.update(key, now, quiet, async move {
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
    let (env_pod, options) = parts.context.resolve(pod, parts.sandbox);
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
