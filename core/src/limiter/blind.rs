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

use arc_swap::ArcSwapOption;

use super::{KeyId, Limiter};

impl Limiter {
    /// Says which windows are blind: this node sends their registers and hears no sum back.
    /// Until the next call, their shares are at most the onset share while this node knows of
    /// no other user's demand for them.
    pub fn set_blind(&self, windows: Vec<KeyId>) {
        self.set_windows(&self.blind_windows, windows);
    }

    /// Whether window `id` is blind (see [`Limiter::set_blind`]).
    pub fn is_blind(&self, id: KeyId) -> bool {
        listed(&self.blind_windows, id)
    }

    /// Says which windows this node knows of only from what it held at its last stop: in owner
    /// mode a node holds other users' registers of a window only as its owner, and a restart
    /// (new boot ids, a new ring) leaves it the registers of windows others own now, which
    /// the new owners complete. Counting those alone, it would take the room of every spend
    /// they lack. Until the next call, each admits nothing more here. The node layer lifts a
    /// window once its owner's first sum comes (`node::owner_mode`). Pinned by
    /// `a_window_known_only_from_the_last_stop_admits_nothing_until_confirmed`
    /// (`limiter/tests/cluster.rs`) and `tests/restart_owners.rs`.
    pub fn set_unconfirmed(&self, windows: Vec<KeyId>) {
        self.set_windows(&self.unconfirmed_windows, windows);
    }

    /// Whether window `id` admits nothing until its owner confirms it (see
    /// [`Limiter::set_unconfirmed`]).
    pub fn is_unconfirmed(&self, id: KeyId) -> bool {
        listed(&self.unconfirmed_windows, id)
    }

    /// Stores `windows` (sorted) in `list`. A change changes shares: every cached bound was
    /// computed with the old list, so the liveness generation moves on.
    fn set_windows(&self, list: &ArcSwapOption<Vec<KeyId>>, windows: Vec<KeyId>) {
        let mut sorted = windows;
        sorted.sort_unstable();
        sorted.dedup();
        if list
            .load()
            .as_deref()
            .map_or(sorted.is_empty(), |c| *c == sorted)
        {
            return;
        }
        list.store((!sorted.is_empty()).then(|| std::sync::Arc::new(sorted)));
        self.liveness_generation.fetch_add(1, Ordering::Release);
    }
}

/// Whether `id` is in `list` (sorted).
fn listed(list: &ArcSwapOption<Vec<KeyId>>, id: KeyId) -> bool {
    list.load()
        .as_deref()
        .is_some_and(|l| l.binary_search(&id).is_ok())
}
