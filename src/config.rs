//! Node configuration: a TOML file, overridden by environment variables, with every default
//! documented here and returned by [`Config::default`].
//!
//! An environment variable `LIMITMESH__SECTION__KEY` sets `key` of `[section]`, for example
//! `LIMITMESH__GRPC__LISTEN=0.0.0.0:9000`; lists are comma-separated
//! (`LIMITMESH__CLUSTER__SEEDS=10.0.0.1:7946,10.0.0.2:7946`). Any other variable starting
//! with `LIMITMESH__` is an error, so that a misspelt one is not silently ignored.
//!
//! Errors name where the bad value came from: `file:line` for the file (from the TOML
//! parser's spans), the variable for the environment.

mod components;
pub mod demo;
mod limiter_settings;
mod load;
mod provenance;
mod validate;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use self::demo::{DEMO_CONFIG_TOML, DEMO_RULES_NAME, DEMO_RULES_YAML};
pub use self::limiter_settings::{
    AdmissionName, ArbitrationName, LimiterSettings, PartitionPolicyName, TableFullPolicyName,
};
pub use self::load::ENV_PREFIX;
pub use self::provenance::SetIn;
pub use self::validate::ASK_WAIT_MAX_MS;

/// Length of a cluster key, in bytes.
pub const CLUSTER_KEY_BYTES: usize = 32;

/// The whole node configuration. Every section and field may be omitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub node: NodeConfig,
    pub grpc: GrpcConfig,
    pub http: HttpConfig,
    pub cluster: ClusterConfig,
    pub limiter: LimiterSettings,
    pub rules: RulesConfig,
    pub log: LogConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's name in logs and member lists. Default: the host name, else `limitmesh`.
    pub name: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            name: default_node_name(),
        }
    }
}

/// The host name (Linux: the kernel's; else `$HOSTNAME`), or `limitmesh`.
fn default_node_name() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let env = std::env::var("HOSTNAME").ok();
    kernel
        .into_iter()
        .chain(env)
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| "limitmesh".to_owned())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// Where the gRPC services (own API, Envoy RLS, health, reflection) listen. Default:
    /// `127.0.0.1:8081`, envoyproxy/ratelimit's port.
    pub listen: SocketAddr,
    /// A request still running after this long is answered with an error. Envoy waits 20 ms by
    /// default; decisions take microseconds. Default: 50.
    pub request_timeout_ms: u64,
    /// HTTP/2 streams per connection. Default: 1024.
    pub max_concurrent_streams: u32,
    /// Rate limit headers in Envoy responses (`response_headers_to_add`). Default: `none`, as
    /// envoyproxy/ratelimit and Limitador: Envoy's filter computes the draft-03 headers itself
    /// from the statuses when `enable_x_ratelimit_headers: DRAFT_VERSION_03` is set.
    pub rate_limit_headers: RateLimitHeadersName,
}

/// See `limitmesh::rpc::RateLimitHeaders`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RateLimitHeadersName {
    None,
    #[serde(rename = "draft-03")]
    Draft03,
    Ietf,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            request_timeout_ms: 50,
            max_concurrent_streams: 1024,
            rate_limit_headers: RateLimitHeadersName::None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Where the admin HTTP server (metrics, health, JSON checks) listens. Default:
    /// `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Whether `POST /json` is served there. It is a check like any other, so it consumes
    /// quota and honours limit overrides: `auto` serves it only when `listen` is a loopback
    /// address, so that a listener opened to the network for metrics and probes lets nobody
    /// spend quota; `on` serves it wherever `listen` is; `off` never. Default: `auto`.
    pub json: JsonCheckName,
}

/// See [`HttpConfig::json`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JsonCheckName {
    Auto,
    On,
    Off,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            json: JsonCheckName::Auto,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The UDP socket for membership and gossip. Default: `127.0.0.1:7946`.
    pub bind: SocketAddr,
    /// The address peers reach this node at, `ip:port`. Default: empty, meaning `bind`. With
    /// peers it must be a concrete address (not `0.0.0.0`).
    pub advertise: String,
    /// Peers to join, `host:port` each. Default: none (a cluster of one).
    pub seeds: Vec<String>,
    /// A `host:port` whose addresses are the seeds, resolved again every `dns_refresh_ms`
    /// (a Kubernetes headless Service). Default: empty.
    pub seed_dns: String,
    /// Default: 30000.
    pub dns_refresh_ms: u64,
    /// Names the cluster in every datagram; nodes of other clusters are ignored. Default:
    /// `limitmesh`.
    pub cluster_id: String,
    /// The keyring: base64 of 32-byte keys. The first is the primary (it signs); the others are
    /// still accepted, for rotation. Default: none.
    pub keys: Vec<String>,
    /// Alternative to `keys`: a file with one base64 key per line (blank lines and `#`
    /// comments ignored). Default: empty.
    pub key_file: String,
    /// The secret that names windows (base64 of 32 bytes), kept apart from the sealing keys so
    /// that a key rotation never renames a window: every node of a cluster must have the same.
    /// Without it (and without `naming_key_file`) windows are named under a secret derived
    /// from `cluster_id`, which is stable but not secret. Default: empty.
    pub naming_key: String,
    /// Alternative to `naming_key`: a file holding it (one base64 line; blank lines and `#`
    /// comments ignored). Default: empty.
    pub naming_key_file: String,
    /// Allows seeds or DNS discovery without keys, for tests on one machine: datagrams are then
    /// sealed with a key derived from the cluster id, which anyone can forge, so `bind`,
    /// `advertise`, `seeds` and `seed_dns` must all be loopback (`127.0.0.1`, `::1`,
    /// `localhost`). Default: false.
    pub insecure: bool,
    /// Default: 200.
    pub gossip_interval_ms: u64,
    /// Default: 5000.
    pub anti_entropy_interval_ms: u64,
    /// Largest datagram sent. Default: 1400 (fits a 1500-byte MTU).
    pub max_packet_size: u32,
    /// A node with peers admits nothing until it holds the cluster's state (every member it
    /// knows has pushed its registers), or until this long after it started. Default: 5000.
    pub warmup_timeout_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 7946)),
            advertise: String::new(),
            seeds: Vec::new(),
            seed_dns: String::new(),
            dns_refresh_ms: 30_000,
            cluster_id: "limitmesh".to_owned(),
            keys: Vec::new(),
            key_file: String::new(),
            naming_key: String::new(),
            naming_key_file: String::new(),
            insecure: false,
            gossip_interval_ms: 200,
            anti_entropy_interval_ms: 5_000,
            max_packet_size: 1_400,
            warmup_timeout_ms: 5_000,
        }
    }
}

