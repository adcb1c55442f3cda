//! Session ids: the owner node in 8 bits (`--node-id`), the owner core in 16 bits, then 128
//! bits from the OS CSPRNG, written in the owned-id layout of `wire::owned_id` (`NN` `CCCC`
//! `R…R`, 38 lower-case hex digits), where `endpoint::owner` reads the owner without a shared
//! map and a balancer routes on the first two digits alone.

use crate::wire::owned_id;

/// An `Mcp-Session-Id`.
///
/// Packed to 8-byte alignment: a `u128` field would align the id, and with it every `Session`
/// holding one, to 16, which padded the session's allocation by 16 bytes (issue 40 §4). The
/// fields are read by value (a reference to `random` is refused by the compiler); `C` keeps
/// them in this order, 24 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C, packed(8))]
pub struct SessionId {
    /// The node that owns the session (`--node-id`): the id's first two hex digits.
    pub node: u8,
    /// The core that owns the session: the id's next four hex digits.
    pub core: u16,
    /// 128 bits from the OS CSPRNG: the unguessable part, and the session table's key.
    pub random: u128,
}

/// Length of the header value.
pub(crate) const SESSION_ID_LEN: usize = owned_id::OWNED_ID_LEN;

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
        let (node, core, random) = owned_id::parse(text)?;
        Some(SessionId { node, core, random })
    }

    /// The header value.
    pub fn encode(&self, out: &mut Vec<u8>) {
        owned_id::push(out, self.node, self.core, self.random);
    }

    /// The header value as a `String` (`encode` into a new buffer).
    pub fn to_header(&self) -> String {
        let mut v = Vec::with_capacity(SESSION_ID_LEN);
        self.encode(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }
}

/// Lower-case hex, 1 to 32 digits (the event-id parts share the ids' digits).
pub(crate) use owned_id::parse_hex;

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
    }

    proptest! {
        #[test]
        fn owner_bits_round_trip(node in any::<u8>(), core in any::<u16>(), random in any::<u128>()) {
            let id = SessionId { node, core, random };
            let text = id.to_header();
            prop_assert_eq!(SessionId::parse(text.as_bytes()), Some(id));
            // The owner check at the edge reads the same node and core from the first six digits.
            prop_assert_eq!(owned_id::owner_prefix(text.as_bytes()), Some((node, core)));
            prop_assert_eq!(text[..2].to_owned(), format!("{node:02x}"));
        }
    }
}
