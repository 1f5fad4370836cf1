//! Several limited descriptors in one run: each has its own limit and traffic, is recorded on
//! its own, and each limit holds through a partition, whatever the others do. A descriptor's
//! name is only a label: one named like the main key is still a limit of its own.

use limitmesh_sim::scenario_file;
use limitmesh_sim::{Report, run};

const SEED: u64 = 3;

/// The main limit overloaded 2×; a small limit with one hot node; a burst from idle; and a
/// descriptor named like the main key whose load stays under its limit. Node 3 is cut off
/// from 5 s to 9 s.
const FOUR_LIMITS: &str = r#"
nodes = 4
duration_ms = 14_000
warmup_ms = 3_000

[limit]
requests = 1_000

[[descriptors]]
name = "small"
requests = 40
traffic = { shape = "skewed", overload = 5.0, hot_share = 0.9 }

[[descriptors]]
name = "burst"
requests = 300
window_ms = 2_000
buckets = 20
traffic = { shape = "burst", overload = 3.0, onset_ms = 6_000 }

[[descriptors]]
name = "tenant=42"
requests = 500
traffic = { shape = "uniform", overload = 0.5 }

[[faults]]
kind = "partition"
side = [3]
from_ms = 5_000
until_ms = 9_000
"#;

#[test]
fn each_descriptor_is_limited_on_its_own_through_a_partition() {
    let cfg =
        scenario_file::parse("four.toml", FOUR_LIMITS, SEED).unwrap_or_else(|e| panic!("{e:#}"));
    let out = run(&cfg).expect("the run");
    let r = Report::new(&cfg, &out);
    eprintln!("seed {SEED}: {r:#?}");
    assert_eq!(
        out.faults.partitions, 1,
        "seed {SEED}: the partition happened"
    );
    assert_eq!(r.descriptors.len(), 3);
    for (d, series) in cfg.descriptors.iter().zip(&out.descriptors) {
        let offered: u64 = series.offered_per_ms.iter().map(|c| u64::from(*c)).sum();
        let admitted: u64 = series.admitted_per_ms.iter().map(|c| u64::from(*c)).sum();
        let by_node: u64 = series
            .admitted_by_node
            .iter()
            .flatten()
            .map(|c| u64::from(*c))
            .sum();
        assert_eq!(
            admitted, by_node,
            "seed {SEED} {}: the nodes' admissions add up",
            d.name
        );
        assert!(offered > 0, "seed {SEED} {}: traffic was offered", d.name);
    }
    let [small, burst, under] = &r.descriptors[..] else {
        unreachable!()
    };
    assert_eq!((small.name.as_str(), small.limit), ("small", 40));
    assert_eq!((burst.window_ms, under.limit), (2_000, 500));
    // Overloaded, each holds its own limit, in and out of the partition.
    for d in [small, burst] {
        assert!(d.over_admission_max <= 0.15, "seed {SEED}: {d:?}");
        let ratio = d.partition_max_ratio.expect("windows inside the partition");
        assert!(ratio <= 1.15, "seed {SEED}: {d:?}");
    }
    assert!(small.utilization >= 0.85, "seed {SEED}: {small:?}");
    // Under its limit, beside an overloaded main key: everything offered is admitted.
    assert_eq!(under.over_admission_max, 0.0, "seed {SEED}: {under:?}");
    // (A booting node admits nothing until it has heard from the cluster: from warm-up on.)
    let s = &out.descriptors[2];
    let from = cfg.warmup_ms as usize;
    let offered: u32 = s.offered_per_ms[from..].iter().sum();
    let admitted: u32 = s.admitted_per_ms[from..].iter().sum();
    assert!(
        f64::from(admitted) >= f64::from(offered) * 0.995,
        "seed {SEED}: tenant=42 under its limit admitted {admitted} of {offered}"
    );
    assert!(under.utilization >= 0.99, "seed {SEED}: {under:?}");
    // And the main key holds its own, unchanged by the others.
    assert!(r.over_admission_max <= 0.15, "seed {SEED}: {r:?}");
}

