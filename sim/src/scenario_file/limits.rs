//! A scenario's limits: given in the file, or looked up in a rules file it names.

use std::path::Path;

use limitmesh::rules::{DescriptorEntry, LoadOptions, Lookup, RuleLimit, RuleSet, RulesSource};

use super::LimitDoc;

/// A rules file, read once, and where it was read from.
pub(super) struct Rules {
    set: RuleSet,
    path: std::path::PathBuf,
    domain: String,
}

/// `[limit]`'s rules file, read from `dir`, if it names one.
pub(super) fn read_rules(doc: &LimitDoc, dir: &Path) -> Result<Option<Rules>, (String, String)> {
    let Some(rules) = &doc.rules else {
        if doc.domain.is_some() || doc.descriptor.is_some() {
            return Err((
                "limit.rules".into(),
                "domain and descriptor go with a rules file".into(),
            ));
        }
        return Ok(None);
    };
    let Some(domain) = &doc.domain else {
        return Err(("limit.domain".into(), "a rules file needs a domain".into()));
    };
    let path = dir.join(rules);
    let set = RuleSet::load(&RulesSource::Path(path.clone()), LoadOptions::default())
        .map_err(|e| ("limit.rules".to_owned(), e.to_string()))?;
    Ok(Some(Rules {
        set,
        path,
        domain: domain.clone(),
    }))
}

/// `key=value` entries joined by `,`: how reports name a descriptor.
pub(super) fn descriptor_name(entries: &[[String; 2]]) -> String {
    entries
        .iter()
        .map(|[k, v]| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The limit of the table at `at` (`limit` or `descriptors[N]`): given (`given`, each
/// defaulting as in `[limit]`), or what `rules` give its `descriptor`.
pub(super) fn resolve_limit(
    at: &str,
    rules: Option<&Rules>,
    descriptor: Option<&[[String; 2]]>,
    given: (Option<u32>, Option<u64>, Option<u16>),
) -> Result<(u32, u64, u16), (String, String)> {
    let field = |f: &str| format!("{at}.{f}");
    let Some(rules) = rules else {
        if descriptor.is_some() {
            return Err((
                field("descriptor"),
                "a descriptor goes with a rules file (limit.rules)".into(),
            ));
        }
        return Ok((
            given.0.unwrap_or(1_000),
            given.1.unwrap_or(1_000),
            given.2.unwrap_or(10),
        ));
    };
    if given.0.is_some() || given.1.is_some() || given.2.is_some() {
        return Err((
            field("requests"),
            "the rules give the limit: leave out requests, window_ms and buckets".into(),
        ));
    }
    let Some(descriptor) = descriptor else {
        return Err((
            field("descriptor"),
            "a rules file needs a descriptor".into(),
        ));
    };
    let entries: Vec<DescriptorEntry<'_>> = descriptor
        .iter()
        .map(|[key, value]| DescriptorEntry { key, value })
        .collect();
    let named = || {
        format!(
            "{descriptor:?} in domain {:?} of {}",
            rules.domain,
            rules.path.display()
        )
    };
    match rules.set.lookup(&rules.domain, &entries) {
        Lookup::Matched(m) => match &m.rule.limit {
            RuleLimit::Limited { limit, .. } => {
                Ok((limit.max, limit.window.window_ms(), limit.window.buckets()))
            }
            RuleLimit::Unlimited => Err((field("descriptor"), format!("{} is unlimited", named()))),
        },
        _ => Err((field("descriptor"), format!("no rule limits {}", named()))),
    }
}
