//! Scenario files: every built-in scenario is a file in `sim/scenarios/` that describes the
//! very same run, `limitmesh-sim run FILE` prints what the named scenario prints, and a bad
//! file is refused with its file, line and field.

use std::path::PathBuf;
use std::process::Command;

use limitmesh_sim::scenario::{SCENARIOS, scenario};
use limitmesh_sim::scenario_file;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

#[test]
fn every_built_in_scenario_is_a_file_of_the_same_run() {
    for name in SCENARIOS {
        let path = dir().join(format!("{name}.toml"));
        let from_file = scenario_file::load(&path, 7).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let built_in = scenario(name, 7, 5).expect("a built-in scenario");
        assert_eq!(
            format!("{from_file:?}"),
            format!("{built_in:?}"),
            "{name}: the file and the built-in differ"
        );
    }
    // The fleet simulator's files are in a folder of their own.
    let files = std::fs::read_dir(dir())
        .expect("sim/scenarios")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "toml"))
        })
        .count();
    assert_eq!(
        files,
        SCENARIOS.len(),
        "a file for each scenario, and no other"
    );
}

#[test]
fn run_file_prints_what_the_named_scenario_prints() {
    let sim = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_limitmesh-sim"))
            .args(args)
            .output()
            .expect("the simulator runs");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let file = dir().join("partition.toml");
    let by_file = sim(&["run", file.to_str().unwrap(), "--seed", "1", "--json"]);
    let by_name = sim(&["partition", "--seed", "1", "--json"]);
    assert_eq!(by_file, by_name, "seed 1");
    assert_eq!(
        by_file.lines().count(),
        3,
        "share, ledger and naive: {by_file}"
    );
}

fn refused(text: &str) -> String {
    match scenario_file::parse("mine.toml", text, 1) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn a_bad_file_is_refused_with_its_file_line_and_field() {
    // An unknown field, on line 3.
    let e = refused("nodes = 4\n[limit]\nrequestz = 5\n");
    assert!(
        e.starts_with("mine.toml:3:") && e.contains("requestz"),
        "{e}"
    );
    // A node that is not there, in the fault on line 4.
    let e = refused("nodes = 4\n\n[[faults]]\nkind = \"crash\"\nnode = 4\nat_ms = 1000\n");
    assert!(
        e.starts_with("mine.toml:3:") || e.starts_with("mine.toml:4:"),
        "{e}"
    );
    assert!(e.contains("faults.node") && e.contains("node 4"), "{e}");
    // A kind of fault there is not.
    let e = refused("nodes = 4\n[[faults]]\nkind = \"meteor\"\n");
    assert!(e.starts_with("mine.toml:") && e.contains("meteor"), "{e}");
    // Not TOML.
    let e = refused("nodes = [\n");
    assert!(e.starts_with("mine.toml:"), "{e}");
    // Values out of range, each naming its field.
    for (text, field) in [
        ("nodes = 1\n", "nodes"),
        (
            "nodes = 3\n[network]\nlatency_ms = [20, 1]\n",
            "network.latency_ms",
        ),
        (
            "nodes = 3\n[network]\nlatency_ms = [1, 18446744073709551615]\n",
            "network.latency_ms",
        ),
        (
            "nodes = 3\n[network]\ngossip_interval_ms = 18446744073709551615\n",
            "network.gossip_interval_ms",
        ),
        (
            "nodes = 3\n[limit]\nwindow_ms = 1000\nbuckets = 7\n",
            "limit",
        ),
        (
            "nodes = 3\n[[faults]]\nkind = \"loss\"\np = 1.5\n",
            "faults.p",
        ),
        (
            "nodes = 3\n[[faults]]\nkind = \"partition\"\nside = [0, 1, 2]\nfrom_ms = 1\nuntil_ms = 2\n",
            "faults.side",
        ),
        ("nodes = 3\nwarmup_ms = 40000\n", "warmup_ms"),
        (
            "nodes = 3\nduration_ms = 1_000_000_000_000\n",
            "duration_ms",
        ),
        (
            "nodes = 3\n[traffic]\nshape = \"skewed\"\noverload = 2.0\nhot_share = 3.0\n",
            "traffic.hot_share",
        ),
    ] {
        let e = refused(text);
        assert!(
            e.starts_with("mine.toml") && e.contains(field),
            "{field}: {e}"
        );
    }
    // A missing file names itself.
    let missing = scenario_file::load(std::path::Path::new("/nonexistent/x.toml"), 1).unwrap_err();
    assert!(format!("{missing:#}").contains("/nonexistent/x.toml"));
}

#[test]
fn a_limit_comes_from_a_rules_file_or_is_refused_with_its_field() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let with = |limit: &str| {
        scenario_file::parse_in(
            "mine.toml",
            &format!("nodes = 3\n[limit]\nrules = \"deploy/examples/rules.yaml\"\n{limit}"),
            1,
            &root,
        )
    };
    // The example rules: `tenant` 100 per second; tenant 42, 3000 per minute in 60 buckets.
    let c = with("domain = \"api\"\ndescriptor = [[\"tenant\", \"acme\"]]\n").unwrap();
    assert_eq!((c.limit, c.window_ms, c.buckets), (100, 1_000, 10));
    let c = with("domain = \"api\"\ndescriptor = [[\"tenant\", \"42\"]]\n").unwrap();
    assert_eq!((c.limit, c.window_ms, c.buckets), (3_000, 60_000, 60));
    for (limit, field, says) in [
        (
            "domain = \"api\"\ndescriptor = [[\"nothing\", \"x\"]]\n",
            "limit.descriptor",
            "no rule",
        ),
        (
            "domain = \"api\"\n",
            "limit.descriptor",
            "needs a descriptor",
        ),
        (
            "descriptor = [[\"tenant\", \"a\"]]\n",
            "limit.domain",
            "needs a domain",
        ),
        (
            "domain = \"api\"\ndescriptor = [[\"tenant\", \"a\"]]\nrequests = 5\n",
            "limit.requests",
            "leave out",
        ),
    ] {
        let e = format!("{:#}", with(limit).unwrap_err());
        assert!(e.contains(field) && e.contains(says), "{limit}: {e}");
    }
    let missing = scenario_file::parse_in(
        "mine.toml",
        "nodes = 3\n[limit]\nrules = \"absent.yaml\"\ndomain = \"d\"\ndescriptor = [[\"k\", \"v\"]]\n",
        1,
        &root,
    )
    .unwrap_err();
    assert!(
        format!("{missing:#}").contains("absent.yaml"),
        "{missing:#}"
    );
}

