//! How a simulated host decides a request. Under the ledger a request that finds no token
//! waits, as the node's gRPC service makes it wait (`limitmesh::rpc`'s token wait): the node
//! asks the window's owner, and the request is decided again every millisecond (asking again
//! where it may) until a token comes, its wait (`ask_wait_ms`) is over, or waiting is in vain
//! (`TokenNeed::in_vain`); refused then, its windows ran dry. An admitted request that left
//! its window short asks ahead. Under the other policies a request is decided at once.

use std::sync::Arc;

use limitmesh::clock::{Clock, ClusterClock};
use limitmesh::limiter::{Decision, Limit, Limiter, Policy, TokenNeed};
use limitmesh::node::Command;
use tokio::sync::mpsc;

use crate::clock::SimClock;
use crate::one_check::check_one;

/// What a request was for, so that its decision is recorded where it belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Traffic {
    Main,
    /// One of the scenario's other descriptors.
    Descriptor(usize),
    Probe,
    /// Background and convergence keys: decided, never recorded.
    Unrecorded,
}

/// A request waiting for a token.
#[derive(Debug)]
struct Pending {
    traffic: Traffic,
    key: Vec<u8>,
    limit: Limit,
    /// True time (ms) at which its wait is over.
    until_t: u64,
}

/// One host's requests: decided at once, or waiting for a token under the ledger.
pub(super) struct Requests {
    limiter: Arc<Limiter>,
    clock: Arc<ClusterClock<SimClock>>,
    /// The node's command channel, for asks; `None` unless the limiter admits under the
    /// ledger.
    asks: Option<mpsc::Sender<Command>>,
    wait_ms: u64,
    pending: Vec<Pending>,
}

impl Requests {
    pub(super) fn new(
        limiter: Arc<Limiter>,
        clock: Arc<ClusterClock<SimClock>>,
        commands: mpsc::Sender<Command>,
    ) -> Self {
        let ledger = matches!(limiter.config().policy, Policy::Ledger(_));
        let wait_ms = limiter.config().ledger.ask_wait_ms;
        Self {
            limiter,
            clock,
            asks: ledger.then_some(commands),
            wait_ms,
            pending: Vec::new(),
        }
    }

    fn decide(&self, key: &[u8], limit: Limit, again: bool) -> Option<Decision> {
        check_one(&self.limiter, (key, limit, 1), self.clock.now_ms(), again).ok()
    }

    /// Sends the asks `decision` names: those ahead of an admitted request, or those of a
    /// refused one that may ask. A full channel skips them, as the gRPC service does.
    fn ask(&self, decision: &Decision) {
        let Some(asks) = &self.asks else {
            return;
        };
        for need in decision.needs.iter().filter(|n| n.ask) {
            if decision.allowed == need.ahead {
                let _ = asks.try_send(Command::Ask(*need));
            }
        }
    }

    /// Decides a request arriving at true time `t`: `Some(admitted)`, or `None` if it waits
    /// for a token (its decision comes from [`Requests::retry`]).
    pub(super) fn check(
        &mut self,
        traffic: Traffic,
        key: &[u8],
        limit: Limit,
        t: u64,
    ) -> Option<bool> {
        let Some(decision) = self.decide(key, limit, false) else {
            return Some(false);
        };
        if self.asks.is_none() {
            return Some(decision.allowed);
        }
        self.ask(&decision);
        if decision.allowed || self.in_vain(&decision) {
            return Some(self.decided(&decision));
        }
        self.pending.push(Pending {
            traffic,
            key: key.to_vec(),
            limit,
            until_t: t + self.wait_ms,
        });
        None
    }

    /// Whether waiting for `decision`'s tokens is in vain, as the gRPC service judges it.
    fn in_vain(&self, decision: &Decision) -> bool {
        TokenNeed::waiting_in_vain(&decision.needs)
    }

    /// The end of a request's wait under the ledger: refused, its windows ran dry.
    fn decided(&self, decision: &Decision) -> bool {
        if !decision.allowed {
            self.limiter.ran_dry(&decision.needs, self.clock.now_ms());
        }
        decision.allowed
    }

    /// Decides the waiting requests again at true time `t`: each one admitted now, refused if
    /// its wait is over or waiting is in vain, is in `decided`.
    pub(super) fn retry(&mut self, t: u64, decided: &mut Vec<(Traffic, bool)>) {
        if self.pending.is_empty() {
            return;
        }
        let mut still = Vec::with_capacity(self.pending.len());
        for p in std::mem::take(&mut self.pending) {
            let Some(decision) = self.decide(&p.key, p.limit, true) else {
                decided.push((p.traffic, false));
                continue;
            };
            self.ask(&decision);
            if decision.allowed || t >= p.until_t || self.in_vain(&decision) {
                decided.push((p.traffic, self.decided(&decision)));
            } else {
                still.push(p);
            }
        }
        self.pending = still;
    }
}
