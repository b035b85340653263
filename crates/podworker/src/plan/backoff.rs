//! [`PodBackoff`]: one pod's crash back-off, kept per container on the pod worker's side of
//! the runtime seam (the kubelet keeps its `flowcontrol.Backoff` in kuberuntime, not in the
//! runtime), and the instances restarted for a reason that is not a crash.
//!
//! A container's back-off is computed once per ended instance (by its container ID), from the
//! instance's typed [`Termination`]: none after the container's first end seen (the first
//! restart is at once, also after an agent restart), then the [`Schedule`]'s initial delay,
//! doubled up to its largest; an instance that ran [`Schedule::reset_after`] starts over. The
//! next instance may start `delay` after the end (`finished_at`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use nodelet_core::backoff::Schedule;
use nodelet_core::runtime::{ContainerState, ContainerStatus, Termination};

/// The crash back-off state of one pod's containers.
#[derive(Debug, Default)]
pub(crate) struct PodBackoff {
    /// By container name.
    entries: BTreeMap<String, Entry>,
    /// Instances (container IDs) stopped for a restart that is not a crash (PW-70).
    exempt: BTreeSet<String>,
    /// Restarts asked for and not planned yet: container name → message.
    requested: BTreeMap<String, String>,
}

/// One container's back-off.
#[derive(Debug)]
struct Entry {
    /// The ended instance the delay was computed for.
    instance: String,
    /// Its delay.
    delay: Duration,
    /// No restart before this time.
    until: SystemTime,
    /// The message the container waits with while the last plan held it back.
    waiting: Option<String>,
}

/// Whether an ended container may start again now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its back-off passed (or there is none).
    Go,
    /// Not yet: `remaining` of its `delay` to wait.
    Wait {
        /// The whole delay (for the message).
        delay: Duration,
        /// What is left of it.
        remaining: Duration,
    },
}

impl PodBackoff {
    /// The verdict for container `name`, whose instance `instance` ended with `t`, at `now`;
    /// the instance's back-off is computed on `schedule` when it is first seen.
    pub(crate) fn verdict(
        &mut self,
        name: &str,
        instance: &str,
        t: &Termination,
        now: SystemTime,
        schedule: Schedule,
    ) -> Verdict {
        let known = self
            .entries
            .get(name)
            .is_some_and(|e| e.instance == instance);
        if !known {
            let (previous, first) = self
                .entries
                .get(name)
                .map_or((Duration::ZERO, true), |e| (e.delay, false));
            let ran = t
                .finished_at
                .duration_since(t.started_at)
                .unwrap_or_default();
            let delay = schedule.after_run(ran, previous, first);
            let entry = Entry {
                instance: instance.to_owned(),
                delay,
                until: t.finished_at + delay,
                waiting: None,
            };
            self.entries.insert(name.to_owned(), entry);
        }
        let Some(entry) = self.entries.get_mut(name) else {
            return Verdict::Go;
        };
        match entry.until.duration_since(now) {
            Ok(remaining) if !remaining.is_zero() => Verdict::Wait {
                delay: entry.delay,
                remaining,
            },
            _ => {
                entry.waiting = None;
                Verdict::Go
            }
        }
    }

    /// Container `name` waits for its back-off with `message` (shown by
    /// [`show_waiting`](Self::show_waiting)).
    pub(crate) fn set_waiting(&mut self, name: &str, message: String) {
        if let Some(entry) = self.entries.get_mut(name) {
            entry.waiting = Some(message);
        }
    }

    /// Shows each container of `statuses` that the last plan held back as the kubelet shows
    /// it: waiting with `CrashLoopBackOff` and the message, the ended instance as its last
    /// state. Only while the runtime still reports that ended instance.
    pub(crate) fn show_waiting(&self, statuses: &mut [ContainerStatus]) {
        for s in statuses {
            let Some(entry) = self.entries.get(&s.name) else {
                continue;
            };
            let (Some(message), ContainerState::Terminated(t)) = (&entry.waiting, &s.state) else {
                continue;
            };
            if s.container_id != entry.instance {
                continue;
            }
            s.last_state = Some(t.clone());
            s.state = ContainerState::Waiting {
                reason: "CrashLoopBackOff".to_owned(),
                message: Some(message.clone()),
            };
        }
    }

