//! A fleet's keys, in classes: how many keys, the nodes that use each, the limit, what a
//! request costs, and the load offered on them over time; and the probe key staleness is
//! measured on. The built-in scenarios' traffic is three classes (global keys every node uses,
//! tenant keys a few nodes share, a key local to each node) or one (a key of every node).

use limitmesh::limiter::Limit;
use limitmesh::window::{EstimateMode, WindowSpec};
use rand::RngExt;
use rand::rngs::StdRng;

use super::load::Load;

/// How many keys a class has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyCount {
    Fixed(usize),
    /// This many for each node of the fleet.
    PerNode(usize),
}

/// How many nodes use each key of a class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Users {
    All,
    /// This many (at most every node).
    Count(usize),
}

/// Which nodes use a key, when not all do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placement {
    /// Drawn at random for each key, from the run's seed.
    Random,
    /// Key `k` of a class whose keys have `u` users each: nodes `k·u` to `k·u + u − 1`
    /// (modulo the fleet), so that keys spread evenly.
    InTurn,
}

/// One class of keys and the load offered on them.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficClass {
    /// Names the class in reports, and its keys (`<name>=<index>`).
    pub name: String,
    pub keys: KeyCount,
    pub users: Users,
    pub placement: Placement,
    /// Units per window.
    pub limit: u32,
    pub window_ms: u64,
    pub buckets: u16,
    /// Units each request takes (Envoy's `hits_addend`).
    pub cost: u32,
    /// Offered to keys `0, k, 2k, ...` for `overloaded_every = k`.
    pub overload: Load,
    pub overloaded_every: usize,
    /// Offered to the other keys.
    pub underload: Load,
}

impl TrafficClass {
    /// How many keys the class has in a fleet of `nodes`.
    pub fn key_count(&self, nodes: usize) -> usize {
        match self.keys {
            KeyCount::Fixed(n) => n,
            KeyCount::PerNode(n) => n.saturating_mul(nodes),
        }
    }

    /// How many nodes use each key in a fleet of `nodes`.
    pub fn users_per_key(&self, nodes: usize) -> usize {
        match self.users {
            Users::All => nodes,
            Users::Count(n) => n.min(nodes),
        }
    }

    /// Whether key `index` is offered `overload` (else `underload`).
    pub fn overloaded(&self, index: usize) -> bool {
        index.is_multiple_of(self.overloaded_every.max(1))
    }

    /// The load offered on key `index`.
    pub fn load(&self, index: usize) -> &Load {
        if self.overloaded(index) {
            &self.overload
        } else {
            &self.underload
        }
    }

    pub fn window(&self) -> Result<WindowSpec, limitmesh::window::WindowError> {
        WindowSpec::new(self.window_ms, self.buckets, EstimateMode::Interpolated)
    }
}

/// The traffic of a fleet run: its classes of keys, in the order reports list them.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    pub classes: Vec<TrafficClass>,
}

/// A class of the built-in scenarios: 1 s windows of 10 buckets, requests of cost 1, a third of
/// the keys (`every`) at `overload` × L and the rest at half their limit.
fn built_in(
    name: &str,
    keys: KeyCount,
    users: Users,
    placement: Placement,
    limit: u32,
    every: usize,
) -> TrafficClass {
    TrafficClass {
        name: name.to_owned(),
        keys,
        users,
        placement,
        limit,
        window_ms: 1_000,
        buckets: limitmesh::window::DEFAULT_BUCKETS,
        cost: 1,
        overload: Load::Constant(2.0),
        overloaded_every: every,
        underload: Load::Constant(0.5),
    }
}

impl Traffic {
    /// The `fleet` traffic: 10 global keys, 5 tenant keys per node each used by 10 nodes, a
    /// key local to each node; a third of each class at twice its limit, the rest at half.
    pub fn fleet() -> Self {
        Self {
            classes: vec![
                built_in(
                    "global",
                    KeyCount::Fixed(10),
                    Users::All,
                    Placement::Random,
                    5_000,
                    3,
                ),
                built_in(
                    "tenant",
                    KeyCount::PerNode(5),
                    Users::Count(10),
                    Placement::Random,
                    100,
                    3,
                ),
                built_in(
                    "local",
                    KeyCount::PerNode(1),
                    Users::Count(1),
                    Placement::InTurn,
                    50,
                    3,
                ),
            ],
        }
    }

    /// One global key of 200 per second over every node, at twice its limit.
    pub fn small_share() -> Self {
        Self {
            classes: vec![built_in(
                "global",
                KeyCount::Fixed(1),
                Users::All,
                Placement::Random,
                200,
                1,
            )],
        }
    }

    /// Requests arriving per (key, node using it) stream, summed, in a fleet of `nodes`.
    pub fn streams(&self, nodes: usize) -> usize {
        self.classes.iter().fold(0usize, |sum, c| {
            sum.saturating_add(c.key_count(nodes).saturating_mul(c.users_per_key(nodes)))
        })
    }
}

