//! Task ids: the bearer handle a client names a task by, with the owner node and core inside it.
//!
//! Owns: `TaskId`, its minting from the OS CSPRNG, its text form and parsing in the owned-id
//! layout of `wire::owned_id` (`NN` node, `CCCC` core, 32 random digits: the session id's
//! layout, so one balancer rule reads both, and `endpoint::owner` reads the owner from
//! `Mcp-Name` without this era).
//! Called by: the store (minting, lookup).
//! Never: accepts anything but the exact text it prints (upper case, other lengths and other
//! shapes are `None`), or looks a task up.

use std::fmt;

use super::error::TaskError;
use crate::wire::owned_id;

/// A task id: the owner node in 8 bits (`--node-id`), the owner core in 16 bits and 128 bits
/// from the OS CSPRNG (SEP-2663 §Security: ids are bearer handles and must be unguessable),
/// written as 38 lower-case hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TaskId {
    pub(super) node: u8,
    pub(super) core: u16,
    pub(super) random: u128,
}

impl TaskId {
    /// A fresh id owned by `core` of `node`.
    pub(super) fn generate(node: u8, core: u16) -> Result<TaskId, TaskError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|_| TaskError::Random)?;
        Ok(TaskId { node, core, random: u128::from_le_bytes(bytes) })
    }

    /// Parses the text form; `None` for anything that is not exactly ours.
    pub(super) fn parse(text: &str) -> Option<TaskId> {
        let (node, core, random) = owned_id::parse(text.as_bytes())?;
        Some(TaskId { node, core, random })
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = owned_id::text(self.node, self.core, self.random);
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_36_hex_digits_that_name_their_core() {
        // Goal: ids are unguessable handles whose owner core routing can read without a
        // lookup. Method: generate, print, parse; reject every malformed variant.
        let a = TaskId::generate(0x7f, 0x01ab).expect("random");
        let b = TaskId::generate(0x7f, 0x01ab).expect("random");
        assert_ne!(a, b);
        let text = a.to_string();
        assert_eq!(text.len(), owned_id::OWNED_ID_LEN);
        assert!(text.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert!(text.starts_with("7f01ab"));
        assert_eq!(TaskId::parse(&text), Some(a));
        assert_eq!(owned_id::owner_prefix(text.as_bytes()), Some((0x7f, 0x01ab)));
        let upper = text.to_ascii_uppercase();
        for bad in [
            "",
            "gate-test",
            &text[1..],
            &format!("{text}0"),
            &upper,
            &text[2..],
            &format!("g{}", &text[1..]),
            "tasks-conformance-nonexistent-12345",
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad:?}");
        }
    }
}
