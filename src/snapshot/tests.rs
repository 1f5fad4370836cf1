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
fn a_missing_file_is_empty_and_a_file_of_something_else_is_refused() {
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
    assert_eq!(
        l.stats().keys,
        0,
        "a file of something else changes nothing"
    );
}

/// A snapshot of `tenants` windows of node 1 (one record each: every window is its own
/// batch of one origin) and the offsets at which its records start.
fn saved_with_records(path: &Path, tenants: usize) -> Vec<usize> {
    let a = limiter(1);
    let day = day(10);
    for t in 0..tenants {
        let key = format!("tenant-{t}");
        let item = [CheckItem {
            key: key.as_bytes(),
            limit: day,
            cost: 1,
        }];
        let req = CheckRequest {
            items: &item,
            dry_run: false,
        };
        for _ in 0..=t {
            assert!(a.check(&req, T0).unwrap().allowed);
        }
    }
    // One record per body: a body holds as many registers as fit, so save them one by one.
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&naming_fingerprint(&a));
    let mut starts = Vec::new();
    for update in a.saved_registers(T0).updates {
        let batch = Batch {
            origin: OriginId(1),
            updates: vec![update],
        };
        for body in encode_batch(&batch, OriginId(0), MAX_BODY).unwrap() {
            starts.push(out.len());
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&checksum(&body));
            out.extend_from_slice(&body);
        }
    }
    std::fs::write(path, &out).unwrap();
    starts
}

#[test]
fn a_file_cut_short_keeps_every_record_before_the_cut() {
    let (_dir, path) = scratch("torn");
    let starts = saved_with_records(&path, 3);
    assert_eq!(starts.len(), 3);
    let whole = std::fs::read(&path).unwrap();
    // Cut inside the last record's body, then inside its header.
    for cut in [whole.len() - 3, starts[2] + 2] {
        std::fs::write(&path, &whole[..cut]).unwrap();
        let saved = read(&path).unwrap();
        assert_eq!(saved.registers(), 2, "cut at {cut}");
        assert_eq!(saved.damage().torn_at, Some(starts[2]), "cut at {cut}");
        assert_eq!(saved.damage().skipped, 0);
        let l = limiter(3);
        assert_eq!(saved.merge_into(&l, T0 + 1).merge.inserted, 2);
    }
}

#[test]
fn a_flipped_bit_loses_its_record_and_no_other() {
    let (_dir, path) = scratch("flipped");
    let starts = saved_with_records(&path, 3);
    let mut bytes = std::fs::read(&path).unwrap();
    // A bit of the middle record's body: it could decode as a register with a smaller
    // count, handing quota out again; the checksum refuses it.
    let in_body = starts[1] + 4 + CHECKSUM + 3;
    bytes[in_body] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let saved = read(&path).unwrap();
    assert_eq!(saved.registers(), 2);
    assert_eq!(saved.damage().skipped, 1);
    assert_eq!(saved.damage().torn_at, None);
    assert!(
        saved
            .damage()
            .first
            .as_deref()
            .unwrap()
            .contains("checksum"),
        "{:?}",
        saved.damage()
    );
}

#[test]
fn files_of_the_first_format_are_still_read() {
    let a = limiter(2);
    admitted(&a, 3, T0);
    let mut v1 = MAGIC_V1.to_vec();
    for body in encode_batch(&a.saved_registers(T0), OriginId(0), MAX_BODY).unwrap() {
        v1.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v1.extend_from_slice(&body);
    }
    let (_dir, path) = scratch("v1");
    std::fs::write(&path, &v1).unwrap();
    let restarted = limiter(3);
    assert_eq!(load(&restarted, &path, T0 + 1).unwrap().merge.inserted, 1);
    assert_eq!(admitted(&restarted, 10, T0 + 1), 7, "3 of 10 were used");
    // A length that claims more than the file holds: the tail is lost, nothing is
    // allocated for it.
    v1.extend_from_slice(&u32::MAX.to_le_bytes());
    v1.extend_from_slice(b"xyz");
    std::fs::write(&path, &v1).unwrap();
    let saved = read(&path).unwrap();
    assert_eq!(saved.registers(), 1);
    let torn = saved.damage().first.clone().unwrap();
    assert!(torn.contains("announced"), "{torn}");
}

/// A file written under another naming secret names windows no request reaches: nothing
/// of it is merged (it would hold them, undroppable, in every member's table until they
/// expire), and a node sets it aside for a person to look at.
#[test]
fn a_file_written_under_another_naming_secret_is_not_merged_and_is_set_aside() {
    let a = limiter(1);
    admitted(&a, 4, T0);
    let (_dir, path) = scratch("other-naming");
    save(&a, &path, T0).unwrap();
    let renamed = Limiter::new(
        LimiterConfig::default(),
        OriginId(3),
        KeyHasher::from_secret(b"another naming secret"),
    );
    let report = read(&path).unwrap().merge_into(&renamed, T0 + 1);
    assert_eq!((report.read, report.merge.inserted), (1, 0));
    assert_eq!(renamed.stats().keys, 0);
    assert_eq!(read_or_set_aside(&path, &renamed).registers(), 0);
    let aside = with_suffix(&path, ".corrupt");
    assert!(!path.exists() && aside.exists(), "set aside");
    // Under its own secret, the same file loads.
    std::fs::rename(&aside, &path).unwrap();
    let same = limiter(3);
    let saved = read_or_set_aside(&path, &same);
    assert_eq!(saved.merge_into(&same, T0 + 1).merge.inserted, 1);
    assert_eq!(admitted(&same, 10, T0 + 1), 6, "4 of 10 were used");
}

#[test]
fn files_of_the_second_format_are_still_read() {
    let (_dir, path) = scratch("v2");
    saved_with_records(&path, 2);
    let v3 = std::fs::read(&path).unwrap();
    let mut v2 = MAGIC_V2.to_vec();
    v2.extend_from_slice(&v3[MAGIC.len() + FINGERPRINT..]);
    std::fs::write(&path, &v2).unwrap();
    let saved = read(&path).unwrap();
    assert_eq!((saved.registers(), saved.damage().is_empty()), (2, true));
    assert_eq!(saved.merge_into(&limiter(3), T0 + 1).merge.inserted, 2);
    // A file of this format cut inside its fingerprint is no snapshot.
    std::fs::write(&path, &v3[..MAGIC.len() + 3]).unwrap();
    assert!(matches!(read(&path), Err(SnapshotError::BadMagic { .. })));
}

#[test]
fn a_path_that_cannot_be_written_is_refused_before_the_node_starts() {
    let dir = tempfile::tempdir().unwrap();
    let ok = dir.path().join("state");
    check_writable(&ok).unwrap();
    assert!(
        !ok.exists() && !with_suffix(&ok, ".tmp").exists(),
        "the probe is gone"
    );
    let missing = dir.path().join("no-such-dir").join("state");
    let err = check_writable(&missing).unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
    let err = check_writable(dir.path()).unwrap_err().to_string();
    assert!(err.contains("is a directory"), "{err}");
    // A parent that is a file cannot hold the snapshot (nor can anything under it).
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let err = check_writable(&file.join("state")).unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
}
