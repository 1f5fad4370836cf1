//! Ranges and cross-field rules of the node configuration.

use std::net::SocketAddr;

use super::provenance::Provenance;
use crate::gossip::wire::MAX_CLOCK_DISTANCE_MS;
use base64::Engine as _;

use super::{CLUSTER_KEY_BYTES, Config, ConfigError};
use crate::window::{EstimateMode, MAX_BUCKETS, WindowSpec};

/// Most bytes in a cluster id (it travels in every datagram header).
const MAX_CLUSTER_ID_BYTES: usize = 64;
/// Datagram size bounds: the IPv4 minimum reassembly size, and the largest UDP payload.
const MIN_PACKET_SIZE: u32 = 576;
const MAX_PACKET_SIZE: u32 = 65_507;
/// The longest a request may wait for its window's owner (`limiter.ask_wait_ms`); an owner
/// holds no ask's deadline further off than this.
pub const ASK_WAIT_MAX_MS: u64 = 1_000;

fn invalid(
    field: &'static str,
    provenance: &Provenance,
    message: impl Into<String>,
) -> ConfigError {
    invalid_because_of(field, field, provenance, message)
}

/// An error about `field` caused by the value of `cause` (where it was set is reported).
fn invalid_because_of(
    field: &'static str,
    cause: &str,
    provenance: &Provenance,
    message: impl Into<String>,
) -> ConfigError {
    ConfigError::Invalid {
        field,
        set_in: provenance.set_in(cause),
        message: message.into(),
    }
}

fn at_least(
    field: &'static str,
    value: u64,
    min: u64,
    provenance: &Provenance,
) -> Result<(), ConfigError> {
    if value < min {
        return Err(invalid(
            field,
            provenance,
            format!("{value} is below the minimum of {min}"),
        ));
    }
    Ok(())
}

/// Accepts `host:port` with a non-zero port, the host an IP address or a DNS name.
fn check_host_port(text: &str) -> Result<(), String> {
    if text.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("`{text}` is not host:port"));
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("`{text}` has no valid port")),
    }
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if name_ok {
        Ok(())
    } else {
        Err(format!(
            "`{text}`: `{host}` is neither an IP address nor a host name"
        ))
    }
}

