//! Ids that name their owner: the one text layout of session ids (`Mcp-Session-Id`) and task
//! ids (`Mcp-Name` of a `tasks/*` request): `NN` the owner node (`--node-id`), `CCCC` the owner
//! core, then 32 random digits, 38 lower-case hex digits in all (visible ASCII, MCP 2025-11-25
//! §session management). A balancer routes on the first two digits alone
//! (`deploy/haproxy-config`); `endpoint::owner` reads node and core from the first six.
//!
//! Owns: the layout (`OWNED_ID_LEN`), reading it (`parse`, `owner_prefix`, `parse_hex`) and
//! writing it (`text`, `push`), the methods that name a task by `Mcp-Name` (`TASK_METHODS`), and where
//! another node's session lands here once adopted (`fold_core`). The id types themselves stay
//! with their eras (`legacy::session::SessionId`, `modern::tasks::TaskId`); they read and write
//! through this file, so the owner check at the edge needs neither era.
//! Never: accepts anything but the exact text it writes (upper case, other lengths and other
//! shapes are `None`).

/// Length of an owned id's text form.
pub(crate) const OWNED_ID_LEN: usize = 38;

/// Hex digits of the node prefix, then where the core's four end.
const NODE_DIGITS: usize = 2;
const CORE_END: usize = NODE_DIGITS + 4;

/// The methods of the tasks extension: each names its task in `params.taskId` and `Mcp-Name`.
pub(crate) const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// Node, core and random part of an owned id; `None` for anything that is not exactly ours.
pub(crate) fn parse(text: &[u8]) -> Option<(u8, u16, u128)> {
    let (node, core) = owner_prefix(text)?;
    Some((node, core, parse_hex(&text[CORE_END..])?))
}

/// The node and core an id of the right length names, read from its first six digits alone
/// (the owner check of every request); `parse` still checks the whole id where the session or
/// task is looked up, so a malformed rest is refused there.
pub(crate) fn owner_prefix(text: &[u8]) -> Option<(u8, u16)> {
    if text.len() != OWNED_ID_LEN {
        return None;
    }
    let node = u8::try_from(parse_hex(&text[..NODE_DIGITS])?).ok()?;
    let core = u16::try_from(parse_hex(&text[NODE_DIGITS..CORE_END])?).ok()?;
    Some((node, core))
}

/// The text form of the id owned by `core` of `node` with random part `random`.
pub(crate) fn text(node: u8, core: u16, random: u128) -> [u8; OWNED_ID_LEN] {
    let mut text = [0u8; OWNED_ID_LEN];
    put_fixed_hex(&mut text[..NODE_DIGITS], u128::from(node));
    put_fixed_hex(&mut text[NODE_DIGITS..CORE_END], u128::from(core));
    put_fixed_hex(&mut text[CORE_END..], random);
    text
}

/// Writes the text form (`text`) into `out`.
pub(crate) fn push(out: &mut Vec<u8>, node: u8, core: u16, random: u128) {
    out.extend_from_slice(&text(node, core, random));
}

/// The core a session of another node lives on here once adopted (`--durable`): its own core
/// number folded onto the cores this node runs (the same on every core, so every request of
/// it meets there).
pub(crate) fn fold_core(core: u16, threads: u16) -> u16 {
    core % threads.max(1)
}

/// Lower-case hex only (the ids we mint), 1 to 32 digits.
pub(crate) fn parse_hex(text: &[u8]) -> Option<u128> {
    if text.is_empty() || text.len() > 32 {
        return None;
    }
    if text.len() == 32 {
        // An owned id's random part, on every request that names a session.
        return hex_32(text);
    }
    // Two 64-bit halves: a `u128` shift is three instructions a digit.
    let (high, low) = text.split_at(text.len().saturating_sub(16));
    let mut seen = 0u8;
    let high = hex_u64(high, &mut seen);
    let low = hex_u64(low, &mut seen);
    (seen & NOT_HEX == 0).then_some((u128::from(high) << 64) | u128::from(low))
}

/// A byte's digit value in `HEX_VALUE` when it is no lower-case hex digit.
const NOT_HEX: u8 = 0x80;

