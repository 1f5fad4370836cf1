//! Counters of what crossed the wire, for metrics and for the simulation's gossip-cost figure.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::gossip::wire::{DropReason, Kind};
use crate::limiter::MergeReport;

const KINDS: [Kind; 7] = [
    Kind::Membership,
    Kind::Summary,
    Kind::AntiEntropy,
    Kind::Heartbeat,
    Kind::Aggregate,
    Kind::Exchange,
    Kind::Ledger,
];

fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::Membership => 0,
        Kind::Summary => 1,
        Kind::AntiEntropy => 2,
        Kind::Heartbeat => 3,
        Kind::Aggregate => 4,
        Kind::Exchange => 5,
        Kind::Ledger => 6,
    }
}

#[derive(Debug, Default)]
pub struct WireStats {
    sent_packets: [AtomicU64; KINDS.len()],
    sent_bytes: [AtomicU64; KINDS.len()],
    received_packets: [AtomicU64; KINDS.len()],
    received_bytes: [AtomicU64; KINDS.len()],
    dropped: [AtomicU64; DropReason::ALL.len()],
    /// Registers sent in summary rounds, counted once per peer they were sent to.
    pub summary_register_sends: AtomicU64,
    pub summary_rounds: AtomicU64,
    pub membership_errors: AtomicU64,
    pub send_errors: AtomicU64,
    pub clock_offset_warnings: AtomicU64,
    merges: Mutex<MergeReport>,
    bad_shape_entries: AtomicU64,
    /// Ledger entries dropped, one by one, from datagrams otherwise taken.
    malformed_ledger_entries: AtomicU64,
}

/// A point-in-time copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireSnapshot {
    pub sent_packets: BTreeMap<&'static str, u64>,
    pub sent_bytes: BTreeMap<&'static str, u64>,
    pub received_packets: BTreeMap<&'static str, u64>,
    pub received_bytes: BTreeMap<&'static str, u64>,
    pub dropped: BTreeMap<&'static str, u64>,
    pub summary_register_sends: u64,
    pub summary_rounds: u64,
    pub membership_errors: u64,
    pub send_errors: u64,
    pub clock_offset_warnings: u64,
    pub merges: MergeReport,
    pub bad_shape_entries: u64,
    pub malformed_ledger_entries: u64,
}

impl WireSnapshot {
    /// Summary bytes per register per peer: the gossip cost per active key per round.
    pub fn summary_bytes_per_register(&self) -> Option<f64> {
        let bytes = *self.sent_bytes.get("summary")?;
        (self.summary_register_sends > 0).then(|| bytes as f64 / self.summary_register_sends as f64)
    }

    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }
}

impl WireStats {
    pub fn sent(&self, kind: Kind, bytes: usize) {
        let i = kind_index(kind);
        self.sent_packets[i].fetch_add(1, Ordering::Relaxed);
        self.sent_bytes[i].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn received(&self, kind: Kind, bytes: usize) {
        let i = kind_index(kind);
        self.received_packets[i].fetch_add(1, Ordering::Relaxed);
        self.received_bytes[i].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn dropped(&self, reason: DropReason) {
        if let Some(i) = DropReason::ALL.iter().position(|r| *r == reason) {
            self.dropped[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `n` ledger entries were dropped alone (malformed) from a datagram otherwise taken.
    pub fn ledger_entries_malformed(&self, n: u64) {
        self.malformed_ledger_entries
            .fetch_add(n, Ordering::Relaxed);
    }

    pub fn merged(&self, report: &MergeReport, bad_shape: u64) {
        self.merges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(report);
        self.bad_shape_entries
            .fetch_add(bad_shape, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> WireSnapshot {
        let by_kind = |a: &[AtomicU64; KINDS.len()]| {
            KINDS
                .iter()
                .map(|k| (k.as_str(), a[kind_index(*k)].load(Ordering::Relaxed)))
                .collect()
        };
        WireSnapshot {
            sent_packets: by_kind(&self.sent_packets),
            sent_bytes: by_kind(&self.sent_bytes),
            received_packets: by_kind(&self.received_packets),
            received_bytes: by_kind(&self.received_bytes),
            dropped: DropReason::ALL
                .iter()
                .zip(&self.dropped)
                .map(|(r, c)| (r.as_str(), c.load(Ordering::Relaxed)))
                .collect(),
            summary_register_sends: self.summary_register_sends.load(Ordering::Relaxed),
            summary_rounds: self.summary_rounds.load(Ordering::Relaxed),
            membership_errors: self.membership_errors.load(Ordering::Relaxed),
            send_errors: self.send_errors.load(Ordering::Relaxed),
            clock_offset_warnings: self.clock_offset_warnings.load(Ordering::Relaxed),
            merges: *self.merges.lock().unwrap_or_else(|e| e.into_inner()),
            bad_shape_entries: self.bad_shape_entries.load(Ordering::Relaxed),
            malformed_ledger_entries: self.malformed_ledger_entries.load(Ordering::Relaxed),
        }
    }
}
