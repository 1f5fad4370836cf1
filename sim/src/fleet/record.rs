//! What a fleet run records, on true time: admissions of every overloaded key in 10 ms slots,
//! bytes and datagrams per node, probe staleness, failure detection, and, for a key shared
//! by every node, which nodes had requests refused window after window.

use super::config::FleetConfig;
use super::traffic::{KeyClass, KeySpec};

/// Admissions are counted in slots of this many ms (windows slide by one slot).
pub const SLOT_MS: u64 = 10;

#[derive(Debug)]
pub struct Recorder {
    /// Key index → index among measured (overloaded) keys.
    measured: Vec<Option<usize>>,
    pub limits: Vec<f64>,
    pub classes: Vec<KeyClass>,
    pub admitted: Vec<Vec<u32>>,
    pub offered: Vec<Vec<u32>>,
    /// Bytes sent and received, and datagrams sent, per node, after warm-up.
    pub bytes: Vec<u64>,
    pub datagrams: Vec<u64>,
    /// Bytes sent after warm-up, by datagram kind, all nodes.
    pub sent_by_kind: std::collections::BTreeMap<&'static str, u64>,
    /// Datagrams sent after warm-up, by kind, all nodes.
    pub datagrams_by_kind: std::collections::BTreeMap<&'static str, u64>,
    /// Per key class, after warm-up, on keys offered less than their limit: requests offered
    /// and refused. A refusal there is a request the limit did not call for.
    pub below_limit: std::collections::BTreeMap<KeyClass, (u64, u64)>,
    /// Every key's class.
    key_classes: Vec<KeyClass>,
    warmup_ms: u64,
    /// When node 0's probes were admitted (ms), and how many each observer has seen.
    pub probes: Vec<u64>,
    seen: Vec<usize>,
    /// Per probe counted by an observer: when it was admitted, and how long until counted.
    pub staleness_ms: Vec<(u64, u64)>,
    /// Crash or replacement to every node counting the member out (ms).
    pub detection_ms: Vec<u64>,
    /// Per node and window of the key every node shares (when there is only one such key):
    /// requests offered and admitted, for starvation.
    shared_key: Option<usize>,
    pub shared_offered: Vec<Vec<u32>>,
    pub shared_admitted: Vec<Vec<u32>>,
    window_ms: u64,
    slots: usize,
    pub partitioned: bool,
    pub crashes: u32,
    pub replacements: u32,
}

impl Recorder {
    pub fn new(cfg: &FleetConfig, keys: &[KeySpec]) -> Self {
        let slots = cfg.duration_ms.div_ceil(SLOT_MS) as usize;
        let mut measured = vec![None; keys.len()];
        let (mut limits, mut classes) = (Vec::new(), Vec::new());
        for (k, key) in keys.iter().enumerate() {
            if key.overloaded {
                measured[k] = Some(limits.len());
                limits.push(f64::from(key.limit.max));
                classes.push(key.class);
            }
        }
        let n = limits.len();
        let globals: Vec<usize> = keys
            .iter()
            .enumerate()
            .filter(|(_, k)| k.class == KeyClass::Global)
            .map(|(i, _)| i)
            .collect();
        let shared_key = (globals.len() == 1 && keys.len() == 1).then(|| globals[0]);
        let windows = cfg.duration_ms.div_ceil(cfg.traffic.window_ms) as usize;
        let per_node = |on: bool| {
            if on {
                vec![vec![0u32; windows]; cfg.nodes]
            } else {
                Vec::new()
            }
        };
        Self {
            measured,
            limits,
            classes,
            admitted: vec![vec![0; slots]; n],
            offered: vec![vec![0; slots]; n],
            bytes: vec![0; cfg.nodes],
            datagrams: vec![0; cfg.nodes],
            sent_by_kind: std::collections::BTreeMap::new(),
            datagrams_by_kind: std::collections::BTreeMap::new(),
            below_limit: std::collections::BTreeMap::new(),
            key_classes: keys.iter().map(|k| k.class).collect(),
            warmup_ms: cfg.warmup_ms,
            probes: Vec::new(),
            seen: vec![0; cfg.nodes],
            staleness_ms: Vec::new(),
            detection_ms: Vec::new(),
            shared_key,
            shared_offered: per_node(shared_key.is_some()),
            shared_admitted: per_node(shared_key.is_some()),
            window_ms: cfg.traffic.window_ms,
            slots,
            partitioned: false,
            crashes: 0,
            replacements: 0,
        }
    }

    pub fn request(&mut self, key: usize, node: usize, t_ms: u64, allowed: bool) {
        match self.measured[key] {
            Some(m) => {
                let slot = (t_ms / SLOT_MS) as usize;
                if slot < self.slots {
                    self.offered[m][slot] += 1;
                    self.admitted[m][slot] += u32::from(allowed);
                }
            }
            // Keys not measured for over-admission are those offered less than their limit.
            None if t_ms >= self.warmup_ms => {
                let (offered, refused) = self.below_limit.entry(self.key_classes[key]).or_default();
                *offered += 1;
                *refused += u64::from(!allowed);
            }
            None => {}
        }
        if self.shared_key == Some(key) {
            let w = (t_ms / self.window_ms) as usize;
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
