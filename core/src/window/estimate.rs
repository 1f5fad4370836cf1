//! Sliding-window arithmetic over `(epoch, count)` buckets: the estimate now, and how long until
//! it drains to a target if nothing more is added. Pure functions shared by the local ring, the
//! replica registers and the decision's `reset_after` / `retry_after`.

use super::spec::{EstimateMode, MAX_BUCKETS, WindowSpec};

const MAX_SLOTS: usize = MAX_BUCKETS as usize + 1;

/// The sliding estimate at `now_ms` of buckets given as `(epoch, count)`, in any order and with
/// repeated epochs allowed (they add). Buckets ahead of `now` count in full.
pub fn sliding_sum(
    spec: &WindowSpec,
    now_ms: u64,
    buckets: impl IntoIterator<Item = (u64, u64)>,
) -> f64 {
    buckets
        .into_iter()
        .map(|(epoch, count)| spec.weight(epoch, now_ms) * count as f64)
        .sum()
}

/// Counts by age in buckets (`0` = current, `B` = straddling the window's start), summed over
/// all inputs. Ahead-of-time buckets fold into age 0; buckets older than `B` are dropped.
/// Lives on the stack: the hot path builds one per check.
#[derive(Debug, Clone)]
pub struct AgeProfile {
    slots: usize,
    by_age: [u64; MAX_SLOTS],
}

impl AgeProfile {
    pub fn new(spec: &WindowSpec) -> Self {
        Self {
            slots: spec.slots(),
            by_age: [0; MAX_SLOTS],
        }
    }

    /// Counts by age, `0..=B`.
    pub fn by_age(&self) -> &[u64] {
        &self.by_age[..self.slots]
    }

    /// Adds `count` at `age` (0 = current bucket); ages beyond the window are ignored.
    pub fn add_at_age(&mut self, age: usize, count: u64) {
        if age < self.slots {
            self.by_age[age] = self.by_age[age].saturating_add(count);
        }
    }

