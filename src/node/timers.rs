//! The node core's periodic timers, as deadlines it keeps itself: the driver only asks when
//! the next one is due ([`Timers::next`]) and wakes the core then.

use std::time::Duration;

use tokio::time::Instant;

/// A tick later than this is a missed tick: the next one is a whole period after it, not
/// after the deadline that was missed (tokio's `MissedTickBehavior::Delay`, with its
/// tolerance), so a node that stalled does not fire a burst of catch-up rounds.
const LATE: Duration = Duration::from_millis(5);

/// The periodic work of a node, in the order it runs when several are due at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Periodic {
    /// Registers that changed, to the members (`gossip_interval`).
    SummaryRound,
    /// This node's registers to one member, a page at a time (`anti_entropy_interval`).
    AntiEntropy,
    /// Announces to seeds and down members that are not members (`REJOIN_INTERVAL`).
    Rejoin,
    /// Expired windows dropped (`gc_interval`).
    CollectGarbage,
}

impl Periodic {
    pub const ALL: [Periodic; 4] = [
        Periodic::SummaryRound,
        Periodic::AntiEntropy,
        Periodic::Rejoin,
        Periodic::CollectGarbage,
    ];
}

#[derive(Debug, Clone)]
struct Every {
    period: Duration,
    due: Instant,
}

/// Deadlines of the periodic work. Every timer is first due at the start.
#[derive(Debug, Clone)]
pub struct Timers {
    every: [Every; 4],
}

impl Timers {
    /// `periods` in the order of [`Periodic::ALL`].
    pub fn new(start: Instant, periods: [Duration; 4]) -> Self {
        Self {
            every: periods.map(|period| Every {
                // A zero period would fire at every wake forever.
                period: period.max(Duration::from_millis(1)),
                due: start,
            }),
        }
    }

    /// When the next timer is due.
    pub fn next(&self) -> Instant {
        self.every
            .iter()
            .map(|e| e.due)
            .fold(self.every[0].due, Instant::min)
    }

    /// Takes the timers due at `now`, in [`Periodic::ALL`] order, and schedules each one's
    /// next deadline.
    pub fn take_due(&mut self, now: Instant) -> impl Iterator<Item = Periodic> + use<> {
        let mut due = Vec::new();
        for (what, every) in Periodic::ALL.into_iter().zip(self.every.iter_mut()) {
            if every.due > now {
                continue;
            }
            every.due = if now > every.due + LATE {
                now + every.period
            } else {
                every.due + every.period
            };
            due.push(what);
        }
        due.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn all_fire_at_start_then_each_on_its_own_period() {
        let t0 = crate::clock::monotonic_now();
        let mut timers = Timers::new(t0, [ms(200), ms(5_000), ms(500), ms(1_000)]);
        assert_eq!(timers.take_due(t0).collect::<Vec<_>>(), Periodic::ALL);
        assert_eq!(timers.next(), t0 + ms(200));
        assert_eq!(timers.take_due(t0 + ms(199)).count(), 0);
        assert_eq!(
            timers.take_due(t0 + ms(200)).collect::<Vec<_>>(),
            [Periodic::SummaryRound]
        );
        assert_eq!(
            timers.take_due(t0 + ms(500)).collect::<Vec<_>>(),
            [Periodic::SummaryRound, Periodic::Rejoin],
            "the round due at 400 ms, missed, fires once, and so does the rejoin"
        );
        // The round was 100 ms late: its next deadline counts from the late tick.
        assert_eq!(timers.next(), t0 + ms(700));
    }

    #[test]
    fn a_slightly_late_tick_keeps_the_phase() {
        let t0 = crate::clock::monotonic_now();
        let mut timers = Timers::new(t0, [ms(200); 4]);
        let _ = timers.take_due(t0).count();
        let _ = timers.take_due(t0 + ms(203)).count();
        assert_eq!(timers.next(), t0 + ms(400));
    }
}
