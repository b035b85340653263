//! [`StreamSlot`]: a stream's claim on its connection, shared by the pool (which hands slots
//! out) and [`TrackedBody`](crate::body::TrackedBody) (which holds one until its body ends).
//! Its own module so that `body` and `pool` do not import each other.

use std::sync::Weak;

/// Whoever counts the streams on its connections; told when a slot is given back.
pub(crate) trait SlotOwner: Send + Sync {
    /// The stream on connection `id` ended.
    fn release(&self, id: u64);
}

/// A stream's claim on its connection; dropping it frees the slot (step (5) of the module
/// docs).
pub(crate) struct StreamSlot {
    owner: Weak<dyn SlotOwner>,
    id: u64,
}

impl StreamSlot {
    pub(crate) fn new(owner: Weak<dyn SlotOwner>, id: u64) -> Self {
        StreamSlot { owner, id }
    }

    /// The connection this slot is on.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.upgrade() {
            owner.release(self.id);
        }
    }
}
