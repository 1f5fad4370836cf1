//! Fleet traffic files: each built-in fleet scenario is a file in `sim/scenarios/fleet/` that
//! describes the very same run at any size, `fleet-run FILE` prints what the named scenario
//! prints, a bad file is refused with its file, line and field, no file takes the simulator
//! past its bounds, and requests of many units are limited and measured in units.

use std::path::PathBuf;
use std::process::Command;

use limitmesh_sim::fleet::{self, FLEET_SCENARIOS, FleetConfig, file, fleet_scenario};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/fleet")
}

#[test]
fn every_built_in_fleet_scenario_is_a_file_of_the_same_run() {
    for name in FLEET_SCENARIOS {
        let path = dir().join(format!("{name}.toml"));
        // The file's own size, and others: a rolling deploy's count and the crashed node
        // follow the size as the built-in's do.
        let sizes = (2..=60).chain([99, 100, 1_000, 5_000]);
        for nodes in std::iter::once(None).chain(sizes.map(Some)) {
            let from_file = file::load(&path, 7, nodes).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let built_in = fleet_scenario(name, 7, nodes.unwrap_or(50)).expect("built in");
            assert_eq!(
                format!("{from_file:?}"),
                format!("{built_in:?}"),
                "{name} at {nodes:?} nodes: the file and the built-in differ"
            );
        }
    }
    let files = std::fs::read_dir(dir())
        .expect("sim/scenarios/fleet")
        .count();
    assert_eq!(
        files,
        FLEET_SCENARIOS.len(),
        "a file for each scenario, and no other"
    );
}

fn sim(args: &[&str]) -> String {
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
}

#[test]
fn fleet_run_prints_what_the_named_scenario_prints() {
    let file = dir().join("fleet-small-share.toml");
    let args = ["--seed", "3", "--nodes", "5", "--only", "share", "--json"];
    let by_file = sim(&[&["fleet-run", file.to_str().unwrap()], &args[..]].concat());
    let by_name = sim(&[&["fleet-small-share"], &args[..]].concat());
    assert_eq!(by_file, by_name, "seed 3");
    assert_eq!(by_file.lines().count(), 1, "share only: {by_file}");
}

fn refused(text: &str) -> String {
    match file::parse("mine.toml", text, 1, None) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => format!("{e:#}"),
    }
}

/// A file with one class, `class` added to its table, and `rest` after it.
fn with_class(class: &str, rest: &str) -> String {
    format!("nodes = 4\n\n[[classes]]\nname = \"k\"\nkeys = 2\nlimit = 100\n{class}{rest}")
}