impl ClusterConfig {
    /// Whether this node is configured to have peers.
    pub fn has_peers(&self) -> bool {
        !self.seeds.is_empty() || !self.seed_dns.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    /// A rules file or a directory of `*.yaml`/`*.yml` files. Default: empty, meaning the
    /// embedded demo rules.
    pub path: String,
    /// How often the files are checked for changes. Default: 1000.
    pub reload_interval_ms: u64,
    /// One domain's descriptors may be spread over several files, which are merged (as
    /// envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`); a descriptor defined at the top of a
    /// domain in two files is an error naming both. Default: false (a domain in two files is
    /// an error).
    pub merge_domains: bool,
    /// Answer every request OK, whatever the limits say, and count the decisions as usual
    /// (envoyproxy/ratelimit's `SHADOW_MODE`): for trying rules out on live traffic. Default:
    /// false.
    pub shadow_mode: bool,
    /// Every limited descriptor in quota mode (envoyproxy/ratelimit's `QUOTA_MODE`): a
    /// request is refused only when all of its descriptors are over their limits. Default:
    /// false.
    pub quota_mode: bool,
}

impl Default for RulesConfig {
    fn default() -> Self {
        Self {
            path: String::new(),
            reload_interval_ms: 1_000,
            merge_domains: false,
            shadow_mode: false,
            quota_mode: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Default: `text`.
    pub format: LogFormat,
    /// A tracing env-filter directive, e.g. `info,limitmesh=debug`. Default: `info`.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".to_owned(),
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Malformed TOML, an unknown key, or a value of the wrong type, in the file.
    #[error("{file}:{line}:{column}: {message}")]
    Toml {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A `LIMITMESH__` variable that names no setting or holds a bad value.
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    /// A value out of range, or settings that contradict each other. `set_in` is where the
    /// value came from.
    #[error("{set_in}: {field}: {message}")]
    Invalid {
        field: &'static str,
        set_in: SetIn,
        message: String,
    },
    #[error("{file}:{line}: {message}")]
    KeyFile {
        file: String,
        line: usize,
        message: String,
    },
}

impl Config {
    /// The embedded demo configuration (one node on 127.0.0.1).
    pub fn demo() -> Result<Self, ConfigError> {
        load::parse(
            "<embedded demo config>",
            DEMO_CONFIG_TOML,
            std::iter::empty(),
        )
    }

    /// Reads the TOML file at `path` (none: the embedded demo configuration), applies the
    /// process's `LIMITMESH__` environment variables, and validates the result.
    pub fn load(path: Option<&std::path::Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(path, std::env::vars_os())
    }

    /// [`Config::load`] with the given environment instead of the process's.
    pub fn load_with_env(
        path: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Result<Self, ConfigError> {
        match path {
            None => load::parse("<embedded demo config>", DEMO_CONFIG_TOML, env),
            Some(path) => {
                let file = path.display().to_string();
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    file: file.clone(),
                    source,
                })?;
                load::parse(&file, &text, env)
            }
        }
    }

    /// Parses TOML text (`file` names it in errors), applies `env` and validates.
    pub fn from_toml(
        file: &str,
        text: &str,
        env: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Result<Self, ConfigError> {
        load::parse(file, text, env)
    }

    /// Checks ranges and cross-field rules. Values are reported as [`SetIn::Default`];
    /// [`Config::load`] validates knowing where each value was set.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self, &provenance::Provenance::default())
    }

    /// The address peers reach this node at.
    pub fn advertise_addr(&self) -> Result<SocketAddr, ConfigError> {
        validate::advertise_addr(self, &provenance::Provenance::default())
    }

    /// The keyring, primary key first: `cluster.keys`, or the lines of `cluster.key_file`.
    /// Empty when neither is set.
    pub fn cluster_keys(&self) -> Result<Vec<[u8; CLUSTER_KEY_BYTES]>, ConfigError> {
        validate::cluster_keys(self, &provenance::Provenance::default())
    }

    /// The secret windows are named under: `cluster.naming_key`, the key in
    /// `cluster.naming_key_file`, or one derived from `cluster.cluster_id`. Never one of the
    /// sealing keys, which rotate.
    pub fn naming_secret(&self) -> Result<[u8; CLUSTER_KEY_BYTES], ConfigError> {
        validate::naming_secret(self, &provenance::Provenance::default())
    }
}
