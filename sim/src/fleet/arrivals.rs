//! Requests arrive as Poisson streams, one per (key, node using it), drawn from a seeded
//! generator of their own, so that the arrivals do not depend on anything the nodes do. They
//! are drawn as one Poisson process at the streams' total rate, each arrival going to a stream
//! with probability in proportion to its rate: the superposition of independent Poisson
//! streams, without a queue of every stream's next arrival (60 000 of them at 1 000 nodes).
//!
//! A stream whose load changes over time is drawn at its peak rate and each of its arrivals
//! kept with probability `load(t) / peak` (thinning): a Poisson process of rate `load(t)`,
//! from the same seed every time. Streams of constant load keep every arrival and draw
//! nothing more.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::load::Load;
use super::traffic::{KeySpec, Traffic};

/// A group's rate (the bits of requests per µs, at the peak) and, if its load varies, the load's
/// class and whether it is the class's `overload`.
type GroupKey = (u64, Option<(usize, bool)>);

/// Streams of one rate (requests per µs each, at their peak) and load, and the total rate of
/// those before them.
#[derive(Debug)]
struct RateGroup {
    rate_per_us: f64,
    before: f64,
    /// The load over time, in `Arrivals::loads`, if it varies.
    load: Option<usize>,
    /// (key, node) of each stream.
    streams: Vec<(usize, usize)>,
}

/// The next requests of every stream, in order.
#[derive(Debug)]
pub struct Arrivals {
    groups: Vec<RateGroup>,
    total_per_us: f64,
    /// Loads that vary, with their peaks.
    loads: Vec<(Load, f64)>,
    rng: StdRng,
    /// Past this, an arrival thinned away ends the draws (µs).
    end_us: f64,
    /// The next request: its time (µs since the start, fractional) and (key, node).
    next: Option<(f64, (usize, usize))>,
}

impl Arrivals {
    /// The arrivals of `keys` (of `traffic`) in a run of `duration_ms`.
    pub fn new(keys: &[KeySpec], traffic: &Traffic, seed: u64, duration_ms: u64) -> Self {
        // Grouped by rate and varying load, so that picking a stream is a search over a few
        // groups; keyed by the rate's bits, as a float is not `Ord` (for positive rates the
        // order is the same), and by (class, overloaded) for a load that varies.
        let mut by_rate: BTreeMap<GroupKey, Vec<(usize, usize)>> = BTreeMap::new();
        for (k, key) in keys.iter().enumerate() {
            let per_user = key.offered_per_s / key.users.len().max(1) as f64;
            // A stream that offers nothing (or a rate that is not one) has no arrivals.
            if !(per_user > 0.0 && per_user.is_finite()) {
                continue;
            }
            let varying = key.varying.map(|overloaded| (key.class, overloaded));
            for &node in &key.users {
                by_rate
                    .entry(((per_user / 1e6).to_bits(), varying))
                    .or_default()
                    .push((k, node));
            }
        }
        let mut loads: Vec<(Load, f64)> = Vec::new();
        let mut load_of: BTreeMap<(usize, bool), usize> = BTreeMap::new();
        let mut groups = Vec::new();
        let mut total_per_us = 0.0;
        for ((bits, varying), streams) in by_rate {
            let rate_per_us = f64::from_bits(bits);
            let load = varying.map(|(class, overloaded)| {
                *load_of.entry((class, overloaded)).or_insert_with(|| {
                    let c = &traffic.classes[class];
                    let load = if overloaded {
                        &c.overload
                    } else {
                        &c.underload
                    };
                    loads.push((load.clone(), load.peak()));
                    loads.len() - 1
                })
            });
            let count = streams.len();
            groups.push(RateGroup {
                rate_per_us,
                before: total_per_us,
                load,
                streams,
            });
            total_per_us += rate_per_us * count as f64;
        }
        let mut arrivals = Self {
            groups,
            total_per_us,
            loads,
            rng: StdRng::seed_from_u64(seed ^ 0xA771_7A15),
            end_us: duration_ms as f64 * 1e3,
            next: None,
        };
        arrivals.next = arrivals.draw(0.0);
        arrivals
    }

    /// The request after one at `after_us`: an exponential gap at the total rate, then a
    /// stream picked in proportion to its rate, kept in proportion to its load then.
    fn draw(&mut self, mut after_us: f64) -> Option<(f64, (usize, usize))> {
        if self.total_per_us <= 0.0 {
            return None;
        }
        loop {
            let u: f64 = self.rng.random_range(f64::EPSILON..1.0);
            let at = after_us - u.ln() / self.total_per_us;
            let pick = self.rng.random_range(0.0..self.total_per_us);
            let g = self
                .groups
                .partition_point(|g| g.before <= pick)
                .saturating_sub(1);
            let group = &self.groups[g];
            let i = ((pick - group.before) / group.rate_per_us) as usize;
            let stream = group.streams[i.min(group.streams.len() - 1)];
            let Some(l) = group.load else {
                return Some((at, stream));
            };
            let (load, peak) = &self.loads[l];
            let keep = load.at(at / 1e3) / peak;
            if self.rng.random::<f64>() < keep {
                return Some((at, stream));
            }
            if at >= self.end_us {
                return None;
            }
            after_us = at;
        }
    }

    /// When the next request arrives (µs since the start).
    pub fn peek_us(&self) -> Option<u64> {
        self.next.map(|(t, _)| t as u64)
    }

    /// The next request: its time, key and node.
    pub fn pop(&mut self) -> Option<(u64, usize, usize)> {
        let (t, (key, node)) = self.next?;
        self.next = self.draw(t);
        Some((t as u64, key, node))
    }
}

