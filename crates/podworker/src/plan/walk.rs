//! The decision of [`Planner::plan`](super::Planner::plan): the kubelet's `computePodActions`
//! and `computeInitContainerActions` over the runtime's typed states of one pod's containers.
//!
//! 0. Restarts asked for a reason that is not a crash (PW-70): each container that runs is to
//!    be stopped, and its instance is then started again at once, whatever `restartPolicy`
//!    says and without back-off.
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
//! 4. Ephemeral containers, in a sandbox only: each once (PW-57), unless step 1 stops the pod.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, PodSpec};
use nodelet_core::backoff::Schedule;
use nodelet_core::runtime::{ContainerState, ContainerStatus, Termination, is_sidecar};

use super::actions::{PodActions, Restart};
use super::backoff::{PodBackoff, Verdict};

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

/// The walk's inputs besides the pod's back-off state.
pub(crate) struct Walk<'a> {
    /// The pod's `restartPolicy` (`Always` when unset).
    pub(crate) policy: &'a str,
    /// The runtime's states of the pod's containers.
    pub(crate) statuses: &'a [ContainerStatus],
    /// `now`, for the back-offs.
    pub(crate) now: SystemTime,
    /// The crash back-off.
    pub(crate) schedule: Schedule,
    /// The container IDs of the sidecar instances that started (their startup probe passed,
    /// or they have none).
    pub(crate) started: &'a [String],
    /// Whether the pod has a sandbox (ephemeral containers start only in one).
    pub(crate) sandbox: bool,
    /// The back-off message of a container, given its delay
    /// (`back-off 10s restarting failed container=…`).
    pub(crate) message: &'a dyn Fn(&Container, Duration) -> String,
}

