//! The bridge's flags and what every request's thread shares (`Link`): the server's address,
//! the session id and protocol version learnt, the tools known to be idempotent, the backoff,
//! the key generator, and stdout (one whole line at a time).
//!
//! Owns: every limit of `tidemark connect` as a named constant with its flag.
//! Called by: `mod.rs` (made once at start), `call.rs` (every request).
//! Never: does I/O beyond writing a line to stdout.

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use clap::Parser;

use super::http::Target;
use crate::upstream::{parse_url, resolve};

/// Reconnections (of one request's stream, or re-sends that never reached the server) before
/// its outcome is reported unknown. With the default backoff that is ~6 s of a server away.
const RECONNECT_ATTEMPTS: u32 = 6;
/// First wait before a reconnection; doubled per attempt.
const BACKOFF_MIN_MS: u64 = 100;
/// Longest wait between reconnections.
const BACKOFF_MAX_MS: u64 = 5_000;
/// Longest wait a server's `retry:` hint may impose (a hostile hint cannot park a call).
const RETRY_HINT_MAX: Duration = Duration::from_secs(30);
/// Longest JSON-RPC message, either way (a stdin line, a JSON body, an SSE event's data).
pub(super) const MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Longest silence on a response stream before it counts as broken (tidemark sends a keep-alive
/// comment every `--sse-keepalive-secs`, 15 s by default).
const READ_TIMEOUT_SECS: u64 = 60;
/// Longest TCP connect.
const CONNECT_TIMEOUT_SECS: u64 = 5;
/// Requests of the local client running at once; beyond, a request is answered -32603 at once.
const IN_FLIGHT_MAX: u32 = 64;

const _: () = assert!(BACKOFF_MIN_MS > 0 && BACKOFF_MIN_MS <= BACKOFF_MAX_MS);

/// `tidemark connect`: MCP over stdio to a local client, Streamable HTTP to the server at URL,
/// resuming dropped streams and never running a call twice.
#[derive(Parser, Debug)]
#[command(name = "tidemark connect", bin_name = "tidemark connect", version)]
pub(super) struct ConnectFlags {
    /// The server's MCP endpoint, `http://HOST[:PORT]/PATH`.
    url: String,
    /// An extra request header `NAME: VALUE` on every request (e.g. `Authorization: Bearer …`).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Reconnections of one request before its outcome is reported unknown (-31006).
    #[arg(long, default_value_t = RECONNECT_ATTEMPTS, value_parser = clap::value_parser!(u32).range(0..=1000))]
    reconnect_attempts: u32,
    /// First backoff before a reconnection, in ms; doubled per attempt.
    #[arg(long, default_value_t = BACKOFF_MIN_MS, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    backoff_min_ms: u64,
    /// Longest backoff between reconnections, in ms.
    #[arg(long, default_value_t = BACKOFF_MAX_MS, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    backoff_max_ms: u64,
    /// Longest silence on a response stream before it counts as broken, in seconds.
    #[arg(long, default_value_t = READ_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..=3600))]
    read_timeout_secs: u64,
    /// Requests running at once; beyond, a request is answered -32603 at once.
    #[arg(long, default_value_t = IN_FLIGHT_MAX, value_parser = clap::value_parser!(u32).range(1..=4096))]
    in_flight_max: u32,
}

/// What every request's thread shares.
pub(super) struct Link {
    pub(super) target: Target,
    /// `--header` lines, split.
    pub(super) headers: Vec<(String, String)>,
    /// `Mcp-Session-Id` from the `initialize` answer (legacy era).
    pub(super) session: Mutex<Option<String>>,
    /// The negotiated protocol version (`MCP-Protocol-Version` on every later request).
    pub(super) protocol_version: Mutex<Option<String>>,
    /// The server said it is tidemark: a re-POST of the same id is decided by the server
    /// (409 when the first arrived, CONTRACT §4) and a key is honoured in both eras.
    pub(super) server_dedups: AtomicBool,
    /// Tools the server annotated `readOnlyHint` or `idempotentHint`: safe to re-send.
    pub(super) idempotent_tools: Mutex<HashSet<String>>,
    pub(super) reconnect_attempts: u32,
    pub(super) backoff_min: Duration,
    pub(super) backoff_max: Duration,
    pub(super) in_flight: AtomicUsize,
    pub(super) in_flight_max: usize,
    /// Where JSON-RPC lines go: one writer at a time, a whole line each.
    pub(super) out: Mutex<std::io::Stdout>,
    /// Makes `Idempotency-Key`s unique to this process: random bits, then a counter.
    pub(super) key_prefix: u64,
    pub(super) key_counter: AtomicUsize,
}

impl Link {
    pub(super) fn new(flags: &ConnectFlags) -> Result<Link, String> {
        let endpoint = parse_url(&flags.url).map_err(|e| format!("the URL: {e}"))?;
        let addr = resolve(&endpoint)?;
        let headers = flags
            .headers
            .iter()
            .map(|h| match h.split_once(':') {
                Some((name, value)) if is_token(name.trim()) && is_value(value.trim()) => {
                    Ok((name.trim().to_owned(), value.trim().to_owned()))
                }
                _ => Err(format!("--header {h:?}: expected NAME: VALUE")),
            })
            .collect::<Result<_, _>>()?;
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| format!("random bits: {e}"))?;
        Ok(Link {
            target: Target {
                addr,
                authority: endpoint.authority.clone(),
                path: endpoint.target.clone(),
                read_timeout: Duration::from_secs(flags.read_timeout_secs),
                connect_timeout: Duration::from_secs(CONNECT_TIMEOUT_SECS),
            },
            headers,
            session: Mutex::new(None),
            protocol_version: Mutex::new(None),
            server_dedups: AtomicBool::new(false),
            idempotent_tools: Mutex::new(HashSet::new()),
            reconnect_attempts: flags.reconnect_attempts,
            backoff_min: Duration::from_millis(flags.backoff_min_ms),
            backoff_max: Duration::from_millis(flags.backoff_max_ms.max(flags.backoff_min_ms)),
            in_flight: AtomicUsize::new(0),
            in_flight_max: flags.in_flight_max as usize,
            out: Mutex::new(std::io::stdout()),
            key_prefix: u64::from_le_bytes(random),
            key_counter: AtomicUsize::new(0),
        })
    }

    /// Writes one message as one line to stdout (the local client).
    pub(super) fn emit(&self, message: &serde_json::Value) {
        let mut line = serde_json::to_vec(message).unwrap_or_default();
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        // A local client that went away ends us at stdin's EOF; nothing to do here.
        let _ = out.write_all(&line).and_then(|()| out.flush());
    }

    /// The wait before reconnection `attempt` (1-based): doubled each time, capped, and at least
    /// the server's `retry:` hint when it gave one (itself capped).
    pub(super) fn backoff(&self, attempt: u32, hint: Option<Duration>) -> Duration {
        let doubled = self.backoff_min.saturating_mul(1 << attempt.saturating_sub(1).min(16));
        let wait = doubled.min(self.backoff_max);
        hint.map_or(wait, |h| wait.max(h.min(RETRY_HINT_MAX)))
    }

    /// A fresh `Idempotency-Key`.
    pub(super) fn new_key(&self) -> String {
        let n = self.key_counter.fetch_add(1, Ordering::Relaxed);
        format!("tmc-{:016x}-{n}", self.key_prefix)
    }
}

