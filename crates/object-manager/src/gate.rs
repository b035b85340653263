//! [`PodGate`]: one scout per newly registered pod (OM-31). The Node authorizer answers a
//! node's read of a pod's object from a graph it fills from its own informers, which trail the
//! pod's creation (tens of milliseconds on a busy server). A node that reads all of a new pod's
//! objects at once while the graph lags has each of them refused and retried: at a node's
//! start, hundreds of refused requests.
//!
//! 1. The first reflector started for a pod's objects (in one manager) is the pod's *scout*:
//!    its first read goes out; the first reads of the pod's other objects wait.
//! 2. The scout's read answered (or refused in any other way than for want of a
//!    relationship, or refused that way for longer than the grace, a denial) opens the gate:
//!    the others go.
//! 3. A scout refused for want of a relationship retries on its own schedule (`refusal.rs`);
//!    the others keep waiting, so one request per pod is refused instead of one per object.
//! 4. A scout that stops before (2) (its reflector cancelled) gives the role to a waiter.
//!
//! Only first reads pass the gate; nothing after it waits for one.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

/// A pod's gate (see the module docs). Shared by the reflectors a pod's registration started.
#[derive(Debug)]
pub(crate) struct PodGate {
    state: watch::Sender<GateState>,
    /// Serialises taking the scout role.
    take: Mutex<()>,
}

#[derive(Debug, Clone, Copy, Default)]
struct GateState {
    scout: bool,
    open: bool,
}

/// The scout role, held by the scout's reflector run until its read was answered (4).
#[derive(Debug)]
pub(crate) struct Scout {
    gate: Arc<PodGate>,
}

impl PodGate {
    pub(crate) fn new() -> Self {
        PodGate {
            state: watch::channel(GateState::default()).0,
            take: Mutex::new(()),
        }
    }

    /// Waits until the gate is open (`None`) or this reader becomes the scout (1), (4).
    ///
    /// # Cancel safety
    /// Cancel-safe: a waiter dropped holds no role.
    pub(crate) async fn pass(self: &Arc<Self>) -> Option<Scout> {
        let mut rx = self.state.subscribe();
        loop {
            {
                let _take = self.take.lock();
                let state = *rx.borrow_and_update();
                if state.open {
                    return None;
                }
                if !state.scout {
                    self.state.send_modify(|s| s.scout = true);
                    return Some(Scout { gate: self.clone() });
                }
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Opens the gate for good (2).
    pub(crate) fn open(&self) {
        self.state.send_if_modified(|s| {
            let was = s.open;
            s.open = true;
            !was
        });
    }

    /// Whether the gate is open.
    pub(crate) fn is_open(&self) -> bool {
        self.state.borrow().open
    }
}

impl Drop for Scout {
    fn drop(&mut self) {
        // (4): the role goes back; a waiter takes it unless the gate is open.
        self.gate.state.send_modify(|s| s.scout = false);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_scout_goes_the_others_wait_until_it_opens_the_gate() {
        let gate = Arc::new(PodGate::new());
        let scout = gate.pass().await;
        assert!(scout.is_some(), "the first reader scouts");
        let passed = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (gate, passed) = (gate.clone(), passed.clone());
                tokio::spawn(async move {
                    let role = gate.pass().await;
                    passed.fetch_add(1, Ordering::SeqCst);
                    role.is_some()
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            passed.load(Ordering::SeqCst),
            0,
            "nobody passes a closed gate"
        );
        gate.open();
        drop(scout);
        for w in waiters {
            assert_eq!(
                w.await.ok(),
                Some(false),
                "through the open gate, not as scouts"
            );
        }
        assert!(gate.is_open());
        assert!(gate.pass().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_scout_that_stops_hands_the_role_to_one_waiter() {
        let gate = Arc::new(PodGate::new());
        let scout = gate.pass().await;
        let scouts = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let (gate, scouts) = (gate.clone(), scouts.clone());
                tokio::spawn(async move {
                    if let Some(role) = gate.pass().await {
                        scouts.fetch_add(1, Ordering::SeqCst);
                        // The new scout's read answered.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        role.gate.open();
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(scout);
        for w in waiters {
            let _ = w.await;
        }
        assert_eq!(scouts.load(Ordering::SeqCst), 1, "exactly one takes over");
        assert!(gate.is_open());
    }
}