impl Walk<'_> {
    /// Steps 0–4 of the module docs. Returns the actions and how long until the earliest
    /// back-off ends, when the pod is to be synced again.
    pub(crate) fn plan(
        &self,
        spec: &PodSpec,
        backoff: &mut PodBackoff,
    ) -> (PodActions, Option<Duration>) {
        let mut actions = PodActions::default();
        let mut wake = None;
        // (0)
        backoff.prune(self.statuses);
        for (name, message) in backoff.take_requests() {
            let Some(s) = self.status(&name).filter(|s| s.is_running()) else {
                // Not running: its next instance, whenever it starts, is a new one anyway.
                continue;
            };
            backoff.exempt(&s.container_id);
            actions.restart.push(Restart {
                container: name,
                message,
            });
        }
        // (1)
        let all_ended = spec.containers.iter().all(|c| {
            self.status(&c.name)
                .is_some_and(|s| self.ended_for_good(s, backoff))
        });
        if all_ended {
            actions.stop = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| is_sidecar(c))
                .filter(|c| {
                    self.status(&c.name)
                        .is_some_and(ContainerStatus::is_running)
                })
                .map(|c| c.name.clone())
                .collect();
            return (actions, None);
        }
        // (2)
        let initialized = self.walk_init(spec, backoff, &mut actions, &mut wake);
        // (3)
        if initialized {
            for c in &spec.containers {
                self.step(c, Kind::App, backoff, &mut actions, &mut wake);
            }
        }
        // (4) PW-57: an ephemeral container starts once, whatever the init containers do, and
        // is never restarted; one that never started (a configuration error) is tried again.
        if self.sandbox {
            for c in spec.ephemeral_containers.iter().flatten() {
                if !self.status(&c.name).is_some_and(has_run) {
                    actions.start.push(c.name.clone());
                }
            }
        }
        (actions, wake)
    }

    /// Step 2: whether every init container is done.
    fn walk_init(
        &self,
        spec: &PodSpec,
        backoff: &mut PodBackoff,
        actions: &mut PodActions,
        wake: &mut Option<Duration>,
    ) -> bool {
        let init: &[Container] = spec.init_containers.as_deref().unwrap_or_default();
        let app_running = spec.containers.iter().any(|c| {
            self.status(&c.name)
                .is_some_and(ContainerStatus::is_running)
        });
        for (i, c) in init.iter().enumerate() {
            let past = app_running
                || init[i + 1..]
                    .iter()
                    .any(|l| self.status(&l.name).is_some_and(has_run));
            if is_sidecar(c) {
                let step = self.step(c, Kind::Sidecar, backoff, actions, wake);
                let ready = matches!(step, Step::Running)
                    && self
                        .status(&c.name)
                        .is_some_and(|s| self.started.contains(&s.container_id));
                if !past && !ready {
                    return false;
                }
            } else if !past {
                let step = self.step(c, Kind::Init, backoff, actions, wake);
                if !matches!(step, Step::Done(true)) {
                    return false;
                }
            }
        }
        true
    }

    /// The runtime's state of container `name`, if it has one.
    fn status(&self, name: &str) -> Option<&ContainerStatus> {
        self.statuses.iter().find(|s| s.name == name)
    }

    /// Whether the app container of status `s` ended and will not be restarted.
    fn ended_for_good(&self, s: &ContainerStatus, backoff: &PodBackoff) -> bool {
        ended(s)
            .is_some_and(|t| !backoff.is_exempt(&s.container_id) && !self.restarts(Kind::App, t))
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
        backoff: &mut PodBackoff,
        actions: &mut PodActions,
        wake: &mut Option<Duration>,
    ) -> Step {
        let Some(s) = self.status(&c.name) else {
            actions.start.push(c.name.clone());
            return Step::Queued;
        };
        if s.is_running() {
            return Step::Running;
        }
        let Some(t) = ended(s) else {
            // Waiting for its first start (a configuration or image error): try again.
            actions.start.push(c.name.clone());
            return Step::Queued;
        };
        // PW-70: stopped for a restart that is not a crash: at once.
        if backoff.is_exempt(&s.container_id) {
            actions.start.push(c.name.clone());
            return Step::Queued;
        }
        if !self.restarts(kind, t) {
            return Step::Done(t.exit_code == 0);
        }
        match backoff.verdict(&c.name, &s.container_id, t, self.now, self.schedule) {
            Verdict::Wait { delay, remaining } => {
                let message = (self.message)(c, delay);
                backoff.set_waiting(&c.name, message.clone());
                actions.back_off.push((c.name.clone(), message));
                *wake = Some(wake.map_or(remaining, |w: Duration| w.min(remaining)));
            }
            Verdict::Go => actions.start.push(c.name.clone()),
        }
        Step::Queued
    }
}

/// How the last instance of status `s` ended, if it ended: its current termination, or the
/// one before a failed start.
fn ended(s: &ContainerStatus) -> Option<&Termination> {
    match &s.state {
        ContainerState::Running { .. } => None,
        ContainerState::Terminated(t) => Some(t),
        ContainerState::Waiting { .. } => s.last_state.as_ref(),
    }
}

/// Whether an instance of the container of status `s` ever started (a container waiting for
/// its first start has none).
fn has_run(s: &ContainerStatus) -> bool {
    !matches!(s.state, ContainerState::Waiting { .. })
        || s.last_state.is_some()
        || !s.container_id.is_empty()
}

