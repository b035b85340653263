//! The runtime's records: what it knows of each container instance ([`Record`]), the state
//! shared by the runtime and its tasks ([`Inner`]), and the `state.json` a running instance
//! leaves for a restarted agent ([`StateFile`]).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::time::SystemTime;

use nodelet_core::runtime::{CONFIG_CHANGED, ContainerState, Termination};
use nodelet_core::{PodDirs, PodUid};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio_util::task::TaskTracker;

use crate::config::RuntimeConfig;

pub(crate) struct Inner {
    pub(crate) config: RuntimeConfig,
    pub(crate) dirs: PodDirs,
    pub(crate) pods: Mutex<HashMap<PodUid, BTreeMap<String, Record>>>,
    pub(crate) changes: broadcast::Sender<PodUid>,
    /// The pods' IPC namespaces (PW-58).
    pub(crate) ipc: crate::ipc::PodIpc,
    /// The agent's task tracker: every task the runtime starts (log copies, followers).
    pub(crate) tasks: TaskTracker,
}

pub(crate) struct Record {
    /// Instances started so far (the next instance's log file is `<starts>.log`).
    pub(crate) starts: u32,
    pub(crate) state: ContainerState,
    pub(crate) last_state: Option<Termination>,
    pub(crate) container_id: String,
    /// The process group of the running instance.
    pub(crate) pgid: Option<i32>,
    /// `true` once the running instance ended (for `kill_pod`).
    pub(crate) ended: watch::Sender<bool>,
    /// The running instance is being stopped for a new environment (FC-12): its end is
    /// recorded as [`CONFIG_CHANGED`], with no back-off.
    pub(crate) config_restart: bool,
}

impl Record {
    pub(crate) fn new() -> Self {
        Self {
            starts: 0,
            state: ContainerState::Waiting {
                reason: "ContainerCreating".to_owned(),
                message: None,
            },
            last_state: None,
            container_id: String::new(),
            pgid: None,
            ended: watch::channel(true).0,
            config_restart: false,
        }
    }

    pub(crate) fn restart_count(&self) -> u32 {
        self.starts.saturating_sub(1)
    }
}

/// What `state.json` holds for a running instance.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StateFile {
    pub(crate) pid: i32,
    pub(crate) start_ticks: u64,
    pub(crate) starts: u32,
    pub(crate) container_id: String,
    pub(crate) started_at: SystemTime,
}

pub(crate) const STATE_FILE: &str = "state.json";
pub(crate) const LAUNCH_FILE: &str = "launch.json";
pub(crate) const SCRATCH_DIR: &str = "scratch";
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Inner {
    /// Runs `f` on the record of container `name` of pod `uid` (made when there is none),
    /// under the lock of the records.
    pub(crate) fn with_record<T>(
        &self,
        uid: &PodUid,
        name: &str,
        f: impl FnOnce(&mut Record) -> T,
    ) -> T {
        let mut pods = self.pods.lock();
        let record = pods
            .entry(uid.clone())
            .or_default()
            .entry(name.to_owned())
            .or_insert_with(Record::new);
        f(record)
    }

    /// Records the end of an instance and announces the pod.
    pub(crate) fn record_end(
        &self,
        uid: &PodUid,
        name: &str,
        mut termination: Termination,
        start_error: bool,
    ) {
        {
            let mut pods = self.pods.lock();
            let Some(r) = pods.get_mut(uid).and_then(|p| p.get_mut(name)) else {
                return;
            };
            if std::mem::take(&mut r.config_restart) && !start_error {
                // FC-12: stopped for a new environment, not a crash: shown as ours.
                termination.reason = CONFIG_CHANGED.to_owned();
            }
            if start_error {
                if let ContainerState::Terminated(t) = &r.state {
                    r.last_state = Some(t.clone());
                }
                r.starts += 1;
                r.container_id = format!("nodelet://{:032x}", rand::random::<u128>());
            }
            r.state = ContainerState::Terminated(termination);
            r.pgid = None;
            r.ended.send_replace(true);
        }
        let _ = self.changes.send(uid.clone());
    }
}

impl Record {
    pub(crate) fn state_is_running(&self) -> bool {
        matches!(self.state, ContainerState::Running { .. })
    }
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot (with
/// the pid, it names one process even after the pid is reused).
pub(crate) fn start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name: field 3 (state) is index 0, so field 22 is index 19.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}