#[test]
fn a_bad_fleet_file_is_refused_with_its_file_line_and_field() {
    // An unknown field, on line 7.
    let e = refused(&with_class("hits = 5\n", ""));
    assert!(e.starts_with("mine.toml:7:") && e.contains("hits"), "{e}");
    assert!(e.contains("hits_addend"), "the fields it could be: {e}");
    // Not TOML.
    let e = refused("nodes = [\n");
    assert!(e.starts_with("mine.toml:"), "{e}");
    // No classes.
    let e = refused("nodes = 4\n");
    assert!(e.starts_with("mine.toml:") && e.contains("classes"), "{e}");
    // Values out of range, each naming its line and field.
    for (text, line, field) in [
        (
            with_class("", "").replacen("nodes = 4", "nodes = 1", 1),
            1,
            "nodes",
        ),
        (
            with_class("hits_addend = 101\n", ""),
            7,
            "classes[0].hits_addend",
        ),
        (
            with_class("hits_addend = 0\n", ""),
            7,
            "classes[0].hits_addend",
        ),
        (
            with_class("window_ms = 1005\n", ""),
            7,
            "classes[0].window_ms",
        ),
        (
            with_class("window_ms = 1000\nbuckets = 7\n", ""),
            7,
            "classes[0].buckets",
        ),
        (with_class("users = 0\n", ""), 7, "classes[0].users"),
        (with_class("users = \"most\"\n", ""), 7, "users"),
        (with_class("keys_per_node = 3\n", ""), 3, "classes[0].keys"),
        (
            with_class("overload = -1.0\n", ""),
            7,
            "classes[0].overload",
        ),
        (
            with_class("overload = [[0, 1.0], [0, 2.0]]\n", ""),
            7,
            "classes[0].overload",
        ),
        (
            with_class("underload = []\n", ""),
            7,
            "classes[0].underload",
        ),
        (
            with_class("overloaded_every = 0\n", ""),
            7,
            "classes[0].overloaded_every",
        ),
        (
            with_class("placement = \"everywhere\"\n", ""),
            7,
            "everywhere",
        ),
        (
            with_class("", "\n[[classes]]\nname = \"k\"\nkeys = 1\nlimit = 5\n"),
            9,
            "classes[1].name",
        ),
        (
            with_class("", "").replacen("\"k\"", "\"a b\"", 1),
            4,
            "classes[0].name",
        ),
        (
            format!("warmup_ms = 60_000\n{}", with_class("", "")),
            1,
            "warmup_ms",
        ),
        (
            format!("duration_ms = 1_000_000_000_000\n{}", with_class("", "")),
            1,
            "duration_ms",
        ),
        (
            with_class("", "\n[network]\nlatency_ms = [20, 1]\n"),
            9,
            "network.latency_ms",
        ),
        (
            with_class("", "\n[network]\nloss = 1.5\n"),
            9,
            "network.loss",
        ),
        (
            with_class("", "\n[network]\ngossip_interval_ms = 1\n"),
            9,
            "network.gossip_interval_ms",
        ),
        (
            with_class(
                "",
                "\n[[faults]]\nkind = \"crash\"\nnode = 4\nat_ms = 1000\n",
            ),
            8,
            "faults[0].node",
        ),
        (
            with_class(
                "",
                "\n[[faults]]\nkind = \"crash\"\nnode = \"first\"\nat_ms = 1\n",
            ),
            8,
            "\"first\", expected a node's index",
        ),
        (
            with_class(
                "",
                "\n[[faults]]\nkind = \"partition\"\nfraction = 1.0\nfrom_ms = 1\nuntil_ms = 2\n",
            ),
            8,
            "faults[0].fraction",
        ),
        (
            with_class(
                "",
                "\n[[faults]]\nkind = \"partition\"\nfraction = 0.5\nfrom_ms = 2\nuntil_ms = 2\n",
            ),
            8,
            "faults[0].until_ms",
        ),
        (
            with_class(
                "",
                "\n[[faults]]\nkind = \"rolling-deploy\"\ncount = 2\nshare = 0.5\nfrom_ms = 1\n\
                 every_ms = 5\n",
            ),
            8,
            "faults[0].count",
        ),
        (
            with_class(
                "",
                "\n[[faults]]\nkind = \"rolling-deploy\"\ncount = 2\nfrom_ms = 1\n\
                 every_ms = 18446744073709551615\n",
            ),
            8,
            "faults[0].every_ms",
        ),
        (
            with_class("", "\n[[faults]]\nkind = \"meteor\"\n"),
            9,
            "meteor",
        ),
    ] {
        let e = refused(&text);
        let at = format!("mine.toml:{line}:");
        assert!(
            e.starts_with(&at) && e.contains(field),
            "{field}: expected at line {line}: {e}\n{text}"
        );
    }
    // A missing file names itself.
    let missing = file::load(std::path::Path::new("/nonexistent/x.toml"), 1, None).unwrap_err();
    assert!(format!("{missing:#}").contains("/nonexistent/x.toml"));
}

