//! Offered load as a multiple of a key's limit: constant, or a piecewise-linear profile over
//! the run.

/// Load offered on a key, as a multiple of its limit (in units: a load of 2 on a limit of 100
/// per window with requests of cost 5 is 40 requests a window).
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    Constant(f64),
    /// `(t_ms, factor)` points at increasing times: the factor goes in a straight line from
    /// one point to the next, holds the first point's factor before it and the last's after.
    Profile(Vec<(u64, f64)>),
}

impl Load {
    /// The largest factor over the run: a profile's peak is at one of its points.
    pub fn peak(&self) -> f64 {
        match self {
            Load::Constant(f) => *f,
            Load::Profile(points) => points.iter().map(|(_, f)| *f).fold(0.0, f64::max),
        }
    }

    /// The factor at `t_ms` (ms since the start of the run, fractional).
    pub fn at(&self, t_ms: f64) -> f64 {
        let points = match self {
            Load::Constant(f) => return *f,
            Load::Profile(points) => points,
        };
        let after = points.partition_point(|(t, _)| (*t as f64) <= t_ms);
        match (after.checked_sub(1).map(|i| points[i]), points.get(after)) {
            (Some((t0, f0)), Some(&(t1, f1))) => {
                let (t0, t1) = (t0 as f64, t1 as f64);
                f0 + (f1 - f0) * (t_ms - t0) / (t1 - t0)
            }
            (Some((_, f)), None) | (None, Some(&(_, f))) => f,
            (None, None) => 0.0,
        }
    }

    /// Whether the factor changes over time.
    pub fn varies(&self) -> bool {
        match self {
            Load::Constant(_) => false,
            Load::Profile(points) => points.windows(2).any(|w| w[0].1 != w[1].1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_linear_between_its_points_and_flat_outside_them() {
        let p = Load::Profile(vec![(1_000, 1.0), (3_000, 3.0), (4_000, 0.0)]);
        let at = |t: f64| p.at(t);
        assert_eq!(at(0.0), 1.0, "the first factor before the first point");
        assert_eq!(at(1_000.0), 1.0);
        assert_eq!(at(2_000.0), 2.0);
        assert_eq!(at(2_500.0), 2.5);
        assert_eq!(at(3_000.0), 3.0);
        assert_eq!(at(3_500.0), 1.5);
        assert_eq!(at(4_000.0), 0.0);
        assert_eq!(at(1e9), 0.0, "the last factor after the last point");
        assert_eq!(p.peak(), 3.0);
        assert!(p.varies());
        assert!(!Load::Profile(vec![(0, 2.0), (5, 2.0)]).varies());
        assert_eq!(Load::Constant(0.5).at(123.0), 0.5);
    }
}
