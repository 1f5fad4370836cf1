//! What the members of this node's side heard, and when: a member is present on a side of any
//! cut if someone on that side heard from it lately. Each member pushes what it heard to one
//! member a round (`node/relay.rs`); what arrives is kept here beside what this node heard
//! itself. A time only ever comes from a datagram someone received, so no member looks fresher
//! than its last datagram to someone on this side; across a cut no datagram passes, so a far
//! member's time stops at the cut and it counts as away once the horizon passes.
//!
//! Members are named on the wire by a short id (the low 32 bits of their id); a short id two
//! members share names neither, so a time never lands on the wrong member this node knows.

use std::collections::HashMap;

use super::Liveness;

/// A member's short id: the low 32 bits of its (random) id.
pub fn short_id(member: u128) -> u32 {
    member as u32
}

/// The members by short id, leaving out every short id two of them share.
pub(super) fn unique_shorts(members: impl Iterator<Item = u128>) -> HashMap<u32, u128> {
    let mut by_short: HashMap<u32, Option<u128>> = HashMap::new();
    for id in members {
        by_short
            .entry(short_id(id))
            .and_modify(|m| *m = None)
            .or_insert(Some(id));
    }
    by_short
        .into_iter()
        .filter_map(|(short, id)| Some((short, id?)))
        .collect()
}

impl Liveness {
    /// A member this node hears from said it heard from the member named `short` at cluster time
    /// `at_ms` (capped at this node's `now_ms`: a time to come would keep a member present
    /// after it stopped). A short id no member or two members have is passed over.
    pub fn heard_relayed(&mut self, short: u32, at_ms: u64, now_ms: u64) {
        let Some(id) = self.shorts.get(&short) else {
            return;
        };
        if let Some(m) = self.members.get_mut(id) {
            let at = at_ms.min(now_ms);
            m.relayed = Some(m.relayed.map_or(at, |r| r.max(at)));
        }
    }

    /// When this node's side last heard from `member`, as far as this node knows: its own last
    /// datagram from it, or a later time another member relayed.
    pub fn side_heard(&self, member: u128) -> Option<u64> {
        let m = self.members.get(&member)?;
        m.last_datagram.max(m.relayed)
    }

    /// Every member this node's side heard from at `since_ms` or later, by short id and time,
    /// in short-id order: what this node relays.
    pub fn side_heard_since(&self, since_ms: u64) -> Vec<(u32, u64)> {
        let mut heard: Vec<(u32, u64)> = self
            .shorts
            .iter()
            .filter_map(|(short, id)| {
                let at = self.side_heard(*id)?;
                (at >= since_ms).then_some((*short, at))
            })
            .collect();
        heard.sort_unstable();
        heard
    }
}
