//! The replica state of one window: origin → register, merged as a CRDT.
//!
//! There is one of these per active key and it is copied on every merge, so it is one flat
//! array of 32-bit words: per register, in origin order, an 8-word head (origin, demand,
//! version, stamp, newest epoch) followed by its counts. Every register of a window has the
//! same number of counts (`B + 1`); registers are normalised to it on the way in, longer ones
//! losing buckets that cannot be in the window any more, shorter ones padded with zeros.
//! Counts take 16 bits each while they fit, two to a word, and the whole replica switches to
//! one word per count while one does not: storage stays exact either way. The packing is a
//! function of the content (narrow whenever every count fits), so equal replicas are equal
//! word for word, whatever they went through.

use std::cmp::Ordering;

use crate::crdt::HlcTimestamp;
use crate::window::{MAX_BUCKETS, WindowSpec};

use super::counts::{Counts, pack_into, words_for};
use super::register::{Arbitration, RegisterRef};
use super::version::VersionVector;

/// Who wrote a register: an origin (a node process boot, `limiter::OriginId`) interned as an
/// index into the node's table of origins. Four bytes instead of sixteen in every register of
/// every key.
pub type OriginIdx = u32;

const HEAD: usize = 8;
/// Most counts a register holds (`B + 1`).
const MAX_STRIDE: usize = MAX_BUCKETS as usize + 1;

/// What merging one register did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeOutcome {
    /// First register seen from this origin.
    Inserted,
    /// Replaced an older version.
    Replaced,
    /// The same version was already held.
    Duplicate,
    /// An older version than the one held; ignored.
    Stale,
}

impl MergeOutcome {
    pub fn changed(self) -> bool {
        matches!(self, MergeOutcome::Inserted | MergeOutcome::Replaced)
    }
}

/// Per-origin registers of one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    words: Box<[u32]>,
    /// Counts per register (`B + 1`).
    stride: u8,
    /// One word per count instead of two counts per word.
    wide: bool,
}

