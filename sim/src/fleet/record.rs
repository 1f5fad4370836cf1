//! What a fleet run records, on true time: admissions of every overloaded key in 10 ms slots
//! (in units: a request of cost 5 admitted is 5 of its limit), bytes and datagrams per node,
//! bytes sent over time, probe staleness, failure detection, and, for a key shared by every
//! node, which nodes had requests refused window after window.

use std::collections::BTreeMap;

use super::config::{FleetConfig, SLOT_MS};
use super::traffic::KeySpec;

#[derive(Debug)]
pub struct Recorder {
    /// Key index → index among measured (overloaded) keys.
    measured: Vec<Option<usize>>,
    /// Per measured key: its key index, limit (units), class, window (in slots), users and
    /// request cost (units).
    pub keys: Vec<usize>,
    pub limits: Vec<f64>,
    pub users: Vec<usize>,
    pub costs: Vec<u32>,
    pub classes: Vec<usize>,
    pub window_slots: Vec<usize>,
    /// Per measured key and slot: units admitted, and units offered.
    pub admitted: Vec<Vec<u32>>,
    pub offered: Vec<Vec<u32>>,
    /// Bytes sent and received, and datagrams sent, per node, after warm-up.
    pub bytes: Vec<u64>,
    pub datagrams: Vec<u64>,
    /// Bytes sent after warm-up, by datagram kind, all nodes.
    pub sent_by_kind: BTreeMap<&'static str, u64>,
    /// Datagrams sent after warm-up, by kind, all nodes.
    pub datagrams_by_kind: BTreeMap<&'static str, u64>,
    /// Bytes sent by all nodes in each second of the run, warm-up included.
    pub sent_per_s: Vec<u64>,
    /// Per key class (its index), after warm-up and before the first crash (as the windows),
    /// on keys never offered more than their limit: requests offered and refused. A refusal
    /// there is a request the limit did not call for.
    pub below_limit: BTreeMap<usize, (u64, u64)>,
    /// The same, all classes, from the first crash on: what the crash refuses.
    pub below_limit_after_crash: (u64, u64),
    crash_ms: u64,
    /// Every key's class and cost.
    key_classes: Vec<usize>,
    key_costs: Vec<u32>,
    warmup_ms: u64,
    /// When node 0's probes were admitted (ms), and how many each observer has seen.
    pub probes: Vec<u64>,
    seen: Vec<usize>,
    /// Per probe counted by an observer: when it was admitted, and how long until counted.
    pub staleness_ms: Vec<(u64, u64)>,
    /// Crash or replacement to every node counting the member out (ms).
    pub detection_ms: Vec<u64>,
    /// Per node and window of the key every node shares (when it is the run's only key):
    /// requests offered and admitted, for starvation.
    shared_key: Option<usize>,
    pub shared_offered: Vec<Vec<u32>>,
    pub shared_admitted: Vec<Vec<u32>>,
    /// The shared key's window.
    pub shared_window_ms: u64,
    slots: usize,
    pub partitioned: bool,
    pub crashes: u32,
    pub replacements: u32,
}

