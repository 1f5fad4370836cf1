//! How a simulated host decides a request. Under the ledger a request that finds no token
//! waits, as the node's gRPC service makes it wait (`limitmesh::rpc`'s token wait): the node
//! asks the window's owner, and the request is decided again every millisecond until a token
//! comes or its wait (`ask_wait_ms`) is over, refused then. An admitted request that left its
//! window short asks ahead. Under the other policies a request is decided at once.

use std::sync::Arc;

use limitmesh::clock::{Clock, ClusterClock};
use limitmesh::limiter::{CheckItem, CheckRequest, Decision, Limit, Limiter, Policy};
use limitmesh::node::Command;
use tokio::sync::mpsc;

use crate::clock::SimClock;

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
        let item = [CheckItem {
            key,
            limit,
            cost: 1,
        }];
        let req = CheckRequest {
            items: &item,
            dry_run: false,
        };
        let now_ms = self.clock.now_ms();
        if again {
            self.limiter.check_again(&req, now_ms).ok()
        } else {
            self.limiter.check(&req, now_ms).ok()
        }
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
        self.ask(&decision);
        if decision.allowed || self.asks.is_none() || decision.needs.is_empty() {
            return Some(decision.allowed);
        }
        self.pending.push(Pending {
            traffic,
            key: key.to_vec(),
            limit,
            until_t: t + self.wait_ms,
        });
        None
    }

    /// Decides the waiting requests again at true time `t`: each one admitted now, or refused
    /// if its wait is over, is in `decided`.
    pub(super) fn retry(&mut self, t: u64, decided: &mut Vec<(Traffic, bool)>) {
        if self.pending.is_empty() {
            return;
        }
        let now_ms = self.clock.now_ms();
        let mut still = Vec::with_capacity(self.pending.len());
        for p in std::mem::take(&mut self.pending) {
            let decision = self.decide(&p.key, p.limit, true);
            let admitted = decision.as_ref().is_some_and(|d| d.allowed);
            let over = t >= p.until_t;
            match &decision {
                Some(d) if admitted => self.ask(d),
                Some(d) if over => self.limiter.ran_dry(&d.needs, now_ms),
                _ => {}
            }
            if admitted || over {
                decided.push((p.traffic, admitted));
            } else {
                still.push(p);
            }
        }
        self.pending = still;
    }
}
