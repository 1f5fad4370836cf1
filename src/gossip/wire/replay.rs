//! Replay protection: per-stream sliding windows over datagram numbers, like IPsec's.
//!
//! A stream is what one sender numbers consecutively for one receiver: its datagrams addressed
//! to this node, or its unaddressed ones (announcements to a seed it knows only by address).
//! Because addressed datagrams are bound to their receiver by authentication, a datagram
//! captured on its way to another node never reaches these windows here.

use std::collections::HashMap;

use crate::limiter::IdHashBuilder;

/// Width of a window, in datagrams: how far out of order a datagram may arrive (a bootstrap
/// push can be hundreds of datagrams sent at once).
pub(super) const REPLAY_WINDOW: u64 = 1024;
const REPLAY_WORDS: usize = (REPLAY_WINDOW / 64) as usize;
/// Streams whose windows are remembered.
pub(super) const MAX_TRACKED_STREAMS: usize = 4_096;

/// Who numbered a stream: the sender's boot id, and whether its datagrams were addressed to
/// this node.
pub(super) type StreamId = (u128, bool);

/// One stream's recent numbers.
#[derive(Debug, Clone)]
struct ReplayWindow {
    highest: u64,
    /// Bit `i` set: number `highest - i` was seen.
    seen: [u64; REPLAY_WORDS],
    last_seen_ms: u64,
}

impl ReplayWindow {
    fn bit(&self, back: u64) -> bool {
        self.seen[(back / 64) as usize] & (1 << (back % 64)) != 0
    }

    fn set(&mut self, back: u64) {
        self.seen[(back / 64) as usize] |= 1 << (back % 64);
    }

    /// Moves the window up by `shift` numbers.
    fn slide(&mut self, shift: u64) {
        if shift >= REPLAY_WINDOW {
            self.seen = [0; REPLAY_WORDS];
            return;
        }
        let (words, bits) = ((shift / 64) as usize, (shift % 64) as u32);
        for i in (0..REPLAY_WORDS).rev() {
            let from = i.checked_sub(words);
            let hi = from.map_or(0, |f| self.seen[f] << bits);
            let lo = match from.and_then(|f| f.checked_sub(1)) {
                Some(g) if bits > 0 => self.seen[g] >> (64 - bits),
                _ => 0,
            };
            self.seen[i] = hi | lo;
        }
    }

    /// Records `number`; false if it was seen or is too old to tell.
    fn accept(&mut self, number: u64) -> bool {
        if number > self.highest {
            self.slide(number - self.highest);
            self.highest = number;
            self.set(0);
            return true;
        }
        let back = self.highest - number;
        if back >= REPLAY_WINDOW || self.bit(back) {
            return false;
        }
        self.set(back);
        true
    }
}

/// The windows of the streams heard from most recently, at most [`MAX_TRACKED_STREAMS`].
#[derive(Debug, Default)]
pub(super) struct ReplayTable {
    /// Hashed: looked up for every datagram, and as large as the cluster. Iteration order is
    /// never relied on (the eviction below breaks ties by stream).
    streams: HashMap<StreamId, ReplayWindow, IdHashBuilder>,
}

impl ReplayTable {
    /// Records `number` of `stream`; false if it was seen already or is too old to tell.
    /// Call it only for authenticated datagrams, so that forgeries cannot move a window.
    pub fn accept(&mut self, stream: StreamId, number: u64, now_ms: u64) -> bool {
        if !self.streams.contains_key(&stream) && self.streams.len() >= MAX_TRACKED_STREAMS {
            // Forget the stream heard from least recently. A datagram of its replayed later is
            // still refused by the clock check once it is a minute old.
            if let Some(oldest) = self
                .streams
                .iter()
                .min_by_key(|(s, w)| (w.last_seen_ms, **s))
                .map(|(s, _)| *s)
            {
                self.streams.remove(&oldest);
            }
        }
        let window = self.streams.entry(stream).or_insert(ReplayWindow {
            highest: 0,
            seen: [0; REPLAY_WORDS],
            last_seen_ms: now_ms,
        });
        if !window.accept(number) {
            return false;
        }
        window.last_seen_ms = now_ms;
        true
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.streams.len()
    }
}
