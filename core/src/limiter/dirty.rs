//! The windows to emit at the next gossip round, queued by checks and by the round itself.
//!
//! A check queues its window the first time it changes it (the window's `queued` flag says
//! whether it already is), and a round queues every window it emitted as changed once more, so
//! that one lost datagram does not leave a peer without a key's last state until anti-entropy.
//! The queue is a vector behind a mutex. The round takes it, and gives it back with what it
//! queues again and room for an eighth more, so that in a steady state no check allocates
//! (`tests/allocations.rs`; a channel allocated a block every few dozen sends), while a quiet
//! round leaves almost nothing allocated.

use std::sync::Mutex;

use super::key::KeyId;

#[derive(Debug, Default)]
pub(crate) struct DirtyQueue {
    queue: Mutex<Vec<KeyId>>,
}

impl DirtyQueue {
    pub fn push(&self, id: KeyId) {
        self.lock().push(id);
    }

    /// Takes the queued windows.
    pub fn take(&self) -> Vec<KeyId> {
        std::mem::take(&mut *self.lock())
    }

    /// Queues `again` (windows the round emitted as changed), with room for an eighth more
    /// and a few dozen new ones before a check has to grow the queue.
    pub fn queue_again(&self, again: &[KeyId]) {
        let mut queue = self.lock();
        queue.reserve(again.len() + again.len() / 8 + 64);
        queue.extend_from_slice(again);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<KeyId>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}
