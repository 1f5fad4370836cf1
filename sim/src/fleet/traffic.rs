//! A fleet's keys and who offers what on each: global keys every node uses, tenant keys a few
//! nodes share, keys local to one node, and the probe key staleness is measured on.
//!
//! Requests arrive as Poisson streams, one per (key, node using it), drawn from a seeded
//! generator of their own, so that the arrivals do not depend on anything the nodes do. They
//! are drawn as one Poisson process at the streams' total rate, each arrival going to a stream
//! with probability in proportion to its rate: the superposition of independent Poisson
//! streams, without a queue of every stream's next arrival (60 000 of them at 1 000 nodes).

use std::collections::BTreeMap;

use limitmesh::limiter::Limit;
use limitmesh::window::WindowSpec;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// What kind of key, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyClass {
    /// Used by every node.
    Global,
    /// Used by a few nodes (a tenant served by some pods).
    Tenant,
    /// Used by one node.
    Local,
}

/// The traffic of a fleet scenario, per key class. Limits are per `window_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    pub window_ms: u64,
    pub global_keys: usize,
    pub global_limit: u32,
    /// Tenant keys per node (so `tenant_keys_per_node × N` in all).
    pub tenant_keys_per_node: usize,
    /// Nodes that use each tenant key.
    pub tenant_users: usize,
    pub tenant_limit: u32,
    /// One key local to each node, with this limit (none if 0).
    pub local_limit: u32,
    /// Every `overloaded_every`-th key of each class is offered `overload × L`; the others
    /// `underload × L`.
    pub overloaded_every: usize,
    pub overload: f64,
    pub underload: f64,
}

impl Traffic {
    /// The `fleet` traffic: 10 global keys, 5 tenant keys per node each used by 10 nodes, a
    /// key local to each node; a third of each class at twice its limit, the rest at half.
    pub fn fleet() -> Self {
        Self {
            window_ms: 1_000,
            global_keys: 10,
            global_limit: 5_000,
            tenant_keys_per_node: 5,
            tenant_users: 10,
            tenant_limit: 100,
            local_limit: 50,
            overloaded_every: 3,
            overload: 2.0,
            underload: 0.5,
        }
    }

    /// One global key of 200 per second over every node, at twice its limit.
    pub fn small_share() -> Self {
        Self {
            window_ms: 1_000,
            global_keys: 1,
            global_limit: 200,
            tenant_keys_per_node: 0,
            tenant_users: 0,
            tenant_limit: 0,
            local_limit: 0,
            overloaded_every: 1,
            overload: 2.0,
            underload: 0.5,
        }
    }
}

/// One key of the run.
#[derive(Debug, Clone)]
pub struct KeySpec {
    pub name: Vec<u8>,
    pub class: KeyClass,
    pub limit: Limit,
    /// The nodes (slots) that receive requests for it.
    pub users: Vec<usize>,
    /// Requests per second offered in all, split evenly over the users.
    pub offered_per_s: f64,
    /// Offered more than its limit: its windows are measured.
    pub overloaded: bool,
}

/// The limit of the probe key staleness is measured on: nothing on it ever expires within a
/// run, so the estimate of the prober's admissions only grows.
pub fn probe_limit() -> Limit {
    Limit {
        max: u32::MAX,
        window: WindowSpec::with_default_buckets(600_000).expect("valid"),
    }
}

pub const PROBE_KEY: &[u8] = b"probe";

/// Builds every key of a fleet of `nodes` nodes.
pub fn keys(traffic: &Traffic, nodes: usize, rng: &mut StdRng) -> Vec<KeySpec> {
    let window = WindowSpec::with_default_buckets(traffic.window_ms).expect("valid window");
    let per_s = 1_000.0 / traffic.window_ms as f64;
    let offered = |index: usize, limit: u32| {
        let overloaded = index.is_multiple_of(traffic.overloaded_every.max(1));
        let factor = if overloaded {
            traffic.overload
        } else {
            traffic.underload
        };
        (f64::from(limit) * per_s * factor, overloaded)
    };
    let mut keys = Vec::new();
    for g in 0..traffic.global_keys {
        let (offered_per_s, overloaded) = offered(g, traffic.global_limit);
        keys.push(KeySpec {
            name: format!("global={g}").into_bytes(),
            class: KeyClass::Global,
            limit: Limit {
                max: traffic.global_limit,
                window,
            },
            users: (0..nodes).collect(),
            offered_per_s,
            overloaded,
        });
    }
    let users = traffic.tenant_users.min(nodes);
    for t in 0..traffic.tenant_keys_per_node * nodes {
        let (offered_per_s, overloaded) = offered(t, traffic.tenant_limit);
        let mut picked: Vec<usize> = Vec::with_capacity(users);
        while picked.len() < users {
            let n = rng.random_range(0..nodes);
            if !picked.contains(&n) {
                picked.push(n);
            }
        }
        picked.sort_unstable();
        keys.push(KeySpec {
            name: format!("tenant={t}").into_bytes(),
            class: KeyClass::Tenant,
            limit: Limit {
                max: traffic.tenant_limit,
                window,
            },
            users: picked,
            offered_per_s,
            overloaded,
        });
    }
    if traffic.local_limit > 0 {
        for n in 0..nodes {
            let (offered_per_s, overloaded) = offered(n, traffic.local_limit);
            keys.push(KeySpec {
                name: format!("local={n}").into_bytes(),
                class: KeyClass::Local,
                limit: Limit {
                    max: traffic.local_limit,
                    window,
                },
                users: vec![n],
                offered_per_s,
                overloaded,
            });
        }
    }
    keys
}

