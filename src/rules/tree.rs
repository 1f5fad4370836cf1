//! The rule tree of one domain, and how a request descriptor walks it.
//!
//! The semantics are envoyproxy/ratelimit's (`GetLimit` in its `src/config/config_impl.go`):
//!
//! - The descriptor's entries are taken in order, one tree level per entry.
//! - At each level an entry matches, in this order of preference: a rule with the same key and
//!   value; else the first rule (in file order) with the same key whose wildcard value matches;
//!   else a rule with the same key and no value. No match ends the walk.
//! - The rule that applies is the one reached by the descriptor's **last** entry, if it has a
//!   `rate_limit`. A rule higher up does not apply to a longer descriptor, and a descriptor
//!   longer than the tree matches nothing.
//!
//! Unlike envoyproxy/ratelimit, keys and values are compared as pairs rather than as a
//! `key_value` string, so key `a_b` never matches the pair (`a`, `b`).

use std::collections::BTreeMap;

use smallvec::SmallVec;

use super::Unit;
use super::key::DescriptorEntry;
use crate::limiter::Limit;

/// What a matched rule decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleLimit {
    /// Never limited (reported as unlimited).
    Unlimited,
    Limited {
        requests_per_unit: u32,
        unit: Unit,
        /// The window the limiter enforces: one unit long, with the rule's bucket count.
        limit: Limit,
    },
}

/// A `rate_limit` of the rules file, with the descriptor options that qualify it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `rate_limit.name`; what `replaces` refers to.
    pub name: Option<String>,
    /// The rule's path in its domain, `key_value.key2` as envoyproxy/ratelimit names stats.
    pub path: String,
    pub limit: RuleLimit,
    /// Counted, but never refuses (`shadow_mode`).
    pub shadow: bool,
    /// `quota_mode`: over its limit, it refuses a request only if every quota-mode
    /// descriptor of the request is over its limit too (envoyproxy/ratelimit's rule).
    pub quota: bool,
    /// `detailed_metric`: its decisions are counted per descriptor value
    /// (`limitmesh_descriptor_decisions_total`).
    pub detailed: bool,
    /// Names of the rules this one drops when both match one request.
    pub replaces: Vec<String>,
    /// `file:line` of the rule, for logs and errors.
    pub location: String,
}

impl Rule {
    /// The name if the rule has one, else its path.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.path)
    }
}

/// A wildcard value: `*` matches any run of characters (possibly empty), anywhere and any
/// number of times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    /// The literal runs between the stars; at least two, because the text has a star.
    parts: Vec<String>,
}

