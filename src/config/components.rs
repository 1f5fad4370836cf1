//! One home for turning the configuration into the settings of each component: the limiter,
//! the cluster node, the gRPC server and the rules. Components know nothing of [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    ArbitrationName, Config, ConfigError, DEMO_RULES_NAME, DEMO_RULES_YAML, JsonCheckName,
    PartitionPolicyName, RateLimitHeadersName, TableFullPolicyName,
};
use crate::crdt::Arbitration;
use crate::limiter::{LimiterConfig, PartitionPolicy, Policy, TableFullPolicy};
use crate::node::NodeParams;
use crate::rpc::{RateLimitHeaders, ServeOptions};
use crate::rules::{LoadOptions, RulesSource};

impl Config {
    /// The core limiter's configuration.
    pub fn limiter_config(&self) -> LimiterConfig {
        let l = &self.limiter;
        LimiterConfig {
            max_keys: l.max_keys,
            policy: Policy::DemandShare(match l.partition_policy {
                PartitionPolicyName::Strict => PartitionPolicy::Strict,
                PartitionPolicyName::Available => PartitionPolicy::Available,
            }),
            arbitration: match l.arbitration {
                ArbitrationName::VectorDominance => Arbitration::VectorDominance,
                ArbitrationName::MaxTimestamp => Arbitration::MaxTimestamp,
            },
            onset_ms: l.onset_ms,
            gossip_interval_ms: self.cluster.gossip_interval_ms,
            expected_hold_ms: l.expected_hold_ms,
            max_clock_drift_ms: l.max_clock_drift_ms,
            when_full: match l.when_table_full {
                TableFullPolicyName::Deny => TableFullPolicy::Deny,
                TableFullPolicyName::Error => TableFullPolicy::Error,
            },
            ..LimiterConfig::default()
        }
    }

    /// Where the rules come from: `rules.path`, or the embedded demo rules.
    pub fn rules_source(&self) -> RulesSource {
        if self.rules.path.is_empty() {
            RulesSource::Embedded {
                name: DEMO_RULES_NAME,
                text: DEMO_RULES_YAML,
            }
        } else {
            RulesSource::Path(PathBuf::from(&self.rules.path))
        }
    }

    pub fn rules_load_options(&self) -> LoadOptions {
        LoadOptions {
            default_buckets: self.limiter.default_buckets,
            merge_domains: self.rules.merge_domains,
            shadow_mode: self.rules.shadow_mode,
            quota_mode: self.rules.quota_mode,
        }
    }

    /// The cluster node's parameters, for a process whose boot id is `node_id` and whose
    /// gossip socket peers reach at `advertise`. Seeds are left to the caller, which resolves
    /// their names.
    pub fn node_params(
        &self,
        node_id: uuid::Uuid,
        advertise: SocketAddr,
    ) -> Result<NodeParams, ConfigError> {
        let c = &self.cluster;
        let mut params = NodeParams::new(
            node_id,
            advertise,
            u64::from_le_bytes(node_id.as_bytes()[..8].try_into().unwrap_or([0; 8])),
        );
        params.set_cluster_id(&c.cluster_id);
        params.ring_key = crate::node::ring_key_of_secret(&self.naming_secret()?);
        params.set_gossip_interval(Duration::from_millis(c.gossip_interval_ms));
        params.anti_entropy_interval = Duration::from_millis(c.anti_entropy_interval_ms);
        params.max_packet_size = c.max_packet_size as usize;
        params.expect_peers = c.has_peers();
        // Without keys anyone can forge datagrams (`cluster.insecure`): send registers only to
        // addresses that have shown they receive them, so that nobody can aim the cluster at a
        // victim.
        params.verify_return_route = c.has_peers() && self.cluster_keys()?.is_empty();
        params.warmup_timeout = Duration::from_millis(c.warmup_timeout_ms);
        params.state_path =
            (!self.limiter.state_path.is_empty()).then(|| PathBuf::from(&self.limiter.state_path));
        Ok(params)
    }

    /// The gRPC server's settings.
    pub fn serve_options(&self) -> ServeOptions {
        let grpc = &self.grpc;
        ServeOptions {
            request_timeout: Duration::from_millis(grpc.request_timeout_ms),
            max_concurrent_streams: grpc.max_concurrent_streams,
            rate_limit_headers: match grpc.rate_limit_headers {
                RateLimitHeadersName::None => RateLimitHeaders::None,
                RateLimitHeadersName::Draft03 => RateLimitHeaders::Draft03,
                RateLimitHeadersName::Ietf => RateLimitHeaders::Ietf,
            },
        }
    }

    /// Whether the admin listener serves `POST /json` (`http.json`); if not, why, in one line
    /// naming the setting.
    pub fn json_check_served(&self) -> Result<(), String> {
        let listen = self.http.listen;
        match self.http.json {
            JsonCheckName::On => Ok(()),
            JsonCheckName::Auto if listen.ip().to_canonical().is_loopback() => Ok(()),
            JsonCheckName::Auto => Err(format!(
                "http.json is \"auto\" and http.listen {listen} is not a loopback address \
                 (set http.json = \"on\" to serve it there)"
            )),
            JsonCheckName::Off => Err("http.json is \"off\"".to_owned()),
        }
    }
}
