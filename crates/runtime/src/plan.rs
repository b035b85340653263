//! The decision behind [`ProcessRuntime::plan`](crate::ProcessRuntime::plan): the kubelet's
//! `computePodActions` and `computeInitContainerActions` over the runtime's records of one pod.
//!
//! 1. The app containers have all ended for good (none to restart under `restartPolicy`,
//!    never the case under `Always`): nothing starts, and the running sidecars are to be
//!    stopped (PW-63); the pod's phase is then decided by its app containers alone.
//! 2. Init containers in order. One that a later init container (or a running app container)
//!    shows to be past is skipped if it runs to completion; a sidecar is kept running however
//!    far the pod got: started when it has no instance, restarted (crash back-off, whatever
//!    `restartPolicy` says) when it ended (PW-61). The first init container that is not done
//!    stops the walk: a regular one until it succeeded, a sidecar until it runs and its
//!    instance has started (startup probe passed, or none; PW-60).
//! 3. With every init container done: each app container as `restartPolicy` and the crash
//!    back-off say.
//! 4. Ephemeral containers: each once (PW-57), unless step 1 stops the pod.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use nodelet_core::runtime::{ContainerState, Plan, Termination, is_sidecar};

use crate::records::Record;

/// How one container of the walk stands.
enum Step {
    /// Its instance runs.
    Running,
    /// It ended and is not restarted; `true` when it succeeded.
    Done(bool),
    /// Queued: to start now, or waiting for its back-off.
    Queued,
}

/// Which list a container is in, which decides its restarts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A regular init container: restarted on failure unless `restartPolicy: Never`.
    Init,
    /// A restartable init container: always restarted.
    Sidecar,
    /// An app container: as `restartPolicy` says.
    App,
}

/// The walk's inputs besides the records.
pub(crate) struct Walk<'a> {
    /// The pod's `restartPolicy` (`Always` when unset).
    pub(crate) policy: &'a str,
    /// `now`, for the back-offs.
    pub(crate) now: Instant,
    /// The container IDs of the sidecar instances that started (their startup probe passed,
    /// or they have none).
    pub(crate) started: &'a [String],
    /// The back-off message of a container (`back-off 10s restarting failed container=…`).
    pub(crate) message: &'a dyn Fn(&Container, &Record) -> String,
}