/// One key of the run.
#[derive(Debug, Clone)]
pub struct KeySpec {
    pub name: Vec<u8>,
    /// Its class's index in [`Traffic::classes`].
    pub class: usize,
    pub limit: Limit,
    /// Units each request takes.
    pub cost: u32,
    /// The nodes (slots) that receive requests for it.
    pub users: Vec<usize>,
    /// Requests per second offered in all at the load's peak, split evenly over the users.
    pub offered_per_s: f64,
    /// Whether the load changes over time: its class's `overload` (`true`) or `underload`.
    pub varying: Option<bool>,
    /// Offered more than its limit at some time: its windows are measured.
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

/// `users` distinct nodes out of `nodes`, drawn at random, in order; `taken` is all false
/// and left so.
fn pick_users(users: usize, nodes: usize, taken: &mut [bool], rng: &mut StdRng) -> Vec<usize> {
    let mut picked: Vec<usize> = Vec::with_capacity(users);
    while picked.len() < users {
        let n = rng.random_range(0..nodes);
        if !taken[n] {
            taken[n] = true;
            picked.push(n);
        }
    }
    for n in &picked {
        taken[*n] = false;
    }
    picked.sort_unstable();
    picked
}

/// Builds every key of a fleet of `nodes` nodes; the classes' windows must be valid (a
/// traffic file is checked before it gets here).
pub fn keys(traffic: &Traffic, nodes: usize, rng: &mut StdRng) -> Vec<KeySpec> {
    let mut keys = Vec::new();
    let mut taken = vec![false; nodes];
    for (c, class) in traffic.classes.iter().enumerate() {
        let window = class.window().expect("a valid window");
        let per_s = 1_000.0 / class.window_ms as f64;
        let users = class.users_per_key(nodes);
        for k in 0..class.key_count(nodes) {
            let users = match (class.users, class.placement) {
                (Users::All, _) => (0..nodes).collect(),
                (Users::Count(_), Placement::Random) => pick_users(users, nodes, &mut taken, rng),
                (Users::Count(_), Placement::InTurn) => {
                    let first = k.wrapping_mul(users);
                    let mut on: Vec<usize> =
                        (0..users).map(|j| first.wrapping_add(j) % nodes).collect();
                    on.sort_unstable();
                    on
                }
            };
            let load = class.load(k);
            keys.push(KeySpec {
                name: format!("{}={k}", class.name).into_bytes(),
                class: c,
                limit: Limit {
                    max: class.limit,
                    window,
                },
                cost: class.cost,
                users,
                offered_per_s: f64::from(class.limit) * per_s * load.peak()
                    / f64::from(class.cost.max(1)),
                varying: load.varies().then(|| class.overloaded(k)),
                overloaded: load.peak() > 1.0,
            });
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn a_fleet_has_its_keys_and_offers_what_it_says() {
        let mut rng = StdRng::seed_from_u64(1);
        let traffic = Traffic::fleet();
        let keys = keys(&traffic, 20, &mut rng);
        let count = |c| keys.iter().filter(|k| k.class == c).count();
        assert_eq!((count(0), count(1), count(2)), (10, 100, 20));
        assert_eq!(traffic.streams(20), 10 * 20 + 100 * 10 + 20);
        assert!(
            keys.iter()
                .filter(|k| k.class == 1)
                .all(|k| k.users.len() == 10 && k.users.windows(2).all(|w| w[0] < w[1]))
        );
        // A local key for each node, in turn.
        let local: Vec<Vec<usize>> = keys
            .iter()
            .filter(|k| k.class == 2)
            .map(|k| k.users.clone())
            .collect();
        assert_eq!(local, (0..20).map(|n| vec![n]).collect::<Vec<_>>());
        // A third of the keys at twice the limit: 10 000 a second on a global key.
        assert_eq!(keys[0].offered_per_s, 10_000.0);
        assert!(keys[0].overloaded && !keys[1].overloaded);
        assert_eq!(keys[1].offered_per_s, 2_500.0);
    }

    #[test]
    fn a_request_of_many_units_is_offered_fewer_times() {
        let mut class = Traffic::small_share().classes.remove(0);
        class.cost = 5;
        class.window_ms = 10_000;
        let traffic = Traffic {
            classes: vec![class],
        };
        let keys = keys(&traffic, 4, &mut StdRng::seed_from_u64(1));
        // 2 × 200 units per 10 s, 5 units a request: 8 requests a second.
        assert_eq!(keys[0].offered_per_s, 8.0);
        assert_eq!(keys[0].cost, 5);
    }

    #[test]
    fn keys_placed_in_turn_spread_evenly() {
        let mut class = Traffic::small_share().classes.remove(0);
        (class.keys, class.users, class.placement) =
            (KeyCount::Fixed(6), Users::Count(2), Placement::InTurn);
        let traffic = Traffic {
            classes: vec![class],
        };
        let keys = keys(&traffic, 4, &mut StdRng::seed_from_u64(1));
        let users: Vec<Vec<usize>> = keys.iter().map(|k| k.users.clone()).collect();
        assert_eq!(
            users,
            [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1], [2, 3]].map(Vec::from)
        );
    }
}
