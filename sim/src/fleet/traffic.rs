//! A fleet's keys and who offers what on each: global keys every node uses, tenant keys a few
//! nodes share, keys local to one node, and the probe key staleness is measured on.
//!
//! Requests arrive as Poisson streams, one per (key, node using it), each drawn from its own
//! seeded generator, so that the arrivals do not depend on anything the nodes do.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

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

/// One Poisson stream: requests for `key` at `node`.
#[derive(Debug)]
struct Stream {
    key: usize,
    node: usize,
    mean_gap_us: f64,
    rng: StdRng,
}

/// The next requests of every stream, earliest first.
#[derive(Debug)]
pub struct Arrivals {
    streams: Vec<Stream>,
    next: BinaryHeap<Reverse<(u64, usize)>>,
}

impl Arrivals {
    pub fn new(keys: &[KeySpec], seed: u64) -> Self {
        let mut streams = Vec::new();
        for (k, key) in keys.iter().enumerate() {
            let per_user = key.offered_per_s / key.users.len().max(1) as f64;
            if per_user <= 0.0 {
                continue;
            }
            for &node in &key.users {
                let stream_seed = seed
                    ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (node as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
                streams.push(Stream {
                    key: k,
                    node,
                    mean_gap_us: 1e6 / per_user,
                    rng: StdRng::seed_from_u64(stream_seed),
                });
            }
        }
        let mut arrivals = Self {
            streams,
            next: BinaryHeap::new(),
        };
        for s in 0..arrivals.streams.len() {
            let gap = arrivals.gap(s);
            arrivals.next.push(Reverse((gap, s)));
        }
        arrivals
    }

    fn gap(&mut self, s: usize) -> u64 {
        let stream = &mut self.streams[s];
        let u: f64 = stream.rng.random_range(f64::EPSILON..1.0);
        (-u.ln() * stream.mean_gap_us).ceil() as u64
    }

    /// When the next request arrives (µs since the start).
    pub fn peek_us(&self) -> Option<u64> {
        self.next.peek().map(|Reverse((t, _))| *t)
    }

    /// The next request: its time, key and node.
    pub fn pop(&mut self) -> Option<(u64, usize, usize)> {
        let Reverse((t, s)) = self.next.pop()?;
        let gap = self.gap(s);
        self.next.push(Reverse((t + gap.max(1), s)));
        Some((t, self.streams[s].key, self.streams[s].node))
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
}