impl Walk<'_> {
    /// Steps 1–4 of the module docs over `records` (the pod's, by container name). Returns
    /// the plan and the earliest end of a back-off, when the pod is to be synced again.
    pub(crate) fn plan(
        &self,
        spec: &PodSpec,
        records: &mut BTreeMap<String, Record>,
    ) -> (Plan, Option<Instant>) {
        let mut plan = Plan::default();
        let mut wake = None;
        // (1)
        let all_ended = spec
            .containers
            .iter()
            .all(|c| records.get(&c.name).is_some_and(|r| self.ended_for_good(r)));
        if all_ended {
            plan.stop = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| is_sidecar(c))
                .filter(|c| records.get(&c.name).is_some_and(Record::state_is_running))
                .map(|c| c.name.clone())
                .collect();
            return (plan, None);
        }
        // (2)
        let init: &[Container] = spec.init_containers.as_deref().unwrap_or_default();
        let has_run = |r: Option<&Record>| r.is_some_and(|r| r.starts > 0);
        let app_running = spec
            .containers
            .iter()
            .any(|c| records.get(&c.name).is_some_and(Record::state_is_running));
        let mut initialized = true;
        for (i, c) in init.iter().enumerate() {
            let past = app_running || init[i + 1..].iter().any(|l| has_run(records.get(&l.name)));
            if is_sidecar(c) {
                let step = self.step(c, Kind::Sidecar, records, &mut plan, &mut wake);
                let ready = matches!(step, Step::Running)
                    && records
                        .get(&c.name)
                        .is_some_and(|r| self.started.contains(&r.container_id));
                if !past && !ready {
                    initialized = false;
                    break;
                }
            } else if !past {
                let step = self.step(c, Kind::Init, records, &mut plan, &mut wake);
                if !matches!(step, Step::Done(true)) {
                    initialized = false;
                    break;
                }
            }
        }
        // (3)
        if initialized {
            for c in &spec.containers {
                self.step(c, Kind::App, records, &mut plan, &mut wake);
            }
        }
        // (4) PW-57: an ephemeral container starts once, whatever the init containers do, and
        // is never restarted; one that never started (a configuration error) is tried again.
        for c in spec.ephemeral_containers.iter().flatten() {
            let started = records
                .get(&c.name)
                .is_some_and(|r| r.state_is_running() || r.starts > 0);
            if !started {
                plan.start.push(c.name.clone());
            }
        }
        (plan, wake)
    }

    /// Whether the app container of record `r` ended and will not be restarted.
    fn ended_for_good(&self, r: &Record) -> bool {
        ended(r).is_some_and(|t| !self.restarts(Kind::App, t))
    }

    /// Whether a container of `kind` that ended with `t` is restarted.
    fn restarts(&self, kind: Kind, t: &Termination) -> bool {
        match (kind, self.policy) {
            (Kind::Sidecar, _) => true,
            (Kind::Init, _) if t.exit_code == 0 => false,
            (_, "Never") => false,
            (_, "OnFailure") => t.exit_code != 0,
            _ => true,
        }
    }

    /// Where container `c` stands; queues it (to start, or in back-off) when it is to run.
    fn step(
        &self,
        c: &Container,
        kind: Kind,
        records: &mut BTreeMap<String, Record>,
        plan: &mut Plan,
        wake: &mut Option<Instant>,
    ) -> Step {
        let Some(r) = records.get_mut(&c.name) else {
            plan.start.push(c.name.clone());
            return Step::Queued;
        };
        if r.state_is_running() {
            return Step::Running;
        }
        let Some(t) = ended(r).cloned() else {
            // Waiting for its first start (a configuration or image error): try again.
            plan.start.push(c.name.clone());
            return Step::Queued;
        };
        if !self.restarts(kind, &t) {
            return Step::Done(t.exit_code == 0);
        }
        match r.not_before {
            Some(at) if at > self.now => {
                let message = (self.message)(c, r);
                if let ContainerState::Terminated(t) = &r.state {
                    r.last_state = Some(t.clone());
                }
                r.state = ContainerState::Waiting {
                    reason: "CrashLoopBackOff".to_owned(),
                    message: Some(message.clone()),
                };
                plan.back_off.push((c.name.clone(), message));
                *wake = Some(wake.map_or(at, |w: Instant| w.min(at)));
            }
            _ => plan.start.push(c.name.clone()),
        }
        Step::Queued
    }
}