pub(crate) fn validate(config: &Config, p: &Provenance) -> Result<(), ConfigError> {
    if config.node.name.trim().is_empty() {
        return Err(invalid("node.name", p, "must not be empty"));
    }

    let grpc = &config.grpc;
    at_least("grpc.request_timeout_ms", grpc.request_timeout_ms, 1, p)?;
    at_least(
        "grpc.max_concurrent_streams",
        u64::from(grpc.max_concurrent_streams),
        1,
        p,
    )?;
    if grpc.listen == config.http.listen && grpc.listen.port() != 0 {
        return Err(invalid(
            "http.listen",
            p,
            format!("{} is also grpc.listen", config.http.listen),
        ));
    }

    let cluster = &config.cluster;
    for seed in &cluster.seeds {
        check_host_port(seed).map_err(|m| invalid("cluster.seeds", p, m))?;
    }
    if !cluster.seed_dns.is_empty() {
        check_host_port(&cluster.seed_dns).map_err(|m| invalid("cluster.seed_dns", p, m))?;
    }
    advertise_addr(config, p)?;
    at_least("cluster.dns_refresh_ms", cluster.dns_refresh_ms, 100, p)?;
    if cluster.cluster_id.is_empty() || cluster.cluster_id.len() > MAX_CLUSTER_ID_BYTES {
        return Err(invalid(
            "cluster.cluster_id",
            p,
            format!("must be 1 to {MAX_CLUSTER_ID_BYTES} bytes"),
        ));
    }
    if !cluster.keys.is_empty() && !cluster.key_file.is_empty() {
        return Err(invalid(
            "cluster.key_file",
            p,
            "set cluster.keys or cluster.key_file, not both",
        ));
    }
    for (i, key) in cluster.keys.iter().enumerate() {
        decode_key(key).map_err(|m| invalid("cluster.keys", p, format!("key {}: {m}", i + 1)))?;
    }
    if !cluster.naming_key.is_empty() && !cluster.naming_key_file.is_empty() {
        return Err(invalid(
            "cluster.naming_key_file",
            p,
            "set cluster.naming_key or cluster.naming_key_file, not both",
        ));
    }
    if !cluster.naming_key.is_empty() {
        decode_key(&cluster.naming_key).map_err(|m| invalid("cluster.naming_key", p, m))?;
    }
    if cluster.has_peers()
        && cluster.keys.is_empty()
        && cluster.key_file.is_empty()
        && !cluster.insecure
    {
        let cause = if cluster.seeds.is_empty() {
            "cluster.seed_dns"
        } else {
            "cluster.seeds"
        };
        return Err(invalid_because_of(
            "cluster.keys",
            cause,
            p,
            "a node with seeds or seed_dns needs a cluster key (cluster.keys or cluster.key_file), \
             or cluster.insecure = true to gossip unauthenticated",
        ));
    }
    if cluster.insecure {
        insecure_on_this_machine_only(config, p)?;
    }
    at_least(
        "cluster.gossip_interval_ms",
        cluster.gossip_interval_ms,
        10,
        p,
    )?;
    if cluster.anti_entropy_interval_ms < cluster.gossip_interval_ms {
        return Err(invalid(
            "cluster.anti_entropy_interval_ms",
            p,
            "must be at least cluster.gossip_interval_ms",
        ));
    }
    if !(MIN_PACKET_SIZE..=MAX_PACKET_SIZE).contains(&cluster.max_packet_size) {
        return Err(invalid(
            "cluster.max_packet_size",
            p,
            format!("must be {MIN_PACKET_SIZE} to {MAX_PACKET_SIZE}"),
        ));
    }

    let limiter = &config.limiter;
    at_least("limiter.max_keys", limiter.max_keys as u64, 1, p)?;
    // A request waits this long inside the caller's own deadline (Envoy's is 20 ms by
    // default); a second is past any caller's patience.
    if !(1..=ASK_WAIT_MAX_MS).contains(&limiter.ask_wait_ms) {
        return Err(invalid("limiter.ask_wait_ms", p, "must be 1 to 1000"));
    }
    // Each save writes every live register: more often than a second is disk work for little.
    at_least(
        "limiter.state_save_interval_ms",
        limiter.state_save_interval_ms,
        1_000,
        p,
    )?;
    // Below a second, ordinary estimation error (a network latency) would cut members off for
    // their clocks and leave the whole cluster on strict shares.
    at_least(
        "limiter.max_clock_drift_ms",
        limiter.max_clock_drift_ms,
        1_000,
        p,
    )?;
    // A datagram sent further than MAX_CLOCK_DISTANCE_MS from the receiver's clock is refused
    // before its send time can correct anything: a clock that far off is never brought back
    // into the tolerance, only cut off. Half of it leaves room for both ends being off.
    if limiter.max_clock_drift_ms > MAX_CLOCK_DISTANCE_MS / 2 {
        return Err(invalid(
            "limiter.max_clock_drift_ms",
            p,
            format!(
                "must be at most {} (half the {} ms beyond which datagrams are refused as \
                 stale)",
                MAX_CLOCK_DISTANCE_MS / 2,
                MAX_CLOCK_DISTANCE_MS
            ),
        ));
    }
    // Every unit is a whole number of seconds, so a count that divides a second divides all.
    WindowSpec::new(1_000, limiter.default_buckets, EstimateMode::Interpolated).map_err(|e| {
        invalid(
            "limiter.default_buckets",
            p,
            format!("must be 1 to {MAX_BUCKETS} and divide 1000: {e}"),
        )
    })?;

    at_least(
        "rules.reload_interval_ms",
        config.rules.reload_interval_ms,
        10,
        p,
    )?;

    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&config.log.filter) {
        return Err(invalid("log.filter", p, e.to_string()));
    }
    Ok(())
}

/// Whether `host:port` (an IP address or a name) names this machine: a loopback address, or
/// `localhost`.
fn is_loopback(text: &str) -> bool {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return addr.ip().is_loopback();
    }
    text.rsplit_once(':')
        .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost"))
}

/// `cluster.insecure` gossips with a key anyone can derive from the cluster id: anyone who can
/// send to the gossip port can forge a member. So it is for tests on one machine, and every
/// address it gossips on must be loopback.
fn insecure_on_this_machine_only(config: &Config, p: &Provenance) -> Result<(), ConfigError> {
    let cluster = &config.cluster;
    let refuse = |field: &'static str, value: &str| {
        invalid_because_of(
            field,
            field,
            p,
            format!(
                "`{value}` is not a loopback address: cluster.insecure (datagrams anyone can \
                 forge) is for tests on one machine; set cluster.keys or cluster.key_file to \
                 gossip between machines"
            ),
        )
    };
    if !cluster.bind.ip().is_loopback() {
        return Err(refuse("cluster.bind", &cluster.bind.to_string()));
    }
    if !cluster.advertise.is_empty() && !is_loopback(&cluster.advertise) {
        return Err(refuse("cluster.advertise", &cluster.advertise));
    }
    if let Some(seed) = cluster.seeds.iter().find(|s| !is_loopback(s)) {
        return Err(refuse("cluster.seeds", seed));
    }
    if !cluster.seed_dns.is_empty() && !is_loopback(&cluster.seed_dns) {
        return Err(refuse("cluster.seed_dns", &cluster.seed_dns));
    }
    Ok(())
}

