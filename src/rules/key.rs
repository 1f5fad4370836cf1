//! Canonical counter keys: the bytes the limiter names a counter by.
//!
//! A key never leaves the node (peers see a keyed hash of it), so it is built for being
//! unambiguous, not for being read: a form tag, then length-prefixed components. Two different
//! (domain, entries) never give the same bytes, whatever the strings contain; with `key=value`
//! joined by separators, `a_b`/`c` and `a`/`b_c` would collide.
//!
//! The counter of a descriptor depends on its domain and on every entry's key and value, not on
//! which rule matched: a rule changed by a reload (or a client's limit override of the same
//! window) keeps counting on the same counter.

/// Leading byte of a descriptor's key.
const FORM_DESCRIPTOR: u8 = 1;
/// Leading byte of a plain key (own API `key`): never equal to a descriptor's key.
const FORM_PLAIN: u8 = 2;

/// Marks a value component that is the request's value.
const VALUE_LITERAL: u8 = 0;
/// Marks a value component that is a shared wildcard pattern (`share_threshold`): every value
/// the pattern matches counts on the same counter.
const VALUE_SHARED: u8 = 1;

/// One key/value pair of a request descriptor.
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

/// Length of `len` as an unsigned LEB128 varint.
fn varint_len(mut len: usize) -> usize {
    let mut bytes = 1;
    while len >= 0x80 {
        len >>= 7;
        bytes += 1;
    }
    bytes
}

fn put_varint(out: &mut Vec<u8>, mut len: usize) {
    while len >= 0x80 {
        out.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
}

fn component_len(s: &str) -> usize {
    varint_len(s.len()) + s.len()
}

fn put_component(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// The value that names entry `index`'s part of the counter.
fn value_of<'a>(
    entry: &DescriptorEntry<'a>,
    index: usize,
    shared: &[(usize, &'a str)],
) -> (u8, &'a str) {
    match shared.iter().find(|(i, _)| *i == index) {
        Some((_, pattern)) => (VALUE_SHARED, pattern),
        None => (VALUE_LITERAL, entry.value),
    }
}

/// Bytes of [`descriptor_key`], computed without building it, so that an oversized key is
/// refused before anything is allocated for it.
pub fn descriptor_key_len(
    domain: &str,
    entries: &[DescriptorEntry<'_>],
    shared: &[(usize, &str)],
) -> usize {
    let entries_len: usize = entries
        .iter()
        .enumerate()
        .map(|(i, e)| component_len(e.key) + 1 + component_len(value_of(e, i, shared).1))
        .sum();
    1 + component_len(domain) + entries_len
}

/// The counter key of a descriptor in `domain`. `shared` lists the entries (by index) whose
/// value is replaced by the wildcard pattern that matched them.
pub fn descriptor_key(
    domain: &str,
    entries: &[DescriptorEntry<'_>],
    shared: &[(usize, &str)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(descriptor_key_len(domain, entries, shared));
    out.push(FORM_DESCRIPTOR);
    put_component(&mut out, domain);
    for (i, entry) in entries.iter().enumerate() {
        put_component(&mut out, entry.key);
        let (kind, value) = value_of(entry, i, shared);
        out.push(kind);
        put_component(&mut out, value);
    }
    out
}

/// Bytes of [`plain_key`].
pub fn plain_key_len(domain: &str, key: &str) -> usize {
    1 + component_len(domain) + component_len(key)
}

/// The counter key of a plain key in `domain`.
pub fn plain_key(domain: &str, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(plain_key_len(domain, key));
    out.push(FORM_PLAIN);
    put_component(&mut out, domain);
    put_component(&mut out, key);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e<'a>(key: &'a str, value: &'a str) -> DescriptorEntry<'a> {
        DescriptorEntry::new(key, value)
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
        assert_ne!(plain_key("d", ""), descriptor_key("d", &[], &[]));
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
                descriptor_key_len("dom", &entries, shared)
            );
        }
        assert_eq!(plain_key(&long, "k").len(), plain_key_len(&long, "k"));
        // 300 needs a two-byte varint: 1 form + (1 + 3) + (1 + 1) + 1 kind + (2 + 300)
        assert_eq!(descriptor_key_len("dom", &entries[..1], &[]), 310);
    }
}
