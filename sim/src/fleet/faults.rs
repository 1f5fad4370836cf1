//! The faults of a fleet run: partitions, crashes, rolling deploys.

use super::config::FleetFault;
use super::engine::{Engine, ms};

impl Engine<'_> {
    pub(super) fn fault(&mut self, i: usize) {
        let t = ms(self.now_us);
        match self.cfg.faults[i] {
            FleetFault::Partition {
                from_ms, until_ms, ..
            } => {
                let side = self.cfg.partition().map_or(1, |(side, _, _)| side);
                if t == from_ms {
                    self.partition = Some((side, true));
                    self.rec.partitioned = true;
                } else if t == until_ms {
                    self.partition = None;
                }
            }
            FleetFault::Crash { node, .. } => {
                if let Some(core) = self.slots[node].core.take() {
                    self.pending_detection.push((core.identity().node, t));
                    self.rec.crashes += 1;
                }
            }
            FleetFault::Replace { .. } => {}
        }
    }

    /// The `k`-th replacement of a rolling deploy: a node from the end (the last one is kept
    /// for the crash), stopped gracefully, and a new process in its place.
    pub(super) fn replace(&mut self, k: usize) {
        let slot = self.cfg.nodes.saturating_sub(2 + k).max(1);
        let Some(now) = self.now_of(slot) else {
            return;
        };
        if let Some(core) = self.slots[slot].core.as_mut() {
            core.leave(now);
            let gone = core.identity().node;
            self.pending_detection.push((gone, ms(self.now_us)));
        }
        self.after_input(slot);
        self.slots[slot].core = None;
        self.rec.replacements += 1;
        self.boot(slot);
    }
}
