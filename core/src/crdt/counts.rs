//! A register's admitted counts as stored: a plain slice, or 16-bit counts packed two to a word.

use std::cmp::Ordering;

/// Read-only counts, newest bucket first.
#[derive(Debug, Clone, Copy)]
pub enum Counts<'a> {
    /// One count per word.
    Wide(&'a [u32]),
    /// `len` 16-bit counts, two per word, low half first.
    Narrow { words: &'a [u32], len: usize },
}

impl<'a> Counts<'a> {
    pub fn len(&self) -> usize {
        match self {
            Counts::Wide(w) => w.len(),
            Counts::Narrow { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> u32 {
        match self {
            Counts::Wide(w) => w.get(i).copied().unwrap_or(0),
            Counts::Narrow { words, len } => {
                if i >= *len {
                    return 0;
                }
                words.get(i / 2).map_or(0, |w| {
                    if i.is_multiple_of(2) {
                        w & 0xFFFF
                    } else {
                        w >> 16
                    }
                })
            }
        }
    }

    pub fn iter(self) -> impl Iterator<Item = u32> + 'a {
        let (wide, words, len) = match self {
            Counts::Wide(w) => (true, w, w.len()),
            Counts::Narrow { words, len } => (false, words, len),
        };
        (0..len).map(move |i| {
            if wide {
                words[i]
            } else {
                let w = words[i / 2];
                if i.is_multiple_of(2) {
                    w & 0xFFFF
                } else {
                    w >> 16
                }
            }
        })
    }

    pub fn to_vec(self) -> Vec<u32> {
        self.iter().collect()
    }

    /// The largest count.
    pub fn max(self) -> u32 {
        self.iter().max().unwrap_or(0)
    }
}

impl PartialEq for Counts<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Counts<'_> {}

impl PartialOrd for Counts<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Counts<'_> {
    /// Lexicographic on the counts, whatever their packing.
    fn cmp(&self, other: &Self) -> Ordering {
        self.iter().cmp(other.iter())
    }
}

/// Words needed for `len` counts in the given packing.
pub(crate) fn words_for(len: usize, wide: bool) -> usize {
    if wide { len } else { len.div_ceil(2) }
}

/// Writes `counts` (padded with zeros or cut to `len`) into `out` in the given packing.
pub(crate) fn pack_into(
    counts: impl Iterator<Item = u32>,
    len: usize,
    wide: bool,
    out: &mut [u32],
) {
    out.fill(0);
    for (i, c) in counts.take(len).enumerate() {
        if wide {
            out[i] = c;
        } else {
            out[i / 2] |= (c & 0xFFFF) << (16 * (i % 2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_and_wide_read_the_same() {
        let counts = [7u32, 0, 65_535, 1, 9];
        let mut narrow = vec![0u32; words_for(5, false)];
        pack_into(counts.iter().copied(), 5, false, &mut narrow);
        let n = Counts::Narrow {
            words: &narrow,
            len: 5,
        };
        let w = Counts::Wide(&counts);
        assert_eq!(n.to_vec(), counts);
        assert_eq!(n, w);
        assert_eq!(n.max(), 65_535);
        assert_eq!(n.get(9), 0);
        assert!(Counts::Wide(&[1, 2]) < Counts::Wide(&[1, 3]));
    }
}
