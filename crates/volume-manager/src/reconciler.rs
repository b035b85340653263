//! The reconciler (VM-8): a [`Reconciler`] compares desired and actual state (a pass over
//! every volume) when a change may give it work — a pod added, updated or removed, a failed or
//! superseded operation, a change of something a volume reads (one [`Change`] stream for
//! objects and sources alike), a deadline — and sleeps otherwise. A SetUp that ended with
//! nothing left to do, or a change whose readers are mid-SetUp, wakes only the waiters. The
//! operations it starts are in `operation.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::asw::MountState;
use crate::changes::{Change, Changes, Scope};
use crate::dsw::{DesiredPod, DesiredVolume};
use crate::executor::Refusal;
use crate::manager::{Inner, State};
use crate::operation::{MountJob, UnmountJob};

/// The reconciler loop of one volume manager: its subscriptions, the resync clock and the
/// passes it starts. Made and run by [`VolumeManager::run`](crate::VolumeManager::run)
/// (through `Inner::run`).
pub(crate) struct Reconciler {
    inner: Arc<Inner>,
    changes: Changes,
    resync: Option<Duration>,
}

impl Reconciler {
    /// A reconciler of `inner`, subscribed to every object manager and source now.
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let changes = Changes::subscribe(&inner.configmaps, &inner.secrets, inner.host.sources());
        let resync = inner.config.resync_interval;
        Self {
            inner,
            changes,
            resync,
        }
    }

    /// Reconstructs the actual state, then reconciles until `shutdown` is cancelled and waits
    /// for the operations still running.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        self.inner.reconstruct().await;
        let mut next_resync = self.resync.map(|r| Instant::now() + r);
        let (mut scope, mut next) = (Some(Scope::All), None);
        loop {
            if let Some(scope) = scope.take() {
                let due = self.pass(&scope);
                // A pass over some volumes keeps the deadlines the last full pass found.
                next = match scope {
                    Scope::All => due,
                    Scope::Only(_) => [next, due].into_iter().flatten().min(),
                };
            }
            let deadline = [next, next_resync].into_iter().flatten().min();
            // A change that gives no volume anything to do (something no desired volume reads,
            // or one whose volumes are mid-SetUp and report their own end) starts no pass.
            scope = tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.inner.wake.notified() => self.inner.requested_scope(),
                () = sleep_until(deadline) => Some(Scope::All),
                // (1) An object manager or a source saw new content; (2) mark its readers.
                change = self.changes.next() => {
                    self.inner.state.lock().mark_changed(&change, Instant::now())
                }
            };
            if let (Some(at), Some(every)) = (next_resync, self.resync)
                && Instant::now() >= at
            {
                self.inner.state.lock().mark_all_remount_required();
                next_resync = Some(Instant::now() + every);
                scope = Some(Scope::All);
            }
        }
        self.inner.host.sources().shutdown();
        let tasks = &self.inner.tasks;
        tasks.close();
        tasks.wait().await;
        tasks.reopen();
    }

    /// One pass (VM-8) over the volumes in `scope`: start unmounts, then mounts and remounts.
    /// Returns when the next pass is due without any event (a backoff expiry or a token
    /// refresh; a pass over some volumes only sees their own deadlines).
    fn pass(&self, scope: &Scope) -> Option<Instant> {
        let now = Instant::now();
        self.inner.passes.fetch_add(1, Ordering::Relaxed);
        let sources_ready = self.inner.sources_ready.load(Ordering::SeqCst);
        let mut next: Option<Instant> = None;
        let mut soonest = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
        let mut unmounts = Vec::new();
        let mut mounts = Vec::new();
        {
            let mut guard = self.inner.state.lock();
            let st: &mut State = &mut guard;
            // Token refresh deadlines (PL-10) turn into remounts; the others are waited for.
            let mut refresh = |unique: &str, v: &mut crate::asw::MountedVolume| match v.refresh_at {
                Some(at) if at <= now => {
                    v.refresh_at = None;
                    v.remount_required = true;
                    st.ops.mark_dirty(unique);
                }
                Some(at) => soonest(at),
                None => {}
            };
            match scope {
                Scope::All => st.asw.iter_mut().for_each(|(u, v)| refresh(u, v)),
                Scope::Only(uniques) => {
                    for unique in uniques {
                        if let Some(v) = st.asw.get_mut(unique) {
                            refresh(unique, v);
                        }
                    }
                }
            }
            // (1) Unmount what is on disk but no longer desired.
            let mut unmount = |unique: &String, v: &crate::asw::MountedVolume| {
                if st.dsw.contains(&v.pod_uid, unique) || (v.reconstructed && !sources_ready) {
                    return;
                }
                match st.ops.try_start(unique, now) {
                    Ok(()) => unmounts.push(UnmountJob {
                        unique: unique.clone(),
                        volume: v.clone(),
                    }),
                    Err(Refusal::BackingOff(at)) => soonest(at),
                    Err(Refusal::Pending) => {}
                }
            };
            match scope {
                Scope::All => st.asw.iter().for_each(|(u, v)| unmount(u, v)),
                Scope::Only(uniques) => {
                    for unique in uniques {
                        if let Some(v) = st.asw.get(unique) {
                            unmount(unique, v);
                        }
                    }
                }
            }
            // (2) Mount what is desired and not mounted; remount what needs it (update path
            // step (3): one operation per volume, none while backing off).
            let mut mount = |pod: &DesiredPod, v: &DesiredVolume| {
                let remount = match st.asw.get(&v.unique) {
                    None => false,
                    Some(m) if m.remount_required || m.state == MountState::Uncertain => true,
                    Some(_) => return,
                };
                match st.ops.try_start(&v.unique, now) {
                    Ok(()) => mounts.push(MountJob {
                        unique: v.unique.clone(),
                        pod_uid: pod.uid.clone(),
                        pod: pod.pod.clone(),
                        volume: v.volume.clone(),
                        plugin: v.plugin.clone(),
                        remount,
                        change_seen: st.change_seen.remove(&v.unique),
                    }),
                    Err(Refusal::BackingOff(at)) => soonest(at),
                    Err(Refusal::Pending) => {}
                }
            };
            match scope {
                Scope::All => st.dsw.volumes().for_each(|(p, v)| mount(p, v)),
                Scope::Only(uniques) => {
                    for unique in uniques {
                        if let Some((p, v)) = st.dsw.volume(unique) {
                            mount(p, v);
                        }
                    }
                }
            }
        }
        for job in unmounts {
            let inner = self.inner.clone();
            self.inner
                .tasks
                .spawn(async move { inner.unmount(job).await });
        }
        for job in mounts {
            let inner = self.inner.clone();
            self.inner
                .tasks
                .spawn(async move { inner.mount(job).await });
        }
        next
    }
}

