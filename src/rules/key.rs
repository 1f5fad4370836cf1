//! Canonical counter keys: the bytes the limiter names a counter by.
//!
//! A key never leaves the node (peers see a keyed hash of it), so it is built for being
//! unambiguous, not for being read: a form tag, then length-prefixed components. Two different
//! (domain, entries) never give the same bytes, whatever the strings contain; with `key=value`
//! joined by separators, `a_b`/`c` and `a`/`b_c` would collide.
//!
//! The counter of a descriptor depends on its domain and on every entry's key and value, as
//! bytes, not on which rule matched: a rule changed by a reload (or a client's limit override
//! of the same window) keeps counting on the same counter. A value that is not valid UTF-8
//! (Envoy forwards header bytes as they are) names its counter by its bytes, so two such
//! values are two counters even where their UTF-8 views, which the rules see, are equal.
//!
//! A canonical form longer than [`MAX_KEY_BYTES`] is limited like any other: its key is a
//! BLAKE3 digest of the whole form (domain included) under a form tag of its own, so it can
//! never equal a key written out in full. The digest is computed as the form is streamed, without
//! building it. Every version of limitmesh must compute the same keys, or a rolling upgrade
//! splits a limit in two.

use crate::limiter::MAX_KEY_BYTES;

/// Leading byte of a descriptor's key.
const FORM_DESCRIPTOR: u8 = 1;
/// Leading byte of a plain key (own API `key`): never equal to a descriptor's key.
const FORM_PLAIN: u8 = 2;
/// Leading byte of a descriptor's key whose canonical form is too long: a digest of it.
const FORM_DESCRIPTOR_DIGEST: u8 = 3;
/// Leading byte of a plain key whose canonical form is too long: a digest of it.
const FORM_PLAIN_DIGEST: u8 = 4;

/// BLAKE3 key derivation context of the digest forms.
const DIGEST_CONTEXT: &str = "limitmesh 2026-11 long counter key v1";

/// Marks a value component that is the request's value.
const VALUE_LITERAL: u8 = 0;
/// Marks a value component that is a shared wildcard pattern (`share_threshold`): every value
/// the pattern matches counts on the same counter.
const VALUE_SHARED: u8 = 1;

/// One key/value pair of a request descriptor, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorEntry<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

impl<'a> DescriptorEntry<'a> {
    pub fn new(key: &'a str, value: &'a str) -> Self {
        Self { key, value }
    }
}

/// An entry as a counter key names it: the bytes of its key and value as the request sent
/// them.
pub trait EntryBytes {
    fn key_bytes(&self) -> &[u8];
    fn value_bytes(&self) -> &[u8];
}

impl EntryBytes for DescriptorEntry<'_> {
    fn key_bytes(&self) -> &[u8] {
        self.key.as_bytes()
    }

    fn value_bytes(&self) -> &[u8] {
        self.value.as_bytes()
    }
}

/// Where a canonical form is written: a key being built, or a digest being computed.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for blake3::Hasher {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

/// Length of `len` as an unsigned LEB128 varint.
fn varint_len(mut len: usize) -> usize {
    let mut bytes = 1;
    while len >= 0x80 {
        len >>= 7;
        bytes += 1;
    }
    bytes
}

fn put_varint(out: &mut impl Sink, mut len: usize) {
    let mut buf = [0u8; 10];
    let mut n = 0;
    while len >= 0x80 {
        buf[n] = (len as u8 & 0x7f) | 0x80;
        len >>= 7;
        n += 1;
    }
    buf[n] = len as u8;
    out.put(&buf[..=n]);
}

fn component_len(s: &[u8]) -> usize {
    varint_len(s.len()) + s.len()
}

fn put_component(out: &mut impl Sink, s: &[u8]) {
    put_varint(out, s.len());
    out.put(s);
}

