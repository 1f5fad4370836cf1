//! A digest of what a rule set decides, so that members can tell whether they enforce the
//! same limits (a node's digest travels in its heartbeats; `node/rules_digest.rs`).
//!
//! It covers everything that changes a decision: each domain, each descriptor key, value and
//! wildcard pattern (in the order wildcards are tried), each rule's limit (requests, unit,
//! window and buckets), `unlimited`, `name`, `replaces`, `shadow_mode`, `quota_mode`,
//! `share_threshold`, and the load options. It leaves out where a rule was written (file,
//! line), comments and formatting, and `detailed_metric` (which changes only what is
//! counted): the same rules reloaded, or moved between files, keep their digest.

use super::RuleSet;
use super::tree::{KeyRules, Node, RuleLimit};

/// Feeds a canonical encoding: every string with its length, every list with its count, so
/// that no two rule sets encode alike.
struct Canonical(blake3::Hasher);

impl Canonical {
    fn u64(&mut self, v: u64) {
        self.0.update(&v.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.update(s.as_bytes());
    }

    fn flag(&mut self, b: bool) {
        self.0.update(&[u8::from(b)]);
    }

    fn node(&mut self, node: &Node) {
        match &node.rule {
            None => self.flag(false),
            Some(rule) => {
                self.flag(true);
                self.flag(rule.name.is_some());
                self.str(rule.name.as_deref().unwrap_or(""));
                match &rule.limit {
                    RuleLimit::Unlimited => self.flag(false),
                    RuleLimit::Limited {
                        requests_per_unit,
                        unit,
                        limit,
                    } => {
                        self.flag(true);
                        self.u64(u64::from(*requests_per_unit));
                        self.str(unit.name());
                        self.u64(u64::from(limit.max));
                        self.u64(limit.window.window_ms());
                        self.u64(u64::from(limit.window.buckets()));
                    }
                }
                self.flag(rule.shadow);
                self.flag(rule.quota);
                self.u64(rule.replaces.len() as u64);
                for r in &rule.replaces {
                    self.str(r);
                }
            }
        }
        self.u64(node.children.len() as u64);
        for (key, rules) in &node.children {
            self.str(key);
            self.key_rules(rules);
        }
    }

    fn key_rules(&mut self, rules: &KeyRules) {
        self.u64(rules.exact.len() as u64);
        for (value, node) in &rules.exact {
            self.str(value);
            self.node(node);
        }
        self.u64(rules.wildcards.len() as u64);
        for w in &rules.wildcards {
            self.str(w.pattern.as_str());
            self.flag(w.shared);
            self.node(&w.node);
        }
        self.flag(rules.any.is_some());
        if let Some(node) = &rules.any {
            self.node(node);
        }
    }
}

impl RuleSet {
    /// The digest of what these rules decide (see the module documentation). Never 0, which
    /// the gossip reserves for "not said".
    pub fn digest(&self) -> u64 {
        let mut c = Canonical(blake3::Hasher::new_derive_key("limitmesh rules digest v1"));
        let options = self.options();
        c.u64(u64::from(options.default_buckets));
        c.flag(options.shadow_mode);
        c.flag(options.quota_mode);
        c.u64(self.domains.len() as u64);
        for (domain, rules) in &self.domains {
            c.str(domain);
            c.node(&rules.root);
        }
        let mut first = [0u8; 8];
        first.copy_from_slice(&c.0.finalize().as_bytes()[..8]);
        u64::from_le_bytes(first).max(1)
    }
}
