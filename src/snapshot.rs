//! The on-disk snapshot of a node's registers (`limiter.state_path`), so that a whole-fleet
//! restart keeps day and month quotas: no peer holds them while every node is down.
//!
//! A graceful stop writes every live register the node holds, its own and its peers' (under
//! their origins), after its last summary round. A start reads the file back through the same
//! path as a peer's registers ([`Limiter::merge`]): registers whose windows have passed, whose
//! clock stamps are in the future, or whose shapes are impossible are dropped and counted,
//! exactly as from the network. The node's own registers come back under its previous origin,
//! which is no longer a member, so the node relays them to every peer that joins it.
//!
//! ```text
//! "LMSTATE" 0x01 | ( u32 LE length | register body )*
//! ```
//!
//! A body is the datagram body format (`gossip::message`), each naming its origin. A length is
//! checked against the bytes that follow before anything is read; a file that does not parse
//! is refused whole with the byte offset at fault.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::gossip::message::{MessageError, decode_batch, encode_batch};
use crate::limiter::{Batch, Limiter, MergeReport, OriginId};

const MAGIC: &[u8; 8] = b"LMSTATE\x01";
/// Largest body written; bodies are read under the message decoder's own limit.
const MAX_BODY: usize = 16 * 1024;

#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a limitmesh state file (bad magic or version)")]
    BadMagic { path: PathBuf },
    #[error("{path}: byte {offset}: {what}")]
    Corrupt {
        path: PathBuf,
        offset: usize,
        what: String,
    },
    #[error("encoding registers: {0}")]
    Encode(#[from] MessageError),
}

/// What loading a snapshot did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoadReport {
    /// Registers read from the file.
    pub read: u64,
    pub merge: MergeReport,
}

/// Moves a snapshot that could not be loaded aside (`<path>.corrupt`), so that the next stop
/// can write a good one and nobody loses the bad one's bytes. Returns where it went.
pub fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".corrupt");
    let aside = PathBuf::from(aside);
    std::fs::rename(path, &aside)?;
    Ok(aside)
}

/// Writes every live register `limiter` holds to `path` (through a temporary file, synced,
/// and a rename, so a crash mid-write leaves the previous snapshot). Returns how many were written.
pub fn save(limiter: &Limiter, path: &Path, now_ms: u64) -> Result<usize, SnapshotError> {
    let mut out = MAGIC.to_vec();
    let mut written = 0;
    let own = limiter.snapshot_local(now_ms);
    for batch in std::iter::once(own).chain(limiter.relay(now_ms, |_| true)) {
        written += batch.updates.len();
        // Sender 0 is nobody: every body names its origin.
        for body in encode_batch(&batch, OriginId(0), MAX_BODY)? {
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&body);
        }
    }
    let io = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        file.write_all(&out).map_err(io)?;
        // On disk before the rename makes it the snapshot: a power cut must not leave an
        // empty or truncated file under the snapshot's name.
        file.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself, on disk.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(written)
}

/// Registers read from a snapshot file and not merged yet: a node reads its file when it
/// starts and merges it once it runs on cluster time, so that what is expired or from the
/// future is judged on the cluster's clock rather than on a wall clock that may be off.
#[derive(Debug, Default)]
pub struct Saved {
    path: PathBuf,
    batches: Vec<Batch>,
}

impl Saved {
    /// How many registers the file held.
    pub fn registers(&self) -> u64 {
        self.batches.iter().map(|b| b.updates.len() as u64).sum()
    }

    /// Merges the registers into `limiter` through the same checks as a peer's.
    pub fn merge_into(&self, limiter: &Limiter, now_ms: u64) -> LoadReport {
        let mut report = LoadReport {
            read: self.registers(),
            ..LoadReport::default()
        };
        for batch in &self.batches {
            report.merge.add(&limiter.merge(batch, now_ms));
        }
        report
    }

    /// [`Saved::merge_into`], logging what came of it.
    pub fn restore(&self, limiter: &Limiter, now_ms: u64) {
        let report = self.merge_into(limiter, now_ms);
        tracing::info!(
            path = %self.path.display(),
            read = report.read,
            kept = report.merge.changed(),
            expired = report.merge.expired,
            "loaded the registers saved at the last stop"
        );
    }
}

/// Reads the saved registers, logging what is wrong. A file that cannot be read is set aside
/// (`<path>.corrupt`) and the node starts without it: a node that cannot start is worse than
/// one whose peers' state arrives before it serves (warm-up).
pub fn read_or_set_aside(path: &Path) -> Saved {
    read(path).unwrap_or_else(|e| {
        let aside = set_aside(path);
        tracing::error!(
            error = %e,
            moved_to = ?aside.as_ref().map(|p| p.display().to_string()),
            "cannot load the saved registers; starting without them"
        );
        Saved {
            path: path.to_owned(),
            batches: Vec::new(),
        }
    })
}

/// Merges the registers saved in `path` into `limiter`: [`read`], then [`Saved::merge_into`].
#[cfg(test)]
fn load(limiter: &Limiter, path: &Path, now_ms: u64) -> Result<LoadReport, SnapshotError> {
    Ok(read(path)?.merge_into(limiter, now_ms))
}