/// An RFC 9110 token (a header name).
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header value that cannot break the request head.
fn is_value(value: &str) -> bool {
    value.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(min: u64, max: u64) -> Link {
        let flags = ConnectFlags::try_parse_from([
            "connect",
            "http://127.0.0.1:9/mcp",
            "--backoff-min-ms",
            &min.to_string(),
            "--backoff-max-ms",
            &max.to_string(),
        ])
        .expect("flags");
        Link::new(&flags).expect("link")
    }

    #[test]
    fn connect_backoff_doubles_up_to_its_cap_and_honours_a_bounded_hint() {
        // Goal: reconnection waits grow, stay within --backoff-max-ms, and a server's retry:
        // hint lengthens them only up to RETRY_HINT_MAX. Method: a few attempts, a huge one.
        let link = link(100, 1_000);
        assert_eq!(link.backoff(1, None), Duration::from_millis(100));
        assert_eq!(link.backoff(2, None), Duration::from_millis(200));
        assert_eq!(link.backoff(u32::MAX, None), Duration::from_millis(1_000));
        assert_eq!(link.backoff(1, Some(Duration::from_millis(700))), Duration::from_millis(700));
        assert_eq!(link.backoff(1, Some(Duration::from_secs(3_600))), RETRY_HINT_MAX);
    }

    #[test]
    fn connect_flags_hold_their_limits() {
        // Goal: every limit flag refuses what is out of its range, and --header its bad form.
        // Method: the limit itself passes, one past it fails.
        let parse = |extra: &[&str]| {
            let mut args = vec!["connect", "http://127.0.0.1:9/mcp"];
            args.extend_from_slice(extra);
            ConnectFlags::try_parse_from(args)
                .map_err(|e| e.to_string())
                .and_then(|f| Link::new(&f))
        };
        assert!(parse(&["--reconnect-attempts", "1000"]).is_ok());
        assert!(parse(&["--reconnect-attempts", "1001"]).is_err());
        assert!(parse(&["--in-flight-max", "4096"]).is_ok());
        assert!(parse(&["--in-flight-max", "0"]).is_err());
        assert!(parse(&["--header", "Authorization: Bearer x"]).is_ok());
        assert!(parse(&["--header", "no colon"]).is_err());
        assert!(parse(&["--header", "X: a\rb"]).is_err());
        assert!(ConnectFlags::try_parse_from(["connect", "https://h/mcp"])
            .map_err(|e| e.to_string())
            .and_then(|f| Link::new(&f))
            .is_err());
    }

    #[test]
    fn connect_keys_are_unique() {
        // Goal: no two calls of one bridge share an Idempotency-Key. Method: many keys, a set.
        let link = link(100, 1_000);
        let keys: HashSet<String> = (0..1000).map(|_| link.new_key()).collect();
        assert_eq!(keys.len(), 1000);
    }
}
