//! One core's shared state and the shape of an era's answer: what both protocol paths read
//! (`Core`: the config, the provider registry, the metrics, the drain flag, which core this
//! is), what they hand back to `endpoint` (`Outcome`, rendered with `reply`/`refuse`), and
//! `source::Source`, the shape of a response stream that `runtime::stream` drives.
//!
//! Below both eras and above `dispatch`: each era keeps its own state in a core of its own
//! (`legacy::LegacyCore`: the sessions; `modern::ModernCore`: keys and tasks) that derefs to
//! this one, so neither era names the other's state. Built by `runtime` once per core.
//! Never: holds an era's state, touches a socket, or decodes a body.

pub(crate) mod source;

use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;

use crate::config::Config;
use crate::dispatch::Registry;
use crate::http::RequestHead;
use crate::metrics::CoreMetrics;
use crate::wire::jsonrpc::RawId;
use crate::wire::{Answer, Refusal};
pub(crate) use source::{KeepAlive, Source, Step};

/// One core's view of the server, shared by both eras.
pub(crate) struct Core {
    pub(crate) cfg: Arc<Config>,
    pub(crate) index: u16,
    pub(crate) threads: u16,
    pub(crate) registry: Registry,
    pub(crate) metrics: Arc<CoreMetrics>,
    /// True once this core drains (SIGTERM/SIGINT, `Running::shutdown`): a new `initialize`
    /// is refused (503 + Retry-After). Set only by `runtime`, never cleared.
    pub(crate) draining: Cell<bool>,
}

/// The parts of a request an era reads: the head's bytes and the (mutable) body.
pub(crate) struct Request<'a> {
    pub(crate) head: &'a RequestHead,
    pub(crate) head_bytes: &'a [u8],
    pub(crate) body: &'a mut [u8],
}

impl Request<'_> {
    /// The bytes of a header the head parser found (`None`: absent).
    pub(crate) fn header(&self, r: &Option<Range<usize>>) -> Option<&[u8]> {
        r.as_ref().map(|r| &self.head_bytes[r.clone()])
    }
}

/// How an era's handling of a request ends; `J` is what that era's connection drives next.
pub(crate) enum Outcome<J> {
    /// A whole response is in the output buffer.
    Reply { keep_alive: bool },
    /// A response head is in the buffer (or nothing yet): the connection drives `J` next.
    Job(J),
    /// The request belongs to another core (its session, key or task): move the connection
    /// there, unanswered.
    HandOff(u16),
}

/// Renders `answer` as a whole response.
pub(crate) fn reply<J>(out: &mut Vec<u8>, answer: Answer<'_>, keep_alive: bool) -> Outcome<J> {
    answer.render(out, keep_alive);
    Outcome::Reply { keep_alive }
}

/// Renders a refusal as a whole response.
pub(crate) fn refuse<J>(
    out: &mut Vec<u8>,
    refusal: Refusal,
    id: Option<&RawId>,
    keep_alive: bool,
) -> Outcome<J> {
    reply(out, Answer::Refused { refusal, id }, keep_alive)
}