impl Recorder {
    pub fn new(cfg: &FleetConfig, keys: &[KeySpec]) -> Self {
        let slots = cfg.duration_ms.div_ceil(SLOT_MS) as usize;
        let mut measured = vec![None; keys.len()];
        let (mut measured_keys, mut limits, mut classes, mut window_slots) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut users, mut costs) = (Vec::new(), Vec::new());
        for (k, key) in keys.iter().enumerate() {
            if key.overloaded {
                measured[k] = Some(limits.len());
                measured_keys.push(k);
                limits.push(f64::from(key.limit.max));
                users.push(key.users.len());
                costs.push(key.cost);
                classes.push(key.class);
                window_slots.push((key.limit.window.window_ms() / SLOT_MS).max(1) as usize);
            }
        }
        let n = limits.len();
        let shared_key = (keys.len() == 1 && keys[0].users.len() == cfg.nodes).then_some(0);
        let shared_window_ms = keys.first().map_or(1_000, |k| k.limit.window.window_ms());
        let windows = cfg.duration_ms.div_ceil(shared_window_ms) as usize;
        let per_node = |on: bool| {
            if on {
                vec![vec![0u32; windows]; cfg.nodes]
            } else {
                Vec::new()
            }
        };
        Self {
            measured,
            keys: measured_keys,
            limits,
            users,
            costs,
            classes,
            window_slots,
            admitted: vec![vec![0; slots]; n],
            offered: vec![vec![0; slots]; n],
            bytes: vec![0; cfg.nodes],
            datagrams: vec![0; cfg.nodes],
            sent_by_kind: BTreeMap::new(),
            datagrams_by_kind: BTreeMap::new(),
            sent_per_s: vec![0; cfg.duration_ms.div_ceil(1_000) as usize],
            below_limit: BTreeMap::new(),
            below_limit_after_crash: (0, 0),
            crash_ms: cfg.first_crash_ms().unwrap_or(u64::MAX),
            key_classes: keys.iter().map(|k| k.class).collect(),
            key_costs: keys.iter().map(|k| k.cost).collect(),
            warmup_ms: cfg.warmup_ms,
            probes: Vec::new(),
            seen: vec![0; cfg.nodes],
            staleness_ms: Vec::new(),
            detection_ms: Vec::new(),
            shared_key,
            shared_offered: per_node(shared_key.is_some()),
            shared_admitted: per_node(shared_key.is_some()),
            shared_window_ms,
            slots,
            partitioned: false,
            crashes: 0,
            replacements: 0,
        }
    }

    /// A request for `key` at `node`, decided at `t_ms`: its units count where it was decided.
    pub fn request(&mut self, key: usize, node: usize, t_ms: u64, allowed: bool) {
        match self.measured[key] {
            Some(m) => {
                let slot = (t_ms / SLOT_MS) as usize;
                if slot < self.slots {
                    let cost = self.key_costs[key];
                    let offered = &mut self.offered[m][slot];
                    *offered = offered.saturating_add(cost);
                    if allowed {
                        let admitted = &mut self.admitted[m][slot];
                        *admitted = admitted.saturating_add(cost);
                    }
                }
            }
            // Keys not measured for over-admission are those offered less than their limit.
            None if t_ms >= self.warmup_ms => {
                let (offered, refused) = if t_ms < self.crash_ms {
                    self.below_limit.entry(self.key_classes[key]).or_default()
                } else {
                    &mut self.below_limit_after_crash
                };
                *offered += 1;
                *refused += u64::from(!allowed);
            }
            None => {}
        }
        if self.shared_key == Some(key) {
            let w = (t_ms / self.shared_window_ms) as usize;
            if let (Some(o), Some(a)) = (
                self.shared_offered[node].get_mut(w),
                self.shared_admitted[node].get_mut(w),
            ) {
                *o += 1;
                *a += u32::from(allowed);
            }
        }
    }

    pub fn sent(&mut self, node: usize, kind: &'static str, bytes: usize) {
        self.bytes[node] += bytes as u64;
        self.datagrams[node] += 1;
        *self.sent_by_kind.entry(kind).or_default() += bytes as u64;
        *self.datagrams_by_kind.entry(kind).or_default() += 1;
    }

    /// Bytes sent at `t_ms` by any node, warm-up included, for the gossip over time.
    pub fn sent_at(&mut self, t_ms: u64, bytes: usize) {
        if let Some(second) = self.sent_per_s.get_mut((t_ms / 1_000) as usize) {
            *second += bytes as u64;
        }
    }

    pub fn received(&mut self, node: usize, bytes: usize) {
        self.bytes[node] += bytes as u64;
    }

    pub fn probe_admitted(&mut self, t_ms: u64) {
        self.probes.push(t_ms);
    }

    /// Observer `node` estimates node 0's probes at `seen`: every probe newly counted was
    /// stale for as long as it took to get here.
    pub fn observed(&mut self, node: usize, seen: f64, t_ms: u64) {
        let counted = (seen.round() as usize).min(self.probes.len());
        while self.seen[node] < counted {
            let admitted = self.probes[self.seen[node]];
            self.staleness_ms
                .push((admitted, t_ms.saturating_sub(admitted)));
            self.seen[node] += 1;
        }
    }

    pub fn detected(&mut self, after_ms: u64) {
        self.detection_ms.push(after_ms);
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::super::report::FleetReport;
    use super::super::traffic::{self, Traffic};
    use super::*;

    /// Two nodes sharing one key of 10 units a second, requests of 5 units; 3 s, the first
    /// second warm-up.
    fn two_nodes_one_key() -> (FleetConfig, Vec<KeySpec>) {
        let mut cfg = FleetConfig::new(1, 2);
        (cfg.duration_ms, cfg.warmup_ms) = (3_000, 1_000);
        cfg.faults.clear();
        let mut class = Traffic::small_share().classes.remove(0);
        (class.limit, class.cost) = (10, 5);
        cfg.traffic = Traffic {
            classes: vec![class],
        };
        let keys = traffic::keys(&cfg.traffic, 2, &mut rand::rngs::StdRng::seed_from_u64(1));
        (cfg, keys)
    }

    /// Requests of 5 units on a limit of 10 a second: three admitted in a window are 15 units,
    /// half again the limit, though they are only three requests of a limit of ten.
    #[test]
    fn a_request_of_many_units_counts_all_of_them() {
        let (cfg, keys) = two_nodes_one_key();
        let mut rec = Recorder::new(&cfg, &keys);
        for (node, t_ms, allowed) in [(0, 1_500, true), (1, 1_600, true), (0, 1_700, true)] {
            rec.request(0, node, t_ms, allowed);
        }
        rec.request(0, 1, 1_800, false);
        assert_eq!(rec.admitted[0][150], 5);
        assert_eq!(rec.admitted[0].iter().sum::<u32>(), 15);
        assert_eq!(rec.offered[0].iter().sum::<u32>(), 20);
        let r = FleetReport::new("units", "share", &cfg, &rec);
        assert!(
            (r.over_admission_max - 0.5).abs() < 1e-9,
            "15 units on a limit of 10: {r:?}"
        );
    }

    /// Two nodes each offered 4 requests (of 5 units) a window: a fixed cap at each could use
    /// at most 4 / 5 of its share (a slot freed waits for the node's next request). A window
    /// offered half that at each node (the same mean as one of each kind) could use 2 / 3.
    #[test]
    fn the_per_node_ceiling_counts_requests_a_window_at_one_node() {
        let (cfg, keys) = two_nodes_one_key();
        assert_eq!(keys[0].users.len(), 2);
        let mut rec = Recorder::new(&cfg, &keys);
        // A request every 125 ms, at each node in turn: every window holds 4 of each node's.
        for i in 0..24u64 {
            rec.request(0, (i % 2) as usize, i * 125, i % 3 == 0);
        }
        let r = FleetReport::new("ceiling", "ledger", &cfg, &rec);
        let (class, ceiling) = &r.per_node_ceiling_by_class.0[0];
        assert!((ceiling - 0.8).abs() < 1e-9, "{class}: {ceiling} of {r:?}");
        // The ceiling is averaged over windows, not taken of the mean load: 2 requests a
        // window at each node over the last second, 4 before.
        let mut rec = Recorder::new(&cfg, &keys);
        for i in 0..24u64 {
            let t = i * 125;
            if t < 2_000 || i % 2 == 0 {
                rec.request(0, (i % 2) as usize, t, true);
            }
        }
        let r = FleetReport::new("ceiling", "ledger", &cfg, &rec);
        let (_, ceiling) = &r.per_node_ceiling_by_class.0[0];
        // Windows ending in the first measured second hold 4 of each node's (4 / 5); then
        // node 1's leave one by one down to 2 a node (2 / 3): their mean is 0.772, where the
        // ceiling of the mean load (3 a window at each node) would be 3 / 4.
        assert!((ceiling - 0.772).abs() < 0.005, "{ceiling}");
    }

    /// A key offered under its limit: its refusals count after warm-up, and those from the
    /// first crash on apart (as the windows end at it).
    #[test]
    fn refusals_below_the_limit_count_until_the_first_crash_and_apart_after_it() {
        let (mut cfg, _) = two_nodes_one_key();
        cfg.traffic.classes[0].overload = super::super::load::Load::Constant(0.5);
        cfg.faults = vec![
            super::super::config::FleetFault::Crash {
                node: 1,
                at_ms: 2_500,
            },
            super::super::config::FleetFault::Crash {
                node: 0,
                at_ms: 2_000,
            },
        ];
        let keys = traffic::keys(&cfg.traffic, 2, &mut rand::rngs::StdRng::seed_from_u64(1));
        let mut rec = Recorder::new(&cfg, &keys);
        assert!(rec.measured[0].is_none(), "a key under its limit");
        // Warm-up: not counted. Before the crash at 2 s: one of four refused. After: two of
        // three.
        let requests = [
            (500, false),
            (1_000, true),
            (1_200, false),
            (1_500, true),
            (1_999, true),
            (2_000, false),
            (2_600, true),
            (2_900, false),
        ];
        for (t_ms, allowed) in requests {
            rec.request(0, 0, t_ms, allowed);
        }
        let r = FleetReport::new("crash", "ledger", &cfg, &rec);
        assert!((r.refused_below_limit - 0.25).abs() < 1e-9, "{r:?}");
        let after = r.refused_below_limit_after_crash.expect("a crash");
        assert!((after - 2.0 / 3.0).abs() < 1e-9, "{r:?}");
        cfg.faults.clear();
        let r = FleetReport::new("no crash", "ledger", &cfg, &Recorder::new(&cfg, &keys));
        assert_eq!(r.refused_below_limit_after_crash, None);
    }
}
