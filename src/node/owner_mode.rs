//! The node's side of owner mode (`ownership.rs`): choosing between the full mesh and owners
//! by the cluster's size, rebuilding the ring as the members change, and each round's
//! registers to their owners and sums to the windows' users.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::core::NodeCore;
use super::ownership::{
    BACK_TO_FULL_MESH, CALM_EVERY, Dissemination, FULL_MESH_UP_TO, MINOR_EVERY, Ownership,
    SUBSCRIPTION, Subscriber,
};
use super::placement::Member;
use crate::clock::{Now, TimeSource};
use crate::gossip::wire::{Destination, Kind};
use crate::limiter::{Batch, KeyId, OriginId, RegisterUpdate};

impl<T: TimeSource> NodeCore<T> {
    /// Picks full mesh or owners for the cluster's size (with hysteresis). Returns whether
    /// owners carry the registers.
    ///
    /// The size is the larger of the members and `N_expected`, which holds a departed
    /// member for a minute: a partition does not change the mode. Were it the members alone,
    /// a side that fell below [`BACK_TO_FULL_MESH`] would go back to the full mesh member by
    /// member as SWIM declared the far side down, and for seconds its owners would no longer
    /// send sums while its users still sent them registers, each user then taking its side's
    /// share as if alone. Not pinned by a test.
    pub(super) fn choose_dissemination(&mut self) -> bool {
        let size = (self.membership.num_members() + 1).max(self.limiter.member_counts().1);
        let owners = match self.params.dissemination {
            // The ledger leases through owners at every size.
            _ if self.limiter.is_ledger() => true,
            Dissemination::FullMesh => false,
            Dissemination::Owners => true,
            Dissemination::Auto if self.ownership.is_some() => size > BACK_TO_FULL_MESH,
            Dissemination::Auto => size > FULL_MESH_UP_TO,
        };
        match (owners, self.ownership.is_some()) {
            (true, false) => {
                tracing::info!(members = size, "large cluster: registers go through owners");
                self.ownership = Some(Ownership::new(self.params.ring_key));
            }
            (false, true) => {
                tracing::info!(
                    members = size,
                    "small cluster: registers go to every member"
                );
                self.ownership = None;
                // Every member hears every register again.
                self.limiter.set_blind(Vec::new());
                self.limiter.set_unconfirmed(Vec::new());
            }
            _ => {}
        }
        owners
    }

    /// Rebuilds the ring if the members changed (at most once a round: between rounds the
    /// ring of the last one serves); the owners it names may then have moved, so this node's
    /// registers all go out again.
    ///
    /// Members SWIM suspects are left off the ring: a window's owner across a partition would
    /// leave its users without sums until SWIM declares it down, seconds later, while both
    /// sides admit. So a change of the suspects rebuilds the ring too.
    pub(super) fn refresh_ring(&mut self) {
        // Under the ledger a suspect stays on the ring until SWIM declares it down: a window
        // changes owner only once its owner is down (or gone), by which time an owner cut off
        // with a partition's minority has stopped leasing (`ledger.rs`). So does a member
        // whose clock this node cuts off: nodes cut a member off each on their own estimates,
        // at moments apart, and a ring that left it off here while it still leased would give
        // its windows two owners. A member's own word that it leases nothing does take it off
        // (`not_leasing.rs`).
        let keep_suspects = self.limiter.is_ledger();
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        if !keep_suspects && self.suspects != ownership.suspects {
            ownership.suspects = self.suspects.clone();
            ownership.stale = true;
        }
        if !ownership.stale {
            return;
        }
        // Under the ledger, the members that said they lease nothing for their clocks are
        // left off (`not_leasing.rs`); `off_ring` is empty otherwise.
        let on_ring = |id: u128| {
            !ownership.off_ring.contains(&id)
                && (keep_suspects || !ownership.suspects.contains(&id))
        };
        let mut members: Vec<Member> = self
            .membership
            .members()
            .iter()
            .filter(|m| on_ring(m.node.as_u128()))
            .map(|m| Member {
                id: m.node.as_u128(),
                addr: m.addr,
            })
            .collect();
        let me = self.params.node_id.as_u128();
        if on_ring(me) {
            members.push(Member {
                id: me,
                addr: self.params.advertise,
            });
        }
        ownership.stale = false;
        // The views of the ring the ledger holds keep the ring they were made of.
        if !ownership.ring.differs(&members) {
            return;
        }
        std::sync::Arc::make_mut(&mut ownership.ring).update(&members);
        ownership.cache.clear();
        ownership.generation += 1;
        // A window held until its owner's first sum that this node owns now gets no sum: it
        // gets every user's registers instead, with this change's resend.
        if !ownership.unconfirmed.is_empty() {
            let held = std::mem::take(&mut ownership.unconfirmed);
            let (owned, still): (BTreeSet<KeyId>, BTreeSet<KeyId>) =
                held.into_iter().partition(|k| ownership.owns(*k, me));
            ownership.unconfirmed = still;
            if !owned.is_empty() {
                self.limiter
                    .set_unconfirmed(ownership.unconfirmed.iter().copied().collect());
            }
        }
        // Owners may have moved: every register goes to both owners next round. Not only those
        // of the windows whose owners moved: a second owner takes over with the registers it
        // holds, and otherwise they are only as fresh as the last anti-entropy (5 s), which
        // would let a new owner's sums leave out what was admitted since. The rolling deploy's
        // bound is pinned by `a_fleet_past_sixteen_members_shares_through_owners_and_holds_the_limits`
        // (`sim/tests/fleet.rs`).
        ownership.resend_all = true;
    }

