//! The configuration a node runs with when it is given none: one node on 127.0.0.1, no peers,
//! and a few demonstration rules, so that `cargo run --release` serves something to try.

/// The node configuration used when no file is given. Every value is the default; it is spelled
/// out so that it doubles as a starting point for a real configuration.
pub const DEMO_CONFIG_TOML: &str = r#"# limitmesh demo node: one node on 127.0.0.1, no peers, the embedded demo rules.

[node]
name = "demo"

[grpc]
listen = "127.0.0.1:8081"          # own API and Envoy RLS v3
request_timeout_ms = 50
max_concurrent_streams = 1024
rate_limit_headers = "none"          # or "draft-03" (x-ratelimit-*) or "ietf" (RateLimit, RateLimit-Policy)

[http]
listen = "127.0.0.1:8080"          # /metrics, /healthz, /readyz

[cluster]
bind = "127.0.0.1:7946"            # gossip (UDP)
advertise = ""                     # defaults to bind
seeds = []                         # no peers: a cluster of one
seed_dns = ""
dns_refresh_ms = 30000
cluster_id = "limitmesh"
keys = []
key_file = ""
insecure = false
gossip_interval_ms = 200
anti_entropy_interval_ms = 5000
max_packet_size = 1400
warmup_timeout_ms = 5000             # with peers: admit nothing until their state arrives

[limiter]
max_keys = 100000
when_table_full = "deny"
partition_policy = "strict"
admission = "share"                  # or "ledger": owners lease tokens, nodes spend them
ask_wait_ms = 15                     # ledger: a request's longest wait for its owner
arbitration = "vector-dominance"
onset_ms = 500
expected_hold_ms = 60000
max_clock_drift_ms = 10000
default_buckets = 10
state_path = ""                      # e.g. "/var/lib/limitmesh/state": keeps quotas across restarts
state_save_interval_ms = 30000       # besides at a graceful stop

[rules]
path = ""                          # empty: the embedded demo rules
reload_interval_ms = 1000

[log]
format = "text"
filter = "info"
"#;

/// How logs and errors name the demo rules.
pub const DEMO_RULES_NAME: &str = "<embedded demo rules>";

/// The rules used when `rules.path` is empty.
pub const DEMO_RULES_YAML: &str = r#"# limitmesh demo rules (envoyproxy/ratelimit format).
domain: demo
descriptors:
  # Each client gets 10 requests per second, its own counter per value.
  - key: client
    rate_limit:
      name: per-client
      unit: second
      requests_per_unit: 10

  # Except a trusted one.
  - key: client
    value: trusted
    rate_limit:
      name: trusted-client
      unlimited: true

  # 100 requests per minute per path under /api/, counted together.
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit:
      name: api
      unit: minute
      requests_per_unit: 100
      buckets: 20

  # Watched but never enforced.
  - key: path
    value: /admin
    shadow_mode: true
    rate_limit:
      name: admin-shadow
      unit: hour
      requests_per_unit: 5
"#;
