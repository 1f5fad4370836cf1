//! Offered load: how many requests each node receives per millisecond, over time.

use rand::RngExt;
use rand::rngs::StdRng;

/// The shape of the offered load, as a multiple of the limit's rate. In a scenario file, the
/// `[traffic]` table, whose `shape` is the variant's name in kebab case.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, tag = "shape", rename_all = "kebab-case")]
pub enum Workload {
    /// `overload × L` per window, spread evenly over the nodes.
    Uniform { overload: f64 },
    /// `overload × L` per window; node 0 takes `hot_share` of it, the rest split evenly.
    Skewed { overload: f64, hot_share: f64 },
    /// Nothing until `onset_ms`, then `overload × L` per window, evenly.
    Burst { overload: f64, onset_ms: u64 },
    /// As `Burst`, but node 0 has had a trickle of `trickle` times the limit before the
    /// onset (so that, unlike its idle peers, it is past its own onset when the burst hits).
    BurstAfterTrickle {
        overload: f64,
        onset_ms: u64,
        trickle: f64,
    },
    /// `from × L` per window until `from_ms`, rising (or falling) in a straight line to
    /// `to × L` at `until_ms`, and `to × L` after; evenly over the nodes.
    Ramp {
        from: f64,
        to: f64,
        from_ms: u64,
        until_ms: u64,
    },
}

impl Workload {
    /// Expected requests per millisecond at `node` at `t_ms`, for a limit of `limit` per
    /// `window_ms`.
    pub fn rate_per_ms(
        &self,
        node: usize,
        nodes: usize,
        t_ms: u64,
        limit: f64,
        window_ms: u64,
    ) -> f64 {
        let per_ms = limit / window_ms as f64;
        let n = nodes.max(1) as f64;
        match *self {
            Workload::Uniform { overload } => overload * per_ms / n,
            Workload::Skewed {
                overload,
                hot_share,
            } => {
                let share = if node == 0 {
                    hot_share
                } else {
                    (1.0 - hot_share) / (n - 1.0).max(1.0)
                };
                overload * per_ms * share
            }
            Workload::Burst { overload, onset_ms } => {
                if t_ms < onset_ms {
                    0.0
                } else {
                    overload * per_ms / n
                }
            }
            Workload::BurstAfterTrickle {
                overload,
                onset_ms,
                trickle,
            } => {
                if t_ms >= onset_ms {
                    overload * per_ms / n
                } else if node == 0 {
                    trickle * per_ms
                } else {
                    0.0
                }
            }
            Workload::Ramp {
                from,
                to,
                from_ms,
                until_ms,
            } => {
                let along = if t_ms <= from_ms {
                    0.0
                } else if t_ms >= until_ms {
                    1.0
                } else {
                    (t_ms - from_ms) as f64 / (until_ms - from_ms) as f64
                };
                (from + (to - from) * along) * per_ms / n
            }
        }
    }

    pub fn overload(&self) -> f64 {
        match *self {
            Workload::Uniform { overload }
            | Workload::Skewed { overload, .. }
            | Workload::Burst { overload, .. }
            | Workload::BurstAfterTrickle { overload, .. } => overload,
            Workload::Ramp { from, to, .. } => from.max(to),
        }
    }
}

/// A Poisson draw with mean `lambda` (Knuth's method; the means here are small).
pub fn poisson(lambda: f64, rng: &mut StdRng) -> u32 {
    if lambda <= 0.0 {
        return 0;
    }
    let limit = (-lambda).exp();
    let mut k = 0u32;
    let mut p = 1.0f64;
    loop {
        p *= rng.random::<f64>();
        if p <= limit || k > 10_000 {
            return k;
        }
        k += 1;
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn poisson_mean_is_lambda() {
        let mut rng = StdRng::seed_from_u64(1);
        let n = 100_000;
        let total: u64 = (0..n).map(|_| u64::from(poisson(0.4, &mut rng))).sum();
        let mean = total as f64 / n as f64;
        assert!((mean - 0.4).abs() < 0.01, "{mean}");
    }

    #[test]
    fn a_ramp_rises_in_a_straight_line_between_its_times() {
        let w = Workload::Ramp {
            from: 0.5,
            to: 2.5,
            from_ms: 1_000,
            until_ms: 3_000,
        };
        let at = |t| w.rate_per_ms(0, 2, t, 1_000.0, 1_000) * 2.0;
        assert!((at(0) - 0.5).abs() < 1e-9);
        assert!((at(2_000) - 1.5).abs() < 1e-9);
        assert!((at(3_000) - 2.5).abs() < 1e-9);
        assert!((at(9_000) - 2.5).abs() < 1e-9);
    }

    #[test]
    fn skewed_load_sums_to_the_total() {
        let w = Workload::Skewed {
            overload: 2.0,
            hot_share: 0.8,
        };
        let total: f64 = (0..5).map(|i| w.rate_per_ms(i, 5, 0, 1_000.0, 1_000)).sum();
        assert!((total - 2.0).abs() < 1e-9);
        assert!((w.rate_per_ms(0, 5, 0, 1_000.0, 1_000) - 1.6).abs() < 1e-9);
    }
}
