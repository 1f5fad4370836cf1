//! Naming windows on the wire: a 128-bit keyed hash of the user's key and the window shape.
//!
//! Users' key strings (user ids, IP addresses) never leave the node: peers only ever see the
//! hash. The hash key is derived from a cluster secret, so nobody outside the cluster can
//! compute ids or craft collisions, and the key table can use the id itself as its hash.

use std::hash::{BuildHasher, Hasher};

use crate::window::WindowSpec;

/// The wire name of one window of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(pub u128);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A limit on one key: at most `max` hits (requests, or units of cost) in any sliding
/// `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub max: u32,
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
        let word = |i: usize| u64::from_le_bytes(derived[8 * i..8 * i + 8].try_into().expect("8"));
        Self {
            k0: word(0),
            k1: word(1),
        }
    }

    /// The id of `key`'s window of shape `spec`. The estimate mode is not part of the name: it
    /// is how a window is read, not what it holds.
    ///
    /// SipHash-1-3 with a 128-bit result over the byte stream `shape (u64 LE) ‖ key`, where
    /// `shape = window_ms | buckets << 48` (a window is under 2^35 ms and has at most 64
    /// buckets: one block, and the stream is unambiguous). The key is hashed in place rather
    /// than copied behind the shape: this runs on every check. Every version of limitmesh
    /// must compute the same ids, or a rolling upgrade splits every limit in two; a test pins
    /// this to a reference implementation.
    #[inline]
    pub fn key_id(&self, key: &[u8], spec: &WindowSpec) -> KeyId {
        let mut s = SipState::new(self.k0, self.k1);
        s.compress(shape_word(spec));
        let mut blocks = key.chunks_exact(8);
        for block in &mut blocks {
            s.compress(u64::from_le_bytes(block.try_into().expect("8 bytes")));
        }
        let last = load_le(blocks.remainder()) | (((8 + key.len()) as u64 & 0xff) << 56);
        KeyId(s.finish128(last))
    }
}

/// A window shape as the first block of its key ids.
fn shape_word(spec: &WindowSpec) -> u64 {
    debug_assert!(spec.window_ms() < 1 << 48, "validated by WindowSpec");
    spec.window_ms() | (u64::from(spec.buckets()) << 48)
}

/// Up to seven bytes as a little-endian integer, in at most two loads (no call to memcpy: it
/// runs on every check).
#[inline]
fn load_le(b: &[u8]) -> u64 {
    let n = b.len();
    debug_assert!(n < 8);
    if n >= 4 {
        // Two overlapping four-byte loads; the overlap holds the same bytes in both.
        let lo = u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")));
        let hi = u64::from(u32::from_le_bytes(b[n - 4..].try_into().expect("4 bytes")));
        lo | (hi << (8 * (n - 4)))
    } else if n > 0 {
        u64::from(b[0])
            | (u64::from(b[n / 2]) << (8 * (n / 2)))
            | (u64::from(b[n - 1]) << (8 * (n - 1)))
    } else {
        0
    }
}

