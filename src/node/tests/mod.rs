//! The node core driven by hand: no socket, no runtime. A small network delivers every
//! datagram at once (or drops what a test says), and time moves a millisecond at a time.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::clock::{Clock, ManualClock, Now, TimeSource, monotonic_now};
use crate::gossip::wire::{Keyring, Kind};
use crate::limiter::{CheckItem, CheckRequest, KeyHasher, Limit, LimiterConfig, OriginId};
use crate::window::WindowSpec;

const T0: u64 = 1_700_000_000_000;

fn addr(i: usize) -> SocketAddr {
    format!("10.0.0.{}:7946", i + 1).parse().unwrap()
}

fn keys() -> NodeKeys {
    NodeKeys {
        keyring: Keyring::new(&[[5u8; 32]]).unwrap(),
        hasher: KeyHasher::from_secret(b"core tests"),
    }
}

fn limit() -> Limit {
    Limit {
        max: 1_000,
        window: WindowSpec::with_default_buckets(60_000).unwrap(),
    }
}

/// One manual clock, and a node's wall clock that many milliseconds off it.
#[derive(Debug, Clone)]
struct Skewed {
    time: ManualClock,
    offset_ms: i64,
}

impl TimeSource for Skewed {
    fn wall_ms(&self) -> u64 {
        self.time.now_ms().saturating_add_signed(self.offset_ms)
    }

    fn mono_ms(&self) -> u64 {
        self.time.now_ms()
    }
}

/// Every node on one manual clock; datagrams delivered in the millisecond they are sent.
struct Net {
    t0: Instant,
    time: ManualClock,
    nodes: Vec<Option<NodeCore<Skewed>>>,
    /// The limiter configuration every node boots with.
    limiter: LimiterConfig,
    /// Every datagram sent, by the node that sent it.
    sent: Vec<Vec<Outgoing>>,
    /// `cut[i]`: node i's datagrams are lost, both ways.
    cut: Vec<bool>,
    /// Pairs of nodes whose datagrams to each other are lost, both ways: a partition.
    apart: Vec<(usize, usize)>,
    /// Datagrams of this kind are lost.
    lose: Option<Kind>,
    /// `mute[i]`: node i's datagrams other than SWIM's are lost (an address that never
    /// answers a register or heartbeat).
    mute: Vec<bool>,
}

impl Net {
    fn new() -> Self {
        Self {
            t0: monotonic_now(),
            time: ManualClock::new(T0),
            nodes: Vec::new(),
            sent: Vec::new(),
            cut: Vec::new(),
            apart: Vec::new(),
            lose: None,
            mute: Vec::new(),
            limiter: LimiterConfig::default(),
        }
    }

    fn at(&self) -> Instant {
        self.t0 + Duration::from_millis(self.time.now_ms() - T0)
    }

    fn params(&self, i: usize, id: u128, seeds: &[usize]) -> NodeParams {
        let mut p = NodeParams::new(uuid::Uuid::from_u128(id), addr(i), id as u64);
        p.seeds = seeds.iter().map(|s| addr(*s)).collect();
        p
    }

    /// Boots node `i` (again, if it ran before) with boot id `id`, seeded with `seeds`.
    fn boot(&mut self, i: usize, id: u128, seeds: &[usize]) {
        self.boot_with(self.params(i, id, seeds));
    }

    fn boot_with(&mut self, params: NodeParams) {
        self.boot_skewed(params, 0);
    }

    /// Boots a node whose wall clock is `offset_ms` off.
    fn boot_skewed(&mut self, params: NodeParams, offset_ms: i64) {
        let i = (0..16).position(|i| addr(i) == params.advertise).unwrap();
        let time = Skewed {
            time: self.time.clone(),
            offset_ms,
        };
        let core = NodeBuilder::new(params, self.limiter.clone(), keys(), time)
            .build_at(self.at())
            .unwrap();
        if self.nodes.len() <= i {
            self.nodes.resize_with(i + 1, || None);
            self.sent.resize_with(i + 1, Vec::new);
            self.cut.resize(i + 1, false);
        }
        self.nodes[i] = Some(core);
        self.deliver();
    }

