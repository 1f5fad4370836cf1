//! Between protobuf messages and the domain: requests in (checking their form and naming the
//! field at fault), decisions out. The only place in limitmesh that reads or builds prost
//! types for the services: `own.rs` for limitmesh's API, `envoy.rs` for Envoy's.

mod envoy;
mod own;

use smallvec::SmallVec;

pub(crate) use self::envoy::{envoy_request, envoy_response};
pub(crate) use self::own::{
    own_check, own_check_error, own_check_response, own_inspect, own_member, own_window,
};
use super::invalid::InvalidRequest;
use super::request::{MAX_DESCRIPTORS, Malformed, RequestEntry};
use crate::rules::EntryBytes;

/// Longest domain a request may name. Every key a request plans starts with its domain, so
/// an unbounded domain would be copied once per descriptor (and per check of a batch).
pub const MAX_DOMAIN_BYTES: usize = 256;

fn check_domain(domain: &str) -> Result<(), InvalidRequest> {
    if domain.is_empty() {
        return Err(InvalidRequest::new("domain", "must not be empty"));
    }
    if domain.len() > MAX_DOMAIN_BYTES {
        return Err(InvalidRequest::new(
            "domain",
            format!(
                "is {} bytes; the maximum is {MAX_DOMAIN_BYTES}",
                domain.len()
            ),
        ));
    }
    Ok(())
}

fn check_descriptor_count(count: usize) -> Result<(), InvalidRequest> {
    if count > MAX_DESCRIPTORS {
        return Err(InvalidRequest::new(
            "descriptors",
            format!("{count} given; the maximum is {MAX_DESCRIPTORS}"),
        ));
    }
    Ok(())
}

/// A descriptor's entries, checked: at least one, none with an empty key. A descriptor that
/// fails is malformed, not the request: it is answered on its own (see [`Malformed`]).
fn entries<'q>(
    i: usize,
    pairs: impl ExactSizeIterator<Item = RequestEntry<'q>>,
) -> Result<SmallVec<[RequestEntry<'q>; 4]>, Malformed> {
    if pairs.len() == 0 {
        return Err(Malformed::Entries(InvalidRequest::new(
            format!("descriptors[{i}].entries"),
            "must not be empty",
        )));
    }
    pairs
        .enumerate()
        .map(|(j, entry)| {
            if entry.key_bytes().is_empty() {
                Err(Malformed::Entries(InvalidRequest::new(
                    format!("descriptors[{i}].entries[{j}].key"),
                    "must not be empty",
                )))
            } else {
                Ok(entry)
            }
        })
        .collect()
}

fn millis(ms: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ms / 1_000).unwrap_or(i64::MAX),
        // Below 1e9, so it fits.
        nanos: ((ms % 1_000) * 1_000_000) as i32,
    }
}

/// Whole seconds, rounded up: a client that waits this long is never early.
fn ceil_seconds(ms: u64) -> u64 {
    ms.div_ceil(1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_split_seconds_and_nanos() {
        assert_eq!(
            millis(1_234),
            prost_types::Duration {
                seconds: 1,
                nanos: 234_000_000
            }
        );
        assert_eq!(millis(0), prost_types::Duration::default());
        assert_eq!(ceil_seconds(0), 0);
        assert_eq!(ceil_seconds(1), 1);
        assert_eq!(ceil_seconds(1_000), 1);
        assert_eq!(ceil_seconds(1_001), 2);
    }
}