/// No file, and no `--nodes`, makes the simulator allocate or work without bound: each bound
/// is refused with what passed it.
#[test]
fn a_fleet_file_is_held_to_the_simulators_bounds() {
    for (text, nodes, says) in [
        // 10^6 streams is the most: 1 001 keys of 1 000 users.
        (
            "nodes = 1000\n[[classes]]\nname = \"k\"\nkeys = 1001\nlimit = 10\n",
            None,
            "streams",
        ),
        (
            "nodes = 4\n[[classes]]\nname = \"k\"\nkeys_per_node = 1000000\nlimit = 10\n",
            None,
            "streams",
        ),
        // A key offered 10^8 requests a second.
        (
            "nodes = 4\n[[classes]]\nname = \"k\"\nkeys = 1\nlimit = 1000000\nwindow_ms = 10\n",
            None,
            "requests a second",
        ),
        // 10 000 overloaded keys over three hours: 10^10 counters.
        (
            "nodes = 4\nduration_ms = 10_800_000\n[[classes]]\nname = \"k\"\nkeys = 10000\n\
             users = 1\nlimit = 10\n",
            None,
            "recorded counters",
        ),
        // One key every node shares, over windows of 10 ms for three hours, on 10 000 nodes.
        (
            "nodes = 5000\nduration_ms = 10_800_000\n[[classes]]\nname = \"k\"\nkeys = 1\n\
             limit = 10\nwindow_ms = 10\nbuckets = 1\noverload = 0.5\n",
            None,
            "recorded counters",
        ),
        (
            "nodes = 4\n[[classes]]\nname = \"k\"\nkeys = 1\nlimit = 10\n",
            Some(5_001),
            "--nodes",
        ),
        (
            "nodes = 4\n[[classes]]\nname = \"k\"\nkeys = 1\nlimit = 10\n",
            Some(1),
            "--nodes",
        ),
    ] {
        let e = match file::parse("big.toml", text, 1, nodes) {
            Ok(c) => panic!("accepted: {:?}", c.traffic),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.starts_with("big.toml") && e.contains(says), "{says}: {e}");
    }
    // More faults than a file may have.
    let text = format!(
        "nodes = 4\n[[classes]]\nname = \"k\"\nkeys = 1\nlimit = 10\n{}",
        "[[faults]]\nkind = \"crash\"\nnode = 1\nat_ms = 5\n".repeat(65)
    );
    let e = format!("{:#}", file::parse("big.toml", &text, 1, None).unwrap_err());
    assert!(e.contains("faults") && e.contains("at most 64"), "{e}");
    // A profile of more points than a file may have.
    let points: Vec<String> = (0..1_001).map(|t| format!("[{t}, 1.0]")).collect();
    let text = format!(
        "nodes = 4\n[[classes]]\nname = \"k\"\nkeys = 1\nlimit = 10\noverload = [{}]\n",
        points.join(", ")
    );
    let e = format!("{:#}", file::parse("big.toml", &text, 1, None).unwrap_err());
    assert!(
        e.starts_with("big.toml:6:") && e.contains("1000 points"),
        "{e}"
    );
}

/// Requests of 5 units each, offered twice the limit in units: the nodes check them with their
/// cost, and the measures count units. Checked as if each cost 1, all of the load would pass
/// (twice the limit); counted as requests, the windows would seem half used.
#[test]
fn requests_of_many_units_fill_their_limit_in_units() {
    let text = "nodes = 5\nduration_ms = 14_000\nwarmup_ms = 4_000\n\
                [[classes]]\nname = \"costly\"\nkeys = 2\nusers = 3\nlimit = 500\nhits_addend = 5\n";
    let cfg: FleetConfig = file::parse("costly.toml", text, 2, None).expect("the file");
    let r = fleet::run("costly", "share", &cfg);
    eprintln!(
        "seed 2: over-admission mean {:.4}, max {:.4}, utilization {:.4}",
        r.over_admission_mean, r.over_admission_max, r.utilization
    );
    assert!(r.windows > 1_000, "seed 2: {r:?}");
    assert!(r.over_admission_max <= 0.1, "seed 2: {r:?}");
    assert!(r.utilization >= 0.8, "seed 2: {r:?}");
    assert!(r.utilization_by_class["costly"] >= 0.8, "seed 2: {r:?}");
}