    fn node(&self, i: usize) -> &NodeCore<Skewed> {
        self.nodes[i].as_ref().unwrap()
    }

    fn now(&self, i: usize) -> Now {
        Now::read_at(self.node(i).clock(), self.at())
    }

    /// Moves time on `ms` milliseconds, waking each node when it asked to be.
    fn run_ms(&mut self, ms: u64) {
        for _ in 0..ms {
            self.time.advance(1);
            for i in 0..self.nodes.len() {
                if self.nodes[i]
                    .as_ref()
                    .is_some_and(|n| n.next_wake() <= self.at())
                {
                    let now = self.now(i);
                    self.nodes[i].as_mut().unwrap().on_wake(now);
                }
            }
            self.deliver();
        }
    }

    /// Delivers what every node sent until the network is quiet.
    fn deliver(&mut self) {
        for _ in 0..64 {
            let mut any = false;
            for from in 0..self.nodes.len() {
                let Some(node) = self.nodes[from].as_mut() else {
                    continue;
                };
                for out in node.take_outgoing() {
                    any = true;
                    self.sent[from].push(out.clone());
                    let Some(to) = (0..self.nodes.len()).find(|j| addr(*j) == out.to) else {
                        continue;
                    };
                    let lost = self.cut[from]
                        || self.cut[to]
                        || self.apart.contains(&(from.min(to), from.max(to)))
                        || self.lose == Some(out.kind)
                        || (self.mute.get(from) == Some(&true) && out.kind != Kind::Membership);
                    if lost || self.nodes[to].is_none() {
                        continue;
                    }
                    let now = self.now(to);
                    let mut datagram = out.datagram;
                    self.nodes[to]
                        .as_mut()
                        .unwrap()
                        .on_datagram(now, &mut datagram, addr(from));
                }
            }
            if !any {
                return;
            }
        }
        panic!("the network never went quiet");
    }

    /// Hands node `to` a datagram as if from node `from`'s address, now.
    fn hand_over(&mut self, to: usize, mut datagram: Vec<u8>, from: usize) {
        let now = self.now(to);
        self.nodes[to]
            .as_mut()
            .unwrap()
            .on_datagram(now, &mut datagram, addr(from));
    }

    fn members(&self, i: usize) -> usize {
        self.node(i).membership.num_members()
    }

    fn admit(&self, i: usize, key: &[u8], n: usize) {
        let item = [CheckItem {
            key,
            limit: limit(),
            cost: 1,
        }];
        let req = CheckRequest {
            items: &item,
            dry_run: false,
        };
        for _ in 0..n {
            assert!(
                self.node(i)
                    .limiter()
                    .check(&req, self.now(i).cluster_ms)
                    .unwrap()
                    .allowed
            );
        }
    }

    /// What node `i` knows `origin` admitted on `key`.
    fn seen(&self, i: usize, key: &[u8], origin: u128) -> f64 {
        let node = self.node(i);
        node.limiter()
            .inspect(key, &limit(), self.now(i).cluster_ms)
            .map_or(0.0, |ins| {
                ins.origins
                    .iter()
                    .filter(|o| o.origin == OriginId(origin))
                    .map(|o| o.admitted)
                    .sum()
            })
    }

    /// Runs 100 ms at a time until node `i` lists `members` others; fails, saying `what`, past
    /// 30 s.
    fn run_until_members(&mut self, i: usize, members: usize, what: &str) {
        let mut waited_ms = 0;
        while self.members(i) != members {
            assert!(waited_ms < 30_000, "{what}");
            self.run_ms(100);
            waited_ms += 100;
        }
    }

