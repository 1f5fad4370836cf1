//! Return routability, for clusters whose datagrams anyone can forge (`cluster.insecure`: the
//! key derives from the cluster id).
//!
//! There, one forged announcement can make a node a member whose address is a victim's, and
//! every member would then push its registers to that address: the node as an amplifier. So a
//! node sends registers (summary rounds, bootstrap and anti-entropy pushes) only to addresses
//! that have shown they receive what it sends. Every register and heartbeat body carries, after
//! the members count, the sender's cookie for the receiver's address and the last cookie the
//! receiver sent it; an address is verified once a datagram *from* it echoes this node's cookie
//! for it. An off-path attacker who forges the source address never sees the cookie. Until then
//! the address gets a heartbeat per round (the cookie's carrier), ten at most, then one every
//! five seconds until it is verified (nothing else resets the count: in an insecure cluster
//! anyone can forge a word from an address), and SWIM's own probes until SWIM declares the
//! never-answering member down;
//! a member held as down is announced to again only if its address was verified.
//!
//! A cookie is a keyed hash of the address under a secret drawn at boot, so nothing per address
//! is kept before it is verified.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use tokio::time::Instant;

/// Bytes the cookies add to a body.
pub(crate) const COOKIES_LEN: usize = 16;
/// Heartbeats an unverified address gets before they slow down.
const PROBES_WITHOUT_ANSWER: u32 = 10;
/// Then one this often, so that a member whose first ones were all lost is still verified.
const PROBE_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct ReturnRoute {
    key: [u8; 32],
    /// Addresses that echoed this node's cookie.
    verified: BTreeSet<SocketAddr>,
    /// The cookie each member last sent this node, to echo back (members only).
    echoes: BTreeMap<u128, u64>,
    /// Members whose bootstrap push waits for their address to be verified.
    pending_bootstrap: BTreeSet<SocketAddr>,
    /// Heartbeats sent to each unverified member address, and when the last went.
    unanswered: BTreeMap<SocketAddr, (u32, Instant)>,
    /// Addresses whose request for an echo was answered this round (members only).
    answered: BTreeSet<SocketAddr>,
}

impl ReturnRoute {
    pub fn new(key: [u8; 32]) -> Self {
        Self {
            key,
            verified: BTreeSet::new(),
            echoes: BTreeMap::new(),
            pending_bootstrap: BTreeSet::new(),
            unanswered: BTreeMap::new(),
            answered: BTreeSet::new(),
        }
    }

    /// Whether an unverified `addr` may get another heartbeat (its cookie's carrier) at `at`:
    /// a few, then one every [`PROBE_BACKOFF`], so that a member that never answers (a forged
    /// one: a victim's address) gets almost nothing, whatever else arrives claiming to come
    /// from it. Counts the heartbeat.
    pub fn may_probe(&mut self, addr: SocketAddr, at: Instant) -> bool {
        let (sent, last) = self.unanswered.entry(addr).or_insert((0, at));
        let due =
            *sent < PROBES_WITHOUT_ANSWER || at.saturating_duration_since(*last) >= PROBE_BACKOFF;
        if due {
            *sent = sent.saturating_add(1);
            *last = at;
        }
        due
    }

    fn cookie(&self, addr: SocketAddr) -> u64 {
        let text = addr.to_string();
        let h = blake3::keyed_hash(&self.key, text.as_bytes());
        u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
    }

    /// The cookies for a body to `addr` (member `node`): this node's cookie for `addr`, then
    /// the echo of `node`'s last cookie (0 if none yet).
    pub fn cookies(&self, addr: SocketAddr, node: Option<u128>) -> [u8; COOKIES_LEN] {
        let mut out = [0u8; COOKIES_LEN];
        out[..8].copy_from_slice(&self.cookie(addr).to_le_bytes());
        let echo = node.and_then(|n| self.echoes.get(&n)).copied().unwrap_or(0);
        out[8..].copy_from_slice(&echo.to_le_bytes());
        out
    }