/// Each byte's value as a lower-case hex digit, or `NOT_HEX`: one load a digit and one check
/// at the end (`parse_hex`) instead of a range match and a branch a digit; a session id's 32
/// digits on every legacy request were ~450 instructions (callgrind, issue 40 §3).
static HEX_VALUE: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Up to 16 digits' value; ORs every digit's table entry into `seen` (`NOT_HEX` marks a byte
/// that is no digit, and the value is then meaningless).
fn hex_u64(digits: &[u8], seen: &mut u8) -> u64 {
    digits.iter().fold(0u64, |n, &b| {
        let digit = HEX_VALUE[usize::from(b)];
        *seen |= digit;
        (n << 4) | u64::from(digit)
    })
}

/// 32 digits' value, eight at a time (`hex_8`): a session id's parse took 283 instructions
/// with the table, `parse_hex` takes 168 this way (callgrind, issue 40's sixth step).
fn hex_32(text: &[u8]) -> Option<u128> {
    let mut value = 0u128;
    for chunk in text.chunks_exact(8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        value = value << 32 | u128::from(hex_8(u64::from_be_bytes(word))?);
    }
    Some(value)
}

/// Eight lower-case hex digits (the first in the top byte of `word`) as their value, all eight
/// checked and converted at once (SWAR): a byte below 0x80 plus `0x80 - c` has its top bit set
/// exactly when it is at least `c`, and no sum carries into the next byte.
fn hex_8(word: u64) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = ONES * 0x80;
    let at_least = |c: u8| word.wrapping_add(ONES * u64::from(0x80 - c)) & TOPS;
    let digit = at_least(b'0') & !at_least(b'9' + 1);
    let letter = at_least(b'a') & !at_least(b'f' + 1);
    if word & TOPS != 0 || digit | letter != TOPS {
        return None;
    }
    // Each byte's value: its low nibble, plus 9 for a letter ('a' is 0x61).
    let nibbles = (word & (ONES * 0x0f)) + (letter >> 7) * 9;
    let pairs = (nibbles | nibbles >> 4) & 0x00ff_00ff_00ff_00ff;
    let quads = (pairs | pairs >> 8) & 0x0000_ffff_0000_ffff;
    // Lossless: the eight digits' 32 bits, in the low half.
    Some((quads | quads >> 16) as u32)
}

/// `n`'s low hex digits, as many as `out` holds, most significant first.
fn put_fixed_hex(out: &mut [u8], mut n: u128) {
    for digit in out.iter_mut().rev() {
        *digit = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn foreign_text_names_no_owner() {
        let core_not_hex = format!("00000g{}", "0".repeat(32));
        let node_not_hex = format!("g00000{}", "0".repeat(32));
        for bad in ["", "abc", &core_not_hex, &node_not_hex, &"A".repeat(38), &"0".repeat(37)] {
            assert_eq!(owner_prefix(bad.as_bytes()), None, "{bad}");
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        // The owner check reads six digits; the whole parse refuses a malformed rest.
        let rest_not_hex = format!("2c0003{}", "g".repeat(32));
        assert_eq!(owner_prefix(rest_not_hex.as_bytes()), Some((0x2c, 3)));
        assert_eq!(parse(rest_not_hex.as_bytes()), None);
    }

    /// Goal: the eight-at-a-time reading refuses each byte next to the digit ranges at every
    /// position and reads every digit at every position. Method: one byte of 32 replaced.
    #[test]
    fn hex_32_checks_every_byte() {
        let valid = b"0123456789abcdeffedcba9876543210";
        for at in 0..32 {
            for bad in [b'/', b':', b'`', b'g', b'@', b'A', b'F', b' ', 0, 0x7f, 0x80, 0xb0, 0xff] {
                let mut text = *valid;
                text[at] = bad;
                assert_eq!(parse_hex(&text), None, "{bad:#x} at {at}");
            }
            for (digit, value) in b"0123456789abcdef".iter().zip(0u128..) {
                let mut text = [b'0'; 32];
                text[at] = *digit;
                assert_eq!(parse_hex(&text), Some(value << (4 * (31 - at))), "{digit} at {at}");
            }
        }
    }

    proptest! {
        /// The table's reading against a digit-by-digit one, on any bytes.
        #[test]
        fn parse_hex_is_the_plain_reading(text in proptest::collection::vec(any::<u8>(), 0..40)) {
            let plain = (1..=32).contains(&text.len()).then(|| {
                text.iter().try_fold(0u128, |n, &b| {
                    let digit = (b as char).to_digit(16).filter(|_| !b.is_ascii_uppercase())?;
                    Some((n << 4) | u128::from(digit))
                })
            });
            prop_assert_eq!(parse_hex(&text), plain.flatten());
        }

        #[test]
        fn parse_hex_reads_every_lower_case_digit_string(digits in "[0-9a-f]{1,32}") {
            prop_assert_eq!(parse_hex(digits.as_bytes()), u128::from_str_radix(&digits, 16).ok());
        }

        #[test]
        fn owner_bits_round_trip(node in any::<u8>(), core in any::<u16>(), random in any::<u128>()) {
            let mut text = Vec::new();
            push(&mut text, node, core, random);
            prop_assert_eq!(text.len(), OWNED_ID_LEN);
            prop_assert_eq!(parse(&text), Some((node, core, random)));
            prop_assert_eq!(owner_prefix(&text), Some((node, core)));
            prop_assert_eq!(text[..2].to_vec(), format!("{node:02x}").into_bytes());
        }
    }
}