    /// A node's registers of `keys` arrived: of the windows this node owns, the sender uses
    /// them.
    pub(super) fn subscribe(&mut self, sender: u128, to: Destination, keys: &[KeyId], now: Now) {
        let at = now.at;
        let me = self.params.node_id.as_u128();
        // A user sends every round (every other where its demand is a minor part) while it
        // counts the window near its limit, and once a second otherwise.
        let pace = self.params.gossip_interval * 5 / 2;
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        for key in keys {
            if ownership.owns(*key, me) {
                // An old owner's sum, held since it left, says less than the users' registers.
                self.limiter.release_departed_sums(*key, now.cluster_ms);
                let subscribers = ownership.subscribers.entry(*key).or_default();
                let prompt = subscribers
                    .get(&sender)
                    .is_some_and(|s| at.saturating_duration_since(s.heard) < pace);
                subscribers.insert(
                    sender,
                    Subscriber {
                        to,
                        heard: at,
                        prompt,
                    },
                );
                ownership.changed.insert(*key);
            }
        }
    }

    /// `sums` arrived from `sender`, at `to`: of their windows that this node holds, those whose first
    /// owner in this node's view is another member get this node's registers at `to` as well,
    /// for as long as its sums keep coming (and [`SUBSCRIPTION`] after).
    ///
    /// A member sends a window's sums while it counts itself the window's first owner (and,
    /// once it does not, for at most [`SUBSCRIPTION`]), and its users divide the limit by the
    /// demand it holds. While SWIM finds out a partition, views of the
    /// members differ for seconds: a node that still counts a member across the cut as the
    /// owner sends its registers there, and the owner its peers use hears from it only when
    /// its ring changes. Meanwhile that owner's sums would leave the node's demand out, and its
    /// peers' shares would sum to more than the limit. Pinned by
    /// `a_member_sending_sums_of_a_window_it_does_not_own_here_gets_the_registers_while_it_does`
    /// (`ownership/tests.rs`).
    pub(super) fn heard_sums(&mut self, sender: u128, to: Destination, sums: &Batch, at: Instant) {
        let me = self.params.node_id.as_u128();
        let limiter = &self.limiter;
        if let Some(ownership) = self.ownership.as_mut() {
            let mut confirmed = false;
            for update in &sums.updates {
                let reg = &update.register;
                let alone = reg.demand == 0 && reg.admitted.iter().all(|c| *c == 0);
                ownership.unanswered.answered(update.key, alone, at);
                confirmed |= ownership.unconfirmed.remove(&update.key);
            }
            if confirmed {
                self.limiter
                    .set_unconfirmed(ownership.unconfirmed.iter().copied().collect());
            }
            let keys = sums.updates.iter().map(|u| u.key);
            ownership.heard_sums((me, sender), to, keys, |k| limiter.holds(k), at);
        }
    }