#[cfg(test)]
mod tests {
    use super::super::traffic::{KeyCount, Placement, Users, keys};
    use super::*;

    const LONG_MS: u64 = 3_600_000;

    #[test]
    fn a_stream_offers_what_its_rate_says() {
        let traffic = Traffic::fleet();
        let keys = keys(&traffic, 20, &mut StdRng::seed_from_u64(1));
        // Over 10 s, a stream offers what its rate says, within a few percent.
        let key = &keys[0];
        let mut arrivals = Arrivals::new(std::slice::from_ref(key), &traffic, 7, LONG_MS);
        let mut n = 0;
        while arrivals.peek_us().is_some_and(|t| t < 10_000_000) {
            arrivals.pop();
            n += 1;
        }
        let expected = key.offered_per_s * 10.0;
        assert!(
            (n as f64 - expected).abs() < expected * 0.03,
            "{n} vs {expected}"
        );
    }

    /// Drawn as one process, every stream still gets its own rate, and its requests are
    /// Poisson: per-second counts whose variance is about their mean.
    #[test]
    fn every_stream_gets_its_rate_and_arrives_as_poisson() {
        let nodes = 20;
        let traffic = Traffic::fleet();
        let keys = keys(&traffic, nodes, &mut StdRng::seed_from_u64(3));
        let seconds = 20;
        let mut counts = vec![vec![vec![0u32; seconds]; nodes]; keys.len()];
        let mut arrivals = Arrivals::new(&keys, &traffic, 11, LONG_MS);
        let mut last = 0;
        while let Some((t, key, node)) = arrivals.pop() {
            assert!(t >= last, "arrivals in order");
            last = t;
            let s = (t / 1_000_000) as usize;
            if s >= seconds {
                break;
            }
            assert!(keys[key].users.contains(&node), "only a key's users get it");
            counts[key][node][s] += 1;
        }
        for (k, key) in keys.iter().enumerate() {
            let expected = key.offered_per_s / key.users.len() as f64 * seconds as f64;
            for (node, by_second) in counts[k].iter().enumerate() {
                let total: u32 = by_second.iter().sum();
                let expected = if key.users.contains(&node) {
                    expected
                } else {
                    0.0
                };
                assert!(
                    (f64::from(total) - expected).abs() < 5.0 * expected.sqrt() + 1.0,
                    "key {k} at node {node}: {total} vs {expected}"
                );
            }
        }
        // Nothing offered, nothing drawn.
        assert!(Arrivals::new(&[], &traffic, 1, LONG_MS).pop().is_none());
        // A global key at twice its limit: each node about a twentieth, per second Poisson.
        let per_node = keys[0].offered_per_s / nodes as f64;
        for (node, seconds_of_node) in counts[0].iter().enumerate() {
            let by_second: Vec<f64> = seconds_of_node.iter().map(|c| f64::from(*c)).collect();
            let mean = by_second.iter().sum::<f64>() / seconds as f64;
            let variance =
                by_second.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (seconds - 1) as f64;
            assert!(
                (mean - per_node).abs() < 0.05 * per_node,
                "node {node}: {mean} vs {per_node}"
            );
            assert!(
                (0.4..2.0).contains(&(variance / mean)),
                "node {node}: variance {variance}, mean {mean}"
            );
        }
    }

    /// A load that ramps, holds and falls to nothing: each second's requests are what the
    /// profile offers over that second, within Poisson bounds, on every key of the class, while
    /// a class of constant load beside it keeps its rate.
    #[test]
    fn arrivals_follow_a_load_profile() {
        let profile = Load::Profile(vec![
            (2_000, 0.5),
            (6_000, 4.0),
            (9_000, 4.0),
            (12_000, 0.0),
        ]);
        let mut ramp = Traffic::small_share().classes.remove(0);
        (ramp.name, ramp.keys, ramp.users) = ("ramp".into(), KeyCount::Fixed(4), Users::Count(3));
        (ramp.limit, ramp.overload, ramp.overloaded_every) = (100, profile.clone(), 2);
        ramp.placement = Placement::InTurn;
        let mut calm = ramp.clone();
        (calm.name, calm.overload, calm.underload) =
            ("calm".into(), Load::Constant(1.5), Load::Constant(1.5));
        let traffic = Traffic {
            classes: vec![ramp, calm],
        };
        let nodes = 5;
        let keys = keys(&traffic, nodes, &mut StdRng::seed_from_u64(2));
        assert_eq!(keys.iter().filter(|k| k.varying.is_some()).count(), 2);
        let seconds = 15;
        let mut counts = vec![vec![0u32; seconds]; keys.len()];
        let mut arrivals = Arrivals::new(&keys, &traffic, 5, seconds as u64 * 1_000);
        while let Some((t, key, _)) = arrivals.pop() {
            let s = (t / 1_000_000) as usize;
            if s >= seconds {
                break;
            }
            counts[key][s] += 1;
        }
        for (k, key) in keys.iter().enumerate() {
            let load = traffic.classes[key.class].load(k % 4);
            for (s, &n) in counts[k].iter().enumerate() {
                // The load's mean over the second, in 1 ms steps, times the rate of a load 1.
                let mean_load = (0..1_000)
                    .map(|ms| load.at((s * 1_000 + ms) as f64 + 0.5))
                    .sum::<f64>()
                    / 1_000.0;
                let expected = mean_load * 100.0;
                assert!(
                    (f64::from(n) - expected).abs() <= 5.0 * expected.sqrt() + 1.0,
                    "key {k}, second {s}: {n} vs {expected}"
                );
            }
        }
        // The ramp's peak seconds offer four times the limit, its last ones nothing.
        assert!(counts[0][7] > 300 && counts[0][13] == 0, "{:?}", counts[0]);
    }
}
