//! What a node tells the limiter of its asks to windows' owners: one sent, one refused, and a
//! request that ran dry in the end (the node loop and the gRPC service call these).

use super::{KeyId, Limiter, TokenNeed};

impl Limiter {
    /// A request refused for want of tokens was refused in the end at `now_ms`, with the `needs` of
    /// its last check: its wait is over, or it had nothing to wait for. Every window it found no
    /// token of ran dry: no admitted request there asks its owner ahead for the window's length.
    /// The gRPC service and the fleet simulator call this for each such refusal, and for a request
    /// that shadow mode answers OK though its limits refused it. A mark may be lost (a request cut
    /// off in its wait, or a lease replacing the window's book at that moment): that costs at most
    /// one ask ahead a round until the next refusal, and a window at its limit soon refuses again.
    pub fn ran_dry(&self, needs: &[TokenNeed], now_ms: u64) {
        let guard = self.table.guard();
        for need in needs.iter().filter(|n| !n.ahead) {
            if let Some(state) = self.table.get(&need.key, &guard) {
                state.holdings.ran_dry(now_ms);
            }
        }
    }

    /// The owner answered an ask of this node's for window `key`: refused until then.
    /// A refusal holds for at most the window's length (an owner's word is not trusted for
    /// longer, and a lease that comes clears it).
    pub fn ask_refused(&self, key: KeyId, retry_after_ms: u64, now_ms: u64) {
        let guard = self.table.guard();
        if let Some(state) = self.table.get(&key, &guard) {
            let retry_ms = retry_after_ms.clamp(1, state.spec().window_ms());
            state.holdings.refused(now_ms.saturating_add(retry_ms));
        }
    }

    /// Whether an ask for window `key` may go to its owner now: none is on its way, and the
    /// owner has not refused one lately.
    pub fn may_ask(&self, key: KeyId, now_ms: u64) -> bool {
        let guard = self.table.guard();
        self.table
            .get(&key, &guard)
            .is_some_and(|state| state.holdings.may_ask(now_ms))
    }

    /// An ask for window `key` went to its owner: no other goes for `wait_ms` (the requests
    /// wait for its answer).
    pub fn asked(&self, key: KeyId, wait_ms: u64, now_ms: u64) {
        let guard = self.table.guard();
        if let Some(state) = self.table.get(&key, &guard) {
            state.holdings.ask_again_at(now_ms + wait_ms.max(1));
        }
    }
}
