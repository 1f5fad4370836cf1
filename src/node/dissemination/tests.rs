use super::*;
use crate::limiter::{KeyId, RegisterUpdate};

fn batch(origin: u128, keys: std::ops::Range<u128>) -> Batch {
    Batch {
        origin: OriginId(origin),
        updates: keys
            .map(|k| RegisterUpdate {
                key: KeyId(k),
                window_ms: 1_000,
                buckets: 10,
                register: crate::crdt::Register {
                    version: 1,
                    hlc: Default::default(),
                    newest_epoch: 0,
                    demand: 0,
                    admitted: Vec::new(),
                },
            })
            .collect(),
    }
}

#[test]
fn pages_cover_every_register_of_every_origin_in_turn() {
    let all = || vec![batch(1, 0..3), batch(2, 3..5), batch(3, 5..10)];
    let mut cursor = 0;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let page = page_of(all(), 4, &mut cursor);
        assert_eq!(page.iter().map(|b| b.updates.len()).sum::<usize>(), 4);
        for b in page {
            for u in b.updates {
                // Each register stays in its own origin's batch.
                assert_eq!(
                    b.origin,
                    OriginId(match u.key.0 {
                        0..3 => 1,
                        3..5 => 2,
                        _ => 3,
                    })
                );
                seen.push(u.key.0);
            }
        }
    }
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen,
        (0..10).collect::<Vec<_>>(),
        "five pages of four cover ten"
    );
    let mut cursor = 7;
    assert_eq!(page_of(vec![batch(1, 0..3)], 4, &mut cursor).len(), 1);
    assert_eq!(cursor, 7, "a page that holds everything moves nothing");
}
