//! The windows changed since the last gossip round, queued by checks for the round to emit.
//!
//! A check queues its window the first time it changes it in a round (the window's dirty flag
//! says whether it already is), so the queue holds each window at most once per round. It is a
//! vector behind a mutex, and the round swaps it for an empty one that keeps the capacity of two
//! rounds ago: in a steady state no check allocates (`tests/allocations.rs`), where a channel
//! would allocate a block every few dozen sends.

use std::sync::Mutex;

use super::key::KeyId;

#[derive(Debug, Default)]
pub(crate) struct DirtyQueue {
    queue: Mutex<Vec<KeyId>>,
}

impl DirtyQueue {
    pub fn push(&self, id: KeyId) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(id);
    }

    /// Takes the queued windows into `out` (cleared first), leaving `out`'s old allocation as
    /// the queue.
    pub fn swap_into(&self, out: &mut Vec<KeyId>) {
        out.clear();
        std::mem::swap(
            &mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()),
            out,
        );
    }
}
