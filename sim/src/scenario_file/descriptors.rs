//! The `[[descriptors]]` tables: more limited descriptors, each with its own traffic.

use serde::Deserialize;

use super::checks::{check_limit, check_workload};
use super::limits::{Rules, descriptor_name, resolve_limit};
use super::{MAX_DURATION_MS, MAX_NODES, ScenarioDoc};
use crate::cluster::SimDescriptor;
use crate::workload::Workload;

/// A `[[descriptors]]` table: one more limited descriptor and its own traffic.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DescriptorDoc {
    /// What reports call it; by default its entries (`tenant=globex`), or `descriptor N`.
    #[serde(default)]
    name: Option<String>,
    /// With a rules file (in `[limit]`): the descriptor's entries, looked up in its domain.
    #[serde(default)]
    descriptor: Option<Vec<[String; 2]>>,
    /// Without a rules file: the limit, defaults as in `[limit]`.
    #[serde(default)]
    requests: Option<u32>,
    #[serde(default)]
    window_ms: Option<u64>,
    #[serde(default)]
    buckets: Option<u16>,
    traffic: Workload,
}

/// Most descriptors a file may add to the main one.
pub const MAX_DESCRIPTORS: usize = 16;

/// The `[[descriptors]]` of `doc`, checked; an error gives the byte offset of its table, the
/// field and what is wrong.
pub(super) fn descriptors(
    doc: &ScenarioDoc,
    rules: Option<&Rules>,
) -> Result<Vec<SimDescriptor>, (Option<usize>, String, String)> {
    if doc.descriptors.len() > MAX_DESCRIPTORS {
        return Err((
            None,
            "descriptors".into(),
            format!(
                "{}: at most {MAX_DESCRIPTORS} besides the one in [limit]",
                doc.descriptors.len()
            ),
        ));
    }
    // Every node's admissions are kept per millisecond for each descriptor: the run's size
    // is bounded as a whole, at what the largest run of one descriptor takes.
    let cells = (1 + doc.descriptors.len() as u64)
        .saturating_mul(doc.nodes as u64)
        .saturating_mul(doc.duration_ms);
    let budget = MAX_NODES as u64 * MAX_DURATION_MS;
    if cells > budget {
        return Err((
            None,
            "descriptors".into(),
            format!(
                "{} descriptors on {} nodes for {} ms: descriptors × nodes × duration_ms is \
                 at most {budget}",
                1 + doc.descriptors.len(),
                doc.nodes,
                doc.duration_ms
            ),
        ));
    }
    let mut names: Vec<String> = doc
        .limit
        .descriptor
        .as_deref()
        .map(descriptor_name)
        .into_iter()
        .collect();
    let mut out = Vec::with_capacity(doc.descriptors.len());
    for (i, spanned) in doc.descriptors.iter().enumerate() {
        let at = format!("descriptors[{i}]");
        let offset = Some(spanned.span().start);
        let d = spanned.get_ref();
        let err = |(field, what): (String, String)| (offset, field, what);
        let limit = resolve_limit(
            &at,
            rules,
            d.descriptor.as_deref(),
            (d.requests, d.window_ms, d.buckets),
        )
        .map_err(err)?;
        check_limit(&at, limit).map_err(err)?;
        check_workload(&format!("{at}.traffic"), &d.traffic).map_err(err)?;
        let name = match (&d.name, &d.descriptor) {
            (Some(name), _) => name.clone(),
            (None, Some(entries)) => descriptor_name(entries),
            (None, None) => format!("descriptor {}", i + 1),
        };
        if name.is_empty() || name.len() > 200 {
            return Err(err((
                format!("{at}.name"),
                "expected 1 to 200 characters".into(),
            )));
        }
        if names.contains(&name) {
            return Err(err((
                format!("{at}.name"),
                format!("{name:?} names another descriptor of this file too"),
            )));
        }
        names.push(name.clone());
        out.push(SimDescriptor {
            name,
            limit: limit.0,
            window_ms: limit.1,
            buckets: limit.2,
            workload: d.traffic.clone(),
        });
    }
    Ok(out)
}