    /// One owner-mode round: this node's registers to their owners, and the sums of the
    /// windows it owns to the nodes that use them.
    ///
    /// Windows that refused something lately (`Limiter::contended`) go out every round, to the
    /// first owner (every [`MINOR_EVERY`]th round where this node's demand is a minor part of
    /// the window's), and their sums to their users; every [`CALM_EVERY`]th round every live
    /// register goes to the first owner, and the sums of every changed window to their users;
    /// at anti-entropy, and when the owners may have moved, every live register goes to both.
    /// A window far from its limit admits the same whether the others' counts are a round old
    /// or a second old; the second owner needs the registers only to take over. On a side of
    /// a partition a window near the side's part counts as contended too, and a user that
    /// sends every round gets its sum every round even where this node counts the window
    /// calm (`Subscriber::prompt`). Registers that get no sums back make their window blind
    /// (`unanswered.rs`).
    pub(super) fn owner_round(&mut self, now: Now, changed: Option<Batch>) {
        let me = self.params.node_id.as_u128();
        let origin = self.limiter.origin();
        self.refresh_ring();
        // Newcomers, now on the ring: the windows they own.
        let newcomers = self
            .ownership
            .as_mut()
            .map(|o| std::mem::take(&mut o.bootstraps))
            .unwrap_or_default();
        self.push_bootstraps(now, &newcomers);
        let calm_round = self.rounds.is_multiple_of(CALM_EVERY);
        let resend_all = self
            .ownership
            .as_mut()
            .is_some_and(|o| std::mem::take(&mut o.resend_all));
        let own = if resend_all || calm_round {
            self.limiter.snapshot_local(now.cluster_ms).updates
        } else {
            let mut updates = changed.map(|b| b.updates).unwrap_or_default();
            // A minor part of a window's demand goes every `MINOR_EVERY` rounds.
            let minor_round = self.rounds.is_multiple_of(MINOR_EVERY);
            updates.retain(|u| {
                self.limiter.contended(u.key, now.cluster_ms)
                    && (minor_round || !self.limiter.minor(u.key, now.cluster_ms))
            });
            updates
        };
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        let mut to_owners: BTreeMap<Destination, Vec<RegisterUpdate>> = BTreeMap::new();
        ownership.forget_acting(now.at);
        for update in own {
            let owned = ownership.owns(update.key, me);
            if owned {
                ownership.changed.insert(update.key);
            }
            // The second owner needs the registers only to take over: from anti-entropy (every
            // `anti_entropy_interval`) and whenever the owners may have moved.
            let destinations = ownership.register_destinations(update.key, me, resend_all);
            if !owned && !destinations.is_empty() {
                // Counted whether or not the registers can leave (an owner's address not yet
                // shown to receive, in an insecure cluster): either way no sum comes, and this
                // node knows nothing of the window's other users.
                ownership.unanswered.sent(update.key, now.at);
            }
            for to in destinations {
                to_owners.entry(to).or_default().push(update.clone());
            }
        }
        // Registers that get no sums back: no member counts itself the window's first owner
        // in this node's view, or they never reach it (`unanswered.rs`).
        let blind = ownership.unanswered.blind(now.at);
        // A window found blind is held to the onset share from now on, not to nothing: its
        // owner does not answer.
        if blind.iter().any(|k| ownership.unconfirmed.remove(k)) {
            self.limiter
                .set_unconfirmed(ownership.unconfirmed.iter().copied().collect());
        }
        self.limiter.set_blind(blind);

        // The sums of the owned windows that changed, one datagram (or a few) per subscriber:
        // the contended ones now, the others on a calm round, except to the users that count
        // them near their limit (`Subscriber::prompt`): those get theirs now too.
        let mut changed = std::mem::take(&mut ownership.changed);
        let mut prompt_only = BTreeSet::new();
        // Only while this node's side of the cluster is scaled (a partition), where a window
        // calm before can be near its side's part (`on_a_side_a_user_near_its_part_gets_its_sums_every_round`):
        // in steady state such a window is calm for a reason, and answering its users every
        // round would only add gossip.
        let prompt_answers = self.limiter.side_part().is_some();
        if !calm_round {
            let (now_due, later): (BTreeSet<KeyId>, BTreeSet<KeyId>) = changed
                .into_iter()
                .partition(|k| self.limiter.contended(*k, now.cluster_ms));
            prompt_only = later
                .iter()
                .filter(|k| {
                    prompt_answers
                        && ownership
                            .subscribers
                            .get(k)
                            .is_some_and(|subs| subs.values().any(|s| s.prompt))
                })
                .copied()
                .collect();
            ownership.changed = later;
            changed = now_due;
            changed.extend(prompt_only.iter().copied());
        }
        let mut to_users: BTreeMap<Destination, Vec<RegisterUpdate>> = BTreeMap::new();
        let stamp = self.limiter.aggregate_stamp(now.cluster_ms);
        for key in changed {
            let Some(subs) = ownership.subscribers.get_mut(&key) else {
                continue;
            };
            subs.retain(|_, s| now.at.saturating_duration_since(s.heard) < SUBSCRIPTION);
            if subs.is_empty() {
                ownership.subscribers.remove(&key);
                continue;
            }
            let only_prompt = prompt_only.contains(&key);
            let ids: Vec<OriginId> = subs
                .iter()
                .filter(|(_, s)| !only_prompt || s.prompt)
                .map(|(id, _)| OriginId(*id))
                .collect();
            let sums = self
                .limiter
                .aggregates_for(key, &ids, stamp, now.cluster_ms);
            let answered = subs.values_mut().filter(|s| !only_prompt || s.prompt);
            for (sub, sum) in answered.zip(sums) {
                sub.prompt = false;
                to_users.entry(sub.to).or_default().push(sum);
            }
        }
        // In an insecure cluster, only to addresses that have shown they receive: a forged
        // member must not draw every user's registers, or an owner's sums, to a victim. (A
        // secure cluster checks nothing, and skips the round's list of destinations.)
        if self.return_route.is_some() {
            let destinations: BTreeSet<Destination> =
                to_owners.keys().chain(to_users.keys()).copied().collect();
            for to in destinations {
                if !self.may_send_state(now, to) {
                    to_owners.remove(&to);
                    to_users.remove(&to);
                }
            }
        }
        // Whoever gets registers or sums hears, now and then, what this build reads: so
        // that it may send this node an exchange.
        for to in to_owners
            .keys()
            .chain(to_users.keys())
            .copied()
            .collect::<Vec<_>>()
        {
            self.announce_features(now, to);
        }
        for (to, updates) in to_owners {
            // A node this one sends registers to may also use windows this one owns: one
            // datagram for both (`registers_and_sums_for_the_same_node_share_a_datagram`).
            let sums = to_users.remove(&to).unwrap_or_default();
            self.send_registers_and_sums(
                now,
                to,
                &Batch { origin, updates },
                &Batch {
                    origin,
                    updates: sums,
                },
            );
        }
        for (to, updates) in to_users {
            self.send_batch(now, Kind::Aggregate, &Batch { origin, updates }, &[to]);
        }
        if resend_all {
            self.relay_departed(now);
        }
    }

