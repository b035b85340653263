//! After an agent restart: the containers its previous run started are found from their
//! `state.json`, killed (a restarted agent cannot follow a process that is not its child) and
//! recorded as ended, so no process is left running untracked.

use std::fs;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use nodelet_core::PodUid;
use nodelet_core::runtime::{ContainerState, Termination};
use tracing::info;

use crate::records::{Inner, Record, STATE_FILE, StateFile, start_ticks};

/// Kills the containers a previous run of the agent started and records them ended.
pub(crate) fn recover(inner: &Inner) {
    let Ok(pods) = fs::read_dir(inner.dirs.pods()) else {
        return;
    };
    for pod in pods.flatten() {
        let Ok(uid) = PodUid::new(pod.file_name().to_string_lossy().into_owned()) else {
            continue;
        };
        let Ok(containers) = fs::read_dir(inner.dirs.containers(&uid)) else {
            continue;
        };
        for container in containers.flatten() {
            let path = container.path().join(STATE_FILE);
            let Ok(bytes) = fs::read(&path) else {
                continue;
            };
            let _ = fs::remove_file(&path);
            let Ok(state) = serde_json::from_slice::<StateFile>(&bytes) else {
                continue;
            };
            let name = container.file_name().to_string_lossy().into_owned();
            let alive = state.pid > 0 && start_ticks(state.pid) == Some(state.start_ticks);
            let (reason, message) = if alive {
                let _ = killpg(Pid::from_raw(state.pid), Signal::SIGKILL);
                wait_gone(state.pid);
                info!(pod.uid = %uid, container = %name, pid = state.pid,
                    "killed a container the agent's previous run started");
                (
                    "Error",
                    "the agent restarted and stopped this container: it cannot follow a \
                     process its previous run started",
                )
            } else {
                (
                    "ContainerStatusUnknown",
                    "the container ended while the agent was not running; its exit code is \
                     unknown",
                )
            };
            let mut record = Record::new();
            record.starts = state.starts;
            record.container_id = state.container_id;
            record.state = ContainerState::Terminated(Termination {
                exit_code: 137,
                signal: alive.then_some(9),
                reason: reason.to_owned(),
                message: Some(message.to_owned()),
                started_at: state.started_at,
                finished_at: SystemTime::now(),
            });
            inner
                .pods
                .lock()
                .entry(uid.clone())
                .or_default()
                .insert(name, record);
        }
    }
}

/// Waits (at most 5 s) until `pid` is gone or a zombie.
fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if start_ticks(pid).is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
