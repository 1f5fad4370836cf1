//! What an owner's books keep for one user of a window: the lease it holds open for it (the
//! segments that may still hold tokens, and its end) and the user's last word on them.

use super::super::lease::{HeldLease, HoldingsReport, Lease, Segment};
use super::LedgerParams;

#[derive(Debug, Clone, Copy)]
pub(super) struct Granted {
    pub(super) segment: Segment,
    /// The first message that carried it.
    pub(super) sent_in: u32,
}

#[derive(Debug, Clone, Default)]
pub(super) struct UserBooks {
    /// The last message sent (0: none).
    pub(super) seq: u32,
    pub(super) expires_ms: u64,
    pub(super) last_segment: u32,
    /// Segments that may still hold tokens.
    pub(super) segments: Vec<Granted>,
    /// The user's newest report, and the version of the emission it came with.
    pub(super) report: Option<(u64, HoldingsReport)>,
    /// What the user last said it was offered over the window.
    pub(super) demand: u32,
    /// The limit the user last said the window has (its rules).
    pub(super) limit: u32,
    pub(super) last_heard_ms: u64,
    /// The most tokens one request of the user's has asked for (0: it never asked). Its
    /// requests are drawn in units of that size, so what covers its demand is counted in them.
    pub(super) cost: u64,
    /// How many of its asks running, up to the last, came with time left for the answer to
    /// reach it within the ask's wait (at most `NEAR_ASKS`).
    pub(super) asks_in_time: u8,
}

impl UserBooks {
    /// Tokens of `g` the user may still spend, by its last report: all of them if the report
    /// was made before the user had `g`.
    pub(super) fn unspent(&self, me: u128, g: &Granted) -> u32 {
        let Some((_, report)) = &self.report else {
            return g.segment.count;
        };
        let Some(mine) = report.of(me).filter(|m| m.seq >= g.sent_in) else {
            return g.segment.count;
        };
        // Closed, or ended with no newer message on its way to revive it: nothing more.
        if report.closed || (mine.lapsed && mine.seq >= self.seq) {
            return 0;
        }
        mine.spent
            .iter()
            .find(|(id, _)| *id == g.segment.id)
            .map_or(g.segment.count, |(_, spent)| {
                g.segment.count.saturating_sub(*spent)
            })
    }

    pub(super) fn unspent_total(&self, me: u128) -> u64 {
        self.segments
            .iter()
            .map(|g| u64::from(self.unspent(me, g)))
            .sum()
    }

    /// Forgets what is spent, and a lease whose every token has left the window.
    pub(super) fn prune(&mut self, me: u128, now_ms: u64, params: &LedgerParams) {
        if params.tail_of(self.expires_ms) <= now_ms {
            self.segments.clear();
            return;
        }
        let keep: Vec<Granted> = self
            .segments
            .iter()
            .filter(|g| self.unspent(me, g) > 0)
            .copied()
            .collect();
        self.segments = keep;
    }

    /// What an ask says of this owner's lease, taken only for the numbering: the next
    /// message and segment continue the user's. What it says was spent is not taken: no
    /// register of those spends came with it, and a report counts only with one.
    pub(super) fn take_word(&mut self, me: u128, h: HeldLease) {
        if h.owner != me {
            return;
        }
        self.seq = self.seq.max(h.seq);
        let last = h.spent.iter().map(|(id, _)| *id).max().unwrap_or(0);
        self.last_segment = self.last_segment.max(last);
    }

    pub(super) fn message(&mut self, me: u128) -> Lease {
        self.seq += 1;
        Lease {
            owner: me,
            seq: self.seq,
            expires_ms: self.expires_ms,
            segments: self.segments.iter().map(|g| g.segment).collect(),
        }
    }
}
