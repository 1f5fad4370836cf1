//! Under the ledger, a request that finds no token at its node waits, as the node's gRPC
//! service makes it wait: for the owner's answer to the node's ask, or for a token it holds
//! that becomes valid, at most the ask's wait. It is decided when a token comes (or at the end
//! of its wait, refused), and counted then.

use limitmesh::clock::Now;
use limitmesh::limiter::Decision;
use limitmesh::node::Command;

use super::engine::{Engine, Waiting, ms};
use super::event::Event;
use crate::one_check::check_one;

impl Engine<'_> {
    /// Decides a request at `slot` now: `Some(decision)` unless no node runs there. `again`:
    /// a request that waited, decided again (`Limiter::check_again`, as the gRPC service).
    pub(super) fn decide(&mut self, slot: usize, key: usize, again: bool) -> Option<Decision> {
        let core = self.slots[slot].core.as_ref()?;
        let now_ms = Now::read_at(core.clock(), self.at()).cluster_ms;
        let k = &self.keys[key];
        check_one(core.limiter(), (&k.name, k.limit, k.cost), now_ms, again).ok()
    }

    /// An admitted request left windows short: the node asks their owners ahead, as the gRPC
    /// service does ([`TokenNeed::ahead`](limitmesh::limiter::TokenNeed::ahead)).
    pub(super) fn ask_ahead(&mut self, slot: usize, decision: &Decision) {
        let at = self.at();
        let Some(core) = self.slots[slot].core.as_mut() else {
            return;
        };
        let now = Now::read_at(core.clock(), at);
        let mut asked = false;
        for need in decision.needs.iter().filter(|n| n.ahead && n.ask) {
            core.on_command(now, Command::Ask(*need));
            asked = true;
        }
        if asked {
            self.after_input(slot);
        }
    }

    /// A request refused for want of tokens in the end (its wait is over): the windows it
    /// lacked ran dry, as the gRPC service tells its limiter.
    fn ran_dry(&mut self, slot: usize, decision: &Decision) {
        let at = self.at();
        if let Some(core) = self.slots[slot].core.as_ref() {
            let now_ms = Now::read_at(core.clock(), at).cluster_ms;
            core.limiter().ran_dry(&decision.needs, now_ms);
        }
    }

    /// A request refused for want of a token: the node asks the owner where it may, and the
    /// request waits, for its whole wait if nothing comes (the gRPC service refuses at once a
    /// request with nothing to wait for).
    pub(super) fn wait_for_token(&mut self, slot: usize, key: usize, decision: &Decision) {
        let at = self.at();
        let Some(core) = self.slots[slot].core.as_mut() else {
            return;
        };
        let now = Now::read_at(core.clock(), at);
        let wait_ms = core.limiter().config().ledger.ask_wait_ms;
        let mut wake_ms = None;
        for need in &decision.needs {
            if need.ask {
                core.on_command(now, Command::Ask(*need));
            }
            if let Some(at) = need.valid_at_ms {
                wake_ms = Some(at.saturating_sub(now.cluster_ms));
            }
        }
        self.after_input(slot);
        let until_us = self.now_us + wait_ms * 1_000;
        self.slots[slot].waiting.push(Waiting { key, until_us });
        let wake_us = wake_ms.map_or(until_us, |ms| (self.now_us + ms * 1_000).min(until_us));
        self.push(wake_us, Event::Waiting { slot });
        if wake_us < until_us {
            self.push(until_us, Event::Waiting { slot });
        }
    }

    /// The requests waiting at `slot` look again if a lease or an owner's answer arrived
    /// since they last looked (nothing else gives a token before its time: those wake-ups
    /// are `Event::Waiting`), as the gRPC service's waits are woken.
    pub(super) fn retry_if_leased(&mut self, slot: usize) {
        let Some(arrivals) = self.slots[slot]
            .core
            .as_ref()
            .map(|c| c.view().leases_arrivals())
        else {
            return;
        };
        if arrivals != self.slots[slot].leases_seen {
            self.slots[slot].leases_seen = arrivals;
            self.retry_waiting(slot);
        }
    }

    /// The requests waiting at `slot` look again: admitted now if a token came, refused if
    /// their wait is over.
    pub(super) fn retry_waiting(&mut self, slot: usize) {
        if self.slots[slot].waiting.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.slots[slot].waiting);
        let mut still = Vec::new();
        for w in waiting {
            let decision = self.decide(slot, w.key, true);
            let admitted = decision.as_ref().is_some_and(|d| d.allowed);
            match &decision {
                Some(d) if admitted => self.ask_ahead(slot, d),
                Some(d) if self.now_us >= w.until_us => self.ran_dry(slot, d),
                _ => {}
            }
            if admitted || self.now_us >= w.until_us {
                self.rec.request(w.key, slot, ms(self.now_us), admitted);
            } else {
                still.push(w);
            }
        }
        self.slots[slot].waiting = still;
    }
}
