use limitmesh_sim::run;
use limitmesh_sim::scenario::scenario;
fn main() {
    let cfg = scenario(&std::env::args().nth(1).unwrap_or("partition".into()), 1, 5).unwrap();
    let out = run(&cfg).unwrap();
    for (i, per_ms) in out.admitted_by_node.iter().enumerate() {
        let secs: Vec<u32> = (0..(per_ms.len() / 1000))
            .map(|s| per_ms[s * 1000..(s + 1) * 1000].iter().sum())
            .collect();
        println!("n{i}: {secs:?}");
    }
    println!("{:?}", out.faults);
    let w = 1000usize;
    let tot = &out.admitted_per_ms;
    let mut best = (0usize, 0u32);
    for t in 5000..tot.len() {
        let s: u32 = tot[t + 1 - w..=t].iter().sum();
        if s > best.1 {
            best = (t, s);
        }
    }
    println!("max window ends {} with {}", best.0, best.1);
    for (i, per_ms) in out.admitted_by_node.iter().enumerate() {
        let s: u32 = per_ms[best.0 + 1 - w..=best.0].iter().sum();
        let by100: Vec<u32> = (0..10)
            .map(|k| {
                per_ms[best.0 + 1 - w + k * 100..best.0 + 1 - w + (k + 1) * 100]
                    .iter()
                    .sum()
            })
            .collect();
        println!("  n{i}: {s} {by100:?}");
    }
    println!(
        "convergence {:?} final_live {:?}",
        out.convergence_ms, out.final_live
    );
}
#[allow(dead_code)]
fn unused() {}