/// The value that names entry `index`'s part of the counter.
fn value_of<'a>(
    entry: &'a impl EntryBytes,
    index: usize,
    shared: &[(usize, &'a str)],
) -> (u8, &'a [u8]) {
    match shared.iter().find(|(i, _)| *i == index) {
        Some((_, pattern)) => (VALUE_SHARED, pattern.as_bytes()),
        None => (VALUE_LITERAL, entry.value_bytes()),
    }
}

/// Bytes of a descriptor's canonical form, computed without building it.
fn descriptor_form_len(
    domain: &str,
    entries: &[impl EntryBytes],
    shared: &[(usize, &str)],
) -> usize {
    let entries_len: usize = entries
        .iter()
        .enumerate()
        .map(|(i, e)| component_len(e.key_bytes()) + 1 + component_len(value_of(e, i, shared).1))
        .sum();
    1 + component_len(domain.as_bytes()) + entries_len
}

fn put_descriptor_form(
    out: &mut impl Sink,
    domain: &str,
    entries: &[impl EntryBytes],
    shared: &[(usize, &str)],
) {
    out.put(&[FORM_DESCRIPTOR]);
    put_component(out, domain.as_bytes());
    for (i, entry) in entries.iter().enumerate() {
        put_component(out, entry.key_bytes());
        let (kind, value) = value_of(entry, i, shared);
        out.put(&[kind]);
        put_component(out, value);
    }
}

/// The key of a form too long to hold: `form`, then the digest of the whole canonical form
/// that `put_form` writes (33 bytes in all).
fn digest_key(form: u8, put_form: impl FnOnce(&mut blake3::Hasher)) -> Vec<u8> {
    let mut hasher = blake3::Hasher::new_derive_key(DIGEST_CONTEXT);
    put_form(&mut hasher);
    let mut out = Vec::with_capacity(1 + blake3::OUT_LEN);
    out.push(form);
    out.extend_from_slice(hasher.finalize().as_bytes());
    out
}

/// The counter key of a descriptor in `domain`. `shared` lists the entries (by index) whose
/// value is replaced by the wildcard pattern that matched them. At most [`MAX_KEY_BYTES`]: a
/// longer canonical form is replaced by its digest.
pub fn descriptor_key(
    domain: &str,
    entries: &[impl EntryBytes],
    shared: &[(usize, &str)],
) -> Vec<u8> {
    let len = descriptor_form_len(domain, entries, shared);
    if len > MAX_KEY_BYTES {
        return digest_key(FORM_DESCRIPTOR_DIGEST, |h| {
            put_descriptor_form(h, domain, entries, shared);
        });
    }
    let mut out = Vec::with_capacity(len);
    put_descriptor_form(&mut out, domain, entries, shared);
    out
}

fn plain_form_len(domain: &str, key: &str) -> usize {
    1 + component_len(domain.as_bytes()) + component_len(key.as_bytes())
}

fn put_plain_form(out: &mut impl Sink, domain: &str, key: &str) {
    out.put(&[FORM_PLAIN]);
    put_component(out, domain.as_bytes());
    put_component(out, key.as_bytes());
}

/// The counter key of a plain key in `domain`; as [`descriptor_key`], a digest when too long.
pub fn plain_key(domain: &str, key: &str) -> Vec<u8> {
    let len = plain_form_len(domain, key);
    if len > MAX_KEY_BYTES {
        return digest_key(FORM_PLAIN_DIGEST, |h| put_plain_form(h, domain, key));
    }
    let mut out = Vec::with_capacity(len);
    put_plain_form(&mut out, domain, key);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e<'a>(key: &'a str, value: &'a str) -> DescriptorEntry<'a> {
        DescriptorEntry::new(key, value)
    }

    /// An entry given as raw bytes, as Envoy may send them.
    struct Raw<'a>(&'a [u8], &'a [u8]);

    impl EntryBytes for Raw<'_> {
        fn key_bytes(&self) -> &[u8] {
            self.0
        }
        fn value_bytes(&self) -> &[u8] {
            self.1
        }
    }

    #[test]
    fn separators_inside_strings_cannot_collide() {
        let a = descriptor_key("d", &[e("a_b", "c")], &[]);
        let b = descriptor_key("d", &[e("a", "b_c")], &[]);
        assert_ne!(a, b);
        let c = descriptor_key("d", &[e("a", ""), e("b", "")], &[]);
        let d = descriptor_key("d", &[e("a", "b")], &[]);
        assert_ne!(c, d);
        assert_ne!(
            descriptor_key("d.x", &[e("k", "v")], &[]),
            descriptor_key("d", &[e("x.k", "v")], &[])
        );
    }

    #[test]
    fn plain_and_descriptor_forms_differ() {
        assert_ne!(plain_key("d", "k"), descriptor_key("d", &[e("k", "")], &[]));
        let none: [DescriptorEntry<'_>; 0] = [];
        assert_ne!(plain_key("d", ""), descriptor_key("d", &none, &[]));
    }

    #[test]
    fn shared_pattern_differs_from_a_literal_value_with_the_same_text() {
        let shared = descriptor_key("d", &[e("path", "/x")], &[(0, "/*")]);
        let literal = descriptor_key("d", &[e("path", "/*")], &[]);
        assert_ne!(shared, literal);
        assert_eq!(
            shared,
            descriptor_key("d", &[e("path", "/y")], &[(0, "/*")]),
            "every value the pattern matches shares the counter"
        );
    }

    #[test]
    fn lengths_are_exact_including_multibyte_varints() {
        let long = "v".repeat(300);
        let entries = [e("k", &long), e("é", "ü")];
        for shared in [&[][..], &[(0, "v*")][..]] {
            assert_eq!(
                descriptor_key("dom", &entries, shared).len(),
                descriptor_form_len("dom", &entries, shared)
            );
        }
        assert_eq!(plain_key(&long, "k").len(), plain_form_len(&long, "k"));
        // 300 needs a two-byte varint: 1 form + (1 + 3) + (1 + 1) + 1 kind + (2 + 300)
        assert_eq!(descriptor_form_len("dom", &entries[..1], &[]), 310);
        assert_eq!(
            descriptor_key("dom", &entries[..1], &[])[0],
            FORM_DESCRIPTOR
        );
    }

    /// The digest form, checked against the canonical form written out byte by byte here.
    #[test]
    fn a_form_over_the_maximum_is_named_by_the_digest_of_all_of_it() {
        let value = "x".repeat(5_000);
        let key = descriptor_key("d", &[e("tenant", &value)], &[]);
        let mut form = vec![FORM_DESCRIPTOR, 1, b'd', 6];
        form.extend_from_slice(b"tenant");
        // 5 000 = 0x1388: LEB128 0x88 0x27.
        form.extend_from_slice(&[VALUE_LITERAL, 0x88, 0x27]);
        form.extend_from_slice(value.as_bytes());
        let digest = blake3::Hasher::new_derive_key(DIGEST_CONTEXT)
            .update(&form)
            .finalize();
        assert_eq!(key.len(), 33);
        assert_eq!(key[0], FORM_DESCRIPTOR_DIGEST);
        assert_eq!(&key[1..], digest.as_bytes());

        let plain = plain_key("d", &value);
        let mut form = vec![FORM_PLAIN, 1, b'd', 0x88, 0x27];
        form.extend_from_slice(value.as_bytes());
        let digest = blake3::Hasher::new_derive_key(DIGEST_CONTEXT)
            .update(&form)
            .finalize();
        assert_eq!(plain[0], FORM_PLAIN_DIGEST);
        assert_eq!(&plain[1..], digest.as_bytes());
    }

    #[test]
    fn long_keys_differ_in_their_last_byte_and_by_form_and_fit_at_the_edge() {
        let a = format!("{}a", "v".repeat(5_000));
        let b = format!("{}b", "v".repeat(5_000));
        assert_ne!(
            descriptor_key("d", &[e("k", &a)], &[]),
            descriptor_key("d", &[e("k", &b)], &[])
        );
        assert_ne!(
            descriptor_key("d", &[e("k", &a)], &[]),
            descriptor_key("e", &[e("k", &a)], &[])
        );
        // A pattern shared by every value keeps a long value out of the key altogether.
        assert_eq!(
            descriptor_key("d", &[e("k", &a)], &[(0, "v*")]),
            descriptor_key("d", &[e("k", &b)], &[(0, "v*")])
        );
        // Exactly the maximum is written out; one byte more is a digest.
        let fits = "v".repeat(MAX_KEY_BYTES - 8); // 1 + (1 + 1) + (1 + 1) + 1 + (2 + len)
        assert_eq!(
            descriptor_key("d", &[e("k", &fits)], &[]).len(),
            MAX_KEY_BYTES
        );
        let over = format!("{fits}v");
        assert_eq!(descriptor_key("d", &[e("k", &over)], &[]).len(), 33);
        assert_ne!(plain_key("d", &a), descriptor_key("d", &[e("k", &a)], &[]));
    }

    #[test]
    fn raw_bytes_name_the_counter() {
        let a = descriptor_key("d", &[Raw(b"k", b"\xff\xfe")], &[]);
        let b = descriptor_key("d", &[Raw(b"k", b"\xfe\xff")], &[]);
        assert_ne!(a, b, "two invalid values are two counters");
        assert_eq!(
            descriptor_key("d", &[Raw(b"k", b"v")], &[]),
            descriptor_key("d", &[e("k", "v")], &[]),
            "valid UTF-8 names the same counter as the string"
        );
    }
}
