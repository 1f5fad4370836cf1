//! `--report DIR`: a page of plots of a run, which a browser renders. The page is written
//! from a short run of a scenario file; if Chromium is installed (CI installs Debian's
//! `chromium` and sets LIMITMESH_REQUIRE_CHROMIUM, so there it must be), it takes a screenshot
//! of the page and the test checks it is not blank: plotted colours over a good part of it.

use std::path::Path;
use std::process::Command;

use limitmesh_sim::plot::{RunData, write_report};
use limitmesh_sim::scenario_file;
use limitmesh_sim::{Report, run};

/// Node 2 cut off for 3 s: long enough for it to declare the others down (a probe every
/// 500 ms, then 1.5 s of suspicion) whatever the seed, and back with them by the end.
const SHORT: &str = r#"
nodes = 3
duration_ms = 8_000
warmup_ms = 2_000
[[faults]]
kind = "partition"
side = [2]
from_ms = 3_000
until_ms = 6_000
"#;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// The share of pixels that are not (near) white, and how many distinct colours there are.
fn ink(png_path: &Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).expect("the screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let mut inked = 0usize;
    let mut colours = std::collections::BTreeSet::new();
    let mut total = 0usize;
    for px in pixels.chunks(channels) {
        total += 1;
        let rgb = [px[0], px[1.min(channels - 1)], px[2.min(channels - 1)]];
        if rgb.iter().any(|c| *c < 235) {
            inked += 1;
        }
        colours.insert(rgb.map(|c| c / 16));
    }
    (inked as f64 / total.max(1) as f64, colours.len())
}

#[test]
fn a_report_is_a_page_of_plots_that_a_browser_renders() {
    let cfg = scenario_file::parse("short.toml", SHORT, 3).expect("the scenario");
    let outcome = run(&cfg).expect("the run");
    let report = Report::new(&cfg, &outcome);
    let (dir, page) = report_page(&cfg, &outcome, &report, "short");
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..100]);
    assert_eq!(
        html.matches("<svg").count(),
        2,
        "admissions and members for one run"
    );
    // The partition shows in the members: node 2 saw fewer up at some point, and all 3 again
    // by the end.
    let seen_by_2: Vec<usize> = outcome.live_samples.iter().map(|(_, l)| l[2]).collect();
    assert!(seen_by_2.iter().any(|n| *n < 3), "{seen_by_2:?}");
    assert_eq!(seen_by_2.last(), Some(&3), "{seen_by_2:?}");
    assert!(
        html.contains("partition [2]"),
        "the fault is on the time axis"
    );
    assert!(html.contains("limit (1000)") && html.contains("node 2"));
    assert!(!html.contains("src=\"http"), "self-contained");
    let svg = std::fs::read_to_string(dir.path().join("short-share.svg")).expect("the plot's file");
    assert!(
        svg.starts_with("<svg") && html.contains(&svg),
        "the same plot as on the page"
    );

    renders(&page, dir.path(), 900);
}

/// Writes the report of one run (`share`) to a new directory; returns it and the page.
fn report_page(
    cfg: &limitmesh_sim::SimConfig,
    outcome: &limitmesh_sim::Outcome,
    report: &Report,
    name: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a directory");
    let page = write_report(
        dir.path(),
        name,
        &[RunData {
            label: "share",
            cfg,
            outcome,
            report,
        }],
    )
    .expect("the report");
    (dir, page)
}

/// Has Chromium, if there is one, take a screenshot of `page` (the first `height` pixels) and
/// checks it is not blank.
fn renders(page: &Path, dir: &Path, height: u32) {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("LIMITMESH_REQUIRE_CHROMIUM").is_none(),
            "Chromium is not installed (Debian: apt-get install chromium)"
        );
        eprintln!("SKIPPED the rendering check: Chromium is not installed");
        return;
    };
    let shot = dir.join("shot.png");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--window-size=1000,{height}"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("Chromium runs");
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (inked, colours) = ink(&shot);
    eprintln!(
        "screenshot: {:.0} % inked, {colours} colours",
        inked * 100.0
    );
    // These pages ink about 15 %, most of it the plots' grids, lines and bars; a blank page
    // inks nothing. A tenth leaves room for runs whose plots draw fewer lines.
    assert!(
        inked > 0.10,
        "the page rendered blank: {:.1} % inked",
        inked * 100.0
    );
    assert!(
        colours > 20,
        "the page rendered without its plots: {colours} colours"
    );
}

