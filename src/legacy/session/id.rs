//! Session ids: the owner node in 8 bits (`--node-id`), the owner core in 16 bits, then 128
//! bits from the OS CSPRNG, written as 38 lower-case hex digits (visible ASCII, MCP 2025-11-25
//! §session management): `NN` `CCCC` `R…R`. Finding the owner is a parse of the first six
//! digits, with no shared map; a balancer routes on the first two alone (a fixed prefix:
//! `deploy/haproxy-config`).

/// An `Mcp-Session-Id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId {
    /// The node that owns the session (`--node-id`): the id's first two hex digits.
    pub node: u8,
    /// The core that owns the session: the id's next four hex digits.
    pub core: u16,
    /// 128 bits from the OS CSPRNG: the unguessable part, and the session table's key.
    pub random: u128,
}

/// Length of the header value.
pub(crate) const SESSION_ID_LEN: usize = 38;

/// Hex digits of the node prefix, then of the core.
const NODE_DIGITS: usize = 2;
const CORE_END: usize = NODE_DIGITS + 4;

/// The OS refused random bytes (our environment's fault; the request gets 503).
#[derive(Debug, thiserror::Error)]
#[error("OS random source failed")]
pub struct RandomError;

impl SessionId {
    /// A fresh id owned by `core` of `node`.
    pub fn generate(node: u8, core: u16) -> Result<SessionId, RandomError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|_| RandomError)?;
        Ok(SessionId { node, core, random: u128::from_le_bytes(bytes) })
    }

    /// Parses a header value; `None` for anything that is not exactly our format.
    pub fn parse(text: &[u8]) -> Option<SessionId> {
        if text.len() != SESSION_ID_LEN {
            return None;
        }
        let (node, core) = SessionId::owner_named(text)?;
        let random = parse_hex(&text[CORE_END..])?;
        Some(SessionId { node, core, random })
    }

    /// The node and core a session id names, read from its first six digits alone (the owner
    /// check of every request: `endpoint::owner`); `parse` still checks the whole id where the
    /// session is looked up, so a malformed rest is refused there.
    pub(crate) fn owner_named(text: &[u8]) -> Option<(u8, u16)> {
        if text.len() != SESSION_ID_LEN {
            return None;
        }
        let node = u8::try_from(parse_hex(&text[..NODE_DIGITS])?).ok()?;
        let core = u16::try_from(parse_hex(&text[NODE_DIGITS..CORE_END])?).ok()?;
        Some((node, core))
    }

    /// The header value.
    pub fn encode(&self, out: &mut Vec<u8>) {
        push_fixed_hex(out, u128::from(self.node), NODE_DIGITS as u32);
        push_fixed_hex(out, u128::from(self.core), 4);
        push_fixed_hex(out, self.random, 32);
    }

    /// The header value as a `String` (`encode` into a new buffer).
    pub fn to_header(&self) -> String {
        let mut v = Vec::with_capacity(SESSION_ID_LEN);
        self.encode(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }
}

/// Lower-case hex only (the ids we mint); at most 32 digits.
pub(crate) fn parse_hex(text: &[u8]) -> Option<u128> {
    if text.is_empty() || text.len() > 32 {
        return None;
    }
    let mut n: u128 = 0;
    for &b in text {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        n = (n << 4) | u128::from(d);
    }
    Some(n)
}

fn push_fixed_hex(out: &mut Vec<u8>, n: u128, digits: u32) {
    for i in (0..digits).rev() {
        out.push(b"0123456789abcdef"[((n >> (i * 4)) & 15) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_ids_are_visible_ascii_and_distinct() {
        let a = SessionId::generate(0x2c, 3).unwrap();
        let b = SessionId::generate(0x2c, 3).unwrap();
        assert_ne!(a, b);
        let text = a.to_header();
        assert_eq!(text.len(), SESSION_ID_LEN);
        assert!(text.bytes().all(|c| (0x21..=0x7e).contains(&c)));
        assert_eq!(SessionId::parse(text.as_bytes()), Some(a));
        // The node is the fixed two-digit prefix a balancer matches, the core follows.
        assert!(text.starts_with("2c0003"), "{text}");
    }

    #[test]
    fn foreign_text_is_not_an_id() {
        for bad in ["", "abc", &"g".repeat(38), &"A".repeat(38), &"0".repeat(36), &"0".repeat(39)] {
            assert_eq!(SessionId::parse(bad.as_bytes()), None, "{bad}");
        }
        let core_not_hex = format!("00000g{}", "0".repeat(32));
        let node_not_hex = format!("g00000{}", "0".repeat(32));
        for bad in ["", "abc", &core_not_hex, &node_not_hex, &"A".repeat(38), &"0".repeat(37)] {
            assert_eq!(SessionId::owner_named(bad.as_bytes()), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn owner_bits_round_trip(node in any::<u8>(), core in any::<u16>(), random in any::<u128>()) {
            let id = SessionId { node, core, random };
            let text = id.to_header();
            prop_assert_eq!(SessionId::parse(text.as_bytes()), Some(id));
            // The owner check reads the same node and core from the first six digits alone.
            prop_assert_eq!(SessionId::owner_named(text.as_bytes()), Some((node, core)));
            prop_assert_eq!(text[..2].to_owned(), format!("{node:02x}"));
        }
    }
}