impl Inner {
    /// Runs a [`Reconciler`] of this manager (see
    /// [`VolumeManager::run`](crate::VolumeManager::run)).
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        Reconciler::new(self).run(shutdown).await;
    }
}

impl State {
    /// Update path step (2) for every desired volume that reads what `change` is about: a
    /// mounted one is marked for remount, and any one backing off after a failure (the thing
    /// that changed was missing?) may retry now; a SetUp in flight is marked stale. For a
    /// change of content the change's time is kept for the volume's `VolumeUpdate`. A lagged
    /// subscription marks every volume ([`mark_all_remount_required`](Self::mark_all_remount_required)).
    /// Returns the volumes a pass should look at when one has work (a mounted volume to
    /// remount or a retry due now; a SetUp still running is marked and reports its own end),
    /// `None` when none has.
    pub(crate) fn mark_changed(&mut self, change: &Change, now: Instant) -> Option<Scope> {
        if *change == Change::Lagged {
            self.mark_all_remount_required();
            return Some(Scope::All);
        }
        let affected: Vec<String> = match change {
            Change::Object(object) => self.dsw.readers_of(object).to_vec(),
            _ => self
                .dsw
                .volumes()
                .filter(|(pod, v)| v.sources.iter().any(|s| change.affects(&pod.uid, s)))
                .map(|(_, v)| v.unique.clone())
                .collect(),
        };
        let mut work = false;
        for unique in &affected {
            if let Some(m) = self.asw.get_mut(unique) {
                m.remount_required = true;
                work = true;
                if change.is_content() {
                    self.change_seen.entry(unique.clone()).or_insert(now);
                }
            }
            work |= self.ops.object_changed(unique, now);
        }
        work.then_some(Scope::Only(affected))
    }

    /// Resync safety net: every desired, mounted volume whose plugin requires remount.
    pub(crate) fn mark_all_remount_required(&mut self) {
        let uniques: Vec<String> = self.dsw.volumes().map(|(_, v)| v.unique.clone()).collect();
        for unique in uniques {
            if let Some(m) = self.asw.get_mut(&unique)
                && m.plugin.requires_remount()
            {
                m.remount_required = true;
            }
            self.ops.mark_dirty(&unique);
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
