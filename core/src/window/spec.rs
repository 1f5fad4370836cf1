//! The shape of a sliding window: its length, its bucket count and how the oldest bucket counts.

use thiserror::Error;

/// Buckets per window when a rule does not say.
pub const DEFAULT_BUCKETS: u16 = 10;
/// More buckets buy resolution at the cost of memory and gossip bytes per key.
pub const MAX_BUCKETS: u16 = 64;
/// A year of 366 days: long enough for Envoy's YEAR unit in leap years.
pub const MAX_WINDOW_MS: u64 = 366 * 24 * 60 * 60 * 1000;

/// How the bucket that straddles the window's start is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EstimateMode {
    /// The straddling bucket counts in proportion to the part of it still inside `(t - W, t]`
    /// (Cloudflare's sliding-window estimate when there is one bucket).
    #[default]
    Interpolated,
    /// Only whole buckets count: at most `L` in any `B` consecutive buckets, the current one
    /// included. Exact at bucket granularity, and never interpolates.
    Exact,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WindowError {
    #[error("window length must be greater than 0 ms")]
    ZeroWindow,
    #[error("window length {window_ms} ms exceeds the maximum of {max_ms} ms (366 days)")]
    WindowTooLong { window_ms: u64, max_ms: u64 },
    #[error("bucket count must be at least 1")]
    ZeroBuckets,
    #[error("bucket count {buckets} exceeds the maximum of {max}")]
    TooManyBuckets { buckets: u16, max: u16 },
    #[error(
        "bucket count {buckets} exceeds the window length of {window_ms} ms (buckets are at least 1 ms)"
    )]
    BucketsExceedWindow { buckets: u16, window_ms: u64 },
    #[error("window length {window_ms} ms is not a multiple of the bucket count {buckets}")]
    NotDivisible { window_ms: u64, buckets: u16 },
}

/// A validated window: `buckets` buckets of `window_ms / buckets` ms each, aligned to the Unix
/// epoch so that all nodes agree on bucket boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowSpec {
    window_ms: u64,
    bucket_ms: u64,
    buckets: u16,
    mode: EstimateMode,
}

impl WindowSpec {
    pub fn new(window_ms: u64, buckets: u16, mode: EstimateMode) -> Result<Self, WindowError> {
        if window_ms == 0 {
            return Err(WindowError::ZeroWindow);
        }
        if window_ms > MAX_WINDOW_MS {
            return Err(WindowError::WindowTooLong {
                window_ms,
                max_ms: MAX_WINDOW_MS,
            });
        }
        if buckets == 0 {
            return Err(WindowError::ZeroBuckets);
        }
        if buckets > MAX_BUCKETS {
            return Err(WindowError::TooManyBuckets {
                buckets,
                max: MAX_BUCKETS,
            });
        }
        if u64::from(buckets) > window_ms {
            return Err(WindowError::BucketsExceedWindow { buckets, window_ms });
        }
        if !window_ms.is_multiple_of(u64::from(buckets)) {
            return Err(WindowError::NotDivisible { window_ms, buckets });
        }
        Ok(Self {
            window_ms,
            bucket_ms: window_ms / u64::from(buckets),
            buckets,
            mode,
        })
    }

    /// A window of `window_ms` with the default bucket count, interpolated.
    pub fn with_default_buckets(window_ms: u64) -> Result<Self, WindowError> {
        Self::new(window_ms, DEFAULT_BUCKETS, EstimateMode::Interpolated)
    }

    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    pub fn bucket_ms(&self) -> u64 {
        self.bucket_ms
    }

    pub fn buckets(&self) -> u16 {
        self.buckets
    }

    pub fn mode(&self) -> EstimateMode {
        self.mode
    }

    /// Slots in a ring: the `B` buckets inside the window plus the one straddling its start.
    pub fn slots(&self) -> usize {
        usize::from(self.buckets) + 1
    }

    /// The bucket that holds wall time `t_ms`.
    pub fn epoch(&self, t_ms: u64) -> u64 {
        t_ms / self.bucket_ms
    }

    pub fn epoch_start_ms(&self, epoch: u64) -> u64 {
        epoch.saturating_mul(self.bucket_ms)
    }

    /// The oldest epoch that still counts at `now_ms` (possibly only in part).
    pub fn oldest_live_epoch(&self, now_ms: u64) -> u64 {
        self.epoch(now_ms).saturating_sub(u64::from(self.buckets))
    }

    /// Weight of bucket `epoch(now) - B`, the one straddling the window's start.
    pub fn straddle_weight(&self, now_ms: u64) -> f64 {
        match self.mode {
            EstimateMode::Exact => 0.0,
            EstimateMode::Interpolated => {
                let left = self.bucket_ms - now_ms % self.bucket_ms;
                left as f64 / self.bucket_ms as f64
            }
        }
    }

    /// Weight at `now_ms` of a bucket: 1 inside the window, the straddle weight for the bucket
    /// at its start, 0 once it has left. Buckets ahead of `now` count in full (conservative).
    pub fn weight(&self, epoch: u64, now_ms: u64) -> f64 {
        let now_epoch = self.epoch(now_ms);
        if epoch >= now_epoch {
            return 1.0;
        }
        let age = now_epoch - epoch;
        let b = u64::from(self.buckets);
        if age < b {
            1.0
        } else if age == b {
            self.straddle_weight(now_ms)
        } else {
            0.0
        }
    }

