//! Under the ledger, a request that finds no token at its node waits, as the node's gRPC
//! service makes it wait: for the owner's answer to the node's ask, or for a token it holds
//! that becomes valid, at most the ask's wait. It is decided again whenever something arrives,
//! asking again where it may, and counted when a token comes, or refused when its wait is over
//! or waiting is in vain (`TokenNeed::waiting_in_vain`).

use limitmesh::clock::Now;
use limitmesh::limiter::{Decision, TokenNeed};
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

    /// A request refused for want of a token: refused at once if waiting is in vain, as the
    /// gRPC service does; otherwise it waits, for its whole wait if nothing comes.
    pub(super) fn wait_for_token(&mut self, slot: usize, key: usize, decision: &Decision) {
        if TokenNeed::waiting_in_vain(&decision.needs) {
            self.ran_dry(slot, decision);
            self.rec.request(key, slot, ms(self.now_us), false);
            return;
        }
        let Some(core) = self.slots[slot].core.as_ref() else {
            return;
        };
        let until_us = self.now_us + core.limiter().config().ledger.ask_wait_ms * 1_000;
        self.slots[slot].waiting.push(Waiting { key, until_us });
        self.push(until_us, Event::Waiting { slot });
        self.ask_and_wake(slot, decision, until_us);
    }

    /// A waiting request's windows that may ask their owners do, and it wakes when a token it
    /// holds becomes valid (before `until_us`).
    fn ask_and_wake(&mut self, slot: usize, decision: &Decision, until_us: u64) {
        let at = self.at();
        let Some(core) = self.slots[slot].core.as_mut() else {
            return;
        };
        let now = Now::read_at(core.clock(), at);
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
        if let Some(wake_ms) = wake_ms {
            let wake_us = self.now_us + wake_ms.max(1) * 1_000;
            if wake_us < until_us {
                self.push(wake_us, Event::Waiting { slot });
            }
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
    /// their wait is over or waiting is in vain; the others ask again where they may.
    pub(super) fn retry_waiting(&mut self, slot: usize) {
        if self.slots[slot].waiting.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.slots[slot].waiting);
        let mut still = Vec::new();
        for w in waiting {
            let over = self.now_us >= w.until_us;
            let decision = self.decide(slot, w.key, true);
            let admitted = match &decision {
                Some(d) if d.allowed => {
                    self.ask_ahead(slot, d);
                    true
                }
                Some(d) if over || TokenNeed::waiting_in_vain(&d.needs) => {
                    self.ran_dry(slot, d);
                    false
                }
                Some(d) => {
                    self.ask_and_wake(slot, d, w.until_us);
                    still.push(w);
                    continue;
                }
                None if over => false,
                None => {
                    still.push(w);
                    continue;
                }
            };
            self.rec.request(w.key, slot, ms(self.now_us), admitted);
        }
        self.slots[slot].waiting = still;
    }
}
