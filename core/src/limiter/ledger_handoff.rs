//! What an owner that leaves gracefully hands the windows' next owners: when the last lease
//! of each window it leases ends. A next owner that knows it leases the window once those
//! leases have ended and their users have reported, not after the longest lease any owner
//! could have granted (ALGORITHM.md, L4).

use super::{KeyId, Limiter};

impl Limiter {
    /// Every window this node holds books for, with the end of the last lease it granted
    /// there (windows that granted none are left out): no token this node leased is spent
    /// after it. Read once this node leases nothing more (it is leaving).
    pub fn lease_ends(&self) -> Vec<(KeyId, u64)> {
        self.lock_owned()
            .windows
            .iter()
            .map(|(key, owned)| (*key, owned.books.last_lease_end()))
            .filter(|(_, end)| *end > 0)
            .collect()
    }
}
