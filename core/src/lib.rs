//! limitmesh's core: what a rate limit decision is made of, with no IO.
//!
//! - [`window`]: the time wheel: epoch-aligned buckets, sliding estimates, the lock-free ring.
//! - [`crdt`]: replica state per window: per-origin registers, version vectors, the hybrid
//!   logical clock that stamps them, merge.
//! - [`limiter`]: keys and limits, the key table, admission by demand share, decisions.
//!
//! Everything here is handed the time (`now_ms`, cluster time in milliseconds since the Unix
//! epoch) and the messages it works on. It never reads a clock, a socket or a random number
//! generator, and depends on no crate that could: the crate boundary is the guarantee.
//! The invariants it keeps are in `ALGORITHM.md` at the repository's root.

pub mod crdt;
pub mod ledger;
pub mod limiter;
pub mod window;
