//! The cluster's keys: one primary that seals, any number that still open (for rotation).

use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305};

use super::WireError;

const AEAD_CONTEXT: &str = "limitmesh 2026-11 datagram aead v1";
const FINGERPRINT_CONTEXT: &str = "limitmesh 2026-11 key fingerprint v1";

/// The cluster's keys. The first seals; all open, so a key can be rotated in before it is
/// used and kept for a while after it stops being used.
pub struct Keyring {
    keys: Vec<(u32, XChaCha20Poly1305)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fps: Vec<String> = self
            .keys
            .iter()
            .map(|(fp, _)| format!("{fp:08x}"))
            .collect();
        f.debug_struct("Keyring")
            .field("fingerprints", &fps)
            .finish()
    }
}

impl Keyring {
    /// Builds a keyring from secrets, primary first. Keys are derived (domain-separated), so
    /// the same secret never serves two purposes.
    pub fn new(secrets: &[[u8; 32]]) -> Result<Self, WireError> {
        if secrets.is_empty() {
            return Err(WireError::EmptyKeyring);
        }
        let keys = secrets
            .iter()
            .map(|s| {
                let aead = blake3::derive_key(AEAD_CONTEXT, s);
                let fp = blake3::derive_key(FINGERPRINT_CONTEXT, s);
                let fingerprint = u32::from_le_bytes([fp[0], fp[1], fp[2], fp[3]]);
                (fingerprint, XChaCha20Poly1305::new(Key::from_slice(&aead)))
            })
            .collect();
        Ok(Self { keys })
    }

    /// The sealing key and its fingerprint.
    pub(super) fn primary(&self) -> &(u32, XChaCha20Poly1305) {
        &self.keys[0]
    }

    /// The keys whose fingerprint is `fingerprint`, or, if `short`, whose fingerprint's low
    /// 16 bits are (a compact header's).
    pub(super) fn matching(
        &self,
        fingerprint: u32,
        short: bool,
    ) -> impl Iterator<Item = &XChaCha20Poly1305> {
        let mask = if short {
            super::envelope::SHORT_MASK
        } else {
            u32::MAX
        };
        self.keys
            .iter()
            .filter(move |(fp, _)| fp & mask == fingerprint)
            .map(|(_, k)| k)
    }

    pub fn fingerprints(&self) -> Vec<u32> {
        self.keys.iter().map(|(fp, _)| *fp).collect()
    }
}
