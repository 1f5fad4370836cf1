//! The replica state of one window: origin → register, merged as a CRDT.
//!
//! Storage is flat, because there is one of these per active key: a sorted array of register
//! heads and one array of counts with a fixed stride of `B + 1` (every register of a window has
//! the same shape). Registers are normalised to that stride on the way in: longer ones lose
//! buckets that cannot be in the window any more, shorter ones are padded with zeros.

use std::cmp::Ordering;

use crate::clock::HlcTimestamp;
use crate::window::WindowSpec;

use super::register::{Arbitration, Register, RegisterRef};
use super::version::VersionVector;

/// The fixed-size part of a stored register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head<O> {
    origin: O,
    demand: u32,
    version: u64,
    hlc: HlcTimestamp,
    newest_epoch: u64,
}

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
pub struct Replica<O> {
    stride: usize,
    heads: Vec<Head<O>>,
    counts: Vec<u32>,
}

impl<O: Copy + Ord> Replica<O> {
    pub fn new(spec: &WindowSpec) -> Self {
        Self::with_stride(spec.slots())
    }

    fn with_stride(stride: usize) -> Self {
        Self {
            stride,
            heads: Vec::new(),
            counts: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    pub fn len(&self) -> usize {
        self.heads.len()
    }

    fn counts_of(&self, index: usize) -> &[u32] {
        &self.counts[index * self.stride..(index + 1) * self.stride]
    }

    fn view(&self, index: usize) -> RegisterRef<'_> {
        let h = &self.heads[index];
        RegisterRef {
            version: h.version,
            hlc: h.hlc,
            newest_epoch: h.newest_epoch,
            demand: h.demand,
            admitted: self.counts_of(index),
        }
    }

    fn find(&self, origin: O) -> Result<usize, usize> {
        self.heads.binary_search_by(|h| h.origin.cmp(&origin))
    }

    pub fn get(&self, origin: O) -> Option<RegisterRef<'_>> {
        self.find(origin).ok().map(|i| self.view(i))
    }

    /// Registers in origin order.
    pub fn iter(&self) -> impl Iterator<Item = (O, RegisterRef<'_>)> + '_ {
        (0..self.heads.len()).map(|i| (self.heads[i].origin, self.view(i)))
    }

    pub fn version_vector(&self) -> VersionVector<O> {
        self.heads.iter().map(|h| (h.origin, h.version)).collect()
    }

    /// Counts normalised to this replica's stride.
    fn normalise<'a>(&self, admitted: &'a [u32], scratch: &'a mut Vec<u32>) -> &'a [u32] {
        if admitted.len() == self.stride {
            return admitted;
        }
        scratch.clear();
        scratch.extend(admitted.iter().copied().take(self.stride));
        scratch.resize(self.stride, 0);
        scratch
    }

    /// Merges one register from `origin`.
    pub fn merge_register(
        &mut self,
        origin: O,
        reg: RegisterRef<'_>,
        arbitration: Arbitration,
    ) -> MergeOutcome {
        let mut scratch = Vec::new();
        let admitted = self.normalise(reg.admitted, &mut scratch);
        let incoming = RegisterRef { admitted, ..reg };
        let head = Head {
            origin,
            demand: reg.demand,
            version: reg.version,
            hlc: reg.hlc,
            newest_epoch: reg.newest_epoch,
        };
        match self.find(origin) {
            Ok(i) => match arbitration.compare(&incoming, &self.view(i)) {
                Ordering::Greater => {
                    self.heads[i] = head;
                    self.counts[i * self.stride..(i + 1) * self.stride].copy_from_slice(admitted);
                    MergeOutcome::Replaced
                }
                Ordering::Equal => MergeOutcome::Duplicate,
                Ordering::Less => MergeOutcome::Stale,
            },
            Err(i) => {
                self.heads.insert(i, head);
                let at = i * self.stride;
                self.counts.splice(at..at, admitted.iter().copied());
                MergeOutcome::Inserted
            }
        }
    }

    /// Whether every register of a received summary is already matched or beaten by what this
    /// replica holds, so the summary can be dropped without reading its buckets. O(origins).
    pub fn dominates(
        &self,
        summary: impl IntoIterator<Item = (O, u64, HlcTimestamp)>,
        arbitration: Arbitration,
    ) -> bool {
        summary.into_iter().all(|(origin, version, hlc)| {
            self.find(origin).is_ok_and(|i| {
                let h = &self.heads[i];
                arbitration.rank(h.version, h.hlc) >= arbitration.rank(version, hlc)
            })
        })
    }

    /// Merges every register of another replica of the same window.
    pub fn merge(&mut self, other: &Replica<O>, arbitration: Arbitration) {
        for (origin, reg) in other.iter() {
            self.merge_register(origin, reg, arbitration);
        }
    }

    /// Drops registers whose buckets have all left the window. Returns how many were dropped.
    pub fn expire(&mut self, spec: &WindowSpec, now_ms: u64) -> usize {
        let before = self.heads.len();
        let mut keep = 0;
        for i in 0..before {
            if !self.view(i).is_expired(spec, now_ms) {
                if keep != i {
                    self.heads[keep] = self.heads[i];
                    self.counts
                        .copy_within(i * self.stride..(i + 1) * self.stride, keep * self.stride);
                }
                keep += 1;
            }
        }
        self.heads.truncate(keep);
        self.counts.truncate(keep * self.stride);
        before - keep
    }

    /// Removes one origin's register (its owner is gone for good).
    pub fn remove(&mut self, origin: O) -> bool {
        match self.find(origin) {
            Ok(i) => {
                self.heads.remove(i);
                self.counts.drain(i * self.stride..(i + 1) * self.stride);
                true
            }
            Err(_) => false,
        }
    }

    /// The newest epoch any register holds.
    pub fn newest_epoch(&self) -> Option<u64> {
        self.heads.iter().map(|h| h.newest_epoch).max()
    }

    /// Bytes this replica holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.heads.capacity() * std::mem::size_of::<Head<O>>()
            + self.counts.capacity() * std::mem::size_of::<u32>()
    }

    /// Releases spare capacity; replicas are cloned on every merge, so spare room is waste.
    pub fn shrink_to_fit(&mut self) {
        self.heads.shrink_to_fit();
        self.counts.shrink_to_fit();
    }
}

impl<O: Copy + Ord> FromIterator<(O, Register)> for Replica<O> {
    /// Builds a replica from registers that must share one stride (the first one's length).
    fn from_iter<I: IntoIterator<Item = (O, Register)>>(iter: I) -> Self {
        let items: Vec<_> = iter.into_iter().collect();
        let stride = items.first().map_or(1, |(_, r)| r.admitted.len().max(1));
        let mut replica = Self::with_stride(stride);
        for (origin, reg) in &items {
            replica.merge_register(*origin, reg.as_ref(), Arbitration::VectorDominance);
        }
        replica
    }
}
