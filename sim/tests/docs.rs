//! The documentation keeps its contract: README.md stays a manual a newcomer reads in ten
//! minutes, every configuration key is documented with its default, the results page is what
//! its generator makes of the recorded JSON, every relative link and anchor resolves, and the
//! Kubernetes manifests parse and agree with the configuration, the rules and the Envoy example
//! they embed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use limitmesh::config::Config;
use serde_json::Value;

/// README.md's budget, in bytes: the user manual, with the rest under docs/.
const README_MAX_BYTES: u64 = 25_000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_readme_stays_within_its_budget() {
    let bytes = std::fs::metadata(root().join("README.md"))
        .expect("README.md")
        .len();
    assert!(
        bytes <= README_MAX_BYTES,
        "README.md is {bytes} bytes, over its budget of {README_MAX_BYTES}: move reference \
         material to docs/ and link to it"
    );
}

// ---- configuration ----

/// Every `section.key` of the configuration, with its default as TOML writes it.
fn config_keys() -> BTreeMap<String, toml::Value> {
    let text = toml::to_string(&Config::default()).expect("the defaults serialise");
    let table: toml::Table = toml::from_str(&text).expect("and parse back");
    let mut keys = BTreeMap::new();
    for (section, body) in table {
        let toml::Value::Table(body) = body else {
            panic!("top-level `{section}` is not a section");
        };
        for (key, value) in body {
            keys.insert(format!("{section}.{key}"), value);
        }
    }
    keys
}

/// The table rows of a page, by their first cell: `` | `key` | default | ... ``.
fn rows_by_key(page: &str) -> BTreeMap<String, Vec<String>> {
    let mut rows = BTreeMap::new();
    for line in page.lines() {
        let Some(inner) = line
            .trim()
            .strip_prefix('|')
            .and_then(|l| l.strip_suffix('|'))
        else {
            continue;
        };
        let cells: Vec<String> = inner.split(" | ").map(|c| c.trim().to_owned()).collect();
        if let Some(key) = cells[0].strip_prefix('`').and_then(|c| c.strip_suffix('`')) {
            rows.insert(key.to_owned(), cells);
        }
    }
    rows
}

/// Every key of [`Config`] has a row in docs/configuration.md whose default is the one
/// `Config::default()` has, written as TOML writes it (the node's name, the host's, excepted).
#[test]
fn every_configuration_key_is_documented_with_its_default() {
    let keys = config_keys();
    assert!(
        keys.len() > 30 && keys.contains_key("cluster.seeds"),
        "the walk found the keys: {:?}",
        keys.keys()
    );
    let page = read(&root().join("docs/configuration.md"));
    let rows = rows_by_key(&page);
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for (key, value) in &keys {
        let Some(row) = rows.get(key) else {
            missing.push(key.as_str());
            continue;
        };
        if key == "node.name" {
            continue;
        }
        let want = format!("`{value}`");
        if row.get(1) != Some(&want) {
            wrong.push(format!(
                "{key}: documented {:?}, default {want}",
                row.get(1)
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "configuration keys missing from docs/configuration.md: {missing:?}"
    );
    assert!(
        wrong.is_empty(),
        "documented defaults that differ from Config::default(): {wrong:#?}"
    );
}

// ---- results ----

/// docs/results.md is generated: the page in the repository is exactly what the generator
/// makes of the JSON recorded under docs/results/.
#[test]
fn the_results_page_is_what_the_generator_makes_of_the_recorded_json() {
    let root = root();
    let generated = limitmesh_sim::results::render(&root).unwrap_or_else(|e| panic!("{e:#}"));
    let committed = read(&root.join("docs/results.md"));
    if generated != committed {
        let line = generated
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || generated.lines().count().min(committed.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "docs/results.md differs from what the generator makes of docs/results/*.json, \
             first at line {line}: regenerate it with `scripts/record-results.sh page` (or \
             record again with `scripts/record-results.sh`)"
        );
    }
    for section in [
        "## Scenarios",
        "## Fleets",
        "## Hot path",
        "## gRPC",
        "## Memory",
    ] {
        assert!(generated.contains(section), "no {section} section");
    }
    assert!(
        !generated.contains("Nothing recorded."),
        "every section has a recording"
    );
}

// ---- links ----

/// The Markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![
        root.join("README.md"),
        root.join("ALGORITHM.md"),
        root.join("deploy/README.md"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The text outside fenced code blocks and inline code spans, where links and headings live.
fn prose(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans: every other run between backticks.
        let mut kept = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                kept.push_str(part);
            }
        }
        out.push(kept);
    }
    out
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped (but `-` and `_`),
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_lowercase().next()?),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file: its headings' (numbered `-1`, `-2` when repeated) and any
/// `<a id="...">`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(heading) = line.strip_prefix('#') {
            let heading = heading.trim_start_matches('#');
            if heading.starts_with(' ') {
                // Inline code keeps its text; link syntax and emphasis do not count.
                let text: String = heading.chars().filter(|c| !"`*[]".contains(*c)).collect();
                let base = slug(&text);
                let n = seen.entry(base.clone()).or_default();
                out.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
        }
        for (marker, quote) in [("id=\"", '"'), ("name=\"", '"')] {
            let mut rest = line;
            while let Some(at) = rest.find(marker) {
                let after = &rest[at + marker.len()..];
                if let Some(end) = after.find(quote) {
                    out.insert(after[..end].to_owned());
                }
                rest = after;
            }
        }
    }
    out
}