fn split(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

fn join(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

impl Replica {
    pub fn new(spec: &WindowSpec) -> Self {
        Self::with_stride(spec.slots())
    }

    /// A replica whose registers hold `stride` counts (1 to `MAX_BUCKETS + 1`).
    pub fn with_stride(stride: usize) -> Self {
        Self {
            words: Box::new([]),
            stride: u8::try_from(stride.clamp(1, MAX_STRIDE)).unwrap_or(u8::MAX),
            wide: false,
        }
    }

    fn stride(&self) -> usize {
        usize::from(self.stride)
    }

    fn reg_words(&self) -> usize {
        HEAD + words_for(self.stride(), self.wide)
    }

    pub fn len(&self) -> usize {
        self.words.len() / self.reg_words()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    fn reg(&self, i: usize) -> &[u32] {
        let w = self.reg_words();
        &self.words[i * w..(i + 1) * w]
    }

    fn origin_at(&self, i: usize) -> OriginIdx {
        self.reg(i)[0]
    }

    fn register_at(&self, i: usize) -> RegisterRef<'_> {
        let r = self.reg(i);
        let counts = &r[HEAD..];
        RegisterRef {
            demand: r[1],
            version: join(r[2], r[3]),
            hlc: HlcTimestamp::from_bits(join(r[4], r[5])),
            newest_epoch: join(r[6], r[7]),
            admitted: if self.wide {
                Counts::Wide(counts)
            } else {
                Counts::Narrow {
                    words: counts,
                    len: self.stride(),
                }
            },
        }
    }

    fn find(&self, origin: OriginIdx) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.origin_at(mid).cmp(&origin) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    pub fn get(&self, origin: OriginIdx) -> Option<RegisterRef<'_>> {
        self.find(origin).ok().map(|i| self.register_at(i))
    }

    /// Registers in origin order.
    pub fn iter(&self) -> impl Iterator<Item = (OriginIdx, RegisterRef<'_>)> + '_ {
        (0..self.len()).map(|i| (self.origin_at(i), self.register_at(i)))
    }

    pub fn version_vector(&self) -> VersionVector<OriginIdx> {
        self.iter().map(|(o, r)| (o, r.version)).collect()
    }

    /// Writes one register in this replica's packing into `out` (exactly its words).
    fn encode_into(&self, origin: OriginIdx, reg: &RegisterRef<'_>, wide: bool, out: &mut [u32]) {
        out[0] = origin;
        out[1] = reg.demand;
        out[2..4].copy_from_slice(&split(reg.version));
        out[4..6].copy_from_slice(&split(reg.hlc.to_bits()));
        out[6..8].copy_from_slice(&split(reg.newest_epoch));
        pack_into(reg.admitted.iter(), self.stride(), wide, &mut out[HEAD..]);
    }

    fn encode(&self, origin: OriginIdx, reg: &RegisterRef<'_>, wide: bool) -> Vec<u32> {
        let mut out = vec![0u32; HEAD + words_for(self.stride(), wide)];
        self.encode_into(origin, reg, wide, &mut out);
        out
    }

    /// Re-encodes every register in the given packing.
    fn repack(&mut self, wide: bool) {
        if wide == self.wide {
            return;
        }
        let regs: Vec<Vec<u32>> = (0..self.len())
            .map(|i| self.encode(self.origin_at(i), &self.register_at(i), wide))
            .collect();
        self.wide = wide;
        self.words = regs.concat().into_boxed_slice();
    }

    /// Narrows a wide replica whose counts all fit 16 bits again.
    fn canonicalise(&mut self) {
        if self.wide
            && self
                .iter()
                .all(|(_, r)| r.admitted.max() <= u32::from(u16::MAX))
        {
            self.repack(false);
        }
    }

    /// Merges one register from `origin`.
    pub fn merge_register(
        &mut self,
        origin: OriginIdx,
        reg: RegisterRef<'_>,
        arbitration: Arbitration,
    ) -> MergeOutcome {
        let stride = self.stride();
        let found = self.find(origin);
        if let Ok(i) = found {
            let held = self.register_at(i);
            let order = arbitration
                .rank(reg.version, reg.hlc)
                .cmp(&arbitration.rank(held.version, held.hlc))
                .then_with(|| {
                    // Same version and stamp: order by content, as normalised to this window.
                    let norm = |r: &RegisterRef<'_>| {
                        let counts: Vec<u32> = (0..stride).map(|k| r.admitted.get(k)).collect();
                        (r.newest_epoch, r.demand, counts)
                    };
                    norm(&reg).cmp(&norm(&held))
                });
            match order {
                Ordering::Equal => return MergeOutcome::Duplicate,
                Ordering::Less => return MergeOutcome::Stale,
                Ordering::Greater => {}
            }
        }
        self.store(origin, reg, found)
    }

    /// Puts `reg` in place of `origin`'s register, whatever their order: the origin itself
    /// sent it, and the held one is not its (see `crdt::succession`).
    pub fn supersede(&mut self, origin: OriginIdx, reg: RegisterRef<'_>) -> MergeOutcome {
        let found = self.find(origin);
        self.store(origin, reg, found)
    }

    /// Writes `reg` for `origin`, at `found` (its place, or where it goes).
    fn store(
        &mut self,
        origin: OriginIdx,
        reg: RegisterRef<'_>,
        found: Result<usize, usize>,
    ) -> MergeOutcome {
        let stride = self.stride();
        let fits_narrow = match reg.admitted {
            Counts::Wide(slice) => slice.iter().take(stride).all(|c| *c <= u32::from(u16::MAX)),
            // Narrow counts fit by construction.
            Counts::Narrow { .. } => true,
        };
        if !self.wide && !fits_narrow {
            self.repack(true);
        }
        // Packing takes `stride` counts and pads with zeros: that is the normalisation.
        let w = self.reg_words();
        let wide = self.wide;
        match found {
            Ok(i) => {
                let mut slot = std::mem::take(&mut self.words);
                self.encode_into(origin, &reg, wide, &mut slot[i * w..(i + 1) * w]);
                self.words = slot;
                self.canonicalise();
                MergeOutcome::Replaced
            }
            Err(i) => {
                let mut words = Vec::with_capacity(self.words.len() + w);
                words.extend_from_slice(&self.words[..i * w]);
                words.resize(i * w + w, 0);
                self.encode_into(origin, &reg, wide, &mut words[i * w..]);
                words.extend_from_slice(&self.words[i * w..]);
                self.words = words.into_boxed_slice();
                MergeOutcome::Inserted
            }
        }
    }

    /// Whether every register of a received summary is already matched or beaten by what this
    /// replica holds, so the summary can be dropped without reading its buckets. O(origins).
    pub fn dominates(
        &self,
        summary: impl IntoIterator<Item = (OriginIdx, u64, HlcTimestamp)>,
        arbitration: Arbitration,
    ) -> bool {
        summary.into_iter().all(|(origin, version, hlc)| {
            self.get(origin).is_some_and(|h| {
                arbitration.rank(h.version, h.hlc) >= arbitration.rank(version, hlc)
            })
        })
    }

    /// Merges every register of another replica of the same window.
    pub fn merge(&mut self, other: &Replica, arbitration: Arbitration) {
        for (origin, reg) in other.iter() {
            self.merge_register(origin, reg, arbitration);
        }
    }

    /// Keeps the registers for which `keep` holds.
    fn retain(&mut self, keep: impl Fn(OriginIdx, &RegisterRef<'_>) -> bool) -> usize {
        let before = self.len();
        let w = self.reg_words();
        let kept: Vec<u32> = (0..before)
            .filter(|i| keep(self.origin_at(*i), &self.register_at(*i)))
            .flat_map(|i| self.words[i * w..(i + 1) * w].iter().copied())
            .collect();
        self.words = kept.into_boxed_slice();
        self.canonicalise();
        before - self.len()
    }

    /// Drops registers whose buckets have all left the window. Returns how many were dropped.
    pub fn expire(&mut self, spec: &WindowSpec, now_ms: u64) -> usize {
        self.expire_except(spec, now_ms, |_| false)
    }

    /// As [`Replica::expire`], keeping the registers of the origins `held` selects whatever
    /// their age.
    pub fn expire_except(
        &mut self,
        spec: &WindowSpec,
        now_ms: u64,
        held: impl Fn(OriginIdx) -> bool,
    ) -> usize {
        let expired = |o: OriginIdx, r: &RegisterRef<'_>| r.is_expired(spec, now_ms) && !held(o);
        if self.iter().all(|(o, r)| !expired(o, &r)) {
            return 0;
        }
        self.retain(|o, r| !expired(o, r))
    }

    /// Removes one origin's register (its owner is gone for good).
    pub fn remove(&mut self, origin: OriginIdx) -> bool {
        self.find(origin).is_ok() && self.retain(|o, _| o != origin) == 1
    }

    /// The newest epoch any register holds.
    pub fn newest_epoch(&self) -> Option<u64> {
        self.iter().map(|(_, r)| r.newest_epoch).max()
    }

    /// Bytes this replica holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.words.len() * std::mem::size_of::<u32>()
    }
}
