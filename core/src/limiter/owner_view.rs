//! The node's view of who owns each window (its ring), as the limiter sees it: which windows
//! this node may lease, from when, and for what part of their limits.

use std::sync::Arc;

use super::{KeyId, Limiter};

/// Who owns a window in this node's view of the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerOf {
    /// The owner's boot id.
    pub owner: u128,
    /// It leases nothing before this (ms): it took the window over from another owner whose
    /// leases may still be spent.
    pub quiet_until_ms: u64,
    /// A previous owner of the window went down without saying it was leaving (it crashed, or
    /// is across a cut and may go on leasing its side), and may have leased its side the whole
    /// limit until this time (ms; 0: no such owner): under `strict` the owner leases nothing of
    /// the window until every token that owner leased has left it, this time plus the window.
    pub blind_since_ms: u64,
    /// The member that owned the window before, left, and handed the owner its books, which
    /// the owner counts (`Limiter::take_handed_books`): what lets it lease before the quiet
    /// period. `None`: no books count.
    pub handed_by: Option<u128>,
}

impl OwnerOf {
    /// The owner of a window no member left without a word.
    pub fn quiet_until(owner: u128, quiet_until_ms: u64) -> Self {
        Self {
            owner,
            quiet_until_ms,
            blind_since_ms: 0,
            handed_by: None,
        }
    }

    /// When the owner may lease a window `window_ms` long, on clocks `margin_ms` apart.
    pub fn leases_from_ms(&self, window_ms: u64, margin_ms: u64) -> u64 {
        if self.blind_since_ms == 0 {
            return self.quiet_until_ms;
        }
        let blind_until = self
            .blind_since_ms
            .saturating_add(window_ms)
            .saturating_add(margin_ms);
        self.quiet_until_ms.max(blind_until)
    }
}

/// The node's view of which member owns which window (its ring).
pub trait OwnerView: Send + Sync + std::fmt::Debug {
    /// The owner of `key`; `None` if no member can lease it in this node's view.
    fn owner_of(&self, key: KeyId) -> Option<OwnerOf>;
    /// The member [`OwnerView::owner_of`] names for `key`, where finding it costs less than
    /// the rest of what that says (a view keeping rings from before a change reads only the
    /// current one).
    fn owner_id(&self, key: KeyId) -> Option<u128> {
        self.owner_of(key).map(|o| o.owner)
    }
    /// This node's side's part of every limit it leases, as `(members seen, members
    /// expected)`: under `strict`, a side cut off from some of the cluster leases only its
    /// part, so that the sides' leases together stay within the limit; `(1, 1)` otherwise.
    /// Nothing is leased where the part is 0 (a part too small for a limit rounds it to 0).
    fn lease_part(&self) -> (u64, u64);
}

/// An [`OwnerView`] behind a pointer the limiter can swap.
#[derive(Debug)]
pub(crate) struct OwnerViewBox(pub Box<dyn OwnerView>);

impl Limiter {
    /// Whether this node leases `key` now, and from when it may (its view of the owners).
    pub(super) fn leases_here(&self, key: KeyId) -> Option<OwnerOf> {
        match self.owner_view.load().as_ref() {
            // No view: a node alone owns every window.
            None => Some(OwnerOf::quiet_until(self.origin.0, 0)),
            Some(view) => {
                let view = &view.0;
                // Most windows are another member's: told by the owner alone.
                if view.owner_id(key) != Some(self.origin.0) {
                    return None;
                }
                view.owner_of(key)
                    .filter(|o| o.owner == self.origin.0 && view.lease_part().0 > 0)
            }
        }
    }

    /// This node's side's part of the limits it leases (see [`OwnerView::lease_part`]).
    pub(super) fn lease_part(&self) -> (u64, u64) {
        self.owner_view
            .load()
            .as_ref()
            .map_or((1, 1), |view| view.0.lease_part())
    }

    /// Sets the node's view of the owners (its ring); see [`OwnerView`].
    pub fn set_owner_view(&self, view: Box<dyn OwnerView>) {
        self.owner_view.store(Some(Arc::new(OwnerViewBox(view))));
    }

    /// The owner of `key` in this node's view (this node, without a view).
    pub fn owner_of(&self, key: KeyId) -> Option<OwnerOf> {
        match self.owner_view.load().as_ref() {
            None => Some(OwnerOf::quiet_until(self.origin.0, 0)),
            Some(view) => view.0.owner_of(key),
        }
    }
}
