//! The HTTP section: what one connection and one request head may hold (`--max-header-bytes`,
//! `--max-headers`, `--max-body-bytes`, the timeouts, connections per core) and the extra
//! `Origin`/`Host` values accepted; its defaults, validation and flags.
//!
//! Owns: `HttpConfig` and its flags. Never: parses a request.

use std::time::Duration;

use super::error::{nonzero, ConfigError};

/// Hard cap of header lines the request-head parser gets room for; `--max-headers` may only
/// lower it.
pub(crate) const HEADERS_CAP: usize = 128;
/// Bytes of one request head (request line + headers). Over it: 431, connection closed.
pub(crate) const HEADER_BYTES_MAX: usize = 16 * 1024;
/// Header lines in one request. Over it: 431, connection closed.
pub(crate) const HEADERS_MAX: usize = 64;
/// Bytes of one POST body. Over it: 413 with a JSON-RPC error; the connection is closed
/// after the answer so the unread body never reaches the parser.
pub(crate) const BODY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Time to receive a whole request head once its first byte arrived. Over it: 408, closed.
pub(crate) const HEADER_TIMEOUT_MS: u64 = 10_000;
/// Time an idle keep-alive connection is kept between requests. Over it: closed silently.
pub(crate) const IDLE_TIMEOUT_SECS: u64 = 60;
/// Open connections on one core. Over it: new connections get 503 and are closed.
pub(crate) const CONNECTIONS_PER_CORE_MAX: usize = 16 * 1024;

/// Nesting depth of a JSON body. Deeper: 400, -32700 (a parser stack bomb is the peer's fault).
pub(crate) const JSON_DEPTH_MAX: usize = 64;
/// `Access-Control-Max-Age` of a CORS preflight answer (`endpoint::cors`), in seconds: how long
/// a browser may reuse it before asking again. 7200 is Chromium's own cap (Firefox caps at one
/// day); a longer value would buy nothing there. No flag: it bounds no resource of ours, and a
/// restart that drops an origin is still enforced at once (the cached preflight does not make
/// the actual request's answer readable: that answer carries no `Access-Control-Allow-Origin`).
pub(crate) const CORS_MAX_AGE_SECS: u64 = 7200;
/// `Mcp-Param-*` header names (MCP 2026-07-28 `x-mcp-header`) one CORS preflight answer echoes
/// by name in `Access-Control-Allow-Headers` (`*` would cover neither `Authorization` nor any
/// header of a credentialed request). Past it the rest are left out, the browser refuses that
/// one request, and `tidemark_cors_headers_left_out_total` counts them. 32: more than the
/// header parameters a tool declares. No flag: `--max-header-bytes` already bounds the work.
pub(crate) const CORS_PARAM_HEADERS_MAX: usize = 32;

const _: () = assert!(HEADER_BYTES_MAX >= 1024);
const _: () = assert!(CORS_MAX_AGE_SECS > 0 && CORS_PARAM_HEADERS_MAX > 0);

