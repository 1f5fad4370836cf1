//! The time units of a rule's `rate_limit`, with the lengths envoyproxy/ratelimit gives them.
//!
//! Months and years are fixed lengths (30 and 365 days), not calendar periods: a limit is a
//! sliding window, and a window has one length.

use std::fmt;

const SECOND_MS: u64 = 1_000;
const DAY_MS: u64 = 86_400 * SECOND_MS;

/// A rule's unit of time; the window of `requests_per_unit` is one unit long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The window length this unit stands for.
    pub fn window_ms(self) -> u64 {
        match self {
            Unit::Second => SECOND_MS,
            Unit::Minute => 60 * SECOND_MS,
            Unit::Hour => 3_600 * SECOND_MS,
            Unit::Day => DAY_MS,
            Unit::Week => 7 * DAY_MS,
            Unit::Month => 30 * DAY_MS,
            Unit::Year => 365 * DAY_MS,
        }
    }

    /// Parses a unit name in any letter case (`second`, `SECOND`, `Second`), as rules files
    /// written for envoyproxy/ratelimit spell them.
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|unit| unit.name().eq_ignore_ascii_case(name))
    }

    /// The upper-case name, as Envoy's enums spell it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_follow_envoyproxy_ratelimit() {
        let seconds: Vec<u64> = Unit::ALL.iter().map(|u| u.window_ms() / 1000).collect();
        assert_eq!(
            seconds,
            [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000]
        );
    }

    #[test]
    fn parses_any_case_and_rejects_the_rest() {
        assert_eq!(Unit::parse("second"), Some(Unit::Second));
        assert_eq!(Unit::parse("MINUTE"), Some(Unit::Minute));
        assert_eq!(Unit::parse("Week"), Some(Unit::Week));
        assert_eq!(Unit::parse("yEaR"), Some(Unit::Year));
        assert_eq!(Unit::parse("unknown"), None);
        assert_eq!(Unit::parse(""), None);
        assert_eq!(Unit::parse("seconds"), None);
        for unit in Unit::ALL {
            assert_eq!(Unit::parse(unit.name()), Some(unit));
        }
    }

    #[test]
    fn every_unit_fits_a_window_with_default_buckets() {
        for unit in Unit::ALL {
            assert!(
                crate::window::WindowSpec::with_default_buckets(unit.window_ms()).is_ok(),
                "{unit}"
            );
        }
    }
}
