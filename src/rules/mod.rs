//! Rules: which limit applies to a request descriptor, read from the YAML format of
//! envoyproxy/ratelimit so that its users migrate by pointing limitmesh at their files.
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: tenant              # no value: each tenant gets its own counter
//!     rate_limit:
//!       unit: second
//!       requests_per_unit: 100
//!       buckets: 20            # limitmesh extension: buckets per sliding window (default 10)
//!   - key: path
//!     value: "/admin/*"        # wildcard value
//!     shadow_mode: true        # counted, never refuses
//!     rate_limit: { unit: minute, requests_per_unit: 10, name: admin }
//! ```
//!
//! Supported: `domain`; nested `descriptors` with `key` and optional `value` (`*` wildcards
//! anywhere in it); `rate_limit` with `unit` (second to year), `requests_per_unit`,
//! `unlimited`, `name`, `replaces`; `shadow_mode`; `quota_mode`; `share_threshold`;
//! `detailed_metric`. `value_to_metric` and `metadata` are accepted and ignored.
//! Matching is described on [`RuleSet::lookup`]; `replaces` acts per request, in `rpc`.
//!
//! A [`RuleSet`] is immutable; [`RulesHandle`] swaps in a new one on reload and keeps the old
//! one if the new files are invalid.

mod digest;
mod error;
mod handle;
mod key;
mod parse;
mod source;
mod tree;
mod unit;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use error::RulesError;
pub use handle::{Reload, RulesHandle, WatchReport, watch};
pub use key::{DescriptorEntry, EntryBytes, descriptor_key, plain_key};
pub use source::{MAX_FILE_BYTES, MAX_FILES, RulesSource};
pub use tree::{Match, Pattern, Rule, RuleLimit};
pub use unit::Unit;

use crate::window::DEFAULT_BUCKETS;

/// How rules are built from files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Buckets per window for rules that do not set `buckets`.
    pub default_buckets: u16,
    /// A domain may span several files (`rules.merge_domains`).
    pub merge_domains: bool,
    /// Every request is answered OK, whatever the limits say; decisions are counted as
    /// usual (`rules.shadow_mode`, envoyproxy/ratelimit's `SHADOW_MODE`).
    pub shadow_mode: bool,
    /// Every limited descriptor is in quota mode (`rules.quota_mode`, envoyproxy/ratelimit's
    /// `QUOTA_MODE`).
    pub quota_mode: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            default_buckets: DEFAULT_BUCKETS,
            merge_domains: false,
            shadow_mode: false,
            quota_mode: false,
        }
    }
}

/// The rules of one domain.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DomainRules {
    root: tree::Node,
    /// `file:line` of its `domain`.
    location: String,
}

/// What the rules say about one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<'r> {
    /// The domain has no rules at all.
    UnknownDomain,
    /// The domain has rules, but none applies to this descriptor.
    NoMatch,
    Matched(Match<'r>),
}

/// A descriptor that reaches one rule (see [`RuleSet::descriptor_templates`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorTemplate {
    pub domain: String,
    /// Per entry: the key, and the value (`None`: any value; a value with `*` is a pattern).
    pub entries: Vec<(String, Option<String>)>,
}

/// Every domain's rules, as loaded at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    domains: BTreeMap<String, DomainRules>,
    options: LoadOptions,
    rule_count: usize,
    files: Vec<String>,
}

impl RuleSet {
    /// No rules: every descriptor is unlimited.
    pub fn empty(options: LoadOptions) -> Self {
        Self {
            domains: BTreeMap::new(),
            options,
            rule_count: 0,
            files: Vec::new(),
        }
    }

    /// Reads and validates every rules file of `source`. The first error (in file name order)
    /// is returned.
    pub fn load(source: &RulesSource, options: LoadOptions) -> Result<Self, RulesError> {
        let documents = source.documents()?;
        let mut set = Self::empty(options);
        for doc in documents {
            set.add_file(&doc.name, &doc.text)?;
        }
        Ok(set)
    }

    /// Builds a rule set from one file's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str, options: LoadOptions) -> Result<Self, RulesError> {
        let mut set = Self::empty(options);
        set.add_file(file, text)?;
        Ok(set)
    }

    fn add_file(&mut self, file: &str, text: &str) -> Result<(), RulesError> {
        let parsed = parse::parse_file(file, text, &self.options)?;
        let rules = parsed.root.rule_count();
        match self.domains.get_mut(&parsed.domain) {
            Some(existing) if self.options.merge_domains => {
                existing
                    .root
                    .merge_top_level(parsed.root)
                    .map_err(|clash| RulesError::DuplicateAcrossFiles {
                        file: file.to_owned(),
                        line: clash.line,
                        domain: parsed.domain.clone(),
                        descriptor: clash.descriptor,
                        first: clash.first,
                    })?;
            }
            Some(existing) => {
                return Err(RulesError::DuplicateDomain {
                    file: file.to_owned(),
                    line: parsed.domain_line,
                    domain: parsed.domain,
                    first: existing.location.clone(),
                });
            }
            None => {
                self.domains.insert(
                    parsed.domain,
                    DomainRules {
                        root: parsed.root,
                        location: format!("{file}:{}", parsed.domain_line),
                    },
                );
            }
        }
        self.rule_count += rules;
        self.files.push(file.to_owned());
        Ok(())
    }

    /// The rule that applies to a descriptor (its entries, in order) in `domain`, as
    /// envoyproxy/ratelimit matches: one tree level per entry; at each level the rule with the
    /// entry's key and value, else the first (in file order) with its key and a wildcard value
    /// that matches, else the one with its key and no value; and the rule reached by the
    /// **last** entry applies if it has a `rate_limit` (a shorter rule above does not).
    pub fn lookup<'r>(&'r self, domain: &str, entries: &[DescriptorEntry<'_>]) -> Lookup<'r> {
        match self.domains.get(domain) {
            None => Lookup::UnknownDomain,
            Some(rules) => rules
                .root
                .lookup(entries)
                .map_or(Lookup::NoMatch, Lookup::Matched),
        }
    }

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// One descriptor for each rule (with a `rate_limit`) of every domain, as a load generator
    /// would send it: the domain and, per entry, the key and the value the rule names (exact,
    /// a wildcard pattern, or `None` for any value). In domain order, then tree order.
    pub fn descriptor_templates(&self) -> Vec<DescriptorTemplate> {
        let mut out = Vec::new();
        for (domain, rules) in &self.domains {
            let mut path = Vec::new();
            rules.root.templates(domain, &mut path, &mut out);
        }
        out
    }

    /// Domain names, sorted.
    pub fn domains(&self) -> impl Iterator<Item = &str> + '_ {
        self.domains.keys().map(String::as_str)
    }

    /// Rules with a `rate_limit` (limited or unlimited), over all domains.
    pub fn rule_count(&self) -> usize {
        self.rule_count
    }

    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// The files the rules came from, in load order.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    pub fn options(&self) -> LoadOptions {
        self.options
    }

    /// Buckets per window for limits that do not say (rules without `buckets`, Envoy limit
    /// overrides, inline limits with `buckets: 0`).
    pub fn default_buckets(&self) -> u16 {
        self.options.default_buckets
    }
}
