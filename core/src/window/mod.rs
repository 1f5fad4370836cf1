//! The time wheel: sliding windows made of epoch-aligned buckets.
//!
//! A window of `W` ms has `B` buckets of `w = W / B` ms; a bucket's epoch is `floor(t / w)` from
//! the Unix epoch, so every node agrees on boundaries. The estimate at `t` counts the buckets
//! `e(t) - B + 1 ..= e(t)` in full and bucket `e(t) - B` in proportion to the part of it still
//! inside `(t - W, t]` ([`EstimateMode::Interpolated`]), or not at all ([`EstimateMode::Exact`]).
//!
//! Sans-IO: everything takes `now_ms`.

mod estimate;
mod ring;
mod spec;

pub use estimate::{AgeProfile, sliding_sum};
pub use ring::{Admit, LocalRing, MAX_PUBLISHED, OfferedTotals, RingSnapshot, RingUsage};
pub use spec::{
    DEFAULT_BUCKETS, EstimateMode, MAX_BUCKETS, MAX_WINDOW_MS, WindowError, WindowSpec,
};