/// SipHash-1-3 state (one compression round per block, three finalization rounds), 128-bit
/// variant.
struct SipState {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl SipState {
    #[inline(always)]
    fn new(k0: u64, k1: u64) -> Self {
        Self {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            // The 128-bit variant tweaks v1.
            v1: k1 ^ 0x646f_7261_6e64_6f6d ^ 0xee,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
        }
    }

    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13) ^ self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16) ^ self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21) ^ self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17) ^ self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    #[inline(always)]
    fn compress(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.v0 ^= m;
    }

    /// Absorbs the last block (the tail bytes and the stream length) and returns
    /// `h2 << 64 | h1`.
    #[inline(always)]
    fn finish128(mut self, last: u64) -> u128 {
        self.compress(last);
        self.v2 ^= 0xee;
        self.round();
        self.round();
        self.round();
        let h1 = self.v0 ^ self.v1 ^ self.v2 ^ self.v3;
        self.v1 ^= 0xdd;
        self.round();
        self.round();
        self.round();
        let h2 = self.v0 ^ self.v1 ^ self.v2 ^ self.v3;
        (u128::from(h2) << 64) | u128::from(h1)
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

    #[test]
    fn id_hashes_made_to_collide_under_one_seed_do_not_under_another() {
        use std::hash::BuildHasher;
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let seeded = |seed: u64| IdHashBuilder {
            start: IdHasher(seed).finish(),
        };
        // Knowing the start, an attacker picks a second id whose fold equals the first's.
        let forge = |b: &IdHashBuilder| {
            let after_lo = |lo: u64| b.start.rotate_left(23).wrapping_mul(K) ^ lo;
            let hi2 = after_lo(1).rotate_left(23).wrapping_mul(K)
                ^ after_lo(2).rotate_left(23).wrapping_mul(K);
            (1u128, 2u128 | (u128::from(hi2) << 64))
        };
        let known = seeded(0);
        let (a, b) = forge(&known);
        assert_eq!(
            known.hash_one(a),
            known.hash_one(b),
            "the forgery works when the seed is known"
        );
        let secret = seeded(0x5EED_1234_5678_9ABC);
        assert_ne!(secret.hash_one(a), secret.hash_one(b));
        assert_ne!(secret.hash_one(a), known.hash_one(a));
    }
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

    /// Ids are part of the wire protocol: they must be exactly SipHash-1-3-128 of the
    /// documented stream, as computed by an independent implementation, for every key length
    /// around the block boundaries and beyond.
    #[test]
    fn ids_are_siphash13_128_of_shape_word_then_key() {
        use siphasher::sip128::{Hasher128, SipHasher13};
        use std::hash::Hasher as _;
        let hasher = KeyHasher::from_secret(b"reference");
        let specs = [
            WindowSpec::with_default_buckets(1_000).unwrap(),
            WindowSpec::new(crate::window::MAX_WINDOW_MS, 64, EstimateMode::Exact).unwrap(),
        ];
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 151 + 7) as u8).collect();
        for spec in &specs {
            let shape = spec.window_ms() | (u64::from(spec.buckets()) << 48);
            for len in 0..bytes.len() {
                let key = &bytes[..len];
                let mut reference = SipHasher13::new_with_keys(hasher.k0, hasher.k1);
                reference.write(&shape.to_le_bytes());
                reference.write(key);
                assert_eq!(
                    hasher.key_id(key, spec).0,
                    reference.finish128().as_u128(),
                    "key length {len}, spec {spec:?}"
                );
            }
        }
    }
}

/// Hashing for tables keyed by node boot ids (and other ids that are not keyed hashes): the
/// halves are folded and then mixed (SplitMix64's finalizer), so that ids with structure, such
/// as a simulator's numbered nodes, still spread over a hash table's buckets and control bytes.
/// Cheaper than SipHash.
///
/// The fold starts from a per-process seed ([`seed_id_hashes`]): the ids come from datagrams,
/// which in an insecure cluster anyone can forge, and with a known start the fold is easy to
/// invert (any target hash has a made-up id for every low half). The service seeds it from the
/// OS at start; a process that never does (the simulator, tests) hashes the same every run.
/// Nothing may depend on the order of such a table.
#[derive(Debug, Clone, Copy)]
pub struct IdHashBuilder {
    start: u64,
}

static ID_HASH_SEED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Seeds the id hashing of tables built from now on (call it once, before the node starts).
pub fn seed_id_hashes(seed: u64) {
    ID_HASH_SEED.store(seed, std::sync::atomic::Ordering::Relaxed);
}

impl Default for IdHashBuilder {
    fn default() -> Self {
        let seed = ID_HASH_SEED.load(std::sync::atomic::Ordering::Relaxed);
        Self {
            // Mixed, so that a seed of 0 (never seeded) still starts away from 0.
            start: IdHasher(seed).finish(),
        }
    }
}

#[derive(Debug, Default)]
pub struct IdHasher(u64);

impl BuildHasher for IdHashBuilder {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.start)
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = self.0.rotate_left(23).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ v;
    }

    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}