#[cfg(test)]
mod tests {
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

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    fn running(name: &str, id: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.to_owned(),
            state: ContainerState::Running { started_at: t0() },
            last_state: None,
            restart_count: 0,
            container_id: id.to_owned(),
        }
    }

    /// Container `name` whose instance `id` ended with `code` at `t0` after a second.
    fn ended_with(name: &str, id: &str, code: i32) -> ContainerStatus {
        let mut s = running(name, id);
        s.state = ContainerState::Terminated(Termination {
            exit_code: code,
            signal: None,
            reason: "Error".to_owned(),
            message: None,
            started_at: t0() - Duration::from_secs(1),
            finished_at: t0(),
        });
        s
    }

    struct Case<'a> {
        policy: &'a str,
        now: SystemTime,
        started: &'a [String],
    }

    impl Case<'_> {
        fn plan(
            &self,
            spec: &PodSpec,
            statuses: &[ContainerStatus],
            backoff: &mut PodBackoff,
        ) -> (PodActions, Option<Duration>) {
            let walk = Walk {
                policy: self.policy,
                statuses,
                now: self.now,
                schedule: Schedule::CRASH_LOOP,
                started: self.started,
                sandbox: true,
                message: &|c, _| format!("back-off {}", c.name),
            };
            walk.plan(spec, backoff)
        }
    }

    fn case<'a>(policy: &'a str, now: SystemTime, started: &'a [String]) -> Case<'a> {
        Case {
            policy,
            now,
            started,
        }
    }

    #[test]
    fn a_sidecar_lets_the_next_init_container_start_once_its_instance_started() {
        let spec = spec("Always");
        let mut b = PodBackoff::default();
        let mut statuses = vec![ended_with("setup", "s1", 0), running("proxy", "p1")];
        let (plan, _) = case("Always", t0(), &[]).plan(&spec, &statuses, &mut b);
        assert!(plan.start.is_empty(), "proxy not started yet: {plan:?}");
        let started = ["p1".to_owned()];
        let (plan, _) = case("Always", t0(), &started).plan(&spec, &statuses, &mut b);
        assert_eq!(plan.start, ["logs"]);
        statuses.push(running("logs", "l1"));
        let started = ["p1".to_owned(), "l1".to_owned()];
        let (plan, _) = case("Always", t0(), &started).plan(&spec, &statuses, &mut b);
        assert_eq!(plan.start, ["app"], "every init container done");
    }

    #[test]
    fn an_ended_sidecar_restarts_whatever_the_restart_policy_and_after_its_back_off() {
        let spec = spec("Never");
        let mut b = PodBackoff::default();
        let mut statuses = vec![
            ended_with("setup", "s1", 0),
            ended_with("proxy", "p1", 0),
            running("logs", "l1"),
            running("app", "a1"),
        ];
        // Its first end: at once.
        let (plan, wake) = case("Never", t0(), &[]).plan(&spec, &statuses, &mut b);
        assert_eq!(plan.start, ["proxy"]);
        assert_eq!(wake, None);
        // Its second end: 10 s after it.
        statuses[1] = ended_with("proxy", "p2", 0);
        let now = t0() + Duration::from_secs(1);
        let (plan, wake) = case("Never", now, &[]).plan(&spec, &statuses, &mut b);
        assert!(plan.start.is_empty());
        assert_eq!(
            plan.back_off,
            [("proxy".to_owned(), "back-off proxy".to_owned())]
        );
        assert_eq!(wake, Some(Duration::from_secs(9)));
        let later = t0() + Duration::from_secs(11);
        let (plan, _) = case("Never", later, &[]).plan(&spec, &statuses, &mut b);
        assert_eq!(plan.start, ["proxy"], "the app runs: nothing waits for it");
        assert!(plan.stop.is_empty());
    }

    #[test]
    fn sidecars_are_stopped_once_every_app_container_ended_for_good() {
        let started = ["p1".to_owned(), "l1".to_owned()];
        for (policy, code, stops) in [
            ("Never", 1, true),
            ("OnFailure", 0, true),
            ("OnFailure", 1, false),
            ("Always", 0, false),
        ] {
            let spec = spec(policy);
            let statuses = [
                ended_with("setup", "s1", 0),
                running("proxy", "p1"),
                running("logs", "l1"),
                ended_with("app", "a1", code),
            ];
            let mut b = PodBackoff::default();
            let (plan, _) = case(policy, t0(), &started).plan(&spec, &statuses, &mut b);
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
        let statuses = [
            ended_with("setup", "s1", 0),
            ended_with("proxy", "p1", 143),
            running("logs", "l1"),
            ended_with("app", "a1", 0),
        ];
        let mut b = PodBackoff::default();
        let (plan, _) = case("Never", t0(), &started).plan(&spec, &statuses, &mut b);
        assert_eq!(plan.stop, ["logs"]);
        assert!(plan.start.is_empty());
    }

    #[test]
    fn a_failed_regular_init_container_before_a_sidecar_still_blocks_the_walk() {
        let statuses = [ended_with("setup", "s1", 1)];
        let mut b = PodBackoff::default();
        let (plan, _) = case("Never", t0(), &[]).plan(&spec("Never"), &statuses, &mut b);
        assert!(
            plan.start.is_empty() && plan.back_off.is_empty(),
            "{plan:?}"
        );
        let (plan, _) = case("OnFailure", t0(), &[]).plan(&spec("OnFailure"), &statuses, &mut b);
        assert_eq!(plan.start, ["setup"]);
    }

    // PW-70: a restart asked for a reason that is not a crash stops the running instance and
    // starts the next one at once: no back-off, and under `restartPolicy: Never` too.
    #[test]
    fn a_requested_restart_stops_a_running_container_and_starts_it_at_once_whatever_the_policy() {
        let spec = spec("Never");
        let started = ["p1".to_owned(), "l1".to_owned()];
        let mut statuses = vec![
            ended_with("setup", "s1", 0),
            running("proxy", "p1"),
            running("logs", "l1"),
            running("app", "a1"),
        ];
        let mut b = PodBackoff::default();
        b.request_restart("app", "config changed".to_owned());
        b.request_restart("setup", "config changed".to_owned());
        let (plan, _) = case("Never", t0(), &started).plan(&spec, &statuses, &mut b);
        assert_eq!(
            plan.restart,
            [Restart {
                container: "app".to_owned(),
                message: "config changed".to_owned()
            }],
            "a container that does not run has nothing to restart"
        );
        assert!(plan.start.is_empty() && plan.stop.is_empty());
        // Stopped (143): started again at once, the sidecars kept.
        statuses[3] = ended_with("app", "a1", 143);
        let (plan, wake) = case("Never", t0(), &started).plan(&spec, &statuses, &mut b);
        assert_eq!(plan.start, ["app"]);
        assert!(plan.stop.is_empty() && plan.back_off.is_empty() && wake.is_none());
        // Its next instance ending under `Never` is an end for good.
        statuses[3] = ended_with("app", "a2", 1);
        let (plan, _) = case("Never", t0(), &started).plan(&spec, &statuses, &mut b);
        assert!(plan.start.is_empty());
        assert_eq!(plan.stop, ["proxy", "logs"]);
    }

    #[test]
    fn ephemeral_containers_start_once_and_only_in_a_sandbox() {
        let pod = PodBuilder::new("ns", "p")
            .container(json!({"name": "app", "image": "x"}))
            .spec(json!({"ephemeralContainers": [{"name": "debug", "image": "x"}]}))
            .build();
        let spec = pod.spec.unwrap_or_default();
        let statuses = [running("app", "a1")];
        let mut b = PodBackoff::default();
        let (plan, _) = case("Always", t0(), &[]).plan(&spec, &statuses, &mut b);
        assert_eq!(plan.start, ["debug"]);
        let walk = Walk {
            policy: "Always",
            statuses: &statuses,
            now: t0(),
            schedule: Schedule::CRASH_LOOP,
            started: &[],
            sandbox: false,
            message: &|c, _| c.name.clone(),
        };
        assert!(walk.plan(&spec, &mut b).0.start.is_empty());
        let statuses = [running("app", "a1"), ended_with("debug", "d1", 1)];
        let (plan, _) = case("Always", t0(), &[]).plan(&spec, &statuses, &mut b);
        assert!(plan.start.is_empty(), "never again");
    }
}
