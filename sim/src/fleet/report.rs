//! The measures of a fleet run, on true time.
//!
//! Over-admission is measured per overloaded key over every sliding window (sliding by 10 ms)
//! that ends after warm-up: `max(0, admitted / L − 1)`; the mean and maximum are exact, the
//! 99th percentile is read from a histogram of 0.1 % steps (there are millions of windows at a
//! thousand nodes). Windows are measured until the first crash. Admissions count in units:
//! a window's admitted units against its limit.

use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::config::{FleetConfig, SLOT_MS};
use super::record::Recorder;

/// Histogram steps: 0.1 % of the limit, up to 300 % over.
pub const STEP: f64 = 0.001;
pub const STEPS: usize = 3_000;

/// A measure per key class, in the order the traffic lists its classes: in JSON, an object
/// keyed by the classes' names.
#[derive(Debug, Clone, PartialEq)]
pub struct ByClass<T>(pub Vec<(String, T)>);

impl<T> ByClass<T> {
    pub fn get(&self, class: &str) -> Option<&T> {
        self.0.iter().find(|(c, _)| c == class).map(|(_, v)| v)
    }
}

impl<T> std::ops::Index<&str> for ByClass<T> {
    type Output = T;

    /// The measure of `class`; panics if the run has no such class (as a map's index does).
    fn index(&self, class: &str) -> &T {
        self.get(class)
            .unwrap_or_else(|| panic!("no key class {class:?} measured"))
    }
}

impl<T: Serialize> Serialize for ByClass<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (class, v) in &self.0 {
            map.serialize_entry(class, v)?;
        }
        map.end()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub nodes: usize,
    /// Windows measured, over every overloaded key.
    pub windows: u64,
    pub over_admission_mean: f64,
    pub over_admission_p99: f64,
    pub over_admission_max: f64,
    /// Mean over windows of admitted / min(L, offered).
    pub utilization: f64,
    pub over_admission_mean_by_class: ByClass<f64>,
    /// The 99th percentile per key class: the pooled one is mostly the tenant keys', which
    /// have most of the windows.
    pub over_admission_p99_by_class: ByClass<f64>,
    pub utilization_by_class: ByClass<f64>,
    /// What a fixed cap at each node could use of the limit, per key class: `x / (x + 1)` for
    /// `x` requests offered a window at one of a key's nodes (a slot freed at a node waits for
    /// that node's next request), averaged as the utilization is, over the windows (a window
    /// offered nothing counts 1, as in the utilization). A shared pool of the limit is not
    /// held to it.
    pub per_node_ceiling_by_class: ByClass<f64>,
    /// Of the requests on keys never offered more than their limit (half of it in `fleet`),
    /// the fraction refused, after warm-up and before the first crash: what a user sees as a
    /// limit that bites too early. It includes what other faults refuse there (a partition's
    /// scaled shares, a new node warming up).
    pub refused_below_limit: f64,
    /// The same, per key class.
    pub refused_below_limit_by_class: ByClass<f64>,
    /// The same, all classes, from the first crash to the end (`None` without a crash): what
    /// the windows of a member gone without a word refuse while no one may lease them.
    pub refused_below_limit_after_crash: Option<f64>,
    /// Largest admitted / L over windows ending inside a partition, over every overloaded key.
    /// It includes the windows that end in the partition's first second, mostly before the cut.
    pub partition_max_ratio: Option<f64>,
    /// The same over windows wholly inside the partition (begun at the cut or after): what the
    /// sides admit while cut off, without the tail of the windows before.
    pub partition_inside_max_ratio: Option<f64>,
    /// The same over windows that end within a window of the heal: admissions of the
    /// partition's last second, and of the sides as they learn of each other again. (Like
    /// every measure here, only windows that end before the first crash.)
    pub partition_heal_max_ratio: Option<f64>,
    pub staleness_p50_ms: Option<u64>,
    pub staleness_p90_ms: Option<u64>,
    pub staleness_p99_ms: Option<u64>,
    /// Gossip bytes sent and received per node per second, after warm-up.
    pub gossip_bytes_per_node_per_s_mean: f64,
    pub gossip_bytes_per_node_per_s_max: f64,
    pub datagrams_per_node_per_s_mean: f64,
    /// Bytes sent per node per second, by datagram kind.
    pub sent_bytes_per_node_per_s_by_kind: BTreeMap<String, f64>,
    /// Datagrams sent per node per second, by kind.
    pub sent_datagrams_per_node_per_s_by_kind: BTreeMap<String, f64>,
    /// The slowest of the crashes and replacements: until every other node counted the member
    /// out (ms).
    pub detection_ms: Option<u64>,
    /// The key every node shares: the longest run of windows in which one node had requests
    /// and none was admitted.
    pub starved_windows_max: Option<u32>,
    pub crashes: u32,
    /// Whether the scenario's partition took effect.
    pub partitioned: bool,
    pub replacements: u32,
}

