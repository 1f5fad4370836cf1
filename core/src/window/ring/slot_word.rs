//! One slot of the ring as one word: a 16-bit tag (the low bits of its bucket's epoch), a
//! 32-bit admitted count and a 16-bit rejected count, so that a slot is read, reset and added
//! to in one atomic operation.

const TAG_SHIFT: u32 = 48;
const ADMITTED_SHIFT: u32 = 16;
const REJECTED_MAX: u64 = 0xFFFF;

pub(super) fn epoch_tag(epoch: u64) -> u64 {
    epoch & 0xFFFF
}

pub(super) fn pack(epoch: u64, admitted: u32, rejected: u64) -> u64 {
    (epoch_tag(epoch) << TAG_SHIFT)
        | (u64::from(admitted) << ADMITTED_SHIFT)
        | rejected.min(REJECTED_MAX)
}

pub(super) fn tag(word: u64) -> u64 {
    word >> TAG_SHIFT
}

pub(super) fn admitted(word: u64) -> u32 {
    (word >> ADMITTED_SHIFT) as u32
}

pub(super) fn rejected(word: u64) -> u64 {
    word & REJECTED_MAX
}

/// Whether `word` holds `epoch`. A never-written word (0) holds nothing.
pub(super) fn holds(word: u64, epoch: u64) -> bool {
    word != 0 && tag(word) == epoch_tag(epoch)
}

/// Whether `word` holds a later bucket than `epoch` (wrapping compare on the tag, valid for
/// buckets less than 2^15 apart).
pub(super) fn holds_newer(word: u64, epoch: u64) -> bool {
    word != 0 && {
        let d = tag(word).wrapping_sub(epoch_tag(epoch)) & 0xFFFF;
        d != 0 && d < 0x8000
    }
}