fn decode_key(text: &str) -> Result<[u8; CLUSTER_KEY_BYTES], String> {
    // The standard engine is strict: padding required, no whitespace, and the bits padding
    // leaves over must be zero, so a key that decodes has exactly the bytes an operator
    // generated, never a near-miss spelling.
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not base64: {e}"))?;
    <[u8; CLUSTER_KEY_BYTES]>::try_from(bytes.as_slice()).map_err(|_| {
        format!(
            "decodes to {} bytes; a key is {CLUSTER_KEY_BYTES}",
            bytes.len()
        )
    })
}

pub(crate) fn advertise_addr(config: &Config, p: &Provenance) -> Result<SocketAddr, ConfigError> {
    let cluster = &config.cluster;
    // The field whose value is the address (for where the error says it was set).
    let (addr, field) = if cluster.advertise.is_empty() {
        (cluster.bind, "cluster.bind")
    } else {
        let addr = cluster.advertise.parse::<SocketAddr>().map_err(|_| {
            invalid(
                "cluster.advertise",
                p,
                format!("`{}` is not ip:port", cluster.advertise),
            )
        })?;
        (addr, "cluster.advertise")
    };
    if cluster.has_peers() && (addr.ip().is_unspecified() || addr.port() == 0) {
        return Err(invalid_because_of(
            "cluster.advertise",
            field,
            p,
            format!(
                "peers must be able to reach {addr}: set cluster.advertise to this node's IP \
                 address and a fixed port"
            ),
        ));
    }
    Ok(addr)
}

pub(crate) fn cluster_keys(
    config: &Config,
    p: &Provenance,
) -> Result<Vec<[u8; CLUSTER_KEY_BYTES]>, ConfigError> {
    let cluster = &config.cluster;
    if cluster.key_file.is_empty() {
        return cluster
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                decode_key(k).map_err(|m| invalid("cluster.keys", p, format!("key {}: {m}", i + 1)))
            })
            .collect();
    }
    read_key_file(&cluster.key_file)
}

/// The keys of a key file, one base64 key a line (blank lines and `#` comments ignored): at
/// least one, or an error naming the file and line.
fn read_key_file(file: &str) -> Result<Vec<[u8; CLUSTER_KEY_BYTES]>, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
        file: file.to_owned(),
        source,
    })?;
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_text = line.trim();
        if line_text.is_empty() || line_text.starts_with('#') {
            continue;
        }
        keys.push(
            decode_key(line_text).map_err(|message| ConfigError::KeyFile {
                file: file.to_owned(),
                line: i + 1,
                message,
            })?,
        );
    }
    if keys.is_empty() {
        return Err(ConfigError::KeyFile {
            file: file.to_owned(),
            line: 1,
            message: "no keys".to_owned(),
        });
    }
    Ok(keys)
}

/// What names windows when no naming key is configured: stable for the cluster's life
/// (nothing rotates it), and a keyed hash all the same, so ids cannot be matched across
/// clusters with other ids.
const NAMING_FROM_CLUSTER_ID: &str = "limitmesh 2026-11 window naming secret from cluster id";

pub(crate) fn naming_secret(
    config: &Config,
    p: &Provenance,
) -> Result<[u8; CLUSTER_KEY_BYTES], ConfigError> {
    let cluster = &config.cluster;
    if !cluster.naming_key.is_empty() {
        return decode_key(&cluster.naming_key).map_err(|m| invalid("cluster.naming_key", p, m));
    }
    if !cluster.naming_key_file.is_empty() {
        let keys = read_key_file(&cluster.naming_key_file)?;
        if keys.len() > 1 {
            return Err(ConfigError::KeyFile {
                file: cluster.naming_key_file.clone(),
                line: 1,
                message: format!(
                    "{} keys; a naming key file holds one (the naming key never rotates)",
                    keys.len()
                ),
            });
        }
        return Ok(keys[0]);
    }
    Ok(blake3::derive_key(
        NAMING_FROM_CLUSTER_ID,
        cluster.cluster_id.as_bytes(),
    ))
}
