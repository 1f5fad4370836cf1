//! The repository's house rules that a reader checks by eye, checked here on every source file
//! of the workspace: no non-test Rust file over [`MAX_LINES`] lines (one concept per file), and
//! no comment that narrates an earlier build or cites one simulator run as its reason (a comment
//! gives the invariant and the test that pins it; figures belong to the generated results).

use std::path::{Path, PathBuf};

/// Most lines a non-test Rust file may have.
const MAX_LINES: usize = 450;

/// Phrases of a comment that tells the history of the code rather than what it holds.
const HISTORY: &[&str] = &[
    "until this build",
    "the build before",
    "the previous build",
    "before this build",
    "before this change",
    "before this rule",
    "(before, ",
];

/// Every file under the workspace root with one of `extensions`, build output and hidden
/// directories left out, sorted.
fn files(extensions: &[&str]) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !(name.starts_with('.') || name == "target") {
                    dirs.push(path);
                }
            } else if extensions
                .iter()
                .any(|ext| path.extension().is_some_and(|e| e == *ext))
            {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `path` relative to the workspace root, with `/` between components.
fn relative(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether a Rust file holds tests or benchmarks only: under a `tests/` or `benches/`
/// directory, or a module's `tests.rs`.
fn is_test_file(relative: &str) -> bool {
    let mut parts = relative.split('/').collect::<Vec<_>>();
    let name = parts.pop().unwrap_or("");
    name == "tests.rs" || parts.iter().any(|p| *p == "tests" || *p == "benches")
}

/// The non-test Rust files of `files` over [`MAX_LINES`] lines that are not on `known`, as
/// `path: lines`.
fn over_the_limit(files: &[(String, String)], known: &[&str]) -> Vec<String> {
    files
        .iter()
        .filter(|(path, _)| !is_test_file(path) && !known.contains(&path.as_str()))
        .filter_map(|(path, text)| {
            let lines = text.lines().count();
            (lines > MAX_LINES).then(|| format!("{path}: {lines} lines"))
        })
        .collect()
}

/// The comment text of `line` in a file of kind `extension`: a Rust comment (`//`, `///`,
/// `//!`) or a TOML comment (`#`) from where it starts; in Markdown, the whole line.
fn comment_of<'a>(extension: &str, line: &'a str) -> Option<&'a str> {
    match extension {
        "md" => Some(line),
        "rs" => line.find("//").map(|at| &line[at..]).filter(|c| {
            // Not a `//` inside a string literal, as in a URL: an odd number of quotes before
            // it opens a string.
            line[..line.len() - c.len()]
                .matches('"')
                .count()
                .is_multiple_of(2)
        }),
        "toml" => line.trim_start().strip_prefix('#'),
        _ => None,
    }
}

/// Whether `comment` cites one simulator run as evidence: a seed, or a window a run reached in
/// multiples of the limit.
fn cites_a_run(comment: &str) -> bool {
    let lower = comment.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || "._-".contains(c)))
        .filter(|w| !w.is_empty())
        .collect();
    words.windows(2).any(|w| {
        let number = |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_digit());
        // "seed 1", "seeds 1-8"; not "--seed <seed>" or "seed N".
        ((w[0] == "seed" || w[0] == "seeds") && number(w[1]))
            // "reached 1.31 x L", "reached 1.12"
            || (w[0] == "reached" && number(w[1]) && w[1].contains('.'))
    })
}

/// The lines of `files` (`(path, text)`) whose comment narrates history or cites a run, as
/// `path:line: text`.
fn offending_comments(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let extension = path.rsplit('.').next().unwrap_or("");
        for (i, line) in text.lines().enumerate() {
            let Some(comment) = comment_of(extension, line) else {
                continue;
            };
            let lower = comment.to_lowercase();
            if HISTORY.iter().any(|h| lower.contains(h)) || cites_a_run(comment) {
                out.push(format!("{path}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    out
}

fn read(paths: Vec<PathBuf>) -> Vec<(String, String)> {
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (relative(&p), text)
        })
        .collect()
}

#[test]
fn no_non_test_rust_file_passes_the_line_limit() {
    let files = read(files(&["rs"]));
    assert!(
        files.len() > 100,
        "the walk found {} Rust files: it missed the workspace",
        files.len()
    );
    let over = over_the_limit(&files, &[]);
    assert!(
        over.is_empty(),
        "non-test files over {MAX_LINES} lines (split each along a seam, or move its tests to a \
         sibling tests.rs):\n{}",
        over.join("\n")
    );
}

#[test]
fn no_comment_narrates_history_or_cites_a_run() {
    // The results page is generated from runs: its figures are what it is for.
    let files: Vec<_> = read(files(&["rs", "toml", "md"]))
        .into_iter()
        .filter(|(path, _)| path != "docs/results.md" && path != "tests/house.rs")
        .collect();
    let offending = offending_comments(&files);
    assert!(
        offending.is_empty(),
        "comments that tell history or cite one run (give the invariant and the test that \
         pins it instead):\n{}",
        offending.join("\n")
    );
}

#[test]
fn the_checks_catch_what_they_are_for() {
    let long = "fn f() {}\n".repeat(MAX_LINES + 1);
    let short = "fn f() {}\n".repeat(MAX_LINES);
    let files = vec![
        ("src/long.rs".to_owned(), long.clone()),
        ("src/short.rs".to_owned(), short),
        ("src/node/tests.rs".to_owned(), long.clone()),
        ("src/node/tests/owners.rs".to_owned(), long.clone()),
        ("benches/hot_path.rs".to_owned(), long.clone()),
        ("core/src/known.rs".to_owned(), long),
    ];
    assert_eq!(
        over_the_limit(&files, &["core/src/known.rs"]),
        vec![format!("src/long.rs: {} lines", MAX_LINES + 1)]
    );

    let comments = vec![
        (
            "src/a.rs".to_owned(),
            "// A window reached 1.31 x L that way.\nlet s = \"seed 1\"; // fine\n".to_owned(),
        ),
        (
            "src/b.rs".to_owned(),
            "/// Holds until this build.\n/// `--seed <seed>` reruns it.\n".to_owned(),
        ),
        (
            "Cargo.toml".to_owned(),
            "# over seeds 1-8\nname = \"seed 2\"\n".to_owned(),
        ),
        (
            "README.md".to_owned(),
            "Each run is seeded; `--seed N` picks one.\n".to_owned(),
        ),
    ];
    assert_eq!(
        offending_comments(&comments),
        vec![
            "src/a.rs:1: // A window reached 1.31 x L that way.".to_owned(),
            "src/b.rs:1: /// Holds until this build.".to_owned(),
            "Cargo.toml:1: # over seeds 1-8".to_owned(),
        ]
    );
}
