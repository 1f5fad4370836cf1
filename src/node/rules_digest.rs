//! Whether the members enforce the rules this node does.
//!
//! Each node says the digest of the rules it has loaded (`RuleSet::digest`) to the members it
//! announces its feature flags to (`features.rs`): 8 bytes after the flags of a heartbeat,
//! which builds that predate it do not read. A node whose rules allow more than the others'
//! (a canary, a typo) spends everyone's quota, and nothing else would tell: so each node
//! counts the live members whose last word differs from its own digest
//! (`limitmesh_rules_mismatched_members`) and warns when that set changes.
//!
//! The digest is kept by the rules layer in a shared cell ([`RulesDigest`]) that a reload
//! updates; the node reads it once a round and announces a change to every member it
//! announces to. What a member said lapses as its flags do: a digest that could be forged
//! (in an insecure cluster) cannot mark a member for good.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The digest of the rules a node has loaded, shared between the rules layer (which sets it
/// at each reload) and the node (which says it). 0: no rules digest to say.
#[derive(Debug, Clone, Default)]
pub struct RulesDigest(Arc<AtomicU64>);

impl RulesDigest {
    pub fn new(digest: u64) -> Self {
        Self(Arc::new(AtomicU64::new(digest)))
    }

    pub fn set(&self, digest: u64) {
        self.0.store(digest, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Bytes of a digest on the wire, after a heartbeat's flags.
pub const DIGEST_LEN: usize = 8;

/// How long what a member said holds: as long as its feature flags (two announcements may be
/// lost).
const SAID_LASTS: Duration = Duration::from_secs(75);
/// How long what a node that is not a member (yet) said is kept: a node announces to a member
/// as soon as it sees it come up, often before the member sees it, and the next announcement
/// is half a minute later.
const NOT_YET_MEMBER: Duration = Duration::from_secs(10);
/// Most entries kept: one per member, and the few coming up.
const MOST_SAID: usize = 1 << 16;

/// What the members said of their rules.
#[derive(Debug, Default)]
pub struct RulesAgreement {
    /// Each member's last digest, and when it said it.
    said: HashMap<u128, (u64, Instant)>,
    /// This node's digest as of the last round.
    own: u64,
    /// The members that differed at the last round.
    mismatched: BTreeSet<u128>,
}

impl RulesAgreement {
    /// `member` (a member, or a node about to be one) said `digest` at `at`.
    pub fn heard(&mut self, member: u128, digest: u64, at: Instant) {
        if digest != 0 && (self.said.len() < MOST_SAID || self.said.contains_key(&member)) {
            self.said.insert(member, (digest, at));
        }
    }

    /// Forgets whoever is no longer a member, unless it said its digest lately as of `at` (it
    /// may be coming up).
    pub fn retain(&mut self, members: &BTreeSet<u128>, at: Instant) {
        self.said.retain(|m, (_, t)| {
            members.contains(m) || at.saturating_duration_since(*t) < NOT_YET_MEMBER
        });
    }

    /// Once a round: this node's digest is `own`; `live` are the members that count. Returns
    /// whether `own` changed since the last round (every member is then told), and the live
    /// members whose digest, said lately, differs from it. Logs a change of those.
    pub fn round(
        &mut self,
        own: u64,
        live: impl IntoIterator<Item = u128>,
        at: Instant,
    ) -> (bool, usize) {
        let changed = own != self.own;
        self.own = own;
        let mismatched: BTreeSet<u128> = live
            .into_iter()
            .filter(|m| {
                self.said.get(m).is_some_and(|(digest, t)| {
                    own != 0 && *digest != own && at.saturating_duration_since(*t) < SAID_LASTS
                })
            })
            .collect();
        if mismatched != self.mismatched {
            if mismatched.is_empty() {
                tracing::info!("every member that says its rules has the rules this node has");
            } else {
                let members: Vec<String> = mismatched
                    .iter()
                    .map(|m| uuid::Uuid::from_u128(*m).to_string())
                    .collect();
                tracing::warn!(
                    count = mismatched.len(),
                    ?members,
                    own_digest = format_args!("{own:016x}"),
                    "members enforce other rules than this node (another rules file, or one \
                     not reloaded yet): a limit they hold higher is spent by everyone"
                );
            }
            self.mismatched = mismatched;
        }
        (changed, self.mismatched.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_saying_another_digest_are_counted_while_live_and_lately_said() {
        let mut a = RulesAgreement::default();
        let t = crate::clock::monotonic_now();
        assert_eq!(a.round(7, [1, 2, 3], t), (true, 0), "nobody said anything");
        a.heard(1, 7, t);
        a.heard(2, 9, t);
        a.heard(3, 0, t);
        assert_eq!(a.round(7, [1, 2, 3], t), (false, 1), "member 2 differs");
        assert_eq!(a.round(7, [1, 3], t), (false, 0), "member 2 is not live");
        // This node reloads to member 2's rules: member 1 now differs.
        assert_eq!(a.round(9, [1, 2, 3], t), (true, 1));
        a.heard(1, 9, t + Duration::from_secs(1));
        assert_eq!(
            a.round(9, [1, 2, 3], t + Duration::from_secs(1)),
            (false, 0)
        );
        // Said once and never again: it lapses.
        a.heard(2, 5, t + Duration::from_secs(2));
        let later = t + Duration::from_secs(2) + SAID_LASTS;
        assert_eq!(a.round(9, [1, 2, 3], later - Duration::from_secs(1)).1, 1);
        assert_eq!(a.round(9, [1, 2, 3], later).1, 0);
        // Gone with the member; kept a while for a node not a member yet.
        a.heard(2, 5, later);
        a.retain(
            &BTreeSet::from([1]),
            later + NOT_YET_MEMBER - Duration::from_secs(1),
        );
        assert_eq!(a.round(9, [1, 2, 3], later).1, 1);
        a.retain(&BTreeSet::from([1]), later + NOT_YET_MEMBER);
        assert_eq!(a.round(9, [1, 2, 3], later).1, 0);
        // A node with no digest of its own counts nobody.
        a.heard(1, 5, later);
        assert_eq!(a.round(0, [1], later), (true, 0));
    }
}
