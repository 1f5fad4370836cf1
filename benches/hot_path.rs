//! Hot-path and merge benchmarks. Every figure that matters is a ratio to a baseline measured in
//! the same run: governor's keyed limiter for the check, on the same keys, each including the
//! clock read.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use limitmesh::clock::{Clock, SystemClock};
use limitmesh::crdt::HlcTimestamp;
use limitmesh::crdt::{Arbitration, Register, Replica};
use limitmesh::limiter::{CheckItem, CheckRequest, Limiter};
use limitmesh::window::WindowSpec;

mod common;

use common::{access_order, keys, ledger_limiter, limiter, open_limit};

fn hot_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));

    let limit = [open_limit()];
    let clock = SystemClock::system();
    let limiter = limiter();
    let quota = Quota::per_second(NonZeroU32::new(u32::MAX).unwrap());
    let governor = RateLimiter::keyed(quota);
    let keys = keys();
    let order = access_order(1 << 16);

    let hot = keys[0].as_bytes();
    // One check of `key` by `limiter`, with its clock read.
    let check = |limiter: &Limiter, key: &[u8]| {
        let item = [CheckItem {
            key,
            limit: limit[0],
            cost: 1,
        }];
        let req = CheckRequest {
            items: &item,
            dry_run: false,
        };
        limiter.check(&req, clock.now_ms()).unwrap().allowed
    };
    assert!(check(&limiter, hot), "the check is admitted");
    group.bench_function("limitmesh/hot_key", |b| {
        b.iter(|| check(&limiter, black_box(hot)))
    });
    // The emission queue would otherwise hold every key the run touched.
    limiter.collect_changed(clock.now_ms());
    // Under the ledger: the check spends a token the node holds.
    let ledger = ledger_limiter(&keys[..1], clock.now_ms());
    assert!(check(&ledger, hot), "the ledger's check is admitted");
    group.bench_function("limitmesh_ledger/hot_key", |b| {
        b.iter(|| check(&ledger, black_box(hot)))
    });
    ledger.collect_changed(clock.now_ms());
    group.bench_function("governor/hot_key", |b| {
        b.iter(|| governor.check_key(black_box(&keys[0])).is_ok())
    });

    let mut i = 0usize;
    group.bench_function("limitmesh/keys_10k", |b| {
        b.iter(|| {
            i = (i + 1) & (order.len() - 1);
            check(&limiter, keys[order[i]].as_bytes())
        })
    });
    limiter.collect_changed(clock.now_ms());
    let mut j = 0usize;
    group.bench_function("governor/keys_10k", |b| {
        b.iter(|| {
            j = (j + 1) & (order.len() - 1);
            governor.check_key(&keys[order[j]]).is_ok()
        })
    });
    group.finish();
}

fn register(version: u64, base_epoch: u64) -> Register {
    Register {
        version,
        hlc: HlcTimestamp::new(base_epoch * 100, 0),
        newest_epoch: base_epoch,
        demand: 400,
        admitted: (0..11).map(|i| 20 + i).collect(),
    }
}

fn merge(c: &mut Criterion) {
    let mut group = c.benchmark_group("merge");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    let spec = WindowSpec::with_default_buckets(1_000).unwrap();
    let mut held = Replica::new(&spec);
    for origin in 0..5 {
        held.merge_register(
            origin,
            register(1, 17_000_000_000).as_ref(),
            Arbitration::VectorDominance,
        );
    }
    let summary: Vec<(u32, Register)> = (0..5).map(|o| (o, register(2, 17_000_000_001))).collect();
    // What the merge path does per window: copy the replica, merge the summary, publish.
    group.bench_function("replica_5_origins", |b| {
        b.iter_batched(
            || held.clone(),
            |mut replica| {
                for (origin, reg) in &summary {
                    replica.merge_register(*origin, reg.as_ref(), Arbitration::VectorDominance);
                }
                replica
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("dominated_5_origins", |b| {
        b.iter(|| {
            held.dominates(
                summary.iter().map(|(o, r)| (*o, r.version - 1, r.hlc)),
                Arbitration::VectorDominance,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, hot_path, merge);
criterion_main!(benches);