/// How the last instance of record `r` ended, if it ended: its current termination, or the
/// one before a back-off.
fn ended(r: &Record) -> Option<&Termination> {
    match &r.state {
        ContainerState::Running { .. } => None,
        ContainerState::Terminated(t) => Some(t),
        ContainerState::Waiting { .. } => r.last_state.as_ref(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use nodelet_testutil::PodBuilder;
    use serde_json::json;

    use super::*;

    fn spec(policy: &str) -> PodSpec {
        let pod = PodBuilder::new("ns", "p")
            .init_container(json!({"name": "setup", "image": "x"}))
            .init_container(json!({"name": "proxy", "image": "x", "restartPolicy": "Always"}))
            .init_container(json!({"name": "logs", "image": "x", "restartPolicy": "Always"}))
            .container(json!({"name": "app", "image": "x"}))
            .spec(json!({"restartPolicy": policy}))
            .build();
        pod.spec.unwrap_or_default()
    }

    fn running(id: &str) -> Record {
        let mut r = Record::new();
        r.starts = 1;
        r.container_id = id.to_owned();
        r.state = ContainerState::Running {
            started_at: SystemTime::UNIX_EPOCH,
        };
        r
    }

    fn ended_with(code: i32, not_before: Option<Instant>) -> Record {
        let mut r = running("old");
        r.state = ContainerState::Terminated(Termination {
            exit_code: code,
            signal: None,
            reason: "Error".to_owned(),
            message: None,
            started_at: SystemTime::UNIX_EPOCH,
            finished_at: SystemTime::UNIX_EPOCH,
        });
        r.not_before = not_before;
        r
    }

    fn walk<'a>(policy: &'a str, now: Instant, started: &'a [String]) -> Walk<'a> {
        Walk {
            policy,
            now,
            started,
            message: &|c, _| format!("back-off {}", c.name),
        }
    }

    fn records(entries: Vec<(&str, Record)>) -> BTreeMap<String, Record> {
        entries
            .into_iter()
            .map(|(n, r)| (n.to_owned(), r))
            .collect()
    }

    #[test]
    fn a_sidecar_lets_the_next_init_container_start_once_its_instance_started() {
        let now = Instant::now();
        let spec = spec("Always");
        let mut recs = records(vec![
            ("setup", ended_with(0, None)),
            ("proxy", running("p1")),
        ]);
        let (plan, _) = walk("Always", now, &[]).plan(&spec, &mut recs);
        assert!(plan.start.is_empty(), "proxy not started yet: {plan:?}");
        let started = ["p1".to_owned()];
        let (plan, _) = walk("Always", now, &started).plan(&spec, &mut recs);
        assert_eq!(plan.start, ["logs"]);
        recs.insert("logs".into(), running("l1"));
        let started = ["p1".to_owned(), "l1".to_owned()];
        let (plan, _) = walk("Always", now, &started).plan(&spec, &mut recs);
        assert_eq!(plan.start, ["app"], "every init container done");
    }

    #[test]
    fn an_ended_sidecar_restarts_whatever_the_restart_policy_and_after_its_back_off() {
        let now = Instant::now();
        let spec = spec("Never");
        let mut recs = records(vec![
            ("setup", ended_with(0, None)),
            ("proxy", ended_with(0, Some(now + Duration::from_secs(10)))),
            ("logs", running("l1")),
            ("app", running("a1")),
        ]);
        let (plan, wake) = walk("Never", now, &[]).plan(&spec, &mut recs);
        assert!(plan.start.is_empty());
        assert_eq!(
            plan.back_off,
            [("proxy".to_owned(), "back-off proxy".to_owned())]
        );
        assert_eq!(wake, Some(now + Duration::from_secs(10)));
        let later = now + Duration::from_secs(11);
        let (plan, _) = walk("Never", later, &[]).plan(&spec, &mut recs);
        assert_eq!(plan.start, ["proxy"], "the app runs: nothing waits for it");
        assert!(plan.stop.is_empty());
    }

    #[test]
    fn sidecars_are_stopped_once_every_app_container_ended_for_good() {
        let now = Instant::now();
        let started = ["p1".to_owned(), "l1".to_owned()];
        for (policy, code, stops) in [
            ("Never", 1, true),
            ("OnFailure", 0, true),
            ("OnFailure", 1, false),
            ("Always", 0, false),
        ] {
            let spec = spec(policy);
            let mut recs = records(vec![
                ("setup", ended_with(0, None)),
                ("proxy", running("p1")),
                ("logs", running("l1")),
                ("app", ended_with(code, None)),
            ]);
            let (plan, _) = walk(policy, now, &started).plan(&spec, &mut recs);
            if stops {
                assert_eq!(plan.stop, ["proxy", "logs"], "{policy} {code}");
                assert!(plan.start.is_empty(), "{policy} {code}");
            } else {
                assert!(plan.stop.is_empty(), "{policy} {code}");
                assert_eq!(plan.start, ["app"], "{policy} {code}");
            }
        }
        // A sidecar that ended then is not started again.
        let spec = spec("Never");
        let mut recs = records(vec![
            ("setup", ended_with(0, None)),
            ("proxy", ended_with(143, None)),
            ("logs", running("l1")),
            ("app", ended_with(0, None)),
        ]);
        let (plan, _) = walk("Never", now, &started).plan(&spec, &mut recs);
        assert_eq!(plan.stop, ["logs"]);
        assert!(plan.start.is_empty());
    }

    #[test]
    fn a_failed_regular_init_container_before_a_sidecar_still_blocks_the_walk() {
        let now = Instant::now();
        let spec = spec("Never");
        let mut recs = records(vec![("setup", ended_with(1, None))]);
        let (plan, _) = walk("Never", now, &[]).plan(&spec, &mut recs);
        assert!(
            plan.start.is_empty() && plan.back_off.is_empty(),
            "{plan:?}"
        );
        let spec = spec_on_failure();
        let (plan, _) = walk("OnFailure", now, &[]).plan(&spec, &mut recs);
        assert_eq!(plan.start, ["setup"]);
    }

    fn spec_on_failure() -> PodSpec {
        spec("OnFailure")
    }
}
