//! The on-disk snapshot of a node's registers (`limiter.state_path`), so that a whole-fleet
//! restart keeps day and month quotas: no peer holds them while every node is down.
//!
//! The node writes every live register it holds, its own and its peers' (under their
//! origins), periodically while it serves and once more after its last summary round. A start
//! reads the file back through the same path as a peer's registers ([`Limiter::merge`]):
//! registers whose windows have passed, whose clock stamps are in the future, or whose shapes
//! are impossible are dropped and counted, exactly as from the network. The node's own
//! registers come back under its previous origin, which is no longer a member, so the node
//! relays them to every peer that joins it.
//!
//! ```text
//! "LMSTATE" 0x03 | 16-byte naming fingerprint
//!     | ( u32 LE length | 8-byte blake3 of the body | register body )*
//! ```
//!
//! Registers name their windows by ids under the naming secret. The fingerprint (the id of a
//! key no request can name) tells whether a file was written under the secret the node has:
//! one written under another (`cluster.naming_key`, or `cluster.cluster_id` when it is not set,
//! changed since) names windows no request reaches, and would hold them, undroppable because
//! they hold quota, in every member's key table until they expire; it is set aside instead.
//!
//! A body is the datagram body format (`gossip::message`), each naming its origin, and each
//! record stands on its own: a record whose checksum or body is wrong is skipped (a bit flip
//! must not turn a count into a smaller one), and a file cut short (a crash mid-write of an
//! older build, a full disk) keeps every record before the cut. A length is checked against
//! the bytes that follow before anything is read. Files of the earlier formats (`0x02`, no
//! fingerprint; `0x01`, no checksums either) are still read.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::gossip::message::{MessageError, decode_batch, encode_batch};
use crate::limiter::{Batch, Limiter, MergeReport, OriginId};
use crate::window::WindowSpec;

const MAGIC_V1: &[u8; 8] = b"LMSTATE\x01";
const MAGIC_V2: &[u8; 8] = b"LMSTATE\x02";
const MAGIC: &[u8; 8] = b"LMSTATE\x03";
/// Bytes of the naming fingerprint.
const FINGERPRINT: usize = 16;
/// The key whose window id is the fingerprint: a request's keys start with a form byte of 1
/// to 4 (`rules::key`), so none is this.
const FINGERPRINT_KEY: &[u8] = b"\0limitmesh snapshot naming fingerprint";
/// Bytes of a record's checksum.
const CHECKSUM: usize = 8;
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
    #[error(
        "{path}: written under another naming secret (cluster.naming_key, or cluster.cluster_id \
         when it is not set, changed since): its registers name windows no request reaches"
    )]
    OtherNaming { path: PathBuf },
    #[error("{path}: {what}")]
    NotWritable { path: PathBuf, what: String },
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

/// What was wrong with a snapshot that was read all the same.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Records skipped: a checksum that does not match, or a body that does not decode.
    pub skipped: u64,
    /// Where the file was cut short, if it was: the records from there on are lost.
    pub torn_at: Option<usize>,
    /// The first problem found, for the log.
    pub first: Option<String>,
}

