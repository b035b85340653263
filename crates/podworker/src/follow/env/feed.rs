//! [`EnvFollow::run`]: what feeds the environments that follow a change (FC-10, FC-11): each
//! change the ConfigMap and Secret managers announce, with each known pod that references the
//! object; the pods a queued restart asks to sync; and every [`RECHECK`] a check of every
//! following container (a change missed when the announcements lagged; reading the objects
//! keeps their watches from going idle).

use std::time::Duration;

use nodelet_core::{AdmittedPod, ObjectRef};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::EnvFollow;

/// How often every following environment is checked again.
pub(crate) const RECHECK: Duration = Duration::from_secs(60);

impl EnvFollow {
    /// Follows `changes` (the ConfigMap manager's, then the Secret manager's announcements)
    /// until `shutdown`. `pods(Some(object))` gives the known pods that reference `object`,
    /// `pods(None)` every known pod; `sync` syncs a pod (a restart was queued for it).
    pub async fn run(
        self,
        changes: [Receiver<ObjectRef>; 2],
        pods: impl Fn(Option<&ObjectRef>) -> Vec<AdmittedPod>,
        sync: impl Fn(AdmittedPod),
        shutdown: CancellationToken,
    ) {
        let [mut configmaps, mut secrets] = changes;
        let mut syncs = self.syncs();
        let mut recheck = tokio::time::interval(RECHECK);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let recheck_all = || pods(None).iter().for_each(|p| self.recheck(p));
        loop {
            let change = tokio::select! {
                () = shutdown.cancelled() => return,
                c = configmaps.recv() => c,
                c = secrets.recv() => c,
                uid = syncs.recv() => {
                    match uid {
                        Ok(uid) => pods(None).into_iter().filter(|p| p.uid() == &uid).for_each(&sync),
                        Err(RecvError::Lagged(_)) => recheck_all(),
                        Err(RecvError::Closed) => return,
                    }
                    continue;
                }
                _ = recheck.tick() => {
                    recheck_all();
                    continue;
                }
            };
            match change {
                Ok(object) => {
                    for pod in pods(Some(&object)) {
                        self.object_changed(&pod, &object);
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "object changes missed; checking every environment");
                    recheck_all();
                }
                Err(RecvError::Closed) => return,
            }
        }
    }
}