/// Streams of one rate (requests per µs each), and the total rate of those before them.
#[derive(Debug)]
struct RateGroup {
    rate_per_us: f64,
    before: f64,
    /// (key, node) of each stream.
    streams: Vec<(usize, usize)>,
}

/// The next requests of every stream, in order.
#[derive(Debug)]
pub struct Arrivals {
    groups: Vec<RateGroup>,
    total_per_us: f64,
    rng: StdRng,
    /// The next request: its time (µs since the start, fractional) and (key, node).
    next: Option<(f64, (usize, usize))>,
}

impl Arrivals {
    pub fn new(keys: &[KeySpec], seed: u64) -> Self {
        // Grouped by rate, so that picking a stream is a search over a few groups; keyed by
        // the rate's bits, as a float is not `Ord` (for positive rates the order is the same).
        let mut by_rate: BTreeMap<u64, Vec<(usize, usize)>> = BTreeMap::new();
        for (k, key) in keys.iter().enumerate() {
            let per_user = key.offered_per_s / key.users.len().max(1) as f64;
            // A stream that offers nothing (or a rate that is not one) has no arrivals.
            if !(per_user > 0.0 && per_user.is_finite()) {
                continue;
            }
            for &node in &key.users {
                by_rate
                    .entry((per_user / 1e6).to_bits())
                    .or_default()
                    .push((k, node));
            }
        }
        let mut groups = Vec::new();
        let mut total_per_us = 0.0;
        for (bits, streams) in by_rate {
            let rate_per_us = f64::from_bits(bits);
            let count = streams.len();
            groups.push(RateGroup {
                rate_per_us,
                before: total_per_us,
                streams,
            });
            total_per_us += rate_per_us * count as f64;
        }
        let mut arrivals = Self {
            groups,
            total_per_us,
            rng: StdRng::seed_from_u64(seed ^ 0xA771_7A15),
            next: None,
        };
        arrivals.next = arrivals.draw(0.0);
        arrivals
    }

    /// The request after one at `after_us`: an exponential gap at the total rate, then a
    /// stream picked in proportion to its rate.
    fn draw(&mut self, after_us: f64) -> Option<(f64, (usize, usize))> {
        if self.total_per_us <= 0.0 {
            return None;
        }
        let u: f64 = self.rng.random_range(f64::EPSILON..1.0);
        let at = after_us - u.ln() / self.total_per_us;
        let pick = self.rng.random_range(0.0..self.total_per_us);
        let g = self
            .groups
            .partition_point(|g| g.before <= pick)
            .saturating_sub(1);
        let group = &self.groups[g];
        let i = ((pick - group.before) / group.rate_per_us) as usize;
        Some((at, group.streams[i.min(group.streams.len() - 1)]))
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
    use super::*;

    #[test]
    fn a_fleet_has_its_keys_and_offers_what_it_says() {
        let mut rng = StdRng::seed_from_u64(1);
        let keys = keys(&Traffic::fleet(), 20, &mut rng);
        let count = |c| keys.iter().filter(|k| k.class == c).count();
        assert_eq!(
            (
                count(KeyClass::Global),
                count(KeyClass::Tenant),
                count(KeyClass::Local)
            ),
            (10, 100, 20)
        );
        assert!(
            keys.iter()
                .filter(|k| k.class == KeyClass::Tenant)
                .all(|k| k.users.len() == 10)
        );
        // Over 10 s, a stream offers what its rate says, within a few percent.
        let key = &keys[0];
        let mut arrivals = Arrivals::new(std::slice::from_ref(key), 7);
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
        let mut rng = StdRng::seed_from_u64(3);
        let keys = keys(&Traffic::fleet(), nodes, &mut rng);
        let seconds = 20;
        let mut counts = vec![vec![vec![0u32; seconds]; nodes]; keys.len()];
        let mut arrivals = Arrivals::new(&keys, 11);
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
        assert!(Arrivals::new(&[], 1).pop().is_none());
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
}