    /// Asks for container `name` to be restarted (PW-70), with `message`.
    pub(crate) fn request_restart(&mut self, name: &str, message: String) {
        self.requested.insert(name.to_owned(), message);
    }

    /// The restarts asked for since the last plan.
    pub(crate) fn take_requests(&mut self) -> BTreeMap<String, String> {
        std::mem::take(&mut self.requested)
    }

    /// Instance `instance` is stopped for a restart that is not a crash.
    pub(crate) fn exempt(&mut self, instance: &str) {
        self.exempt.insert(instance.to_owned());
    }

    /// Whether instance `instance` was stopped for a restart that is not a crash.
    pub(crate) fn is_exempt(&self, instance: &str) -> bool {
        !instance.is_empty() && self.exempt.contains(instance)
    }

    /// Forgets the exempt instances that are no longer any container's current one.
    pub(crate) fn prune(&mut self, statuses: &[ContainerStatus]) {
        self.exempt
            .retain(|id| statuses.iter().any(|s| &s.container_id == id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(id: &str, ran: u64, at: SystemTime) -> (String, Termination) {
        let t = Termination {
            exit_code: 1,
            signal: None,
            reason: "Error".to_owned(),
            message: None,
            started_at: at - Duration::from_secs(ran),
            finished_at: at,
        };
        (id.to_owned(), t)
    }

    #[test]
    fn the_first_end_restarts_at_once_then_10s_doubling_and_a_long_run_starts_over() {
        let mut b = PodBackoff::default();
        let s = Schedule::CRASH_LOOP;
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let secs = Duration::from_secs;
        let (id, t) = ended("c1", 1, t0);
        assert_eq!(b.verdict("c", &id, &t, t0, s), Verdict::Go);
        let (id, t) = ended("c2", 1, t0 + secs(5));
        let wait = b.verdict("c", &id, &t, t0 + secs(6), s);
        assert_eq!(
            wait,
            Verdict::Wait {
                delay: secs(10),
                remaining: secs(9)
            }
        );
        // Asked again for the same instance: the same back-off, not a doubled one.
        assert_eq!(b.verdict("c", &id, &t, t0 + secs(15), s), Verdict::Go);
        let (id, t) = ended("c3", 1, t0 + secs(20));
        assert!(matches!(
            b.verdict("c", &id, &t, t0 + secs(20), s),
            Verdict::Wait { delay, .. } if delay == secs(20)
        ));
        let (id, t) = ended("c4", 600, t0 + secs(1000));
        assert_eq!(b.verdict("c", &id, &t, t0 + secs(1000), s), Verdict::Go);
    }

    #[test]
    fn a_held_back_container_shows_crash_loop_back_off_while_its_ended_instance_is_reported() {
        let mut b = PodBackoff::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        for (i, id) in ["c1", "c2"].into_iter().enumerate() {
            let (id, t) = ended(id, 1, t0);
            let _ = b.verdict(
                "c",
                &id,
                &t,
                t0 + Duration::from_secs(i as u64),
                Schedule::CRASH_LOOP,
            );
        }
        b.set_waiting("c", "back-off 10s".to_owned());
        let (_, t) = ended("c2", 1, t0);
        let status = |id: &str| ContainerStatus {
            name: "c".to_owned(),
            state: ContainerState::Terminated(t.clone()),
            last_state: None,
            restart_count: 1,
            container_id: id.to_owned(),
        };
        let mut statuses = [status("c2"), status("other")];
        b.show_waiting(&mut statuses);
        assert!(
            matches!(&statuses[0].state, ContainerState::Waiting { reason, .. } if reason == "CrashLoopBackOff")
        );
        assert_eq!(statuses[0].last_state.as_ref(), Some(&t));
        assert!(
            statuses[1].terminated().is_some(),
            "another instance: as reported"
        );
    }
}
