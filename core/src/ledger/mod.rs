//! The ledger: a window's owner leases tokens, its users spend them.
//!
//! Every window has an owner (a member picked by consistent hashing). The owner's books
//! (`books.rs`) count, at each moment from now on, the slots of the window that are taken: by
//! spends the users' registers record, and by tokens leased and not known spent
//! (`occupancy.rs`). It leases a token only where a slot stays free over the whole span that
//! token could occupy a sliding window, so no window ever holds more than `L` spends, whatever
//! the traffic, delays or losses. Users spend what they hold on the hot path without a lock
//! (`holdings.rs`) and report what they still hold with their registers (`lease.rs`).

mod books;
mod handed;
mod holdings;
mod lease;
mod occupancy;
mod quantile;
mod spend_clock;
mod spend_marks;
mod spend_tally;
mod targets;
pub mod tuning;

pub use books::{Ask, AskAnswer, Books, Heard, LedgerParams, Renewal, spend_tail_ms};
pub use handed::{HandedBooks, MOST_HANDED_STEPS, spends_after};
pub use holdings::{Charge, HeldNow, Holdings};
pub use lease::{HeldLease, HoldingsReport, Lease, Segment};
pub use occupancy::{Occupancy, Span};
pub use quantile::poisson_quantile;
pub use spend_clock::{ClockShape, SealedBucket, SpendClock, slot_end_ms};
pub use spend_marks::SpendMarks;
pub use spend_tally::SpendTally;
pub use targets::{Cover, cover_targets, cut_near_cushions};
