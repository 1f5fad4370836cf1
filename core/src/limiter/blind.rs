//! Windows this node uses but hears nothing of.
//!
//! In owner mode a node hears of a window's other users only through the sums of the owner
//! it sends its registers to. The owner answers every register with a sum, empty or not
//! (`Limiter::aggregates_for`), so registers that go unanswered mean this node has no owner
//! for the window: the member it takes for the first owner counts itself the second (a
//! member missing from this node's view of the cluster), or is gone. Hearing of no other
//! user, the node would take the whole limit while every other user takes its share, and the
//! window would pass its limit by up to that node's part. A blind window of which this node
//! knows no other user's demand gets the onset share instead, `1 / live` of the limit
//! (`1 / N_e` under strict), as a node whose peers cannot have been heard yet does; one whose
//! other users' demand it still knows (an owner's last sum, for a window) keeps its demand
//! share. The node layer says which windows are blind (`node::unanswered`). No bound of a
//! blind window is cached: whether it is capped changes when the others' demand lapses,
//! within a bucket.
//!
//! Pinned by `a_blind_window_takes_the_onset_share_until_it_is_not_and_a_cached_bound_follows`
//! and `a_blind_window_whose_other_users_are_known_keeps_its_demand_share`
//! (`limiter/tests/cluster.rs`).

use std::sync::atomic::Ordering;

use super::{KeyId, Limiter};

impl Limiter {
    /// Says which windows are blind: this node sends their registers and hears no sum back.
    /// Until the next call, their shares are at most the onset share while this node knows of
    /// no other user's demand for them.
    pub fn set_blind(&self, windows: Vec<KeyId>) {
        let mut sorted = windows;
        sorted.sort_unstable();
        sorted.dedup();
        let current = self.blind_windows.load();
        if current
            .as_deref()
            .map_or(sorted.is_empty(), |c| *c == sorted)
        {
            return;
        }
        self.blind_windows
            .store((!sorted.is_empty()).then(|| std::sync::Arc::new(sorted)));
        // Shares change: cached bounds were computed without the cap, or with it.
        self.liveness_generation.fetch_add(1, Ordering::Release);
    }

    /// Whether window `id` is blind (see [`Limiter::set_blind`]).
    pub fn is_blind(&self, id: KeyId) -> bool {
        self.blind_windows
            .load()
            .as_deref()
            .is_some_and(|b| b.binary_search(&id).is_ok())
    }
}