    fn sent_kind(&self, i: usize, kind: Kind) -> usize {
        self.sent[i].iter().filter(|o| o.kind == kind).count()
    }
}

/// Three nodes, two seeded by the first, formed and past their warm-ups.
fn formed() -> Net {
    let mut net = Net::new();
    net.boot(0, 1, &[]);
    net.boot(1, 2, &[0]);
    net.boot(2, 3, &[0]);
    net.run_ms(3_000);
    for i in 0..3 {
        assert_eq!(net.members(i), 2, "node {i} sees both others");
        assert!(net.node(i).is_ready(), "node {i} is past its warm-up");
    }
    net
}

#[test]
fn nodes_join_through_a_seed_and_end_their_warm_up() {
    let mut net = Net::new();
    net.boot(0, 1, &[]);
    assert!(net.node(0).is_ready(), "no peers: ready at once");
    net.boot(1, 2, &[0]);
    assert!(
        !net.node(1).is_ready(),
        "a node with seeds waits for their state"
    );
    assert!(!net.node(1).view().is_ready());
    net.run_ms(3_000);
    assert_eq!((net.members(0), net.members(1)), (1, 1));
    assert!(net.node(1).is_ready());
    assert!(net.node(1).view().is_ready());
    let members = net.node(0).view().members();
    assert_eq!(members.len(), 2);
    assert!(members.iter().any(|m| m.addr == addr(1) && !m.is_self));
}

#[test]
fn a_summary_round_carries_admissions_to_every_member() {
    let mut net = formed();
    let before = net.sent_kind(0, Kind::Summary);
    net.admit(0, b"tenant=1", 40);
    assert_eq!(net.seen(1, b"tenant=1", 1), 0.0, "not before a round");
    net.run_ms(200);
    assert_eq!(
        net.sent_kind(0, Kind::Summary) - before,
        2,
        "one summary datagram to each member"
    );
    assert_eq!(net.seen(1, b"tenant=1", 1), 40.0);
    assert_eq!(net.seen(2, b"tenant=1", 1), 40.0);
    // A quiet round sends heartbeats, not summaries.
    let (summaries, heartbeats) = (
        net.sent_kind(0, Kind::Summary),
        net.sent_kind(0, Kind::Heartbeat),
    );
    net.run_ms(600);
    assert!(
        net.sent_kind(0, Kind::Summary) - summaries <= 2,
        "the resend of the last change only"
    );
    assert!(net.sent_kind(0, Kind::Heartbeat) > heartbeats);
}

#[test]
fn periodic_anti_entropy_pushes_a_page_at_a_time() {
    let mut net = Net::new();
    let mut p = net.params(0, 1, &[]);
    p.anti_entropy_page = 2;
    p.anti_entropy_interval = Duration::from_millis(1_000);
    net.boot_with(p);
    for k in 0..5 {
        net.admit(0, format!("k{k}").as_bytes(), 1);
    }
    net.run_ms(1_000);
    // Node 1 joins while every anti-entropy datagram is lost: the bootstrap push and the first
    // page (at 2 s) never arrive, and the summary rounds carry only what changes.
    net.lose = Some(Kind::AntiEntropy);
    net.boot(1, 2, &[0]);
    net.run_ms(1_500);
    let holds = |net: &Net| {
        (0..5)
            .filter(|k| net.seen(1, format!("k{k}").as_bytes(), 1) == 1.0)
            .count()
    };
    assert_eq!(net.members(1), 1);
    assert_eq!(holds(&net), 0);
    net.lose = None;
    // One page a second, two registers each, round-robin over the five.
    for expected in [2, 4, 5] {
        let pushes = net.sent_kind(0, Kind::AntiEntropy);
        net.run_ms(1_000);
        assert_eq!(net.sent_kind(0, Kind::AntiEntropy) - pushes, 1);
        assert_eq!(holds(&net), expected);
    }
}

