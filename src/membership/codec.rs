//! foca's packets in bincode 2, always decoded under a size limit.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use bytes::{Buf, BufMut};
use foca::{Codec, Header, Member};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

/// A SWIM packet fits a datagram; this bounds what decoding a hostile one may claim.
const DECODE_LIMIT: usize = 16 * 1024;
const WIRE: Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT>> =
    bincode::config::standard().with_limit::<DECODE_LIMIT>();

#[derive(Debug, Error)]
pub enum CodecError {
    #[error("encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    #[error("decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    #[error("no room: {needed} bytes needed, {available} available")]
    NoSpace { needed: usize, available: usize },
}

/// Encodes each item to a scratch buffer first, so a member that does not fit never leaves a
/// half-written packet (foca's contract).
#[derive(Debug, Clone, Copy, Default)]
pub struct BincodeCodec;

impl BincodeCodec {
    fn put<V: Serialize>(v: &V, mut buf: impl BufMut) -> Result<(), CodecError> {
        let bytes = bincode::serde::encode_to_vec(v, WIRE)?;
        if buf.remaining_mut() < bytes.len() {
            return Err(CodecError::NoSpace {
                needed: bytes.len(),
                available: buf.remaining_mut(),
            });
        }
        buf.put_slice(&bytes);
        Ok(())
    }

    fn take<V: DeserializeOwned>(mut buf: impl Buf) -> Result<V, CodecError> {
        let (v, used) = bincode::serde::decode_from_slice(buf.chunk(), WIRE)?;
        buf.advance(used);
        Ok(v)
    }
}

impl<T: Serialize + DeserializeOwned> Codec<T> for BincodeCodec {
    type Error = CodecError;

    fn encode_header(&mut self, header: &Header<T>, buf: impl BufMut) -> Result<(), CodecError> {
        Self::put(header, buf)
    }

    fn decode_header(&mut self, buf: impl Buf) -> Result<Header<T>, CodecError> {
        Self::take(buf)
    }

    fn encode_member(&mut self, member: &Member<T>, buf: impl BufMut) -> Result<(), CodecError> {
        Self::put(member, buf)
    }

    fn decode_member(&mut self, buf: impl Buf) -> Result<Member<T>, CodecError> {
        Self::take(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::NodeId;

    #[test]
    fn members_round_trip_and_never_half_write() {
        let id = NodeId::new(
            uuid::Uuid::from_u128(5),
            "10.0.0.1:7946".parse().unwrap(),
            77,
        );
        let member = Member::alive(id.clone());
        let mut buf = Vec::new();
        BincodeCodec.encode_member(&member, &mut buf).unwrap();
        let decoded: Member<NodeId> = BincodeCodec.decode_member(&buf[..]).unwrap();
        assert_eq!(decoded.id(), &id);

        let mut small = Vec::new();
        let limited = (&mut small).limit(3);
        assert!(matches!(
            BincodeCodec.encode_member(&member, limited),
            Err(CodecError::NoSpace { .. })
        ));
        assert!(small.is_empty(), "nothing written when it does not fit");
        // A claimed string length of 2^50 is refused, not allocated.
        let hostile = [0xFDu8, 0, 0, 0, 0, 0, 0, 4, 0];
        let r: Result<Member<NodeId>, _> = BincodeCodec.decode_member(&hostile[..]);
        assert!(r.is_err());
    }
}