/// Every `[text](target)` and `![alt](target)` target of the prose.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// Where a relative link points, and the anchor it names, if any.
fn resolve(from: &Path, target: &str) -> (PathBuf, Option<String>) {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a.to_owned())),
        None => (target, None),
    };
    let file = if path.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().expect("a directory").join(path)
    };
    (file, anchor)
}

/// The problems with the relative links of `file`: a target that does not exist, or an
/// anchor the target does not have.
fn broken_links(file: &Path) -> Vec<String> {
    let text = read(file);
    let mut broken = Vec::new();
    for target in link_targets(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = resolve(file, &target);
        if !path.exists() {
            broken.push(format!("{}: {target}: no such file", file.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            let known = path.extension().is_some_and(|e| e == "md") && path.is_file();
            if !known || !anchors(&read(&path)).contains(&anchor) {
                broken.push(format!("{}: {target}: no such anchor", file.display()));
            }
        }
    }
    broken
}

#[test]
fn relative_links_and_anchors_resolve() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in documents() {
        checked += link_targets(&read(&file)).len();
        broken.extend(broken_links(&file));
    }
    assert!(checked > 100, "the links were found: {checked}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The checker itself: it finds a missing file, a missing anchor, and accepts what exists,
/// including a heading's anchor with inline code and a repeated heading's.
#[test]
fn the_link_checker_tells_good_links_from_bad() {
    let dir = tempfile::tempdir().expect("a directory");
    std::fs::write(
        dir.path().join("b.md"),
        "# Restarts and `state_path`\n## 4. The bound, informally\n## Twice\n## Twice\n\
         ```sh\n# not a heading\n```\n",
    )
    .unwrap();
    let a = dir.path().join("a.md");
    std::fs::write(
        &a,
        "[ok](b.md#restarts-and-state_path) [ok](b.md#4-the-bound-informally) \
         [ok](b.md#twice-1) [ok](#here) [web](https://example.com/x#y) `[code](nowhere.md)`\n\
         # Here\n[bad](missing.md) [bad](b.md#nowhere) [bad](b.md#not-a-heading)\n",
    )
    .unwrap();
    let broken = broken_links(&a);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    for bad in ["missing.md", "b.md#nowhere", "b.md#not-a-heading"] {
        assert!(
            broken.iter().any(|b| b.contains(bad)),
            "{bad} not reported: {broken:#?}"
        );
    }
}

// ---- Kubernetes ----

fn manifest(name: &str) -> Vec<Value> {
    let path = root().join("deploy/kubernetes").join(name);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&read(&path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!docs.is_empty(), "{name}: no documents");
    for d in &docs {
        for field in ["apiVersion", "kind"] {
            assert!(d[field].is_string(), "{name}: a document without {field}");
        }
        assert!(
            d["metadata"]["name"].is_string(),
            "{name}: a document without a name"
        );
    }
    docs
}

fn object<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|l| l.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default()
}

/// A container's probes use ports it declares, and its mounts volumes the pod has.
fn check_container(container: &Value, pod: &Value) {
    let name = container["name"].as_str().unwrap_or("?");
    let ports = names(&container["ports"]);
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let p = &container[probe];
        for port in [&p["httpGet"]["port"], &p["tcpSocket"]["port"]] {
            if let Some(port) = port.as_str() {
                assert!(
                    ports.contains(&port),
                    "{name}: {probe} uses port {port}, not one of {ports:?}"
                );
            }
        }
    }
    let volumes = names(&pod["volumes"]);
    for mount in names(&container["volumeMounts"]) {
        assert!(volumes.contains(&mount), "{name}: no volume {mount}");
    }
}

/// Both manifests parse; the native one runs limitmesh as an init container with
/// `restartPolicy: Always` beside Envoy and the app, the classic one as an ordinary container;
/// everything but the Deployment is the same in both; the Envoy configuration they embed is
/// `deploy/envoy/envoy.yaml`; the node configuration validates with the address the pod gives
/// it, and the rules load.
#[test]
fn the_kubernetes_manifests_parse_and_agree() {
    let native = manifest("limitmesh-sidecar.yaml");
    let classic = manifest("limitmesh-sidecar-classic.yaml");

    let pod = &object(&native, "Deployment", "my-service")["spec"]["template"]["spec"];
    let init = &pod["initContainers"];
    let sidecar = init
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == "limitmesh"))
        .expect("limitmesh among the init containers");
    assert_eq!(sidecar["restartPolicy"], "Always", "a native sidecar");
    assert!(sidecar["startupProbe"].is_object(), "Envoy waits for it");
    assert_eq!(names(&pod["containers"]), ["envoy", "app"]);
    for c in init.as_array().into_iter().flatten() {
        check_container(c, pod);
    }
    for c in pod["containers"].as_array().into_iter().flatten() {
        check_container(c, pod);
    }

    let old_pod = &object(&classic, "Deployment", "my-service")["spec"]["template"]["spec"];
    assert!(old_pod["initContainers"].is_null(), "no native sidecar");
    assert_eq!(names(&old_pod["containers"]), ["limitmesh", "envoy", "app"]);
    for c in old_pod["containers"].as_array().into_iter().flatten() {
        check_container(c, old_pod);
    }
    let others = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] != "Deployment")
            .cloned()
            .collect()
    };
    assert_eq!(
        others(&native),
        others(&classic),
        "the Services and ConfigMaps of the two forms differ"
    );

    let envoy = object(&native, "ConfigMap", "my-service-envoy")["data"]["envoy.yaml"]
        .as_str()
        .expect("envoy.yaml");
    let embedded: Value = serde_saphyr::from_str(envoy).expect("the embedded Envoy config");
    let example: Value = serde_saphyr::from_str(&read(&root().join("deploy/envoy/envoy.yaml")))
        .expect("deploy/envoy/envoy.yaml");
    assert_eq!(
        embedded, example,
        "the pod's Envoy config is not deploy/envoy/envoy.yaml"
    );

    let data = &object(&native, "ConfigMap", "limitmesh")["data"];
    let env = [(
        "LIMITMESH__CLUSTER__ADVERTISE".into(),
        "10.1.2.3:7946".into(),
    )];
    let config = Config::from_toml(
        "limitmesh.toml",
        data["limitmesh.toml"].as_str().expect("limitmesh.toml"),
        env,
    )
    .unwrap_or_else(|e| panic!("the manifest's node config: {e}"));
    assert!(
        config.grpc.listen.ip().is_loopback(),
        "gRPC stays in the pod"
    );
    assert!(
        !config.http.listen.ip().is_loopback(),
        "the admin listener is reachable by Prometheus and the probes"
    );
    assert_eq!(config.grpc.listen.port(), 8081, "where Envoy asks");
    limitmesh::rules::RuleSet::parse(
        "rules.yaml",
        data["rules.yaml"].as_str().expect("rules.yaml"),
        limitmesh::rules::LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("the manifest's rules: {e}"));
}
