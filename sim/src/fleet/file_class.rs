//! A class of keys in a fleet traffic file (`[[classes]]`, see `file.rs`): its table, and the
//! checks that turn it into a [`TrafficClass`].

use serde::Deserialize;
use toml::Spanned;

use super::config::{MAX_DURATION_MS, MAX_STREAMS, SLOT_MS};
use super::file_text::{Bad, Text, within};
use super::file_values::{LoadDoc, UsersDoc};
use super::load::Load;
use super::traffic::{KeyCount, Placement, TrafficClass, Users};

/// Largest load, as a multiple of a limit.
pub const MAX_LOAD: f64 = 1_000.0;

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum PlacementDoc {
    Random,
    InTurn,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClassDoc {
    pub(super) name: Spanned<String>,
    keys: Option<Spanned<u64>>,
    keys_per_node: Option<Spanned<u64>>,
    users: Option<Spanned<UsersDoc>>,
    placement: Option<PlacementDoc>,
    limit: Spanned<u32>,
    window_ms: Option<Spanned<u64>>,
    buckets: Option<Spanned<u16>>,
    hits_addend: Option<Spanned<u32>>,
    overload: Option<Spanned<LoadDoc>>,
    overloaded_every: Option<Spanned<u64>>,
    underload: Option<Spanned<LoadDoc>>,
}

/// Checks a load: finite multiples from 0 to [`MAX_LOAD`], a profile's points at increasing
/// times within the longest run.
fn check_load(text: &Text<'_>, load: &Spanned<LoadDoc>, field: &str) -> Result<Load, Bad> {
    let bad = |what: String| text.bad(load, field.to_owned(), what);
    let factor_ok = |f: f64| (0.0..=MAX_LOAD).contains(&f);
    match &load.get_ref().0 {
        Load::Constant(f) if !factor_ok(*f) => Err(bad(format!("{f}: expected 0 to {MAX_LOAD}"))),
        Load::Profile(points) if points.is_empty() => Err(bad("a profile of no points".into())),
        Load::Profile(points) => {
            for (i, &(t, f)) in points.iter().enumerate() {
                if !factor_ok(f) {
                    return Err(bad(format!("point {i}: {f}: expected 0 to {MAX_LOAD}")));
                }
                if t > MAX_DURATION_MS {
                    return Err(bad(format!(
                        "point {i}: {t} ms: expected at most {MAX_DURATION_MS}"
                    )));
                }
                if i > 0 && t <= points[i - 1].0 {
                    return Err(bad(format!(
                        "point {i}: {t} ms is not after the point before ({} ms)",
                        points[i - 1].0
                    )));
                }
            }
            Ok(load.get_ref().0.clone())
        }
        Load::Constant(_) => Ok(load.get_ref().0.clone()),
    }
}

pub(super) fn class(
    text: &Text<'_>,
    at: &str,
    spanned: &Spanned<ClassDoc>,
) -> Result<TrafficClass, Bad> {
    let d = spanned.get_ref();
    let field = |f: &str| format!("{at}.{f}");
    let name = d.name.get_ref();
    let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > 40 || !name.chars().all(name_ok) {
        return Err(text.bad(
            &d.name,
            field("name"),
            format!("{name:?}: expected 1 to 40 letters, digits, '-', '_' or '.'"),
        ));
    }
    let most = MAX_STREAMS as u64;
    let keys = match (&d.keys, &d.keys_per_node) {
        (Some(k), None) => {
            within(text, k, &field("keys"), 1..=most)?;
            KeyCount::Fixed(*k.get_ref() as usize)
        }
        (None, Some(k)) => {
            within(text, k, &field("keys_per_node"), 1..=most)?;
            KeyCount::PerNode(*k.get_ref() as usize)
        }
        _ => {
            return Err((
                text.line(spanned.span()),
                field("keys"),
                "give either keys (in all) or keys_per_node".into(),
            ));
        }
    };
    let users = match &d.users {
        None => Users::All,
        Some(u) => match *u.get_ref() {
            UsersDoc::All => Users::All,
            UsersDoc::Count(n) => {
                within(text, &Spanned::new(u.span(), n), &field("users"), 1..=most)?;
                Users::Count(n as usize)
            }
        },
    };
    let limit = *d.limit.get_ref();
    within(text, &d.limit, &field("limit"), 1..=u32::MAX)?;
    let window_ms = d.window_ms.as_ref().map_or(1_000, |w| *w.get_ref());
    let buckets = d
        .buckets
        .as_ref()
        .map_or(limitmesh::window::DEFAULT_BUCKETS, |b| *b.get_ref());
    let window_at = d.window_ms.as_ref().map_or(spanned.span(), Spanned::span);
    // Admissions are measured in 10 ms slots: a window is a whole number of them.
    if !(window_ms.is_multiple_of(SLOT_MS) && (SLOT_MS..=MAX_DURATION_MS).contains(&window_ms)) {
        return Err((
            text.line(window_at),
            field("window_ms"),
            format!(
                "{window_ms}: expected a multiple of {SLOT_MS} from {SLOT_MS} to {MAX_DURATION_MS}"
            ),
        ));
    }
    let cost = d.hits_addend.as_ref().map_or(1, |h| *h.get_ref());
    if let Some(h) = &d.hits_addend {
        // A request costing more than the limit is refused as invalid, never admitted.
        within(text, h, &field("hits_addend"), 1..=limit)?;
    }
    let every = d.overloaded_every.as_ref().map_or(1, |e| *e.get_ref());
    if let Some(e) = &d.overloaded_every {
        within(text, e, &field("overloaded_every"), 1..=most)?;
    }
    let load = |l: &Option<Spanned<LoadDoc>>, name: &str, default: f64| match l {
        None => Ok(Load::Constant(default)),
        Some(l) => check_load(text, l, &field(name)),
    };
    let class = TrafficClass {
        name: name.clone(),
        keys,
        users,
        placement: match d.placement {
            None | Some(PlacementDoc::Random) => Placement::Random,
            Some(PlacementDoc::InTurn) => Placement::InTurn,
        },
        limit,
        window_ms,
        buckets,
        cost,
        overload: load(&d.overload, "overload", 2.0)?,
        overloaded_every: every as usize,
        underload: load(&d.underload, "underload", 0.5)?,
    };
    class.window().map_err(|e| {
        (
            text.line(window_at),
            field("buckets"),
            format!("window_ms {window_ms} with buckets {buckets}: {e}"),
        )
    })?;
    Ok(class)
}