fn refused(text: &str) -> String {
    match scenario_file::parse("mine.toml", text, 1) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn a_bad_descriptor_is_refused_with_its_line_and_field() {
    let e = refused(
        "nodes = 3\n[[descriptors]]\nname = \"a\"\ntraffic = { shape = \"uniform\", overload = 1.0 }\n\
         [[descriptors]]\nname = \"a\"\ntraffic = { shape = \"uniform\", overload = 1.0 }\n",
    );
    assert!(
        e.starts_with("mine.toml:5:") && e.contains("descriptors[1].name"),
        "{e}"
    );
    let e = refused(
        "nodes = 3\n[[descriptors]]\ntraffic = { shape = \"skewed\", overload = 1.0, hot_share = 2.0 }\n",
    );
    assert!(
        e.starts_with("mine.toml:2:") && e.contains("descriptors[0].traffic.hot_share"),
        "{e}"
    );
    let e = refused("nodes = 3\n[[descriptors]]\nname = \"a\"\n");
    assert!(e.contains("traffic"), "{e}");
    let e = refused(
        "nodes = 3\n[[descriptors]]\ndescriptor = [[\"k\", \"v\"]]\n\
         traffic = { shape = \"uniform\", overload = 1.0 }\n",
    );
    assert!(
        e.contains("descriptors[0].descriptor") && e.contains("rules"),
        "{e}"
    );
    let e = refused(
        "nodes = 3\n[[descriptors]]\nrequests = 0\ntraffic = { shape = \"uniform\", overload = 1.0 }\n",
    );
    assert!(e.contains("descriptors[0].requests"), "{e}");
    // Too many, or too much to record.
    let many = "[[descriptors]]\ntraffic = { shape = \"uniform\", overload = 1.0 }\n".repeat(17);
    let e = refused(&format!("nodes = 3\n{many}"));
    assert!(e.contains("descriptors") && e.contains("at most 16"), "{e}");
    let e = refused(
        "nodes = 64\nduration_ms = 600_000\n[[descriptors]]\n\
         traffic = { shape = \"uniform\", overload = 1.0 }\n",
    );
    assert!(e.contains("descriptors × nodes × duration_ms"), "{e}");
    // The same descriptor twice, in [limit] and in [[descriptors]].
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let e = scenario_file::parse_in(
        "mine.toml",
        "nodes = 3\n[limit]\nrules = \"deploy/examples/rules.yaml\"\ndomain = \"api\"\n\
         descriptor = [[\"tenant\", \"acme\"]]\n[[descriptors]]\ndescriptor = [[\"tenant\", \"acme\"]]\n\
         traffic = { shape = \"uniform\", overload = 1.0 }\n",
        1,
        &root,
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("names another descriptor"),
        "{e:#}"
    );
}

#[test]
fn descriptors_take_their_limits_from_the_rules_file() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let c = scenario_file::parse_in(
        "mine.toml",
        "nodes = 3\n[limit]\nrules = \"deploy/examples/rules.yaml\"\ndomain = \"api\"\n\
         descriptor = [[\"tenant\", \"acme\"]]\n\
         [[descriptors]]\ndescriptor = [[\"tenant\", \"42\"]]\n\
         traffic = { shape = \"uniform\", overload = 1.0 }\n\
         [[descriptors]]\nname = \"login\"\n\
         descriptor = [[\"route\", \"/login\"], [\"remote_address\", \"10.0.0.1\"]]\n\
         traffic = { shape = \"uniform\", overload = 1.0 }\n",
        1,
        &root,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(c.main_name.as_deref(), Some("tenant=acme"));
    let got: Vec<(&str, u32, u64, u16)> = c
        .descriptors
        .iter()
        .map(|d| (d.name.as_str(), d.limit, d.window_ms, d.buckets))
        .collect();
    assert_eq!(
        got,
        [("tenant=42", 3_000, 60_000, 60), ("login", 10, 60_000, 10)]
    );
}