/// Reads the registers saved in `path`. A missing file is an empty snapshot (the first start);
/// anything else that is wrong with it is an error naming it, and nothing is read.
pub fn read(path: &Path) -> Result<Saved, SnapshotError> {
    let empty = || Saved {
        path: path.to_owned(),
        batches: Vec::new(),
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(empty()),
        Err(source) => {
            return Err(SnapshotError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let corrupt = |offset: usize, what: String| SnapshotError::Corrupt {
        path: path.to_owned(),
        offset,
        what,
    };
    let Some(mut rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return Err(SnapshotError::BadMagic {
            path: path.to_owned(),
        });
    };
    let mut saved = empty();
    while !rest.is_empty() {
        let offset = bytes.len() - rest.len();
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(corrupt(offset, "truncated length".to_owned()));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > tail.len() {
            return Err(corrupt(
                offset,
                format!("a body of {len} bytes is announced; {} remain", tail.len()),
            ));
        }
        let (body, tail) = tail.split_at(len);
        let (batch, _rejects) =
            decode_batch(body, OriginId(0)).map_err(|e| corrupt(offset + 4, e.to_string()))?;
        saved.batches.push(batch);
        rest = tail;
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{CheckItem, CheckRequest, KeyHasher, Limit, LimiterConfig};
    use crate::window::WindowSpec;

    const T0: u64 = 1_700_000_000_000;

    fn limiter(origin: u128) -> Limiter {
        Limiter::new(
            LimiterConfig::default(),
            OriginId(origin),
            KeyHasher::from_secret(b"snapshot"),
        )
    }

    fn day(limit: u32) -> Limit {
        Limit {
            max: limit,
            window: WindowSpec::with_default_buckets(86_400_000).unwrap(),
        }
    }

    fn admitted(l: &Limiter, n: usize, now: u64) -> usize {
        let item = [CheckItem {
            key: b"tenant",
            limit: day(10),
            cost: 1,
        }];
        let req = CheckRequest {
            items: &item,
            dry_run: false,
        };
        (0..n)
            .filter(|_| l.check(&req, now).unwrap().allowed)
            .count()
    }

    /// A path in a directory removed when the test ends (the guard).
    fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        (dir, path)
    }

    #[test]
    fn a_restarted_node_keeps_what_it_and_its_peers_admitted() {
        let (a, peer) = (limiter(1), limiter(2));
        assert_eq!(admitted(&a, 6, T0), 6);
        assert_eq!(admitted(&peer, 3, T0), 3);
        a.merge(&peer.collect_changed(T0).unwrap(), T0);
        let (_dir, path) = scratch("keeps");
        assert_eq!(save(&a, &path, T0 + 1).unwrap(), 2);

        // A new process: a new origin, nothing in memory.
        let restarted = limiter(3);
        let report = load(&restarted, &path, T0 + 60_000).unwrap();
        assert_eq!(report.read, 2);
        assert_eq!(report.merge.inserted, 2);
        assert_eq!(admitted(&restarted, 5, T0 + 60_000), 1, "9 of 10 were used");
        // The old origin's registers are relayed to peers that join.
        assert_eq!(restarted.relay(T0 + 60_000, |o| o == OriginId(1)).len(), 1);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn registers_whose_windows_have_passed_are_not_loaded() {
        let a = limiter(1);
        admitted(&a, 4, T0);
        let (_dir, path) = scratch("expired");
        save(&a, &path, T0).unwrap();
        let restarted = limiter(3);
        let report = load(&restarted, &path, T0 + 2 * 86_400_000).unwrap();
        assert_eq!(report.read, 1);
        assert_eq!(report.merge.expired, 1);
        assert_eq!(admitted(&restarted, 20, T0 + 2 * 86_400_000), 10);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_missing_file_is_empty_and_a_bad_one_is_refused_whole() {
        let l = limiter(1);
        assert_eq!(
            load(&l, &scratch("missing-never-written").1, T0).unwrap(),
            LoadReport::default()
        );
        let (_dir, path) = scratch("bad");
        std::fs::write(&path, b"not a state file").unwrap();
        assert!(matches!(
            load(&l, &path, T0),
            Err(SnapshotError::BadMagic { .. })
        ));
        // A length that claims more than the file holds: refused, nothing allocated for it.
        let mut lying = MAGIC.to_vec();
        lying.extend_from_slice(&u32::MAX.to_le_bytes());
        lying.extend_from_slice(b"xyz");
        std::fs::write(&path, &lying).unwrap();
        let err = load(&l, &path, T0).unwrap_err().to_string();
        assert!(err.contains("byte 8") && err.contains("announced"), "{err}");
        // A good body followed by garbage: nothing is merged.
        let a = limiter(2);
        admitted(&a, 3, T0);
        save(&a, &path, T0).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&5u32.to_le_bytes());
        bytes.extend_from_slice(b"\xFF\xFF\xFF\xFF\xFF");
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            load(&l, &path, T0),
            Err(SnapshotError::Corrupt { .. })
        ));
        assert_eq!(l.stats().keys, 0, "a corrupt file changes nothing");
        let _ = std::fs::remove_file(&path);
    }
}