#[derive(Debug, Default)]
pub(super) struct Windows {
    count: u64,
    over_sum: f64,
    over_max: f64,
    utilization_sum: f64,
    /// The sum over windows of the per-node ceiling (see `per_node_ceiling_by_class`).
    ceiling_sum: f64,
    /// Windows by over-admission, in steps of [`STEP`] (the last: that much or more).
    pub histogram: Vec<u64>,
}

impl Windows {
    /// A window: units admitted and offered, the limit, and `per_request`, the units a window
    /// offers one of the key's nodes per request it is offered there (for the per-node
    /// ceiling).
    fn add(&mut self, admitted: u64, offered: u64, limit: f64, per_request: f64) {
        // A window offered nothing loses nothing (its utilization counts 1 too).
        let x = offered as f64 / per_request;
        self.ceiling_sum += if offered == 0 { 1.0 } else { x / (x + 1.0) };
        let over = (admitted as f64 / limit - 1.0).max(0.0);
        self.count += 1;
        self.over_sum += over;
        self.over_max = self.over_max.max(over);
        let cap = (offered as f64).min(limit);
        self.utilization_sum += if cap > 0.0 {
            admitted as f64 / cap
        } else {
            1.0
        };
        if self.histogram.is_empty() {
            self.histogram = vec![0; STEPS + 1];
        }
        self.histogram[((over / STEP) as usize).min(STEPS)] += 1;
    }

    fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.over_sum / self.count as f64
        }
    }

    fn utilization(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.utilization_sum / self.count as f64
        }
    }

    fn ceiling(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.ceiling_sum / self.count as f64
        }
    }

    fn p99(&self) -> f64 {
        let target = (self.count as f64 * 0.99).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.histogram.iter().enumerate() {
            seen += n;
            if seen >= target {
                return i as f64 * STEP;
            }
        }
        self.over_max
    }
}

fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

/// The longest run of windows in which a node had requests and none was admitted; windows
/// without requests neither extend nor end a run.
fn longest_starvation(offered: &[Vec<u32>], admitted: &[Vec<u32>], from: usize) -> u32 {
    let mut worst = 0;
    for (o, a) in offered.iter().zip(admitted) {
        let mut run = 0;
        for w in from..o.len() {
            if a[w] > 0 {
                run = 0;
            } else if o[w] > 0 {
                run += 1;
                worst = worst.max(run);
            }
        }
    }
    worst
}

impl FleetReport {
    pub fn new(name: &str, policy: &str, cfg: &FleetConfig, rec: &Recorder) -> Self {
        Self::measure(name, policy, cfg, rec).0
    }