    /// Adds another profile of the same window at the same instant.
    pub fn absorb(&mut self, other: &AgeProfile) {
        for (mine, theirs) in self.by_age.iter_mut().zip(other.by_age()) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// Keeps the larger count of each age: two lower bounds of the same counts combined.
    pub fn max_with(&mut self, other: &AgeProfile) {
        for (mine, theirs) in self.by_age.iter_mut().zip(other.by_age()) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.by_age().iter().all(|c| *c == 0)
    }

    pub fn add(&mut self, spec: &WindowSpec, now_ms: u64, epoch: u64, count: u64) {
        let age = spec.epoch(now_ms).saturating_sub(epoch);
        if let Some(slot) = self
            .by_age
            .get_mut(usize::try_from(age).unwrap_or(usize::MAX))
        {
            *slot = slot.saturating_add(count);
        }
    }

    pub fn extend(
        &mut self,
        spec: &WindowSpec,
        now_ms: u64,
        buckets: impl IntoIterator<Item = (u64, u64)>,
    ) {
        for (epoch, count) in buckets {
            self.add(spec, now_ms, epoch, count);
        }
    }

    /// The estimate at `now_ms`.
    pub fn sum(&self, spec: &WindowSpec, now_ms: u64) -> f64 {
        let b = usize::from(spec.buckets());
        let full: u64 = self.by_age[..b].iter().sum();
        full as f64 + self.by_age[b] as f64 * spec.straddle_weight(now_ms)
    }

    /// Milliseconds from `now_ms` until the estimate is at most `target`, assuming nothing more
    /// is added. `None` when `target` is negative (never reached).
    ///
    /// The interpolated estimate is continuous and piecewise linear in time: inside a bucket only
    /// the straddling bucket's weight falls, and at a boundary that bucket's weight has reached 0
    /// while the next oldest takes over at weight 1. So each bucket interval is solved directly.
    pub fn drain_time_ms(&self, spec: &WindowSpec, now_ms: u64, target: f64) -> Option<u64> {
        if target < 0.0 {
            return None;
        }
        let b = usize::from(spec.buckets());
        let w = spec.bucket_ms();
        let now_epoch = spec.epoch(now_ms);
        let mut full: u64 = self.by_age[..b].iter().sum();
        for k in 0..=b {
            // During interval k, the bucket that was age `b - k` at `now` straddles the start.
            let straddling = self.by_age[b - k];
            let interval_start = spec.epoch_start_ms(now_epoch + k as u64).max(now_ms);
            let phase_start = (interval_start % w) as f64 / w as f64;
            let est_start = match spec.mode() {
                EstimateMode::Interpolated => full as f64 + straddling as f64 * (1.0 - phase_start),
                EstimateMode::Exact => full as f64,
            };
            if est_start <= target {
                return Some(interval_start - now_ms);
            }
            if spec.mode() == EstimateMode::Interpolated && (full as f64) <= target {
                // Solve full + straddling * (1 - phase) <= target for the phase.
                let phase = 1.0 - (target - full as f64) / straddling as f64;
                let at =
                    spec.epoch_start_ms(now_epoch + k as u64) + (phase * w as f64).ceil() as u64;
                return Some(at.max(interval_start) - now_ms);
            }
            // At the next boundary the next bucket starts to straddle.
            if k < b {
                full -= self.by_age[b - k - 1];
            }
        }
        Some(spec.epoch_start_ms(now_epoch + b as u64 + 1) - now_ms)
    }

    /// Milliseconds until every counted bucket has left the window.
    pub fn reset_time_ms(&self, spec: &WindowSpec, now_ms: u64) -> u64 {
        match self.by_age().iter().position(|c| *c > 0) {
            Some(age) => {
                let newest = spec.epoch(now_ms) - age as u64;
                spec.expiry_ms(newest).saturating_sub(now_ms)
            }
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000; // a bucket boundary for 100 ms buckets

    fn spec(mode: EstimateMode) -> WindowSpec {
        WindowSpec::new(1_000, 10, mode).unwrap()
    }

    fn profile(spec: &WindowSpec, now: u64, buckets: &[(u64, u64)]) -> AgeProfile {
        let mut p = AgeProfile::new(spec);
        p.extend(spec, now, buckets.iter().copied());
        p
    }

    /// Brute force: step the clock 1 ms at a time until the estimate drops to the target.
    fn brute_drain(spec: &WindowSpec, now: u64, buckets: &[(u64, u64)], target: f64) -> u64 {
        (0..=spec.window_ms() + spec.bucket_ms())
            .find(|dt| sliding_sum(spec, now + dt, buckets.iter().copied()) <= target + 1e-9)
            .unwrap()
    }

    #[test]
    fn estimate_at_bucket_boundaries() {
        let s = spec(EstimateMode::Interpolated);
        let e0 = s.epoch(T0);
        let buckets = [(e0, 100)];
        // Inside the window for 1 s, then it fades over one more bucket.
        assert_eq!(sliding_sum(&s, T0, buckets), 100.0);
        assert_eq!(sliding_sum(&s, T0 + 999, buckets), 100.0);
        assert_eq!(sliding_sum(&s, T0 + 1_000, buckets), 100.0); // age B, weight 1
        assert_eq!(sliding_sum(&s, T0 + 1_050, buckets), 50.0);
        assert_eq!(sliding_sum(&s, T0 + 1_099, buckets), 1.0);
        assert_eq!(sliding_sum(&s, T0 + 1_100, buckets), 0.0);

        let x = spec(EstimateMode::Exact);
        assert_eq!(sliding_sum(&x, T0 + 999, buckets), 100.0);
        assert_eq!(sliding_sum(&x, T0 + 1_000, buckets), 0.0);
    }

    #[test]
    fn profile_sum_matches_sliding_sum() {
        for mode in [EstimateMode::Interpolated, EstimateMode::Exact] {
            let s = spec(mode);
            let e0 = s.epoch(T0);
            let buckets = [
                (e0, 7),
                (e0 + 3, 11),
                (e0 + 3, 2),
                (e0 + 9, 5),
                (e0 + 10, 4),
            ];
            for dt in (0..2_300).step_by(7) {
                let now = T0 + dt;
                let p = profile(&s, now, &buckets);
                let expected = sliding_sum(&s, now, buckets);
                assert!(
                    (p.sum(&s, now) - expected).abs() < 1e-9,
                    "{mode:?} at +{dt}"
                );
            }
        }
    }

    #[test]
    fn drain_time_matches_brute_force() {
        for mode in [EstimateMode::Interpolated, EstimateMode::Exact] {
            let s = spec(mode);
            let e0 = s.epoch(T0);
            let buckets = [(e0, 30), (e0 + 2, 10), (e0 + 5, 40), (e0 + 9, 20)];
            for dt in [900, 937, 1_000, 1_050, 1_234] {
                let now = T0 + dt;
                let p = profile(&s, now, &buckets);
                for target in [0.0, 5.0, 19.5, 50.0, 69.0, 99.0, 1e9] {
                    let got = p.drain_time_ms(&s, now, target).unwrap();
                    let want = brute_drain(&s, now, &buckets, target);
                    assert_eq!(got, want, "{mode:?} now=+{dt} target={target}");
                }
            }
        }
    }

    #[test]
    fn negative_target_never_drains() {
        let s = spec(EstimateMode::Interpolated);
        assert_eq!(AgeProfile::new(&s).drain_time_ms(&s, T0, -1.0), None);
    }

    #[test]
    fn reset_time_is_when_the_newest_bucket_leaves() {
        let s = spec(EstimateMode::Interpolated);
        let e0 = s.epoch(T0);
        let now = T0 + 420;
        let p = profile(&s, now, &[(e0, 3), (e0 + 4, 1)]);
        // Bucket e0+4 starts at T0+400 and stops counting 11 buckets later.
        assert_eq!(p.reset_time_ms(&s, now), T0 + 400 + 1_100 - now);
        let x = spec(EstimateMode::Exact);
        let p = profile(&x, now, &[(e0, 3), (e0 + 4, 1)]);
        assert_eq!(p.reset_time_ms(&x, now), T0 + 400 + 1_000 - now);
    }

    #[test]
    fn far_future_and_ancient_buckets_are_bounded() {
        let s = spec(EstimateMode::Interpolated);
        let mut p = AgeProfile::new(&s);
        p.add(&s, T0, u64::MAX, 5); // far future folds into the current bucket
        p.add(&s, T0, 0, 1_000); // ancient history is dropped
        assert_eq!(p.sum(&s, T0), 5.0);
    }
}
