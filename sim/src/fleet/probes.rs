//! Node 0's probes and the observers that look for them: how long an admission at one node
//! takes to be counted at another (staleness), and how long the members take to see a crashed
//! one gone (failure detection).

use limitmesh::clock::Now;
use limitmesh::limiter::Limit;

use super::engine::{Engine, ms};
use super::event::Event;
use super::traffic::{self, PROBE_KEY};
use crate::one_check::check_one;

/// Node 0 admits a probe every this many ms on average, at phases spread over the round.
const PROBE_EVERY_MS: u64 = 100;
/// How often observers look for node 0's probes, and nodes for a crashed member.
const SAMPLE_EVERY_MS: u64 = 5;
/// How often each observer offers a (refused) request on the probe key, so that it holds the
/// key and receives what it is sent.
const OBSERVE_EVERY_MS: u64 = 500;

impl Engine<'_> {
    pub(super) fn probe(&mut self) {
        if self.check(0, PROBE_KEY, traffic::probe_limit()) == Some(true) {
            self.rec.probe_admitted(ms(self.now_us));
        }
        // Every 100 ms on average, at phases spread over the round (37 is prime to 100), so
        // that probes do not all land in step with node 0's rounds.
        self.probes_sent += 1;
        let gap = PROBE_EVERY_MS / 2 + (self.probes_sent * 37) % PROBE_EVERY_MS;
        self.push(self.now_us + gap * 1_000, Event::Probe);
    }

    pub(super) fn observe(&mut self) {
        let refused = Limit {
            max: 0,
            ..traffic::probe_limit()
        };
        for o in self.observers() {
            self.check(o, PROBE_KEY, refused);
        }
        self.push(self.now_us + OBSERVE_EVERY_MS * 1_000, Event::Observe);
    }

    fn observers(&self) -> std::ops::RangeInclusive<usize> {
        1..=self.cfg.observers.min(self.cfg.nodes - 1)
    }

    /// One request for `key` at `slot`'s node: whether it was admitted (`None`: no node runs
    /// there).
    fn check(&mut self, slot: usize, key: &[u8], limit: Limit) -> Option<bool> {
        let core = self.slots[slot].core.as_ref()?;
        let now_ms = Now::read_at(core.clock(), self.at()).cluster_ms;
        Some(
            check_one(core.limiter(), (key, limit, 1), now_ms, false)
                .ok()?
                .allowed,
        )
    }

    pub(super) fn sample(&mut self) {
        self.push(self.now_us + SAMPLE_EVERY_MS * 1_000, Event::Sample);
        let t = ms(self.now_us);
        let observed: Vec<(usize, f64)> = self
            .observers()
            .filter_map(|o| {
                let core = self.slots[o].core.as_ref()?;
                let now = Now::read_at(core.clock(), self.at());
                let seen = core
                    .limiter()
                    .inspect(PROBE_KEY, &traffic::probe_limit(), now.cluster_ms)
                    .map_or(0.0, |i| i.global_admitted);
                Some((o, seen))
            })
            .collect();
        for (o, seen) in observed {
            self.rec.observed(o, seen, t);
        }
        if !t.is_multiple_of(50) || self.pending_detection.is_empty() {
            return;
        }
        let at = self.at();
        let slots = &self.slots;
        let rec = &mut self.rec;
        self.pending_detection.retain(|(gone, since)| {
            let still = slots
                .iter()
                .filter_map(|s| s.core.as_ref())
                .any(|core| core.counts_live(*gone, at));
            if !still {
                rec.detected(t.saturating_sub(*since));
            }
            still
        });
    }
}
