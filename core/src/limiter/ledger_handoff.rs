//! A window handed from its owner to the next: an owner that leaves gracefully stops leasing,
//! then sends each window's next owner the slots its books hold (every spend its registers
//! record and every token leased and not known spent, each over the span it can occupy a
//! sliding window). The next owner counts those slots beside its own books until each span
//! ends, so it may lease the window at once instead of waiting out the previous owner's
//! leases (`ALGORITHM.md` §10, L4).

use super::ledger_owner::OwnedWindows;
use super::{KeyId, Limiter};
use crate::ledger::Span;
use crate::window::WindowSpec;

/// The slots one window's books hold, for the window's next owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    pub key: KeyId,
    pub window_ms: u64,
    pub buckets: u16,
    /// Each `count` slots from `from_ms` until `until_ms` (cluster time).
    pub spans: Vec<Span>,
}

impl Limiter {
    /// The slots every window this node keeps books for holds from `now_ms` on, in at most
    /// `most` spans a window (merged so that they take at least the slots they stand for).
    /// The caller must have stopped this node leasing first: a lease granted after this is in
    /// no handoff.
    pub fn hand_over(&self, now_ms: u64, most: usize) -> Vec<Handoff> {
        let guard = self.table.guard();
        let mut owned = self.lock_owned();
        let OwnedWindows { windows, handed } = &mut *owned;
        // Windows with books, and windows handed here that this node has not leased yet
        // (their slots are passed on).
        let keys: std::collections::BTreeSet<KeyId> =
            windows.keys().chain(handed.keys()).copied().collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(state) = self.table.get(&key, &guard) else {
                continue;
            };
            let spec = windows.get(&key).map_or_else(|| state.spec(), |w| w.spec);
            let mut spends = self.spends_of(state, &spec, now_ms);
            spends.extend(handed.get(&key).into_iter().flatten().copied());
            // The limit does not change which slots are taken.
            let params = self.ledger_params(&spec, u32::MAX, 0);
            let mut occupancy = crate::ledger::Occupancy::default();
            if let Some(w) = windows.get_mut(&key) {
                occupancy = w.books.occupancy(&spends, now_ms, &params);
            } else {
                for s in spends {
                    occupancy.add(s);
                }
            }
            out.push(Handoff {
                key,
                window_ms: spec.window_ms(),
                buckets: spec.buckets(),
                spans: occupancy.coarse_spans(now_ms, most),
            });
        }
        out
    }

    /// Takes the slots a window's previous owner handed over: each span extended by the
    /// clock margin (it was on the sender's clock), counted beside this node's books of the
    /// window until it ends. `false` if the window's shape is not the one held here.
    pub fn take_over(&self, handoff: &Handoff, now_ms: u64, most: usize) -> bool {
        let Ok(spec) = WindowSpec::new(
            handoff.window_ms,
            handoff.buckets,
            crate::window::EstimateMode::Interpolated,
        ) else {
            return false;
        };
        let guard = self.table.guard();
        let Ok(state) = self.table.get_or_insert(handoff.key, &spec, now_ms, &guard) else {
            return false;
        };
        if !state.has_shape(&spec) {
            return false;
        }
        let margin = self.config.ledger.margin_ms;
        let mut owned = self.lock_owned();
        let spans = owned.handed.entry(handoff.key).or_default();
        spans.extend(handoff.spans.iter().map(|s| Span {
            until_ms: s.until_ms.saturating_add(margin),
            ..*s
        }));
        spans.retain(|s| s.until_ms > now_ms && s.count > 0);
        // Handoffs of one window from several owners in a row: kept within the bound by
        // merging, which only takes more slots.
        if spans.len() > 2 * most {
            let mut all = crate::ledger::Occupancy::default();
            for s in spans.iter() {
                all.add(*s);
            }
            *spans = all.coarse_spans(now_ms, most);
        }
        true
    }
}