    /// The registers this node holds of departed origins, each to its window's owners: when
    /// the owners move (a restart of every node moves them all) the old owners' registers,
    /// restored from snapshots or kept since, are what the new owners' sums must count.
    pub(super) fn relay_departed(&mut self, now: Now) {
        let me = self.params.node_id.as_u128();
        let departed = self.departed_registers(now);
        let Some(ownership) = self.ownership.as_mut() else {
            return;
        };
        let mut by_owner: BTreeMap<(Destination, OriginId), Vec<RegisterUpdate>> = BTreeMap::new();
        for Batch { origin, updates } in departed {
            for update in updates {
                for to in ownership.owner_destinations(update.key, me) {
                    by_owner
                        .entry((to, origin))
                        .or_default()
                        .push(update.clone());
                }
            }
        }
        for ((to, origin), updates) in by_owner {
            if self.may_send_state(now, to) {
                self.send_batch(now, Kind::AntiEntropy, &Batch { origin, updates }, &[to]);
            }
        }
    }

    /// The boot ids of `key`'s two owners in this node's view, in owner mode.
    pub fn owners_of(&mut self, key: KeyId) -> Option<[uuid::Uuid; 2]> {
        self.refresh_ring();
        let [a, b] = self.ownership.as_mut()?.owners(key)?;
        Some([uuid::Uuid::from_u128(a.id), uuid::Uuid::from_u128(b.id)])
    }

    /// Whether `key`'s owners (in this node's view) include `member`.
    pub(super) fn owned_by(&mut self, key: KeyId, member: u128) -> bool {
        self.ownership
            .as_mut()
            .and_then(|o| o.owners(key))
            .is_some_and(|[a, b]| a.id == member || b.id == member)
    }
}