impl Damage {
    fn note(&mut self, offset: usize, what: impl std::fmt::Display) {
        if self.first.is_none() {
            self.first = Some(format!("byte {offset}: {what}"));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.skipped == 0 && self.torn_at.is_none()
    }
}

/// Moves a snapshot that could not be loaded aside (`<path>.corrupt`), so that the next stop
/// can write a good one and nobody loses the bad one's bytes. Returns where it went.
pub fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let aside = with_suffix(path, ".corrupt");
    std::fs::rename(path, &aside)?;
    Ok(aside)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The fingerprint of the naming secret `limiter` names windows under.
fn naming_fingerprint(limiter: &Limiter) -> [u8; FINGERPRINT] {
    let spec = WindowSpec::with_default_buckets(1_000).expect("a second's window is valid");
    limiter.key_id(FINGERPRINT_KEY, &spec).0.to_le_bytes()
}

fn checksum(body: &[u8]) -> [u8; CHECKSUM] {
    let hash = blake3::hash(body);
    let mut out = [0; CHECKSUM];
    out.copy_from_slice(&hash.as_bytes()[..CHECKSUM]);
    out
}

/// Checks, before a node starts, that it will be able to save to `path`: its directory exists
/// and a file can be written beside it (the temporary file [`save`] writes first). A node that
/// found out only at its first save would lose what it admitted at the next restart.
pub fn check_writable(path: &Path) -> Result<(), SnapshotError> {
    let not_writable = |what: String| SnapshotError::NotWritable {
        path: path.to_owned(),
        what,
    };
    if path.is_dir() {
        return Err(not_writable("is a directory; name a file in it".to_owned()));
    }
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir,
        None => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(not_writable(format!(
            "the directory {} does not exist",
            dir.display()
        )));
    }
    let probe = with_suffix(path, ".tmp");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| not_writable(format!("cannot write {}: {e}", probe.display())))
}

/// Writes every live register `limiter` holds to `path` (through a temporary file, synced,
/// and a rename, so a crash mid-write leaves the previous snapshot). Returns how many were
/// written. Saving publishes nothing: it can run while the node serves.
pub fn save(limiter: &Limiter, path: &Path, now_ms: u64) -> Result<usize, SnapshotError> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&naming_fingerprint(limiter));
    let mut written = 0;
    let own = limiter.saved_registers(now_ms);
    for batch in std::iter::once(own).chain(limiter.relay(now_ms, |_| true)) {
        written += batch.updates.len();
        // Sender 0 is nobody: every body names its origin.
        for body in encode_batch(&batch, OriginId(0), MAX_BODY)? {
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&checksum(&body));
            out.extend_from_slice(&body);
        }
    }
    let io = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = with_suffix(path, ".tmp");
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

/// Registers read from a snapshot file: merged when the node is built, and merged again
/// once it runs on cluster time, so that what a clock that was behind refused as stamped in
/// the future is judged again on the cluster's clock.
#[derive(Debug, Default)]
pub struct Saved {
    path: PathBuf,
    /// The fingerprint of the naming secret it was written under (files of earlier formats
    /// carry none).
    naming: Option<[u8; FINGERPRINT]>,
    batches: Vec<Batch>,
    damage: Damage,
}

impl Saved {
    /// How many registers the file held.
    pub fn registers(&self) -> u64 {
        self.batches.iter().map(|b| b.updates.len() as u64).sum()
    }

    /// What was wrong with the file.
    pub fn damage(&self) -> &Damage {
        &self.damage
    }

    /// Whether the registers name windows as `limiter` does: written under its naming secret,
    /// or in a format that does not say.
    pub fn names_as(&self, limiter: &Limiter) -> bool {
        self.naming
            .is_none_or(|naming| naming == naming_fingerprint(limiter))
    }