/// Registers of origins that are gone (restored from a snapshot after a restart of every
/// node, or kept since a member left) reach a member that missed its bootstrap push: with
/// periodic anti-entropy, not only with the push, which a lost datagram (or a node that joined
/// before they were restored) misses.
#[test]
fn periodic_anti_entropy_carries_the_registers_of_departed_origins() {
    // A departed origin's day of admissions, as a snapshot file holds it.
    let departed = crate::limiter::Limiter::new(
        LimiterConfig::default(),
        OriginId(99),
        KeyHasher::from_secret(b"core tests"),
    );
    let item = [CheckItem {
        key: b"k",
        limit: limit(),
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    for _ in 0..7 {
        assert!(departed.check(&req, T0).unwrap().allowed);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    crate::snapshot::save(&departed, &path, T0).unwrap();

    let mut net = Net::new();
    let mut p = net.params(0, 1, &[]);
    p.anti_entropy_interval = Duration::from_millis(1_000);
    p.state_path = Some(path);
    net.boot_with(p);
    assert_eq!(net.seen(0, b"k", 99), 7.0, "restored when built");
    // Node 1 joins while every anti-entropy datagram is lost: its bootstrap push never
    // arrives, and node 0 has nothing of its own that changes.
    net.lose = Some(Kind::AntiEntropy);
    net.boot(1, 2, &[0]);
    net.run_ms(1_500);
    assert_eq!(net.members(1), 1);
    assert_eq!(net.seen(1, b"k", 99), 0.0);
    net.lose = None;
    net.run_ms(2_000);
    assert_eq!(net.seen(1, b"k", 99), 7.0, "a periodic push carried it");
}

#[test]
fn a_silent_member_stops_counting_as_live_long_before_swim_says_down() {
    let mut net = formed();
    assert_eq!(net.node(0).limiter().member_counts().0, 3);
    net.cut[2] = true;
    net.run_ms(1_200);
    assert_eq!(
        net.node(0).limiter().member_counts().0,
        2,
        "silence threshold 800 ms: node 2 no longer shares the limit"
    );
    assert_eq!(net.members(0), 2, "SWIM still holds it");
    net.cut[2] = false;
    net.run_ms(3_000);
    assert_eq!(net.node(0).limiter().member_counts().0, 3);
}

#[test]
fn after_a_heal_a_member_that_renewed_while_up_here_counts_at_once_and_one_from_afar_does_not() {
    // Four nodes split {0, 1} | {2, 3} until each side holds the other down, then healed.
    let mut net = Net::new();
    for i in 0..4 {
        let seeds: Vec<usize> = if i == 0 { vec![] } else { vec![0] };
        net.boot(i, i as u128 + 1, &seeds);
    }
    net.run_ms(4_000);
    assert_eq!(net.members(0), 3);
    net.apart = vec![(0, 2), (0, 3), (1, 2), (1, 3)];
    net.run_ms(15_000);
    assert_eq!(net.members(0), 1, "the far side was never declared down");
    net.apart.clear();
    let bump = |net: &Net, i: usize| {
        net.node(0)
            .membership
            .member_by_id(uuid::Uuid::from_u128(i as u128 + 1))
            .map(|m| m.bump)
    };
    let before = bump(&net, 1).expect("node 1 is a member");
    // Node 1 learns the far side declared it down and renews; node 0 heard it all along.
    let mut renewed_at = None;
    let mut far_up_at = None;
    for ms in 0..5_000 {
        net.run_ms(1);
        let at = net.at();
        if renewed_at.is_none() && bump(&net, 1).is_some_and(|b| b > before) {
            renewed_at = Some(ms);
            assert!(
                net.node(0).counts_live(uuid::Uuid::from_u128(2), at),
                "a renewal of a member up here started a join grace"
            );
        }
        if far_up_at.is_none() && bump(&net, 2).is_some() {
            far_up_at = Some(ms);
            assert!(
                !net.node(0).counts_live(uuid::Uuid::from_u128(3), at),
                "a member back from the far side counted before its registers could come"
            );
        }
    }
    assert!(renewed_at.is_some(), "node 1 never renewed");
    assert!(far_up_at.is_some(), "node 2 never came back");
    assert_eq!(net.node(0).limiter().member_counts().0, 4);
}

#[test]
fn a_restarted_member_is_renamed_and_gets_the_cluster_state() {
    let mut net = formed();
    net.admit(0, b"day", 7);
    net.run_ms(400);
    assert_eq!(net.seen(1, b"day", 1), 7.0);
    // Node 1 restarts: a new boot id at the same address.
    net.boot(1, 22, &[0]);
    assert_eq!(net.seen(1, b"day", 1), 0.0);
    net.run_ms(3_000);
    assert!(net.node(1).is_ready());
    assert_eq!(
        net.seen(1, b"day", 1),
        7.0,
        "pushed when node 0 saw the rename"
    );
    let at_1 = net.node(0).membership.member_at(addr(1)).unwrap();
    assert_eq!(at_1.node, uuid::Uuid::from_u128(22));
    assert_eq!(net.members(0), 2);
}

#[test]
fn a_node_that_leaves_sends_its_last_admissions_and_is_counted_out() {
    let mut net = formed();
    net.admit(2, b"last", 9);
    let now = net.now(2);
    net.nodes[2].as_mut().unwrap().leave(now);
    net.deliver();
    net.nodes[2] = None;
    assert_eq!(net.seen(0, b"last", 3), 9.0, "the final round went out");
    net.run_ms(100);
    assert_eq!(net.members(0), 1, "it left: no suspicion needed");
    assert_eq!(net.node(0).limiter().member_counts().0, 2);
}

#[test]
fn bad_datagrams_are_dropped_and_counted_by_reason() {
    let mut net = formed();
    let from = addr(1);
    let now = net.now(0);
    let node = net.nodes[0].as_mut().unwrap();
    let stats = node.view().clone();
    let before = stats.wire.snapshot().dropped;
    node.on_datagram(now, &mut [], from);
    node.on_datagram(now, &mut [0u8; 10], from);
    node.on_datagram(now, &mut [0xAB; 200], from);
    node.on_datagram(now, &mut vec![0u8; 5_000], from);
    let after = stats.wire.snapshot().dropped;
    let grew = |reason: &str| after.get(reason).unwrap_or(&0) - before.get(reason).unwrap_or(&0);
    assert_eq!(grew("too_short"), 2);
    assert_eq!(grew("bad_magic"), 1);
    assert_eq!(grew("oversized"), 1);
}

#[test]
fn a_replayed_datagram_is_dropped_and_changes_nothing() {
    let mut net = formed();
    net.admit(0, b"x", 3);
    net.run_ms(200);
    assert_eq!(net.seen(1, b"x", 1), 3.0);
    let summary = net.sent[0]
        .iter()
        .rev()
        .find(|o| o.kind == Kind::Summary && o.to == addr(1))
        .unwrap()
        .clone();
    net.admit(0, b"x", 2);
    net.run_ms(200);
    assert_eq!(net.seen(1, b"x", 1), 5.0);
    let dropped = |net: &Net| {
        net.node(1)
            .view()
            .wire
            .snapshot()
            .dropped
            .get("replayed")
            .copied()
    };
    let before = dropped(&net).unwrap_or(0);
    net.hand_over(1, summary.datagram, 0);
    assert_eq!(dropped(&net), Some(before + 1));
    assert_eq!(
        net.seen(1, b"x", 1),
        5.0,
        "the old register did not come back"
    );
}

mod cluster_time;
mod far_clock;
mod forged;
mod ledger_ask;
mod ledger_join;
mod ledger_leave;
mod not_leasing;
mod owners;
mod rules;
