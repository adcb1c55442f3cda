//! The edge of the MCP endpoint: one parsed HTTP request → the path check, the Host/Origin
//! rules (DNS-rebinding protection), HEAD and unknown methods, and the choice of the protocol
//! path (era) that serves it. Also `Core`, one core's view of the server that every path reads.
//!
//! Called by `runtime::conn` once per request; answers with an `Outcome` telling the connection
//! what to do next. Never: touches a socket, decodes a body, or knows about sessions.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::config::Config;
use crate::http::{Method, RequestHead};
use crate::legacy::{self, session::SessionTable};
use crate::metrics::CoreMetrics;
use crate::wire::jsonrpc::RawId;
use crate::wire::{Answer, Refusal};

/// One core's view of the server.
pub(crate) struct Core {
    pub cfg: Arc<Config>,
    pub index: u16,
    pub threads: u16,
    pub registry: crate::dispatch::Registry,
    pub sessions: RefCell<SessionTable>,
    pub metrics: Arc<CoreMetrics>,
}

/// What the connection does after `handle`.
pub enum Outcome {
    /// A whole response is in the output buffer.
    Reply { keep_alive: bool },
    /// An SSE response head is in the buffer; write the stream next.
    Stream(legacy::SseJob),
    /// The session lives on another core: move the connection there, unanswered.
    HandOff(u16),
}

/// The parts of a request `handle` reads: the head's bytes and the (mutable) body.
pub struct Request<'a> {
    pub head: &'a RequestHead,
    pub head_bytes: &'a [u8],
    pub body: &'a mut [u8],
}

impl Request<'_> {
    pub(crate) fn header(&self, r: &Option<std::ops::Range<usize>>) -> Option<&[u8]> {
        r.as_ref().map(|r| &self.head_bytes[r.clone()])
    }
}

/// Renders `answer` as a whole response.
pub(crate) fn reply(out: &mut Vec<u8>, answer: Answer<'_>, keep_alive: bool) -> Outcome {
    answer.render(out, keep_alive);
    Outcome::Reply { keep_alive }
}

/// Renders a refusal as a whole response.
pub(crate) fn refuse(
    out: &mut Vec<u8>,
    refusal: Refusal,
    id: Option<&RawId>,
    keep_alive: bool,
) -> Outcome {
    reply(out, Answer::Refused { refusal, id }, keep_alive)
}

/// Which protocol path serves a request. Only the legacy era (2025-03-26 … 2025-11-25) is
/// served today; a request of the 2026-07-28 stateless revision is answered by the legacy path
/// with MCP's backward-compatibility error so that its client falls back to `initialize`. The
/// stateless path will be selected here (by `MCP-Protocol-Version` ≥ 2026-07-28 or the
/// `_meta` protocol version), beside the legacy one, without touching it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Era {
    Legacy,
}

fn era(_req: &Request<'_>) -> Era {
    Era::Legacy
}

/// Entry point: one parsed request.
pub async fn handle(core: &Rc<Core>, req: Request<'_>, out: &mut Vec<u8>) -> Outcome {
    core.metrics.requests_total.inc();
    let keep_alive = req.head.keep_alive;
    let (authority, path) = split_target(&req.head_bytes[req.head.path.clone()]);
    let path = path.split(|&b| b == b'?').next().unwrap_or(path);
    if path != core.cfg.path.as_bytes() {
        return refuse(out, Refusal::NotFoundPath, None, keep_alive);
    }
    if !host_and_origin_allowed(&core.cfg, &req)
        || authority.is_some_and(|a| !host_allowed(&core.cfg, a))
    {
        return refuse(out, Refusal::Forbidden, None, keep_alive);
    }
    match (req.head.method(), era(&req)) {
        (Method::Post, Era::Legacy) => legacy::post(core, req, out).await,
        (Method::Get, Era::Legacy) => legacy::get(core, req, out),
        (Method::Delete, Era::Legacy) => legacy::delete(core, req, out),
        (Method::Head, _) => reply(out, Answer::HeadNotAllowed, keep_alive),
        (Method::Other, _) => refuse(out, Refusal::MethodNotAllowed, None, keep_alive),
    }
}

/// Splits an absolute-form request target (`http://host:port/mcp`, RFC 9112 §3.2.2: a server
/// MUST accept it) into its authority and path; an origin-form target has no authority.
fn split_target(target: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let rest = target.strip_prefix(b"http://").or_else(|| target.strip_prefix(b"https://"));
    match rest {
        None => (None, target),
        Some(rest) => match rest.iter().position(|&b| b == b'/') {
            Some(slash) => (Some(&rest[..slash]), &rest[slash..]),
            None => (Some(rest), b"/"),
        },
    }
}

/// The Host rule, also applied to an absolute-form target's authority (which the server must
/// use instead of Host).
pub(crate) fn host_allowed(cfg: &Config, host: &[u8]) -> bool {
    let listed = cfg.allowed_hosts.iter().any(|h| h.as_bytes() == host);
    listed || !cfg.listen.ip().is_loopback() || is_loopback_authority(host)
}

/// DNS-rebinding protection: on a loopback listener, Host and Origin must be loopback names
/// unless allowed by flag. On other listeners only Origin is checked against the allow-list.
fn host_and_origin_allowed(cfg: &Config, req: &Request<'_>) -> bool {
    let loopback = cfg.listen.ip().is_loopback();
    if let Some(host) = req.header(&req.head.host) {
        if !host_allowed(cfg, host) {
            return false;
        }
    }
    if let Some(origin) = req.header(&req.head.origin) {
        let listed = cfg.allowed_origins.iter().any(|o| o.as_bytes() == origin);
        let authority = origin
            .strip_prefix(b"http://")
            .or_else(|| origin.strip_prefix(b"https://"))
            .map(is_loopback_authority)
            .unwrap_or(false);
        if !listed && !authority && origin != b"null" {
            return false;
        }
        if !listed && origin == b"null" && loopback {
            return false;
        }
    }
    true
}

/// `localhost`, `127.x.y.z` or `[::1]`, with an optional port.
fn is_loopback_authority(a: &[u8]) -> bool {
    let host = if a.starts_with(b"[") {
        match a.iter().position(|&b| b == b']') {
            Some(end) => &a[..=end],
            None => return false,
        }
    } else {
        a.split(|&b| b == b':').next().unwrap_or(a)
    };
    host.eq_ignore_ascii_case(b"localhost")
        || host == b"[::1]"
        || (host.starts_with(b"127.")
            && std::str::from_utf8(host).is_ok_and(|h| h.parse::<std::net::Ipv4Addr>().is_ok()))
}
