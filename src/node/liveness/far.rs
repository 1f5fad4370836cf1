//! Senders whose genuine datagrams arrive with send times more than a minute from this node's
//! clock (`DropReason::Stale`). Such a sender cannot be a member: its SWIM traffic is refused
//! too. It is a member all the same as far as the limit goes, so it counts as a silent one (in
//! `N_expected`, never live) for as long as such datagrams keep coming. Without that, a node
//! whose own clock is a minute off would hear nobody, end its warm-up alone and admit the
//! whole limit beside the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::limiter::OriginId;
use crate::membership::NodeId;

/// How often a sender a minute off is told so (with a heartbeat it will find just as stale).
const TELL_FAR_EVERY: Duration = Duration::from_secs(1);
/// Most senders told so per second in all: the answers go to the address a datagram came
/// from, which could be spoofed; this bounds what a replay of genuine datagrams can make a
/// node send.
const TELLS_PER_SECOND: u32 = 64;

/// How long a sender heard with a clock a minute off still counts (SWIM probes every second,
/// so a sender still running is heard again well within it).
const FAR_MEMORY: Duration = Duration::from_secs(5);
/// How long a sender a minute off that stopped counting is remembered, with the send time that
/// last counted it: a replay of its datagrams counts it again no more than once in this long.
const FAR_REPLAY_MEMORY: Duration = Duration::from_secs(60);

/// Most senders remembered as far off: every member of a large cluster, when this node's own
/// clock is the one that is off.
const MAX_FAR: usize = 1 << 14;

/// The senders a minute off, and the tells sent them.
#[derive(Debug, Default)]
pub struct FarSenders {
    /// When each was last heard, and when last told so.
    senders: BTreeMap<u128, FarSender>,
    /// How many are not members, as of the last [`FarSenders::refresh`].
    members: usize,
    /// Tells sent in the current second, and when it began.
    tells: (u32, Option<Instant>),
}

#[derive(Debug, Clone, Copy)]
struct FarSender {
    heard: Instant,
    told: Option<Instant>,
    /// How many members it says it counts.
    count: usize,
    /// Its latest send time: a sender whose send times stop advancing is not heard again.
    sent_ms: u64,
    /// It sent a datagram sealed for this boot, so it counts (see `FarSenders::clock`), and
    /// was heard within [`FAR_MEMORY`].
    counted: bool,
    /// The send time of the datagram that last counted it: only a later one counts it again,
    /// so a replay renews nothing, even once the sender stopped counting (the entry stays, not
    /// counted, for [`FAR_REPLAY_MEMORY`], or until the table is full).
    counted_sent_ms: u64,
}

impl FarSenders {
    /// A genuine datagram from `sender`, sent at `sent_ms` on its clock, was more than a
    /// minute from this node's clock. Returns whether to tell the sender so: a node whose own
    /// clock is off hears nothing from anyone otherwise (its datagrams are refused, so nobody
    /// answers them). At most once a second per sender, and the answer is no larger than
    /// what came in. A datagram sent before the last one from the same sender renews nothing,
    /// nor counts it (see `FarSender::counted_sent_ms`). Unless `counted`, the sender is only
    /// answered, not counted.
    pub fn clock(&mut self, sender: u128, sent_ms: u64, counted: bool, at: Instant) -> bool {
        if self.senders.len() >= MAX_FAR && !self.senders.contains_key(&sender) {
            self.senders
                .retain(|_, f| at.saturating_duration_since(f.heard) < FAR_MEMORY);
            if self.senders.len() >= MAX_FAR {
                return false;
            }
        }
        let entry = self.senders.entry(sender).or_insert(FarSender {
            heard: at,
            told: None,
            count: 0,
            sent_ms: 0,
            counted: false,
            counted_sent_ms: 0,
        });
        if sent_ms < entry.sent_ms {
            return false;
        }
        entry.sent_ms = sent_ms;
        // A sender a minute off counts only while it keeps sending: a replay renews nothing.
        if counted && sent_ms > entry.counted_sent_ms {
            entry.heard = at;
            entry.counted = true;
            entry.counted_sent_ms = sent_ms;
        }
        let due = entry
            .told
            .is_none_or(|t| at.saturating_duration_since(t) >= TELL_FAR_EVERY);
        if !due {
            return false;
        }
        let (sent, since) = &mut self.tells;
        if since.is_none_or(|s| at.saturating_duration_since(s) >= Duration::from_secs(1)) {
            *sent = 0;
            *since = Some(at);
        }
        if *sent >= TELLS_PER_SECOND {
            return false;
        }
        *sent += 1;
        entry.told = Some(at);
        true
    }

    /// `sender`, a minute off, says it counts this many members.
    pub fn said_count(&mut self, sender: u128, members: usize) {
        if let Some(f) = self.senders.get_mut(&sender) {
            f.count = members;
        }
    }

    /// Senders heard lately with clocks a minute off that are not members; the others stop
    /// counting (their last counted send time stays: `FarSender::counted_sent_ms`).
    pub fn refresh(&mut self, members: &[NodeId], at: Instant) -> Vec<OriginId> {
        // Not counted past FAR_MEMORY; forgotten past FAR_REPLAY_MEMORY (a sender whose clock
        // stepped back counts again then, as does a replay: at most once a minute).
        self.senders
            .retain(|_, f| at.saturating_duration_since(f.heard) < FAR_REPLAY_MEMORY);
        let mut any = false;
        for f in self.senders.values_mut() {
            f.counted &= at.saturating_duration_since(f.heard) < FAR_MEMORY;
            any |= f.counted;
        }
        if !any {
            self.members = 0;
            return Vec::new();
        }
        let members: BTreeSet<u128> = members.iter().map(|m| m.node.as_u128()).collect();
        let far: Vec<OriginId> = self
            .senders
            .iter()
            .filter(|(s, f)| f.counted && !members.contains(s))
            .map(|(s, _)| OriginId(*s))
            .collect();
        self.members = far.len();
        far
    }

    /// How many of the senders a minute off are not members, as of the last
    /// [`FarSenders::refresh`]: members all the same, in the count this node tells its peers.
    pub fn members(&self) -> usize {
        self.members
    }

    /// The member counts the senders that count say.
    pub fn counts(&self) -> impl Iterator<Item = usize> + '_ {
        self.senders.values().filter(|f| f.counted).map(|f| f.count)
    }
}
