//! One rules file (the YAML of envoyproxy/ratelimit) into a domain's rule tree.
//!
//! Parsing is typed (serde-saphyr) and every node keeps its location, so that every error,
//! syntactic or semantic, names the file and the line of the node at fault. Work is bounded:
//! the parser runs under a budget (depth, nodes, scalar bytes, aliases), so hostile input fails
//! with an error instead of exhausting the stack or memory.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::{Location, Spanned};

use super::error::RulesError;
use super::tree::{KeyRules, Node, Pattern, Rule, RuleLimit, WildcardRule};
use super::{LoadOptions, Unit};
use crate::limiter::Limit;
use crate::window::{EstimateMode, WindowSpec};

/// Deepest YAML nesting accepted. Each descriptor level takes two (a list and a mapping), so
/// descriptors may nest 11 deep, more than real rules use. The bound is what keeps parsing
/// within a 2 MiB thread stack (tokio's blocking threads, test threads) even in a debug
/// build, where the deserializer's frames take about 90 KiB per descriptor level.
pub(crate) const MAX_YAML_DEPTH: usize = 24;
/// Most YAML nodes in one file.
const MAX_YAML_NODES: usize = 200_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    domain: Option<Spanned<String>>,
    descriptors: Option<Vec<Spanned<DescriptorDoc>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorDoc {
    key: Option<Spanned<String>>,
    value: Option<Spanned<String>>,
    rate_limit: Option<Spanned<RateLimitDoc>>,
    descriptors: Option<Vec<Spanned<DescriptorDoc>>>,
    #[serde(default)]
    shadow_mode: bool,
    share_threshold: Option<Spanned<bool>>,
    quota_mode: Option<Spanned<bool>>,
    detailed_metric: Option<Spanned<bool>>,
    // Options of envoyproxy/ratelimit that change no decision: accepted so that its files
    // load unchanged, and ignored.
    #[serde(default, rename = "value_to_metric")]
    _value_to_metric: IgnoredAny,
    #[serde(default, rename = "metadata")]
    _metadata: IgnoredAny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitDoc {
    unit: Option<Spanned<String>>,
    requests_per_unit: Option<Spanned<u32>>,
    #[serde(default)]
    unlimited: bool,
    name: Option<Spanned<String>>,
    replaces: Option<Vec<Spanned<ReplacesDoc>>>,
    /// limitmesh extension: buckets per window.
    buckets: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplacesDoc {
    name: Option<Spanned<String>>,
}

/// A parsed file: its domain and the root of its rule tree.
#[derive(Debug)]
pub(crate) struct ParsedFile {
    pub domain: String,
    pub domain_line: u64,
    pub root: Node,
}

fn line(loc: Location) -> u64 {
    // Locations are 1-based; an unknown one (0) still names the file.
    loc.line().max(1)
}

fn yaml_error(file: &str, err: &serde_saphyr::Error) -> RulesError {
    let (line, column) = err
        .location()
        .map_or((1, 1), |loc| (loc.line().max(1), loc.column().max(1)));
    let options = serde_saphyr::render_options! {
        snippets: serde_saphyr::SnippetMode::Off,
    };
    let mut message = err.render_with_options(options);
    // The location leads the error already.
    let suffix = format!(" at line {line}, column {column}");
    if message.ends_with(&suffix) {
        message.truncate(message.len() - suffix.len());
    }
    RulesError::Yaml {
        file: file.to_owned(),
        line,
        column,
        message,
    }
}

/// Parses the text of one rules file. `file` names it in errors.
pub(crate) fn parse_file(
    file: &str,
    text: &str,
    options: &LoadOptions,
) -> Result<ParsedFile, RulesError> {
    let yaml_options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_YAML_DEPTH,
            max_nodes: MAX_YAML_NODES,
            max_documents: 1,
            max_aliases: 1_000,
            max_anchors: 1_000,
        },
        with_snippet: false,
    };
    let doc: FileDoc = serde_saphyr::from_str_with_options(text, yaml_options)
        .map_err(|e| yaml_error(file, &e))?;
    let Some(domain) = doc.domain else {
        return Err(RulesError::MissingDomain {
            file: file.to_owned(),
            line: 1,
        });
    };
    let domain_line = line(domain.referenced);
    if domain.value.is_empty() {
        return Err(RulesError::EmptyDomain {
            file: file.to_owned(),
            line: domain_line,
        });
    }
    let builder = Builder { file, options };
    let mut root = Node {
        location: format!("{file}:{domain_line}"),
        ..Node::default()
    };
    builder.add_level(&mut root, "", doc.descriptors.unwrap_or_default())?;
    Ok(ParsedFile {
        domain: domain.value,
        domain_line,
        root,
    })
}

struct Builder<'a> {
    file: &'a str,
    options: &'a LoadOptions,
}

/// Where a descriptor goes among its siblings with the same key.
enum Slot {
    Exact(String),
    Wildcard(Pattern),
    Any,
}

