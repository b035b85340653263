//! Which volumes are failing for a node-side reason ([`NodeFault`]), so that the log speaks
//! once per volume and state change: WARN when a volume enters a node fault or its fault
//! changes, INFO when it is set up again — never once per retry. Pure bookkeeping under the
//! manager's lock; the reconciler writes the log lines.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::NodeFault;

/// What the log should say about a volume after the result of its SetUp was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Nothing new: no node fault, the same fault again, or a failure that is not node-side.
    Quiet,
    /// The volume entered node fault `fault`, from none or from `previous`: one WARN line.
    Entered {
        fault: NodeFault,
        previous: Option<NodeFault>,
    },
    /// The volume was set up again after `failures` failed attempts over `failing_for`, the
    /// last node fault being `fault`: one INFO line.
    Recovered {
        fault: NodeFault,
        failures: u32,
        failing_for: Duration,
    },
}

/// The volumes (unique names) in a node fault.
#[derive(Debug, Default)]
pub(crate) struct NodeFaults {
    failing: HashMap<String, Failing>,
}

/// A volume in a node fault.
#[derive(Debug, Clone, Copy)]
struct Failing {
    fault: NodeFault,
    since: Instant,
    failures: u32,
}

impl NodeFaults {
    /// A SetUp of `volume` failed, with `fault` if it was node-side. A failure that is not
    /// node-side (say the ConfigMap was deleted meanwhile) changes no state: a volume in a node
    /// fault stays there (it has not been written since), one not in a node fault stays out.
    pub(crate) fn failed(
        &mut self,
        volume: &str,
        fault: Option<NodeFault>,
        now: Instant,
    ) -> Transition {
        if let Some(failing) = self.failing.get_mut(volume) {
            failing.failures = failing.failures.saturating_add(1);
            return match fault {
                Some(fault) if fault != failing.fault => {
                    let previous = std::mem::replace(&mut failing.fault, fault);
                    Transition::Entered {
                        fault,
                        previous: Some(previous),
                    }
                }
                _ => Transition::Quiet,
            };
        }
        let Some(fault) = fault else {
            return Transition::Quiet;
        };
        self.failing.insert(
            volume.to_owned(),
            Failing {
                fault,
                since: now,
                failures: 1,
            },
        );
        Transition::Entered {
            fault,
            previous: None,
        }
    }

    /// A SetUp of `volume` succeeded: it leaves its node fault, if it was in one.
    pub(crate) fn succeeded(&mut self, volume: &str, now: Instant) -> Transition {
        match self.failing.remove(volume) {
            Some(f) => Transition::Recovered {
                fault: f.fault,
                failures: f.failures,
                failing_for: now.saturating_duration_since(f.since),
            },
            None => Transition::Quiet,
        }
    }

    /// The volume is gone (torn down, or its pod removed): forget it without a log line.
    pub(crate) fn forget(&mut self, volume: &str) {
        self.failing.remove(volume);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOL: &str = "kubernetes.io/configmap/uid-1-cfg";

    fn at(secs: u64) -> Instant {
        // A fixed origin plus an offset: the bookkeeping only subtracts instants.
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *ORIGIN.get_or_init(Instant::now) + Duration::from_secs(secs)
    }

    #[test]
    fn a_volume_entering_a_node_fault_is_reported_once_however_often_it_retries() {
        let mut faults = NodeFaults::default();
        assert_eq!(
            faults.failed(VOL, Some(NodeFault::NoSpace), at(0)),
            Transition::Entered {
                fault: NodeFault::NoSpace,
                previous: None
            }
        );
        for retry in 1..10 {
            assert_eq!(
                faults.failed(VOL, Some(NodeFault::NoSpace), at(retry)),
                Transition::Quiet
            );
        }
        assert_eq!(
            faults.succeeded(VOL, at(30)),
            Transition::Recovered {
                fault: NodeFault::NoSpace,
                failures: 10,
                failing_for: Duration::from_secs(30),
            }
        );
        // Recovered: the next success says nothing, the next fault is new again.
        assert_eq!(faults.succeeded(VOL, at(31)), Transition::Quiet);
        assert!(matches!(
            faults.failed(VOL, Some(NodeFault::NoSpace), at(32)),
            Transition::Entered { previous: None, .. }
        ));
    }

    #[test]
    fn a_change_of_fault_is_reported_again_and_recovery_counts_from_the_first() {
        let mut faults = NodeFaults::default();
        faults.failed(VOL, Some(NodeFault::NoSpace), at(0));
        assert_eq!(
            faults.failed(VOL, Some(NodeFault::ReadOnly), at(5)),
            Transition::Entered {
                fault: NodeFault::ReadOnly,
                previous: Some(NodeFault::NoSpace)
            }
        );
        assert_eq!(
            faults.failed(VOL, Some(NodeFault::ReadOnly), at(6)),
            Transition::Quiet
        );
        assert_eq!(
            faults.succeeded(VOL, at(10)),
            Transition::Recovered {
                fault: NodeFault::ReadOnly,
                failures: 3,
                failing_for: Duration::from_secs(10),
            }
        );
    }

    #[test]
    fn failures_that_are_not_node_side_change_no_state() {
        let mut faults = NodeFaults::default();
        // Not in a node fault: nothing to say, on failure or on success.
        assert_eq!(faults.failed(VOL, None, at(0)), Transition::Quiet);
        assert_eq!(faults.succeeded(VOL, at(1)), Transition::Quiet);
        // In one: an object missing meanwhile neither ends nor changes it.
        faults.failed(VOL, Some(NodeFault::Io), at(2));
        assert_eq!(faults.failed(VOL, None, at(3)), Transition::Quiet);
        assert_eq!(
            faults.failed(VOL, Some(NodeFault::Io), at(4)),
            Transition::Quiet
        );
        assert!(matches!(
            faults.succeeded(VOL, at(5)),
            Transition::Recovered { failures: 3, .. }
        ));
    }

    #[test]
    fn volumes_are_tracked_separately_and_a_forgotten_one_never_reports_recovery() {
        let mut faults = NodeFaults::default();
        let other = "kubernetes.io/secret/uid-1-token";
        assert!(matches!(
            faults.failed(VOL, Some(NodeFault::NoSpace), at(0)),
            Transition::Entered { .. }
        ));
        assert!(matches!(
            faults.failed(other, Some(NodeFault::NoSpace), at(0)),
            Transition::Entered { .. }
        ));
        faults.forget(VOL);
        assert_eq!(faults.succeeded(VOL, at(1)), Transition::Quiet);
        assert!(matches!(
            faults.succeeded(other, at(1)),
            Transition::Recovered { failures: 1, .. }
        ));
    }
}