impl Pattern {
    /// `None` if `text` has no `*`.
    pub fn new(text: &str) -> Option<Pattern> {
        if !text.contains('*') {
            return None;
        }
        Some(Pattern {
            text: text.to_owned(),
            parts: text.split('*').map(str::to_owned).collect(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, value: &str) -> bool {
        let (Some(first), Some(last)) = (self.parts.first(), self.parts.last()) else {
            return false;
        };
        let fixed: usize = self.parts.iter().map(String::len).sum();
        if value.len() < fixed
            || !value.starts_with(first.as_str())
            || !value.ends_with(last.as_str())
        {
            return false;
        }
        // The region between the anchored first and last runs; the middle runs must appear in
        // it in order. Taking each at its leftmost position is optimal: it leaves the most room
        // for the rest. Slicing is safe: prefix and suffix are char-aligned and do not overlap
        // (their total length is at most the value's).
        let mut rest = &value[first.len()..value.len() - last.len()];
        for part in &self.parts[1..self.parts.len() - 1] {
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// One level of the tree: the rule at this node, and the rules below it by entry key.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub rule: Option<Rule>,
    pub children: BTreeMap<String, KeyRules>,
    /// `file:line` of the descriptor that made this node (of its `domain`, for a root).
    pub location: String,
}

/// A descriptor defined at the top of a domain in two files (see [`Node::merge_top_level`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Clash {
    /// `key` or `key: value`, quoted.
    pub descriptor: String,
    /// Its line in the file being merged in.
    pub line: u64,
    /// `file:line` of its first definition.
    pub first: String,
}

/// The rules below a node for one entry key.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct KeyRules {
    pub exact: BTreeMap<String, Node>,
    /// In file order: the first that matches wins.
    pub wildcards: Vec<WildcardRule>,
    /// The rule with the key and no value.
    pub any: Option<Box<Node>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WildcardRule {
    pub pattern: Pattern,
    /// `share_threshold`: every value the pattern matches counts on one counter.
    pub shared: bool,
    pub node: Node,
}

/// A rule that applies to a descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match<'r> {
    pub rule: &'r Rule,
    /// Entries (by index) matched by a `share_threshold` wildcard, with its pattern: the
    /// counter is named by the pattern instead of the value.
    pub shared: SmallVec<[(usize, &'r str); 1]>,
}

impl KeyRules {
    /// The node an entry value leads to, and the pattern to count under if it is shared.
    fn child(&self, value: &str) -> Option<(&Node, Option<&str>)> {
        if let Some(node) = self.exact.get(value) {
            return Some((node, None));
        }
        if let Some(w) = self.wildcards.iter().find(|w| w.pattern.matches(value)) {
            return Some((&w.node, w.shared.then_some(w.pattern.as_str())));
        }
        self.any.as_deref().map(|node| (node, None))
    }
}

impl Node {
    /// Adds the top-level descriptors of another file's rules of the same domain, as
    /// envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG` does: appended (wildcards after this
    /// domain's, in file order), and a descriptor (key and value, or key alone, or the same
    /// wildcard) already defined here is an error rather than merged level by level. Nothing
    /// is changed on error.
    pub fn merge_top_level(&mut self, other: Node) -> Result<(), Clash> {
        let clash = |key: &str, value: Option<&str>, theirs: &Node, ours: &Node| {
            let descriptor = match value {
                Some(v) => format!("`{key}: {v}`"),
                None => format!("`{key}`"),
            };
            let line = theirs
                .location
                .rsplit_once(':')
                .and_then(|(_, l)| l.parse().ok())
                .unwrap_or(0);
            Clash {
                descriptor,
                line,
                first: ours.location.clone(),
            }
        };
        for (key, theirs) in &other.children {
            let Some(ours) = self.children.get(key) else {
                continue;
            };
            for (value, node) in &theirs.exact {
                if let Some(first) = ours.exact.get(value) {
                    return Err(clash(key, Some(value), node, first));
                }
            }
            for w in &theirs.wildcards {
                if let Some(first) = ours
                    .wildcards
                    .iter()
                    .find(|o| o.pattern.as_str() == w.pattern.as_str())
                {
                    return Err(clash(key, Some(w.pattern.as_str()), &w.node, &first.node));
                }
            }
            if let (Some(node), Some(first)) = (&theirs.any, &ours.any) {
                return Err(clash(key, None, node, first));
            }
        }
        for (key, theirs) in other.children {
            let ours = self.children.entry(key).or_default();
            ours.exact.extend(theirs.exact);
            ours.wildcards.extend(theirs.wildcards);
            if theirs.any.is_some() {
                ours.any = theirs.any;
            }
        }
        Ok(())
    }

    /// The rule that applies to `entries` below this node (a domain's root), if any.
    pub fn lookup<'r>(&'r self, entries: &[DescriptorEntry<'_>]) -> Option<Match<'r>> {
        let mut node = self;
        let mut shared = SmallVec::new();
        for (i, entry) in entries.iter().enumerate() {
            let (child, pattern) = node.children.get(entry.key)?.child(entry.value)?;
            if let Some(pattern) = pattern {
                shared.push((i, pattern));
            }
            if i + 1 == entries.len() {
                return child.rule.as_ref().map(|rule| Match { rule, shared });
            }
            node = child;
        }
        None
    }

    /// Appends a template for every rule below this node, whose entries so far are `path`.
    pub(crate) fn templates(
        &self,
        domain: &str,
        path: &mut Vec<(String, Option<String>)>,
        out: &mut Vec<super::DescriptorTemplate>,
    ) {
        for (key, rules) in &self.children {
            let below = rules
                .exact
                .iter()
                .map(|(v, n)| (Some(v.clone()), n))
                .chain(
                    rules
                        .wildcards
                        .iter()
                        .map(|w| (Some(w.pattern.as_str().to_owned()), &w.node)),
                )
                .chain(rules.any.as_deref().map(|n| (None, n)));
            for (value, node) in below {
                path.push((key.clone(), value));
                if node.rule.is_some() {
                    out.push(super::DescriptorTemplate {
                        domain: domain.to_owned(),
                        entries: path.clone(),
                    });
                }
                node.templates(domain, path, out);
                path.pop();
            }
        }
    }

    /// Rules (nodes with a `rate_limit`) at or below this node.
    pub fn rule_count(&self) -> usize {
        let here = usize::from(self.rule.is_some());
        here + self
            .children
            .values()
            .map(|k| {
                k.exact.values().map(Node::rule_count).sum::<usize>()
                    + k.wildcards
                        .iter()
                        .map(|w| w.node.rule_count())
                        .sum::<usize>()
                    + k.any.as_deref().map_or(0, Node::rule_count)
            })
            .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Pattern {
        Pattern::new(text).unwrap()
    }

    #[test]
    fn trailing_star_is_a_prefix_match() {
        let pat = p("files/*");
        assert!(pat.matches("files/"));
        assert!(pat.matches("files/a.pdf"));
        assert!(!pat.matches("file"));
        assert!(!pat.matches("xfiles/a"));
    }

    #[test]
    fn middle_and_multiple_stars() {
        let pat = p("/api/*/action");
        assert!(pat.matches("/api/123/action"));
        assert!(pat.matches("/api//action"));
        assert!(!pat.matches("/api/123/other"));
        let multi = p("/api/*/resource/*/action");
        assert!(multi.matches("/api/v1/resource/123/action"));
        assert!(!multi.matches("/api/v1/resource/action"));
        // Prefix and suffix must not overlap.
        assert!(!p("ab*ba").matches("aba"));
        assert!(p("ab*ba").matches("abba"));
        assert!(p("*").matches(""));
        assert!(p("a**b").matches("ab"));
        assert!(p("*x*").matches("axb"));
        assert!(!p("*x*").matches("ab"));
    }

    #[test]
    fn patterns_handle_multibyte_text() {
        assert!(p("é*ü").matches("éaü"));
        assert!(p("é*ü").matches("éü"));
        assert!(!p("é*ü").matches("ü"));
        assert!(p("*ß*").matches("straße"));
    }

    #[test]
    fn text_without_a_star_is_not_a_pattern() {
        assert!(Pattern::new("plain").is_none());
        assert_eq!(p("a*").as_str(), "a*");
    }
}