/// The scenario example of docs/simulation.md, as a user would save it at the top of the
/// repository: it runs (shortened) with its rules and writes a report that renders.
#[test]
fn the_documented_example_runs_and_its_report_renders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/simulation.md")).expect("the page");
    let from = page.find("\n## Your own scenario\n").expect("the section");
    let block = &page[from..];
    let start = block.find("```toml\n").expect("a TOML block") + "```toml\n".len();
    let text = &block[start..start + block[start..].find("```").expect("its end")];
    let mut cfg =
        scenario_file::parse_in("mine.toml", text, 1, &root).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        (cfg.nodes, cfg.limit),
        (4, 100),
        "4 nodes, the tenant rule's 100 per second"
    );
    assert!(
        cfg.faults
            .iter()
            .any(|f| matches!(f, limitmesh_sim::Fault::Partition { side, .. } if side == &[3])),
        "a 3 | 1 partition"
    );
    let names: Vec<&str> = cfg.descriptors.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["tenant=globex"], "a second tenant");
    // Shortened, the partition kept inside the run.
    cfg.duration_ms = 14_000;
    cfg.converge_at_ms = None;
    let outcome = run(&cfg).expect("the run");
    let report = Report::new(&cfg, &outcome);
    assert!(
        report.partition_max_ratio.is_some(),
        "windows inside the partition"
    );
    assert!(
        report.descriptors[0].partition_max_ratio.is_some(),
        "the second tenant's windows inside the partition"
    );
    let (dir, page) = report_page(&cfg, &outcome, &report, "mine");
    // A plot for each tenant, each a file of its own too.
    let html = std::fs::read_to_string(&page).expect("the page");
    for title in ["mine, tenant=acme: share", "mine, tenant=globex: share"] {
        assert!(html.contains(title), "no plot titled {title:?}");
    }
    for file in ["mine-share.svg", "mine-share-1-tenant_globex.svg"] {
        assert!(dir.path().join(file).exists(), "no {file}");
    }
    renders(&page, dir.path(), 900);
}

/// The fleet traffic example of docs/simulation.md, saved as a user would: it parses as the
/// page says (and an unknown field is refused on the line the page gives), and `fleet-run`
/// runs it on 8 nodes under two admissions, prints a JSON report for each named after the
/// file, and writes a page of plots (a plot for each class and admission) that renders.
#[test]
fn the_documented_fleet_example_runs_and_its_report_renders() {
    use limitmesh_sim::fleet::{FleetFault, file};

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/simulation.md")).expect("the page");
    let from = page
        .find("\n## Your own fleet's traffic\n")
        .expect("the section");
    let block = &page[from..];
    let start = block.find("```toml\n").expect("a TOML block") + "```toml\n".len();
    let text = &block[start..start + block[start..].find("```").expect("its end")];
    let cfg = file::parse("mine.toml", text, 1, None).unwrap_or_else(|e| panic!("{e:#}"));
    let classes: Vec<&str> = cfg
        .traffic
        .classes
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!((cfg.nodes, classes), (50, vec!["tenant", "upload"]));
    assert!(
        matches!(cfg.faults[..], [FleetFault::Partition { .. }]),
        "{:?}",
        cfg.faults
    );
    let misspelt = text.replacen("limit = 100 ", "limits = 100", 1);
    let e = format!(
        "{:#}",
        file::parse("mine.toml", &misspelt, 1, None).unwrap_err()
    );
    assert!(
        e.starts_with("mine.toml:15: unknown field `limits`, expected one of `name`, `keys`,"),
        "the page's example of an error: {e}"
    );

    let dir = tempfile::tempdir().expect("a directory");
    let mine = dir.path().join("mine.toml");
    std::fs::write(&mine, text).expect("the file");
    let out = dir.path().join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_limitmesh-sim"))
        .args([
            "fleet-run",
            mine.to_str().unwrap(),
            "--seed",
            "1",
            "--nodes",
            "8",
        ])
        .args([
            "--only",
            "share,ledger",
            "--json",
            "--report",
            out.to_str().unwrap(),
        ])
        .output()
        .expect("the simulator runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let reports: Vec<serde_json::Value> = String::from_utf8(run.stdout)
        .expect("UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON report"))
        .collect();
    let rows: Vec<(&str, &str)> = reports
        .iter()
        .map(|r| {
            (
                r["scenario"].as_str().unwrap(),
                r["policy"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, [("mine", "share"), ("mine", "ledger")]);
    for r in &reports {
        assert_eq!(r["nodes"], 8);
        assert_eq!(r["partitioned"], true, "the partition happened: {r}");
        for class in ["tenant", "upload"] {
            assert!(
                r["utilization_by_class"][class].as_f64().is_some(),
                "{class} measured: {r}"
            );
        }
    }
    let page = out.join("index.html");
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..100]);
    assert!(
        html.contains("partition 5 | 3"),
        "the cut, on the time axis"
    );
    for (policy, class) in [
        ("share", "tenant"),
        ("share", "upload"),
        ("ledger", "tenant"),
        ("ledger", "upload"),
    ] {
        let svg = std::fs::read_to_string(out.join(format!("mine-{policy}-{class}.svg")))
            .unwrap_or_else(|e| panic!("{policy}, {class}: {e}"));
        assert!(
            html.contains(&svg) && svg.contains(&format!("{class} keys: {policy}")),
            "the plot of {class} under {policy} is on the page"
        );
    }
    // Two tables head the page: the plots are further down.
    renders(&page, dir.path(), 2_000);
}
