//! A window's owner leaving gracefully under the ledger, between real node cores.

use super::*;
use crate::limiter::{PartitionPolicy, Policy};

const LIMIT: u32 = 100;

fn second() -> Limit {
    Limit {
        max: LIMIT,
        window: WindowSpec::with_default_buckets(1_000).unwrap(),
    }
}

/// Four ledger nodes; three offer a window six times its limit while the fourth, its owner,
/// leaves gracefully. The leaver hands the window to its next owner, which leases it at once:
/// in the second after the leaver's leases ended the others admit nearly the whole limit (a
/// new owner's quiet period, the longest lease plus two rounds, would leave them nothing
/// then), and no window holds more than the limit.
#[test]
fn an_owner_that_leaves_hands_its_windows_to_the_next_and_the_limit_stays_whole() {
    let mut net = Net::new();
    net.limiter.policy = Policy::Ledger(PartitionPolicy::Strict);
    for i in 0..4 {
        let seeds: Vec<usize> = if i == 0 { vec![] } else { vec![0] };
        let mut p = net.params(i, i as u128 + 1, &seeds);
        p.dissemination = Dissemination::Owners;
        net.boot_with(p);
    }
    net.run_ms(5_000);
    assert_eq!(net.members(0), 3, "formed");
    let spec = second().window;
    let key = (0..1_000)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| {
            let id = net.node(0).limiter().key_id(k, &spec);
            (0..3).all(|i| {
                net.node(i)
                    .limiter()
                    .owner_of(id)
                    .is_some_and(|o| o.owner == 4)
            })
        })
        .expect("node 3 owns some key");
    let item = [CheckItem {
        key: &key,
        limit: second(),
        cost: 1,
    }];
    let req = CheckRequest {
        items: &item,
        dry_run: false,
    };
    let mut admitted: Vec<u64> = Vec::new();
    let left_at = net.now(0).cluster_ms + 4_000;
    let mut left = false;
    for _ in 0..8_000 {
        let now_ms = net.now(0).cluster_ms;
        if !left && now_ms >= left_at {
            let now = net.now(3);
            net.nodes[3].as_mut().unwrap().leave(now);
            net.deliver();
            net.nodes[3] = None;
            left = true;
        }
        if now_ms.is_multiple_of(5) {
            // A request that finds no token asks the window's owner (the network is
            // instant here) and is decided again, as the gRPC service's wait does.
            for i in 0..3 {
                let at = net.now(i).cluster_ms;
                let d = net.node(i).limiter().check(&req, at).unwrap();
                let allowed = d.allowed || {
                    let Some(need) = d.needs.first().filter(|n| n.ask).copied() else {
                        continue;
                    };
                    let now = net.now(i);
                    net.nodes[i]
                        .as_mut()
                        .unwrap()
                        .on_command(now, Command::Ask(need));
                    net.deliver();
                    net.node(i).limiter().check_again(&req, at).unwrap().allowed
                };
                if allowed {
                    admitted.push(at);
                }
            }
        }
        net.run_ms(1);
    }
    assert_eq!(net.members(0), 2, "the owner left");
    let id = net.node(0).limiter().key_id(&key, &spec);
    let next = net.node(0).limiter().owner_of(id).expect("an owner");
    assert_ne!(next.owner, 4, "the window has a new owner");
    let within = |from: u64| {
        admitted
            .iter()
            .filter(|t| (from..from + 1_000).contains(*t))
            .count()
    };
    let (before, after) = (within(left_at - 1_000), within(left_at + 500));
    admitted.sort_unstable();
    let mut busiest = 0;
    let mut j = 0;
    for i in 0..admitted.len() {
        while admitted[i] - admitted[j] >= 1_000 {
            j += 1;
        }
        busiest = busiest.max(i + 1 - j);
    }
    println!("{before} a second before the leave, {after} from 500 ms after; busiest {busiest}");
    assert!(busiest <= LIMIT as usize, "{busiest} in one window");
    assert!(before >= 90, "only {before} a second before the leave");
    assert!(
        after as f64 >= 0.9 * before as f64,
        "{after} admitted in the second from 500 ms after the leave, {before} before"
    );
}
