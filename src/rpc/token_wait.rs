//! Under the ledger a request that finds no token for a window does not fail at once: the node
//! asks the window's owner (`Command::Ask`; the node sends one ask per window and wait, the
//! others wait for its answer) and the request waits
//! for the owner's lease, or for a token this node holds that becomes valid, and is decided
//! again. It waits at most the limiter's `ask_wait_ms` (inside Envoy's 20 ms default timeout),
//! and is refused at the end of it as it would have been at the start.
//!
//! Invariant: waiting never admits what the ledger would refuse. Every retry is a full check
//! against the tokens held at that moment; the wait only gives the owner's answer time to land.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::limiter::{Limiter, Policy, TokenNeed};
use crate::node::{ClusterView, Command};

/// What a request needs to wait for tokens: the node's command channel (for asks) and its
/// view (woken whenever a lease or an owner's answer arrives).
#[derive(Clone)]
pub struct TokenWait {
    pub commands: mpsc::Sender<Command>,
    pub view: Arc<ClusterView>,
    /// The longest wait, from the limiter's ledger timing.
    pub wait_ms: u64,
}

impl std::fmt::Debug for TokenWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenWait")
            .field("wait_ms", &self.wait_ms)
            .finish_non_exhaustive()
    }
}

impl TokenWait {
    /// What requests to `limiter` wait with, if it admits under the ledger.
    pub fn for_node(
        limiter: &Limiter,
        commands: &mpsc::Sender<Command>,
        view: &Arc<ClusterView>,
    ) -> Option<Self> {
        matches!(limiter.config().policy, Policy::Ledger(_)).then(|| Self {
            commands: commands.clone(),
            view: view.clone(),
            wait_ms: limiter.config().ledger.ask_wait_ms,
        })
    }

    /// How many times leases arrived at the node so far: read before a check, so that
    /// [`TokenWait::wait`] does not sleep through one that came after it.
    pub fn arrivals(&self) -> u64 {
        self.view.leases_arrivals()
    }

    /// Asks the owners of the windows an admitted request left short
    /// ([`TokenNeed::ahead`]); nothing waits for the answers. A full command channel skips
    /// them: the next request asks again.
    pub fn ask_ahead(&self, needs: &[TokenNeed]) {
        for need in needs.iter().filter(|n| n.ahead && n.ask) {
            let _ = self.commands.try_send(Command::Ask(*need));
        }
    }

    /// Asks the owners `needs` names (where the limiter says to) and waits until a lease or an
    /// owner's answer arrives (at once if one came since `seen`, as [`TokenWait::arrivals`]
    /// read it before the check), a held token becomes valid (`valid_at_ms`, cluster time,
    /// read at `now_ms`), or `deadline` fires. A full command channel skips the ask: the
    /// request still waits for what another request's ask brings.
    pub async fn wait(
        &self,
        needs: &[TokenNeed],
        now_ms: u64,
        seen: u64,
        deadline: Pin<&mut Sleep>,
    ) {
        let arrived = self.view.leases.notified();
        tokio::pin!(arrived);
        // Registered before the asks go out, so that an answer landing at once still wakes it.
        arrived.as_mut().enable();
        for need in needs.iter().filter(|n| n.ask) {
            let _ = self.commands.try_send(Command::Ask(*need));
        }
        if self.arrivals() != seen {
            return;
        }
        let valid_after = needs
            .iter()
            .filter_map(|n| n.valid_at_ms)
            .min()
            .map(|at| Duration::from_millis(at.saturating_sub(now_ms).max(1)));
        let valid = async {
            match valid_after {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = arrived => {}
            _ = deadline => {}
            _ = valid => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::KeyId;

    fn need(key: u128, ask: bool, ahead: bool) -> TokenNeed {
        TokenNeed {
            index: 0,
            key: KeyId(key),
            window_ms: 1_000,
            buckets: 10,
            limit: 10,
            want: 1,
            valid_at_ms: None,
            ask,
            refused: false,
            ahead,
        }
    }

    /// Asks ahead go to the node without waiting, only for the windows an admitted request
    /// left short and may ask about; the needs of a refused request are not asked here.
    #[test]
    fn only_needs_ahead_that_may_ask_are_sent_ahead() {
        let (commands, mut received) = mpsc::channel(8);
        let wait = TokenWait {
            commands,
            view: Arc::new(ClusterView::default()),
            wait_ms: 15,
        };
        wait.ask_ahead(&[
            need(1, true, true),
            need(2, true, false),
            need(3, false, true),
        ]);
        let Ok(Command::Ask(sent)) = received.try_recv() else {
            panic!("an ask ahead was sent");
        };
        assert_eq!(sent.key, KeyId(1));
        assert!(
            received.try_recv().is_err(),
            "only the one ahead that may ask"
        );
    }
}