    /// Merges the registers into `limiter` through the same checks as a peer's; none if they
    /// were written under another naming secret ([`Saved::names_as`]).
    pub fn merge_into(&self, limiter: &Limiter, now_ms: u64) -> LoadReport {
        let mut report = LoadReport {
            read: self.registers(),
            ..LoadReport::default()
        };
        if !self.names_as(limiter) {
            return report;
        }
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

    /// The second merge, on cluster time: logged only if it kept something the first did not.
    pub fn restore_again(&self, limiter: &Limiter, now_ms: u64) {
        let report = self.merge_into(limiter, now_ms);
        if report.merge.changed() > 0 {
            tracing::info!(
                path = %self.path.display(),
                kept = report.merge.changed(),
                "merged saved registers that the clock at start refused"
            );
        }
    }
}

/// Reads the saved registers for `limiter`, logging what is wrong. A file that cannot be read
/// at all, or that was written under another naming secret, is set aside (`<path>.corrupt`)
/// and the node starts without it: a node that cannot start is worse than one whose peers'
/// state arrives before it serves (warm-up). A damaged file keeps its good records, and a copy
/// is set aside for a person to look at.
pub fn read_or_set_aside(path: &Path, limiter: &Limiter) -> Saved {
    let read = read(path).and_then(|saved| {
        if saved.names_as(limiter) {
            Ok(saved)
        } else {
            Err(SnapshotError::OtherNaming {
                path: path.to_owned(),
            })
        }
    });
    match read {
        Ok(saved) => {
            if !saved.damage.is_empty() {
                let copy = with_suffix(path, ".corrupt");
                let copied = std::fs::copy(path, &copy).is_ok();
                tracing::error!(
                    path = %path.display(),
                    skipped = saved.damage.skipped,
                    torn_at = ?saved.damage.torn_at,
                    first = saved.damage.first.as_deref().unwrap_or(""),
                    kept = saved.registers(),
                    copy = ?copied.then(|| copy.display().to_string()),
                    "the saved registers are damaged; loading the records that are whole"
                );
            }
            saved
        }
        Err(e) => {
            let aside = set_aside(path);
            tracing::error!(
                error = %e,
                moved_to = ?aside.as_ref().map(|p| p.display().to_string()),
                "cannot load the saved registers; starting without them"
            );
            Saved {
                path: path.to_owned(),
                ..Saved::default()
            }
        }
    }
}

/// Merges the registers saved in `path` into `limiter`: [`read`], then [`Saved::merge_into`].
#[cfg(test)]
fn load(limiter: &Limiter, path: &Path, now_ms: u64) -> Result<LoadReport, SnapshotError> {
    Ok(read(path)?.merge_into(limiter, now_ms))
}

/// Reads the registers saved in `path`. A missing file is an empty snapshot (the first start);
/// a file that is not a snapshot at all is an error naming it; a damaged one is read as far as
/// its records are whole ([`Saved::damage`] says what was lost).
pub fn read(path: &Path) -> Result<Saved, SnapshotError> {
    let mut saved = Saved {
        path: path.to_owned(),
        ..Saved::default()
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(saved),
        Err(source) => {
            return Err(SnapshotError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let (mut rest, checked) = if let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) {
        let Some((naming, rest)) = rest.split_first_chunk::<FINGERPRINT>() else {
            return Err(SnapshotError::BadMagic {
                path: path.to_owned(),
            });
        };
        saved.naming = Some(*naming);
        (rest, true)
    } else if let Some(rest) = bytes.strip_prefix(MAGIC_V2.as_slice()) {
        (rest, true)
    } else if let Some(rest) = bytes.strip_prefix(MAGIC_V1.as_slice()) {
        (rest, false)
    } else {
        return Err(SnapshotError::BadMagic {
            path: path.to_owned(),
        });
    };
    let head = 4 + if checked { CHECKSUM } else { 0 };
    while !rest.is_empty() {
        let offset = bytes.len() - rest.len();
        let damage = &mut saved.damage;
        if rest.len() < head {
            damage.torn_at = Some(offset);
            damage.note(offset, "the file ends inside a record's header");
            break;
        }
        let (header, tail) = rest.split_at(head);
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        if len > tail.len() {
            // Past the end: the file was cut here (a length is never trusted further).
            damage.torn_at = Some(offset);
            damage.note(
                offset,
                format!("a body of {len} bytes is announced; {} remain", tail.len()),
            );
            break;
        }
        let (body, tail) = tail.split_at(len);
        rest = tail;
        if checked && header[4..] != checksum(body) {
            damage.skipped += 1;
            damage.note(offset, "the checksum does not match the body");
            continue;
        }
        match decode_batch(body, OriginId(0)) {
            Ok((batch, _rejects)) => saved.batches.push(batch),
            Err(e) => {
                damage.skipped += 1;
                damage.note(offset + head, e);
            }
        }
    }
    Ok(saved)
}

#[cfg(test)]
mod tests;