    /// Weights for many buckets at one instant, with the division done once.
    pub fn weigher(&self, now_ms: u64) -> Weigher {
        Weigher {
            now_epoch: self.epoch(now_ms),
            buckets: u64::from(self.buckets),
            straddle: self.straddle_weight(now_ms),
        }
    }

    /// Wall time at which a bucket stops counting at all.
    pub fn expiry_ms(&self, epoch: u64) -> u64 {
        let leave_epoch = match self.mode {
            EstimateMode::Interpolated => epoch.saturating_add(u64::from(self.buckets) + 1),
            EstimateMode::Exact => epoch.saturating_add(u64::from(self.buckets)),
        };
        self.epoch_start_ms(leave_epoch)
    }
}

/// [`WindowSpec::weight`] for a fixed `now`.
#[derive(Debug, Clone, Copy)]
pub struct Weigher {
    now_epoch: u64,
    buckets: u64,
    straddle: f64,
}

impl Weigher {
    /// Age in buckets (ahead-of-time buckets are age 0).
    pub fn age(&self, epoch: u64) -> u64 {
        self.now_epoch.saturating_sub(epoch)
    }

    pub fn weight(&self, epoch: u64) -> f64 {
        let age = self.age(epoch);
        if age < self.buckets {
            1.0
        } else if age == self.buckets {
            self.straddle
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_shapes_with_typed_errors() {
        use EstimateMode::Interpolated as I;
        assert_eq!(WindowSpec::new(0, 10, I), Err(WindowError::ZeroWindow));
        assert_eq!(WindowSpec::new(1000, 0, I), Err(WindowError::ZeroBuckets));
        assert_eq!(
            WindowSpec::new(5, 10, I),
            Err(WindowError::BucketsExceedWindow {
                buckets: 10,
                window_ms: 5
            })
        );
        assert_eq!(
            WindowSpec::new(1000, 3, I),
            Err(WindowError::NotDivisible {
                window_ms: 1000,
                buckets: 3
            })
        );
        assert_eq!(
            WindowSpec::new(1000, 100, I),
            Err(WindowError::TooManyBuckets {
                buckets: 100,
                max: MAX_BUCKETS
            })
        );
        assert!(matches!(
            WindowSpec::new(MAX_WINDOW_MS + 1, 10, I),
            Err(WindowError::WindowTooLong { .. })
        ));
    }

    #[test]
    fn accepts_a_second_through_a_leap_year() {
        for window_ms in [
            1_000,
            60_000,
            3_600_000,
            86_400_000,
            365 * 86_400_000,
            MAX_WINDOW_MS,
        ] {
            let spec = WindowSpec::with_default_buckets(window_ms).unwrap();
            assert_eq!(spec.bucket_ms() * 10, window_ms);
        }
    }

    #[test]
    fn epochs_align_to_unix_time() {
        let spec = WindowSpec::with_default_buckets(1_000).unwrap();
        assert_eq!(spec.epoch(1_700_000_000_099), 17_000_000_000);
        assert_eq!(spec.epoch(1_700_000_000_100), 17_000_000_001);
        assert_eq!(spec.epoch_start_ms(17_000_000_001), 1_700_000_000_100);
    }

    #[test]
    fn straddling_bucket_weight_falls_linearly() {
        let spec = WindowSpec::with_default_buckets(1_000).unwrap();
        let base = 1_700_000_000_000;
        assert_eq!(spec.straddle_weight(base), 1.0);
        assert_eq!(spec.straddle_weight(base + 25), 0.75);
        assert_eq!(spec.straddle_weight(base + 99), 0.01);
        let exact = WindowSpec::new(1_000, 10, EstimateMode::Exact).unwrap();
        assert_eq!(exact.straddle_weight(base + 25), 0.0);
    }

    #[test]
    fn weights_by_age() {
        let spec = WindowSpec::with_default_buckets(1_000).unwrap();
        let now = 1_700_000_000_040; // 40 % into its bucket
        let e = spec.epoch(now);
        assert_eq!(spec.weight(e + 3, now), 1.0, "future buckets count in full");
        assert_eq!(spec.weight(e, now), 1.0);
        assert_eq!(spec.weight(e - 9, now), 1.0);
        assert!((spec.weight(e - 10, now) - 0.6).abs() < 1e-12);
        assert_eq!(spec.weight(e - 11, now), 0.0);
    }

    #[test]
    fn weigher_matches_weight() {
        for mode in [EstimateMode::Interpolated, EstimateMode::Exact] {
            let spec = WindowSpec::new(1_000, 10, mode).unwrap();
            let now = 1_700_000_000_040;
            let w = spec.weigher(now);
            for epoch in spec.epoch(now) - 13..spec.epoch(now) + 3 {
                assert_eq!(w.weight(epoch), spec.weight(epoch, now), "{mode:?} {epoch}");
            }
        }
    }

    #[test]
    fn expiry_is_when_the_weight_reaches_zero() {
        for mode in [EstimateMode::Interpolated, EstimateMode::Exact] {
            let spec = WindowSpec::new(1_000, 10, mode).unwrap();
            let e = 17_000_000_000;
            let expiry = spec.expiry_ms(e);
            assert!(spec.weight(e, expiry - 1) > 0.0, "{mode:?}");
            assert_eq!(spec.weight(e, expiry), 0.0, "{mode:?}");
        }
    }
}