    /// Takes the cookies off the front of a body that arrived from `from` (the datagram's
    /// source address), sent by member `sender` (`None` if it is not a member). Returns the rest
    /// of the body, whether `from` is newly verified, and whether this datagram echoes `from`'s
    /// cookie (its sender receives at `from`); `None` if the body is too short.
    pub fn observe<'b>(
        &mut self,
        body: &'b [u8],
        from: SocketAddr,
        sender: Option<u128>,
    ) -> Option<(&'b [u8], bool, bool)> {
        let (cookies, rest) = body.split_first_chunk::<COOKIES_LEN>()?;
        let (theirs, echoed) = cookies.split_at(8);
        let theirs = u64::from_le_bytes(theirs.try_into().expect("8 bytes"));
        let echoed = u64::from_le_bytes(echoed.try_into().expect("8 bytes"));
        if let Some(sender) = sender {
            self.echoes.insert(sender, theirs);
        }
        let echoes = echoed == self.cookie(from);
        let newly = echoes && self.verified.insert(from);
        if newly {
            self.unanswered.remove(&from);
        }
        Some((rest, newly, echoes))
    }

    /// Forgets the cookie `node` sent: what this node sends it echoes nothing until it sends
    /// another.
    #[cfg(test)]
    pub fn forget_echo(&mut self, node: u128) {
        self.echoes.remove(&node);
    }

    pub fn is_verified(&self, addr: SocketAddr) -> bool {
        self.verified.contains(&addr)
    }

    /// Remembers that `addr`'s bootstrap waits for it to be verified.
    pub fn defer_bootstrap(&mut self, addr: SocketAddr) {
        self.pending_bootstrap.insert(addr);
    }

    /// Whether a request for an echo from `addr` (a member's address) may be answered: once a
    /// round, so that forged requests make this node a reflector of at most one heartbeat a
    /// round per member. Counts the answer.
    pub fn may_answer(&mut self, addr: SocketAddr) -> bool {
        self.answered.insert(addr)
    }

    /// A new summary round: every member may be answered again.
    pub fn new_round(&mut self) {
        self.answered.clear();
    }

    /// Whether `addr` had a bootstrap waiting (which is now due).
    pub fn take_bootstrap(&mut self, addr: SocketAddr) -> bool {
        self.pending_bootstrap.remove(&addr)
    }

    /// Forgets everything about nodes and addresses that are no longer members.
    pub fn retain(&mut self, members: &BTreeSet<u128>, addrs: &BTreeSet<SocketAddr>) {
        self.echoes.retain(|n, _| members.contains(n));
        self.verified.retain(|a| addrs.contains(a));
        self.pending_bootstrap.retain(|a| addrs.contains(a));
        self.unanswered.retain(|a, _| addrs.contains(a));
        self.answered.retain(|a| addrs.contains(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[test]
    fn an_unverified_address_gets_ten_heartbeats_then_one_every_five_seconds() {
        let mut a = ReturnRoute::new([1; 32]);
        let mut b = ReturnRoute::new([2; 32]);
        let (a_addr, b_addr) = (addr(1), addr(2));
        let t = crate::clock::monotonic_now();
        for _ in 0..10 {
            assert!(a.may_probe(b_addr, t));
        }
        assert!(!a.may_probe(b_addr, t));
        assert!(!a.may_probe(b_addr, t + PROBE_BACKOFF / 2));
        assert!(a.may_probe(b_addr, t + PROBE_BACKOFF));
        assert!(!a.may_probe(b_addr, t + PROBE_BACKOFF * 3 / 2));
        assert!(a.may_probe(addr(3), t), "per address");
        // Verified at last: nothing to hold back any more, and a fresh count if it ever
        // has to be verified again.
        let to_b = a.cookies(b_addr, Some(0xB));
        b.observe(&to_b, a_addr, Some(0xA)).unwrap();
        let to_a = b.cookies(a_addr, Some(0xA));
        assert!(a.observe(&to_a, b_addr, Some(0xB)).unwrap().1);
        assert!(!a.unanswered.contains_key(&b_addr));
    }

    #[test]
    fn a_request_for_an_echo_is_answered_once_a_round() {
        let mut r = ReturnRoute::new([1; 32]);
        assert!(r.may_answer(addr(1)));
        assert!(
            !r.may_answer(addr(1)),
            "a forger's second request this round"
        );
        assert!(r.may_answer(addr(2)), "per address");
        r.new_round();
        assert!(r.may_answer(addr(1)));
        assert!(r.may_answer(addr(2)));
        r.retain(&BTreeSet::new(), &BTreeSet::from([addr(2)]));
        assert!(!r.may_answer(addr(2)), "kept while a member");
        assert!(r.may_answer(addr(1)), "forgotten with the member");
    }

    #[test]
    fn an_address_is_verified_only_by_echoing_its_own_cookie() {
        let mut a = ReturnRoute::new([1; 32]);
        let mut b = ReturnRoute::new([2; 32]);
        let (a_addr, b_addr) = (addr(1), addr(2));
        // A writes to B: A's cookie for B, nothing to echo yet.
        let to_b = a.cookies(b_addr, Some(0xB));
        let (rest, newly) = b
            .observe(&[&to_b[..], b"x"].concat(), a_addr, Some(0xA))
            .map(|(r, n, _)| (r.to_vec(), n))
            .unwrap();
        assert_eq!(rest, b"x");
        assert!(!newly);
        // B answers, echoing A's cookie: A now knows B's address receives.
        let to_a = b.cookies(a_addr, Some(0xA));
        let (_, newly, echoes) = a.observe(&to_a, b_addr, Some(0xB)).unwrap();
        assert_eq!(newly, echoes);
        assert!(newly && a.is_verified(b_addr));
        // A forger who sends "from" B's address without having seen the cookie gets nowhere.
        let mut c = ReturnRoute::new([3; 32]);
        let mut forged = [0u8; COOKIES_LEN];
        forged[8..].copy_from_slice(&12345u64.to_le_bytes());
        let (_, newly, echoes) = c.observe(&forged, b_addr, None).unwrap();
        assert!(!newly && !echoes);
        assert!(!c.is_verified(b_addr));
        // Nor does a datagram without the echo from an address verified before: each datagram
        // says for itself whether it echoes (what a node's flags are taken from).
        let (_, newly, echoes) = a.observe(&forged, b_addr, Some(0xB)).unwrap();
        assert!(!newly && !echoes && a.is_verified(b_addr));
        let (_, newly, echoes) = a.observe(&to_a, b_addr, Some(0xB)).unwrap();
        assert!(!newly && echoes, "verified already, and this one echoes");
        // The echo proves the address, not the sender's claim: B's cookie echoed from
        // another address verifies nothing.
        let mut d = ReturnRoute::new([4; 32]);
        let to_b = d.cookies(b_addr, None);
        let mut echo = [0u8; COOKIES_LEN];
        echo[8..].copy_from_slice(&to_b[..8]);
        assert!(!d.observe(&echo, addr(9), None).unwrap().1);
        assert!(d.observe(&echo, b_addr, None).unwrap().1);
        assert!(d.observe(&[0u8; 3], b_addr, None).is_none(), "too short");
    }
}