/// Loss on the timeline drops datagrams only while it lasts; a ramp of load parses and runs.
#[test]
fn timed_loss_fires_only_in_its_window_and_a_ramp_runs() {
    let run_with = |extra: &str| {
        let text = format!("nodes = 3\nduration_ms = 6_000\nwarmup_ms = 2_000\n{extra}");
        let cfg = scenario_file::parse("t.toml", &text, 4).unwrap_or_else(|e| panic!("{e:#}"));
        limitmesh_sim::run(&cfg).expect("the run")
    };
    let inside =
        run_with("[[faults]]\nkind = \"loss\"\np = 0.5\nfrom_ms = 2_000\nuntil_ms = 4_000\n");
    assert!(
        inside.faults.datagrams_dropped > 0,
        "seed 4: nothing dropped"
    );
    let after = run_with("[[faults]]\nkind = \"loss\"\np = 0.5\nfrom_ms = 7_000\n");
    assert_eq!(
        after.faults.datagrams_dropped, 0,
        "seed 4: dropped before the loss began"
    );
    let ramp = run_with(
        "[traffic]\nshape = \"ramp\"\nfrom = 0.2\nto = 2.0\nfrom_ms = 1_000\nuntil_ms = 5_000\n",
    );
    let early: u32 = ramp.offered_per_ms[..1_000].iter().sum();
    let late: u32 = ramp.offered_per_ms[5_000..].iter().sum();
    assert!(late > early * 5, "seed 4: offered {early} then {late}");
    let e = refused("nodes = 3\n[[faults]]\nkind = \"loss\"\np = 0.1\nuntil_ms = 5\n");
    assert!(e.contains("faults.until_ms"), "{e}");
}
