//! The values a scenario's limits and traffic may take; errors name the field.

use limitmesh::window::WindowSpec;

use crate::workload::Workload;

/// Checks a limit's values; errors name `at`'s fields.
pub(super) fn check_limit(
    at: &str,
    (requests, window_ms, buckets): (u32, u64, u16),
) -> Result<(), (String, String)> {
    if requests == 0 {
        return Err((format!("{at}.requests"), "0: expected at least 1".into()));
    }
    WindowSpec::new(window_ms, buckets, Default::default()).map_err(|e| {
        (
            at.to_owned(),
            format!("window_ms {window_ms} with buckets {buckets}: {e}"),
        )
    })?;
    Ok(())
}

/// Checks a traffic table's values; errors name `at`'s fields (`traffic`,
/// `descriptors[0].traffic`).
pub(super) fn check_workload(at: &str, w: &Workload) -> Result<(), (String, String)> {
    let share = |f: &str, v: f64| {
        if (0.0..=1.0).contains(&v) {
            Ok(())
        } else {
            Err((format!("{at}.{f}"), format!("{v}: expected 0 to 1")))
        }
    };
    let overload = |f: &str, v: f64| {
        if (0.0..=1_000.0).contains(&v) {
            Ok(())
        } else {
            Err((format!("{at}.{f}"), format!("{v}: expected 0 to 1000")))
        }
    };
    match *w {
        Workload::Uniform { overload: o } | Workload::Burst { overload: o, .. } => {
            overload("overload", o)
        }
        Workload::Skewed {
            overload: o,
            hot_share,
        } => {
            overload("overload", o)?;
            share("hot_share", hot_share)
        }
        Workload::BurstAfterTrickle {
            overload: o,
            trickle,
            ..
        } => {
            overload("overload", o)?;
            share("trickle", trickle)
        }
        Workload::Ramp {
            from,
            to,
            from_ms,
            until_ms,
        } => {
            overload("from", from)?;
            overload("to", to)?;
            if until_ms <= from_ms {
                return Err((
                    format!("{at}.until_ms"),
                    format!("{until_ms} is not after from_ms {from_ms}"),
                ));
            }
            Ok(())
        }
    }
}
