//! What the plots of a fleet run draw: the busiest keys of each class window by window, every
//! measured window's over-admission, the bytes the fleet sent each second, and how stale one
//! node's view of another's admissions was.

use super::config::{FleetConfig, SLOT_MS};
use super::record::Recorder;
use super::traffic::KeySpec;

/// Keys of each class a report plots: those whose busiest window was the largest part of
/// their limit.
pub const BUSIEST_PER_CLASS: usize = 3;

/// One overloaded key, slot by slot.
#[derive(Debug, Clone)]
pub struct TracedKey {
    pub name: String,
    pub class: String,
    /// Units per window.
    pub limit: u32,
    pub window_ms: u64,
    /// Its busiest window after warm-up, as a multiple of the limit.
    pub busiest: f64,
    /// Units admitted in each slot of [`FleetTrace::SLOT_MS`].
    pub admitted: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct FleetTrace {
    /// The busiest keys of each class, classes in order, the busiest first.
    pub keys: Vec<TracedKey>,
    /// Windows measured by over-admission, in steps of 0.1 % of the limit (the last: 300 % or
    /// more).
    pub over_admission: Vec<u64>,
    /// Bytes sent per node of the fleet in each second of the run.
    pub sent_per_node_per_s: Vec<f64>,
    /// Each probe's delay until an observer counted it (ms), after warm-up.
    pub staleness_ms: Vec<u64>,
}

impl FleetTrace {
    pub const SLOT_MS: u64 = SLOT_MS;

    pub(super) fn new(
        cfg: &FleetConfig,
        keys: &[KeySpec],
        rec: &Recorder,
        over_admission: Vec<u64>,
    ) -> Self {
        let warmup = (cfg.warmup_ms / SLOT_MS) as usize;
        let mut traced: Vec<TracedKey> = Vec::new();
        for (c, class) in cfg.traffic.classes.iter().enumerate() {
            let mut busiest: Vec<(f64, usize)> = (0..rec.keys.len())
                .filter(|m| rec.classes[*m] == c)
                .map(|m| {
                    let w = rec.window_slots[m];
                    let sums = crate::report::window_sums(&rec.admitted[m], w, warmup.max(w));
                    let max = sums.into_iter().max().unwrap_or(0);
                    (max as f64 / rec.limits[m], m)
                })
                .collect();
            // The busiest first; among equals, the first key.
            busiest.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for &(ratio, m) in busiest.iter().take(BUSIEST_PER_CLASS) {
                let key = &keys[rec.keys[m]];
                traced.push(TracedKey {
                    name: String::from_utf8_lossy(&key.name).into_owned(),
                    class: class.name.clone(),
                    limit: key.limit.max,
                    window_ms: key.limit.window.window_ms(),
                    busiest: ratio,
                    admitted: rec.admitted[m].clone(),
                });
            }
        }
        let nodes = cfg.nodes.max(1) as f64;
        Self {
            keys: traced,
            over_admission,
            sent_per_node_per_s: rec.sent_per_s.iter().map(|b| *b as f64 / nodes).collect(),
            staleness_ms: rec
                .staleness_ms
                .iter()
                .filter(|(at, _)| *at >= cfg.warmup_ms)
                .map(|(_, d)| *d)
                .collect(),
        }
    }
}
