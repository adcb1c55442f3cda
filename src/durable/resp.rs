//! The mirror's pipelines as RESP bytes (`Pipeline`): commands written straight into one buffer
//! the mirror thread keeps from batch to batch. `redis::Cmd` allocates per argument and per
//! command and packs the pipeline into a second buffer, which cost the mirror thread more than
//! everything else it does per record; `link::Link` sends these bytes and counts the replies.
//!
//! Never: writes a command whose argument count differs from what it announced (checked in debug
//! builds), or shrinks its buffer below what the last batch needed (no allocation per batch).

use super::keys::{self, SessionKey};
use crate::digits::decimal;

/// Commands for one round trip, encoded as RESP arrays of bulk strings.
#[derive(Debug, Default)]
pub(crate) struct Pipeline {
    buf: Vec<u8>,
    commands: usize,
    /// A value whose length must lead it (JSON) is written here first.
    scratch: Vec<u8>,
    /// Arguments the current command still owes (debug builds check the announced count).
    #[cfg(debug_assertions)]
    owed: usize,
}

impl Pipeline {
    /// Empties it for the next batch, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.debug_done();
        self.buf.clear();
        self.commands = 0;
    }

    /// No command in it.
    pub(crate) fn is_empty(&self) -> bool {
        self.commands == 0
    }

    /// How many commands (so how many replies) it holds.
    pub(crate) fn commands(&self) -> usize {
        self.commands
    }

    /// Its bytes, every command complete.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.debug_done();
        &self.buf
    }

    /// Its bytes, owned (an io_uring write takes its buffer), leaving it empty: `give_back`
    /// returns the buffer, so a batch allocates none.
    pub(crate) fn take_bytes(&mut self) -> Vec<u8> {
        self.debug_done();
        self.commands = 0;
        std::mem::take(&mut self.buf)
    }

    /// Takes back a buffer `take_bytes` gave (emptied), keeping its capacity.
    pub(crate) fn give_back(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        if buf.capacity() > self.buf.capacity() {
            self.buf = buf;
        }
    }

    /// Starts a command of `args` arguments, its name the first.
    pub(crate) fn command(&mut self, args: usize) -> &mut Self {
        self.debug_done();
        self.commands += 1;
        self.buf.push(b'*');
        self.buf.extend_from_slice(decimal(args as u64, &mut [0; 20]));
        self.buf.extend_from_slice(b"\r\n");
        #[cfg(debug_assertions)]
        {
            self.owed = args;
        }
        self
    }

    /// One argument made of `parts` in order (a key: its prefix and a name), never built first.
    pub(crate) fn arg_parts(&mut self, parts: &[&[u8]]) -> &mut Self {
        #[cfg(debug_assertions)]
        {
            assert!(self.owed > 0, "more arguments than the command announced");
            self.owed -= 1;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.buf.push(b'$');
        self.buf.extend_from_slice(decimal(len as u64, &mut [0; 20]));
        self.buf.extend_from_slice(b"\r\n");
        for part in parts {
            self.buf.extend_from_slice(part);
        }
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// A session's key (`keys::SessionKey`) as one argument.
    pub(crate) fn arg_key(&mut self, kind: SessionKey, sid: &str) -> &mut Self {
        self.arg_parts(&[kind.prefix().as_bytes(), sid.as_bytes(), keys::TAG_END.as_bytes()])
    }

    /// One argument.
    pub(crate) fn arg(&mut self, bytes: &[u8]) -> &mut Self {
        self.arg_parts(&[bytes])
    }

    /// `n` in decimal as one argument.
    pub(crate) fn arg_u64(&mut self, n: u64) -> &mut Self {
        let mut digits = [0; 20];
        let digits = decimal(n, &mut digits);
        self.arg_parts(&[digits])
    }

    /// `n` in decimal followed by `suffix` as one argument (a stream entry id).
    pub(crate) fn arg_u64_then(&mut self, n: u64, suffix: &[u8]) -> &mut Self {
        let mut digits = [0; 20];
        let digits = decimal(n, &mut digits);
        self.arg_parts(&[digits, suffix])
    }

    /// One argument of exactly `len` bytes that `write` appends in place.
    pub(crate) fn arg_sized(&mut self, len: usize, write: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        #[cfg(debug_assertions)]
        {
            assert!(self.owed > 0, "more arguments than the command announced");
            self.owed -= 1;
        }
        self.buf.push(b'$');
        self.buf.extend_from_slice(decimal(len as u64, &mut [0; 20]));
        self.buf.extend_from_slice(b"\r\n");
        let start = self.buf.len();
        write(&mut self.buf);
        assert_eq!(self.buf.len() - start, len, "an argument of another length than announced");
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// One argument that `write` appends to an empty buffer (a value whose length is known only
    /// once written).
    pub(crate) fn arg_written(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        write(&mut scratch);
        self.arg(&scratch);
        self.scratch = scratch;
        self
    }

    fn debug_done(&self) {
        #[cfg(debug_assertions)]
        assert_eq!(self.owed, 0, "a command has fewer arguments than it announced");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_resp_arrays_of_bulk_strings_with_exact_lengths() {
        // Goal: the bytes are exactly what `redis::Cmd` would pack for the same commands (the
        // store parses them the same), including empty values and multi-part keys.
        let mut pipe = Pipeline::default();
        pipe.command(3).arg(b"HSET").arg_parts(&[b"tm:st:", b"ab"]).arg(b"");
        pipe.command(3).arg(b"XADD").arg_u64_then(120, b"-1").arg_u64(0);
        pipe.command(2).arg(b"GET").arg_written(|out| out.extend_from_slice(b"{\"a\":1}"));
        pipe.command(2).arg(b"GET").arg_sized(3, |out| out.extend_from_slice(b"abc"));
        let mut redis_pipe = redis::pipe();
        redis_pipe.cmd("HSET").arg("tm:st:ab").arg("");
        redis_pipe.cmd("XADD").arg("120-1").arg(0);
        redis_pipe.cmd("GET").arg("{\"a\":1}");
        redis_pipe.cmd("GET").arg("abc");
        assert_eq!(pipe.commands(), 4);
        assert_eq!(pipe.bytes(), &redis_pipe.get_packed_pipeline()[..]);
        pipe.clear();
        assert!(pipe.is_empty());
        assert_eq!(pipe.bytes(), b"");
        assert_eq!(decimal(u64::MAX, &mut [0; 20]), b"18446744073709551615");
    }
}