impl Builder<'_> {
    fn file(&self) -> String {
        self.file.to_owned()
    }

    /// Adds `descriptors` as children of `parent`, whose path is `parent_path`.
    fn add_level(
        &self,
        parent: &mut Node,
        parent_path: &str,
        descriptors: Vec<Spanned<DescriptorDoc>>,
    ) -> Result<(), RulesError> {
        // (key, value) → line of its first definition at this level.
        let mut seen: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for spanned in descriptors {
            let at = line(spanned.referenced);
            let doc = spanned.value;
            let key = match &doc.key {
                Some(k) if !k.value.is_empty() => k.value.clone(),
                _ => {
                    return Err(RulesError::EmptyKey {
                        file: self.file(),
                        line: at,
                    });
                }
            };
            let value = doc
                .value
                .as_ref()
                .map_or("", |v| v.value.as_str())
                .to_owned();
            if let Some(first_line) = seen.insert((key.clone(), value.clone()), at) {
                let descriptor = if value.is_empty() {
                    format!("`{key}`")
                } else {
                    format!("`{key}: {value}`")
                };
                return Err(RulesError::DuplicateDescriptor {
                    file: self.file(),
                    line: at,
                    descriptor,
                    first_line,
                });
            }
            let segment = if value.is_empty() {
                key.clone()
            } else {
                format!("{key}_{value}")
            };
            let path = if parent_path.is_empty() {
                segment
            } else {
                format!("{parent_path}.{segment}")
            };
            let slot = if value.is_empty() {
                Slot::Any
            } else {
                Pattern::new(&value).map_or_else(|| Slot::Exact(value.clone()), Slot::Wildcard)
            };
            let shared = self.share_threshold(&doc, &slot, at)?;
            let mut node = Node {
                rule: doc
                    .rate_limit
                    .map(|rl| {
                        let quota = doc.quota_mode.as_ref().is_some_and(|q| q.value);
                        let detailed = doc.detailed_metric.as_ref().is_some_and(|d| d.value);
                        self.rule(rl, &path, doc.shadow_mode, quota, detailed)
                    })
                    .transpose()?,
                children: Default::default(),
                location: format!("{}:{at}", self.file),
            };
            self.add_level(&mut node, &path, doc.descriptors.unwrap_or_default())?;
            let siblings: &mut KeyRules = parent.children.entry(key).or_default();
            match slot {
                Slot::Exact(value) => {
                    siblings.exact.insert(value, node);
                }
                Slot::Wildcard(pattern) => siblings.wildcards.push(WildcardRule {
                    pattern,
                    shared,
                    node,
                }),
                Slot::Any => siblings.any = Some(Box::new(node)),
            }
        }
        Ok(())
    }

    fn share_threshold(
        &self,
        doc: &DescriptorDoc,
        slot: &Slot,
        at: u64,
    ) -> Result<bool, RulesError> {
        match &doc.share_threshold {
            Some(flag) if flag.value => match slot {
                Slot::Wildcard(_) => Ok(true),
                Slot::Exact(_) | Slot::Any => Err(RulesError::ShareThresholdWithoutWildcard {
                    file: self.file(),
                    line: line(flag.referenced).max(at),
                }),
            },
            _ => Ok(false),
        }
    }

    fn rule(
        &self,
        spanned: Spanned<RateLimitDoc>,
        path: &str,
        shadow: bool,
        quota: bool,
        detailed: bool,
    ) -> Result<Rule, RulesError> {
        let at = line(spanned.referenced);
        let doc = spanned.value;
        let name = doc.name.map(|n| n.value).filter(|n| !n.is_empty());
        let mut replaces = Vec::new();
        for r in doc.replaces.unwrap_or_default() {
            let r_line = line(r.referenced);
            match r.value.name.map(|n| n.value) {
                Some(n) if !n.is_empty() => {
                    if name.as_deref() == Some(n.as_str()) {
                        return Err(RulesError::SelfReplace {
                            file: self.file(),
                            line: r_line,
                            name: n,
                        });
                    }
                    replaces.push(n);
                }
                _ => {
                    return Err(RulesError::EmptyReplaces {
                        file: self.file(),
                        line: r_line,
                    });
                }
            }
        }
        let unit = match &doc.unit {
            Some(u) => match Unit::parse(&u.value) {
                Some(unit) => Some(unit),
                None if doc.unlimited && u.value.is_empty() => None,
                None => {
                    return Err(RulesError::UnknownUnit {
                        file: self.file(),
                        line: line(u.referenced),
                        unit: u.value.clone(),
                    });
                }
            },
            None => None,
        };
        let limit = if doc.unlimited {
            if let (Some(_), Some(u)) = (unit, &doc.unit) {
                return Err(RulesError::UnitWithUnlimited {
                    file: self.file(),
                    line: line(u.referenced),
                });
            }
            RuleLimit::Unlimited
        } else {
            let Some(unit) = unit else {
                return Err(RulesError::MissingUnit {
                    file: self.file(),
                    line: at,
                });
            };
            let Some(requests) = doc.requests_per_unit else {
                return Err(RulesError::MissingRequestsPerUnit {
                    file: self.file(),
                    line: at,
                });
            };
            let (buckets, buckets_line) = match &doc.buckets {
                Some(b) => (b.value, line(b.referenced)),
                None => (u64::from(self.options.default_buckets), at),
            };
            let window = u16::try_from(buckets)
                .map_err(|_| crate::window::WindowError::TooManyBuckets {
                    buckets: u16::MAX,
                    max: crate::window::MAX_BUCKETS,
                })
                .and_then(|b| WindowSpec::new(unit.window_ms(), b, EstimateMode::Interpolated))
                .map_err(|source| RulesError::BadBuckets {
                    file: self.file(),
                    line: buckets_line,
                    buckets,
                    unit,
                    source,
                })?;
            RuleLimit::Limited {
                requests_per_unit: requests.value,
                unit,
                limit: Limit {
                    max: requests.value,
                    window,
                },
            }
        };
        Ok(Rule {
            name,
            path: path.to_owned(),
            limit,
            shadow,
            quota,
            detailed,
            replaces,
            location: format!("{}:{at}", self.file),
        })
    }
}