/// The HTTP rules of the MCP endpoint: accepted origins and hosts, the bounds of a request
/// head and body, and the connection timeouts and count.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HttpConfig {
    /// Extra `Origin` values accepted besides loopback ones (exact match, e.g. `https://app`).
    pub allowed_origins: Vec<String>,
    /// Extra `Host` values accepted besides loopback ones (exact match, with port if any).
    pub allowed_hosts: Vec<String>,
    /// Bytes of one request head (`--max-header-bytes`, `HEADER_BYTES_MAX`); over it: 431, closed.
    pub header_bytes_max: usize,
    /// Header lines in one request (`--max-headers`, `HEADERS_MAX`, at most `HEADERS_CAP`); over
    /// it: 431, closed.
    pub headers_max: usize,
    /// Bytes of one POST body (`--max-body-bytes`, `BODY_BYTES_MAX`); over it: 413 with a JSON-RPC
    /// error, closed.
    pub body_bytes_max: usize,
    /// Time to receive a whole request head after its first byte (`--header-timeout-ms`,
    /// `HEADER_TIMEOUT_MS`); over it: 408, closed.
    pub header_timeout: Duration,
    /// Time an idle keep-alive connection is kept (`--idle-timeout-secs`, `IDLE_TIMEOUT_SECS`);
    /// over it: closed silently.
    pub idle_timeout: Duration,
    /// Open connections on one core (`--max-connections-per-core`, `CONNECTIONS_PER_CORE_MAX`);
    /// over it: 503, closed.
    pub connections_per_core_max: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_bytes_max: HEADER_BYTES_MAX,
            headers_max: HEADERS_MAX,
            body_bytes_max: BODY_BYTES_MAX,
            header_timeout: Duration::from_millis(HEADER_TIMEOUT_MS),
            idle_timeout: Duration::from_secs(IDLE_TIMEOUT_SECS),
            connections_per_core_max: CONNECTIONS_PER_CORE_MAX,
        }
    }
}

impl From<HttpFlags> for HttpConfig {
    fn from(flags: HttpFlags) -> HttpConfig {
        HttpConfig {
            allowed_origins: flags.allowed_origin,
            allowed_hosts: flags.allowed_host,
            header_bytes_max: flags.max_header_bytes,
            headers_max: flags.max_headers,
            body_bytes_max: flags.max_body_bytes,
            header_timeout: Duration::from_millis(flags.header_timeout_ms),
            idle_timeout: Duration::from_secs(flags.idle_timeout_secs),
            connections_per_core_max: flags.max_connections_per_core,
        }
    }
}

impl HttpConfig {
    /// Checks the section's values.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("max-header-bytes", self.header_bytes_max as u128),
            ("max-headers", self.headers_max as u128),
            ("max-body-bytes", self.body_bytes_max as u128),
            ("header-timeout-ms", self.header_timeout.as_millis()),
            ("idle-timeout-secs", self.idle_timeout.as_millis()),
            ("max-connections-per-core", self.connections_per_core_max as u128),
        ])?;
        if self.headers_max > HEADERS_CAP {
            return Err(ConfigError::TooManyHeaders(HEADERS_CAP));
        }
        Ok(())
    }
}

/// The command line's flags of this section: the accepted origins and hosts, and the bounds of a
/// request and a connection. `cli` flattens them into its `Flags` in `--help`'s order (a section's
/// flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct HttpFlags {
    /// Extra Origin value to accept (repeatable), e.g. https://app.example.
    #[arg(long)]
    pub(crate) allowed_origin: Vec<String>,
    /// Extra Host value to accept (repeatable), e.g. mcp.example:8080.
    #[arg(long)]
    pub(crate) allowed_host: Vec<String>,
    /// Bytes of one request head (request line and headers); over it: 431, closed.
    #[arg(long, default_value_t = HEADER_BYTES_MAX)]
    pub(crate) max_header_bytes: usize,
    /// Header lines of one request (at most HEADERS_CAP, 128); over it: 431, closed.
    #[arg(long, default_value_t = HEADERS_MAX)]
    pub(crate) max_headers: usize,
    /// Bytes of one POST body; over it: 413, closed.
    #[arg(long, default_value_t = BODY_BYTES_MAX)]
    pub(crate) max_body_bytes: usize,
    /// Time to receive a request head once its first byte came (and, with TLS, the handshake
    /// from the accept); past it: 408, closed.
    #[arg(long, default_value_t = HEADER_TIMEOUT_MS)]
    pub(crate) header_timeout_ms: u64,
    /// An idle keep-alive connection is closed after this long.
    #[arg(long, default_value_t = IDLE_TIMEOUT_SECS)]
    pub(crate) idle_timeout_secs: u64,
    /// Open connections per core; over it: 503, closed.
    #[arg(long, default_value_t = CONNECTIONS_PER_CORE_MAX)]
    pub(crate) max_connections_per_core: usize,
}
