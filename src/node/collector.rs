//! Cluster metrics, read at scrape time from the counters the node keeps anyway: nothing on
//! the gossip path touches the metrics registry.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::view::{ClusterView, MemberState};
use crate::limiter::Limiter;

/// Exposes a node's wire, membership, key-table and clock counters.
#[derive(Debug)]
pub struct ClusterCollector {
    pub view: Arc<ClusterView>,
    pub limiter: Arc<Limiter>,
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    ConstCounter::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> std::fmt::Result {
    ConstGauge::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn gauge_f64(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    ConstGauge::new(v).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// Milliseconds as seconds: Prometheus names its base units.
fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

fn labelled_counters<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, v) in values {
        ConstCounter::new(v).encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

impl Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let wire = self.view.wire.snapshot();
        let e = &mut encoder;
        labelled_counters(
            e,
            "gossip_packets_sent",
            "Datagrams sent, by kind",
            "kind",
            wire.sent_packets.iter().map(|(k, v)| (*k, *v)),
        )?;
        labelled_counters(
            e,
            "gossip_bytes_sent",
            "Datagram bytes sent, envelope included, by kind",
            "kind",
            wire.sent_bytes.iter().map(|(k, v)| (*k, *v)),
        )?;
        labelled_counters(
            e,
            "gossip_packets_received",
            "Authenticated datagrams received, by kind",
            "kind",
            wire.received_packets.iter().map(|(k, v)| (*k, *v)),
        )?;
        labelled_counters(
            e,
            "gossip_bytes_received",
            "Authenticated datagram bytes received, by kind",
            "kind",
            wire.received_bytes.iter().map(|(k, v)| (*k, *v)),
        )?;
        labelled_counters(
            e,
            "datagrams_dropped",
            "Datagrams dropped, by reason (forged and unknown_key are authentication failures)",
            "reason",
            wire.dropped.iter().map(|(k, v)| (*k, *v)),
        )?;
        let m = wire.merges;
        labelled_counters(
            e,
            "merges",
            "Registers received from peers, by what merging them did",
            "outcome",
            [
                ("inserted", m.inserted),
                ("replaced", m.replaced),
                ("duplicate", m.duplicate),
                ("stale", m.stale),
                ("dominated", m.dominated),
                ("own", m.own),
                ("expired", m.expired),
                ("future", m.future),
                ("bad_shape", m.bad_shape + wire.bad_shape_entries),
                ("table_full", m.table_full),
                ("unsolicited", m.unsolicited),
                ("version_jump", m.version_jump),
                ("superseded", m.superseded),
                ("not_from_origin", m.not_from_origin),
            ],
        )?;
        gauge(
            e,
            "rules_mismatched_members",
            "Live members whose rules (as they last said) differ from this node's",
            self.view
                .rules_mismatched_members
                .load(std::sync::atomic::Ordering::Relaxed) as i64,
        )?;
        counter(
            e,
            "gossip_rounds",
            "Gossip (summary) rounds run",
            wire.summary_rounds,
        )?;
        counter(
            e,
            "ledger_entries_malformed",
            "Ledger entries dropped one by one (malformed) from datagrams otherwise taken",
            wire.malformed_ledger_entries,
        )?;
        counter(
            e,
            "gossip_register_sends",
            "Registers sent in gossip rounds, once per peer",
            wire.summary_register_sends,
        )?;
        counter(
            e,
            "membership_errors",
            "SWIM packets that did not apply (stale or from a declared-down member)",
            wire.membership_errors,
        )?;
        counter(
            e,
            "send_errors",
            "Datagrams the socket refused to send",
            wire.send_errors,
        )?;
        counter(
            e,
            "clock_offset_warnings",
            "Datagrams from a peer whose clock is off by more than the warning threshold",
            wire.clock_offset_warnings,
        )?;

        let members = self.view.members();
        {
            let mut family = e.encode_descriptor(
                "members",
                "Members as this node sees them (itself included), by state",
                None,
                MetricType::Gauge,
            )?;
            for state in [MemberState::Alive, MemberState::Suspect, MemberState::Down] {
                let n = members.iter().filter(|m| m.state == state).count();
                ConstGauge::new(n as i64)
                    .encode(family.encode_family(&[("state", state.as_str())])?)?;
            }
        }
        {
            let mut family = e.encode_descriptor(
                "clock_peer_offset_seconds",
                "Estimated clock offset of each peer (its wall clock minus cluster time)",
                None,
                MetricType::Gauge,
            )?;
            for m in members.iter().filter(|m| !m.is_self) {
                if let Some(offset) = m.clock_offset_ms {
                    let peer = m.addr.to_string();
                    ConstGauge::new(seconds(offset))
                        .encode(family.encode_family(&[("peer", peer.as_str())])?)?;
                }
            }
        }
        let (live, expected) = self.limiter.member_counts();
        gauge(
            e,
            "members_live",
            "Members live for admission, this node included",
            live as i64,
        )?;
        gauge(
            e,
            "members_expected",
            "Largest cluster size seen over the hold period (N_expected)",
            expected as i64,
        )?;

        let stats = self.limiter.stats();
        gauge(e, "keys", "Windows held", stats.keys as i64)?;
        gauge(
            e,
            "windows_without_owner",
            "Windows whose registers go to an owner that sends no sums back (held to the onset share while no other user's demand is known)",
            stats.blind_windows as i64,
        )?;
        gauge(
            e,
            "keys_max",
            "Most windows held at once (max_keys)",
            stats.max_keys as i64,
        )?;
        counter(
            e,
            "keys_expired",
            "Idle windows garbage collected",
            stats.expired_keys,
        )?;
        counter(
            e,
            "keys_evicted",
            "Windows evicted to make room",
            stats.evicted_keys,
        )?;
        counter(
            e,
            "keys_refused",
            "Checks on new keys refused because the key table was full of windows holding quota",
            stats.refused_table_full,
        )?;
        let clock = &self.view.clock;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        counter(
            e,
            "clock_rollbacks",
            "Times the wall clock stepped backwards (cluster time does not follow it)",
            load(&clock.rollbacks),
        )?;
        counter(
            e,
            "clock_forward_steps",
            "Times the wall clock stepped forwards (cluster time does not follow it)",
            load(&clock.forward_steps),
        )?;
        gauge_f64(
            e,
            "clock_own_offset_seconds",
            "This node's wall clock minus cluster time",
            seconds(clock.offset_ms.load(std::sync::atomic::Ordering::Relaxed)),
        )?;
        gauge_f64(
            e,
            "clock_correction_seconds",
            "How far this node's cluster time was moved from its wall clock",
            seconds(
                clock
                    .correction_ms
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
        )?;
        gauge_f64(
            e,
            "clock_cluster_lead_seconds",
            "This node's cluster time minus the median of the serving members' (as they say it, \
             less their latency; 0 while none says it): beyond 0.01 s the ledger's bound does not \
             hold as stated",
            seconds(
                clock
                    .cluster_lead_ms
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
        )?;
        gauge(
            e,
            "clock_fenced",
            "1 if this node's clock is beyond limiter.max_clock_drift_ms and it is cut off",
            i64::from(clock.fenced.load(std::sync::atomic::Ordering::Relaxed)),
        )?;
        gauge(
            e,
            "clock_fenced_members",
            "Members this node cuts off because their clocks are beyond the tolerance",
            load(&clock.fenced_members) as i64,
        )?;
        gauge(
            e,
            "clock_far_members",
            "Senders whose datagrams come more than 60 s from this node's clock (counted as silent \
             members; this node cuts itself off when they outnumber its live ones)",
            load(&clock.far_members) as i64,
        )?;
        counter(
            e,
            "clock_fence_events",
            "Times this node or a member was newly cut off for its clock",
            load(&clock.fence_events),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::wire::{DropReason, Kind};
    use crate::limiter::{KeyHasher, LimiterConfig, OriginId};

    #[test]
    fn cluster_families_render_with_their_values() {
        let view = Arc::new(ClusterView::default());
        view.wire.sent(Kind::Summary, 120);
        view.wire.dropped(DropReason::Forged);
        view.wire.dropped(DropReason::Forged);
        let limiter = Arc::new(Limiter::new(
            LimiterConfig::default(),
            OriginId(1),
            KeyHasher::from_secret(b"x"),
        ));
        let mut metrics = crate::metrics::Metrics::new();
        metrics
            .registry
            .register_collector(Box::new(ClusterCollector { view, limiter }));
        let text = metrics.encode();
        assert!(
            text.contains("limitmesh_gossip_bytes_sent_total{kind=\"summary\"} 120"),
            "{text}"
        );
        assert!(
            text.contains("limitmesh_datagrams_dropped_total{reason=\"forged\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("limitmesh_clock_cluster_lead_seconds 0"),
            "{text}"
        );
        assert!(text.contains("limitmesh_keys_max 100000"), "{text}");
        assert!(text.contains("limitmesh_members_live 1"), "{text}");
        assert!(text.contains("limitmesh_clock_fenced 0"), "{text}");
    }
}
