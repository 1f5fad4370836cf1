//! A strict decoder for standard, padded base64 (RFC 4648 §4), enough for cluster keys.
//!
//! Strict means one spelling per byte string: the length must be a multiple of 4, padding only
//! at the end, no whitespace, and the bits padding leaves over must be zero. A key that decodes
//! has exactly the bytes an operator generated, never a near-miss.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Base64Error {
    #[error("length {0} is not a multiple of 4")]
    Length(usize),
    #[error("invalid character at position {0}")]
    Character(usize),
    #[error("padding in the middle of the text")]
    Padding,
    #[error("non-zero bits after the last byte")]
    TrailingBits,
}

fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Err(Base64Error::Length(bytes.len()));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (q, quad) in bytes.chunks_exact(4).enumerate() {
        let last = q + 1 == quads;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(Base64Error::Padding);
        }
        let mut acc: u32 = 0;
        for (i, &c) in quad[..4 - pad].iter().enumerate() {
            let v = sextet(c).ok_or(if c == b'=' {
                Base64Error::Padding
            } else {
                Base64Error::Character(q * 4 + i)
            })?;
            acc |= u32::from(v) << (18 - 6 * i);
        }
        let [_, b0, b1, b2] = acc.to_be_bytes();
        match pad {
            0 => out.extend_from_slice(&[b0, b1, b2]),
            1 => {
                if b2 != 0 {
                    return Err(Base64Error::TrailingBits);
                }
                out.extend_from_slice(&[b0, b1]);
            }
            _ => {
                if b1 != 0 || b2 != 0 {
                    return Err(Base64Error::TrailingBits);
                }
                out.push(b0);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_4648_test_vectors() {
        for (text, plain) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg==", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
        ] {
            assert_eq!(decode(text).unwrap(), plain.as_bytes(), "{text}");
        }
    }

    #[test]
    fn full_alphabet_and_high_bytes() {
        assert_eq!(decode("+/+/").unwrap(), [0xfb, 0xff, 0xbf]);
        assert_eq!(decode("AAAA").unwrap(), [0, 0, 0]);
        assert_eq!(decode("////").unwrap(), [0xff, 0xff, 0xff]);
    }

    #[test]
    fn refuses_every_non_canonical_spelling() {
        assert_eq!(decode("Zg="), Err(Base64Error::Length(3)));
        assert_eq!(decode("Zg"), Err(Base64Error::Length(2)));
        assert_eq!(decode("Zm9v\n"), Err(Base64Error::Length(5)));
        assert_eq!(decode("Zm 9"), Err(Base64Error::Character(2)));
        assert_eq!(decode("Zm-v"), Err(Base64Error::Character(2)));
        assert_eq!(decode("Zg==Zm9v"), Err(Base64Error::Padding));
        assert_eq!(decode("Z==="), Err(Base64Error::Padding));
        assert_eq!(decode("Z=g="), Err(Base64Error::Padding));
        assert_eq!(decode("Zh=="), Err(Base64Error::TrailingBits));
        assert_eq!(decode("Zm9="), Err(Base64Error::TrailingBits));
        assert_eq!(decode("é==="), Err(Base64Error::Length(5)));
    }
}
