//! `tidemark connect URL`: the client-side bridge. A local MCP client speaks newline-delimited
//! JSON-RPC on this process's stdin/stdout; every message goes to the Streamable HTTP server at
//! URL (tidemark or any other) and every message of the server comes back, and a call is never
//! run twice because a stream dropped (CONTRACT §12, the seed's client half).
//!
//! What it does that a plain stdio-to-HTTP bridge does not: a response stream that breaks is
//! resumed with `GET` + `Last-Event-ID` (and `Mcp-Session-Id`) from the last event this bridge
//! forwarded, never re-POSTed; a 409 (CONTRACT §4: -31001, -31002, -31004) is followed by
//! resuming from the `Last-Event-ID` hint (or the bridge's own cursor, which is never earlier);
//! every `tools/call` carries an `Idempotency-Key`, and a re-send (a 2026-07-28 stream that
//! dropped, a `-31004` of a call still running) carries the same key; reconnections wait a
//! bounded exponential backoff; and when the outcome cannot be known (the server stayed away
//! past the retry budget, or a stream without event ids dropped) the local client gets -31006
//! "outcome unknown" instead of a silent second run.
//!
//! The folder: `mod.rs` the stdin loop; `link.rs` the flags and what the threads share; `call.rs` one request's life
//! (POST, stream, resume, 409, re-send, outcome unknown); `http.rs` one blocking HTTP/1.1
//! exchange. One local client, so plain threads: the stdin loop, and a thread per request.
//! Owns: the bridge's flags and limits, the session id and protocol version it learnt, the
//! tools it knows to be idempotent (from the `tools/list` answers it carried), stdout.
//! Called by: `main.rs` when the first argument is `connect`.
//! Never: writes anything but JSON-RPC lines to stdout (diagnostics go to stderr), re-POSTs a
//! non-idempotent call whose stream is owed, or speaks `https://` (put a local TLS terminator
//! in front; the URL parser is the `--upstream` one).

// Not the server: no worker core runs here, one local client's threads share the link.
#![allow(
    clippy::disallowed_types,
    reason = "the bridge's own threads, never a worker core: the link is shared by Mutex"
)]

mod call;
mod http;
mod link;

use std::ffi::OsString;
use std::io::{BufRead, Read};
use std::sync::Arc;

use clap::error::ErrorKind;
use clap::Parser;

use link::{ConnectFlags, Link, MESSAGE_BYTES};

/// Runs the bridge with `args` (the first is the subcommand's name) until stdin ends and every
/// request it read has been answered. `Err` only for bad flags or an unusable URL.
pub fn connect<I: IntoIterator<Item = OsString>>(args: I) -> Result<(), String> {
    let flags = match ConnectFlags::try_parse_from(args) {
        Ok(flags) => flags,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return Ok(());
        }
        Err(e) => return Err(e.to_string()),
    };
    let link = Arc::new(Link::new(&flags)?);
    let mut stdin = std::io::stdin().lock();
    let mut threads = Vec::new();
    loop {
        let mut line = Vec::new();
        let read = (&mut stdin)
            .take(MESSAGE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("stdin: {e}"))?;
        if read == 0 {
            break;
        }
        if let Some(handle) = call::from_client(&link, &line) {
            threads.push(handle);
        }
        threads.retain(|t: &std::thread::JoinHandle<()>| !t.is_finished());
    }
    for thread in threads {
        let _ = thread.join();
    }
    call::end_session(&link);
    Ok(())
}