    /// The measures, and every measured window's over-admission (a histogram in steps of
    /// [`STEP`]).
    pub(super) fn measure(
        name: &str,
        policy: &str,
        cfg: &FleetConfig,
        rec: &Recorder,
    ) -> (Self, Vec<u64>) {
        let warmup = (cfg.warmup_ms / SLOT_MS) as usize;
        // Windows end at the first crash: a member gone for good keeps its share reserved for
        // `expected_hold_ms` under the strict policy, which is the point of the policy but not
        // what the scenario measures (the crash is there to time failure detection).
        let until = cfg
            .first_crash_ms()
            .map_or(usize::MAX, |at_ms| (at_ms / SLOT_MS) as usize);
        let partition = cfg.partition().map(|(_, a, b)| (a / SLOT_MS, b / SLOT_MS));
        let mut all = Windows::default();
        let mut by_class: BTreeMap<usize, Windows> = BTreeMap::new();
        let mut partition_max: Option<f64> = None;
        let mut partition_inside_max: Option<f64> = None;
        let mut partition_heal_max: Option<f64> = None;
        let raise = |max: &mut Option<f64>, r: f64| *max = Some(max.map_or(r, |m| m.max(r)));
        for k in 0..rec.limits.len() {
            let limit = rec.limits[k];
            let w = rec.window_slots[k];
            let from = warmup.max(w);
            let to = rec.admitted[k].len().min(until);
            let admitted = crate::report::window_sums(&rec.admitted[k][..to], w, from);
            let offered = crate::report::window_sums(&rec.offered[k][..to], w, from);
            // Units per request offered at one of the key's nodes.
            let per_request = f64::from(rec.costs[k].max(1)) * rec.users[k].max(1) as f64;
            for (i, (&a, &o)) in admitted.iter().zip(&offered).enumerate() {
                let t = from + i;
                all.add(a, o, limit, per_request);

                by_class
                    .entry(rec.classes[k])
                    .or_default()
                    .add(a, o, limit, per_request);
                if let Some((p0, p1)) = partition {
                    let (t, r) = (t as u64, a as f64 / limit);
                    if t >= p0 && t < p1 {
                        raise(&mut partition_max, r);
                        if (t + 1).saturating_sub(w as u64) >= p0 {
                            raise(&mut partition_inside_max, r);
                        }
                    } else if t >= p1 && t < p1 + w as u64 {
                        raise(&mut partition_heal_max, r);
                    }
                }
            }
        }
        // Probes admitted after warm-up and before the first crash, as the windows.
        let crash_ms = (until as u64).saturating_mul(SLOT_MS);
        let mut stale: Vec<u64> = rec
            .staleness_ms
            .iter()
            .filter(|(at, _)| *at >= cfg.warmup_ms && *at < crash_ms)
            .map(|(_, d)| *d)
            .collect();
        stale.sort_unstable();
        let seconds = (cfg.duration_ms.saturating_sub(cfg.warmup_ms) as f64 / 1e3).max(1e-3);
        let per_s: Vec<f64> = rec.bytes.iter().map(|b| *b as f64 / seconds).collect();
        let nodes = cfg.nodes as f64;
        let starved = (!rec.shared_offered.is_empty()).then(|| {
            let from = (cfg.warmup_ms / rec.shared_window_ms) as usize;
            longest_starvation(&rec.shared_offered, &rec.shared_admitted, from)
        });
        let class = |c: usize| cfg.traffic.classes[c].name.clone();
        let by = |f: &dyn Fn(&Windows) -> f64| {
            ByClass(by_class.iter().map(|(c, w)| (class(*c), f(w))).collect())
        };
        let report = FleetReport {
            scenario: name.to_owned(),
            policy: policy.to_owned(),
            seed: cfg.seed,
            nodes: cfg.nodes,
            windows: all.count,
            over_admission_mean: all.mean(),
            over_admission_p99: all.p99(),
            over_admission_max: all.over_max,
            utilization: all.utilization(),
            over_admission_mean_by_class: by(&Windows::mean),
            over_admission_p99_by_class: by(&Windows::p99),
            utilization_by_class: by(&Windows::utilization),
            per_node_ceiling_by_class: by(&Windows::ceiling),
            refused_below_limit: {
                let (offered, refused) = rec
                    .below_limit
                    .values()
                    .fold((0, 0), |(o, r), (bo, br)| (o + bo, r + br));
                refused as f64 / u64::max(offered, 1) as f64
            },
            refused_below_limit_after_crash: cfg.first_crash_ms().map(|_| {
                let (offered, refused) = rec.below_limit_after_crash;
                refused as f64 / offered.max(1) as f64
            }),
            refused_below_limit_by_class: ByClass(
                rec.below_limit
                    .iter()
                    .map(|(c, (offered, refused))| {
                        (class(*c), *refused as f64 / (*offered).max(1) as f64)
                    })
                    .collect(),
            ),
            partition_max_ratio: partition_max,
            partition_inside_max_ratio: partition_inside_max,
            partition_heal_max_ratio: partition_heal_max,
            staleness_p50_ms: percentile(&stale, 0.5),
            staleness_p90_ms: percentile(&stale, 0.9),
            staleness_p99_ms: percentile(&stale, 0.99),
            gossip_bytes_per_node_per_s_mean: per_s.iter().sum::<f64>() / nodes,
            gossip_bytes_per_node_per_s_max: per_s.iter().copied().fold(0.0, f64::max),
            datagrams_per_node_per_s_mean: rec.datagrams.iter().sum::<u64>() as f64
                / seconds
                / nodes,
            sent_bytes_per_node_per_s_by_kind: rec
                .sent_by_kind
                .iter()
                .map(|(k, b)| ((*k).to_owned(), *b as f64 / seconds / nodes))
                .collect(),
            sent_datagrams_per_node_per_s_by_kind: rec
                .datagrams_by_kind
                .iter()
                .map(|(k, d)| ((*k).to_owned(), *d as f64 / seconds / nodes))
                .collect(),
            detection_ms: rec.detection_ms.iter().copied().max(),
            starved_windows_max: starved,
            crashes: rec.crashes,
            partitioned: rec.partitioned,
            replacements: rec.replacements,
        };
        let mut histogram = all.histogram;
        histogram.resize(STEPS + 1, 0);
        (report, histogram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_99th_percentile_comes_from_the_histogram() {
        let mut w = Windows::default();
        for i in 0..1_000 {
            // 1 % of windows 50 % over, the rest exact.
            let admitted = if i % 100 == 0 { 150 } else { 100 };
            w.add(admitted, 200, 100.0, 1.0);
        }
        assert_eq!(w.count, 1_000);
        assert!((w.mean() - 0.005).abs() < 1e-9);
        assert_eq!(w.p99(), 0.0);
        w.add(150, 200, 100.0, 1.0);
        assert!((w.p99() - 0.5).abs() < 1e-9, "{}", w.p99());
    }

    #[test]
    fn starvation_counts_refused_windows_until_an_admission() {
        let offered = vec![vec![1, 0, 1, 1, 1, 0]];
        let admitted = vec![vec![0, 0, 0, 1, 0, 0]];
        assert_eq!(longest_starvation(&offered, &admitted, 0), 2);
        assert_eq!(longest_starvation(&offered, &admitted, 3), 1);
    }
}
