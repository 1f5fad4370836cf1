//! Naming windows on the wire: a 128-bit keyed hash of the user's key and the window shape.
//!
//! Users' key strings (user ids, IP addresses) never leave the node: peers only ever see the
//! hash. The hash key is derived from a cluster secret, so nobody outside the cluster can
//! compute ids or craft collisions, and the key table can use the id itself as its hash.

use std::hash::{BuildHasher, Hasher};

use siphasher::sip128::{Hasher128, SipHasher13};

use crate::window::WindowSpec;

/// The wire name of one window of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(pub u128);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A limit on one key: at most `limit` requests in any sliding `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub limit: u32,
    pub window: WindowSpec,
}

const KEY_ID_CONTEXT: &str = "limitmesh 2026-11 window key id v1";

/// Computes [`KeyId`]s under a secret shared by the cluster.
#[derive(Clone)]
pub struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher(..)")
    }
}

impl KeyHasher {
    /// Derives the hash key from `secret` (domain-separated, so the same secret can also key
    /// datagram authentication without the two uses ever sharing key material).
    pub fn from_secret(secret: &[u8]) -> Self {
        let derived = blake3::derive_key(KEY_ID_CONTEXT, secret);
        let (a, b) = derived.split_at(8);
        Self {
            k0: u64::from_le_bytes(a.try_into().expect("8 bytes")),
            k1: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
        }
    }

    /// The id of `key`'s window of shape `spec`. The estimate mode is not part of the name: it
    /// is how a window is read, not what it holds.
    pub fn key_id(&self, key: &[u8], spec: &WindowSpec) -> KeyId {
        // One contiguous input (shape, then the key; unambiguous because the shape has a fixed
        // width): SipHash runs fastest on a single write.
        const INLINE: usize = 54;
        let mut buf = [0u8; 10 + INLINE];
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        buf[..8].copy_from_slice(&spec.window_ms().to_le_bytes());
        buf[8..10].copy_from_slice(&spec.buckets().to_le_bytes());
        if key.len() <= INLINE {
            buf[10..10 + key.len()].copy_from_slice(key);
            h.write(&buf[..10 + key.len()]);
        } else {
            h.write(&buf[..10]);
            h.write(key);
        }
        KeyId(h.finish128().as_u128())
    }
}

/// Hashing for tables keyed by [`KeyId`]: the id already is a keyed hash, so fold it.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyIdHashBuilder;

#[derive(Debug, Default)]
pub struct KeyIdHasher(u64);

impl BuildHasher for KeyIdHashBuilder {
    type Hasher = KeyIdHasher;
    fn build_hasher(&self) -> KeyIdHasher {
        KeyIdHasher(0)
    }
}

impl Hasher for KeyIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached if something other than a KeyId is hashed; stay correct anyway.
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(17) ^ u64::from_le_bytes(b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = (v as u64) ^ ((v >> 64) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::EstimateMode;

    #[test]
    fn ids_depend_on_key_shape_and_secret_but_not_mode() {
        let a = KeyHasher::from_secret(b"cluster-a");
        let b = KeyHasher::from_secret(b"cluster-b");
        let sec = WindowSpec::with_default_buckets(1_000).unwrap();
        let min = WindowSpec::with_default_buckets(60_000).unwrap();
        let sec20 = WindowSpec::new(1_000, 20, EstimateMode::Interpolated).unwrap();
        let sec_exact = WindowSpec::new(1_000, 10, EstimateMode::Exact).unwrap();
        let id = a.key_id(b"tenant=42", &sec);
        assert_eq!(id, a.key_id(b"tenant=42", &sec), "deterministic");
        assert_eq!(id, a.key_id(b"tenant=42", &sec_exact));
        assert_ne!(id, a.key_id(b"tenant=43", &sec));
        assert_ne!(id, a.key_id(b"tenant=42", &min));
        assert_ne!(id, a.key_id(b"tenant=42", &sec20));
        assert_ne!(id, b.key_id(b"tenant=42", &sec));
        assert_ne!(a.key_id(b"", &sec), a.key_id(b"\0", &sec));
        // Long keys take the two-write path; it is the same function of the same bytes.
        let long = vec![7u8; 300];
        assert_ne!(a.key_id(&long, &sec), a.key_id(&long[..299], &sec));
    }
}
