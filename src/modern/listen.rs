//! `subscriptions/listen` (MCP 2026-07-28): a long-lived response stream carrying the list
//! changes the client opted in to. The first message is
//! `notifications/subscriptions/acknowledged` with the types the server agreed to; every
//! message carries `_meta["io.modelcontextprotocol/subscriptionId"]` (the request's id); only
//! the opted-in types are sent; a stream the server ends (drain) gets the request's result.
//!
//! Changes are counted process-wide (`provider::LIST_CHANGES`): a tool list changed by a call
//! on another core reaches every core's listen streams, which look at the counts every
//! `LISTEN_POLL` (no cross-core wake-up is needed for a signal this rare), and report each kind
//! at most once per `--list-changed-min-ms` (a flooding upstream's changes are one report).
//!
//! Owns: `ListenJob` (a `core::Source` that `runtime::stream` drives: the acknowledgement,
//! the changes each `LISTEN_POLL`, the result at the drain's end) and its messages. Never:
//! touches the socket, or holds a drain (it waits for changes that may never come).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use simd_json::prelude::*;

use crate::core::{Core, KeepAlive, Outcome, Source, Step};
use crate::provider::LIST_CHANGES;
use crate::wire::jsonrpc::{self, RawId};
use crate::wire::{Answer, WireValue};

use super::meta::META_SUBSCRIPTION_ID;

/// How often a listen stream looks at the process-wide change counts.
const LISTEN_POLL: Duration = Duration::from_millis(50);

/// The notification types of a subscription, as `SubscriptionFilter` names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
}

/// One open `subscriptions/listen` stream.
pub(crate) struct ListenJob {
    id: RawId,
    granted: Filter,
    /// The change counts last reported (tools, prompts, resources).
    seen: [u64; 3],
    /// When each kind was last reported: a kind is reported again only `--list-changed-min-ms`
    /// later (the count keeps what came meanwhile, so the last change is reported then).
    reported: [Option<Instant>; 3],
    /// `--list-changed-min-ms`.
    min: Duration,
    /// True once the acknowledgement is in the output.
    acknowledged: bool,
}

fn counts() -> [u64; 3] {
    [
        LIST_CHANGES.tools.load(Ordering::Relaxed),
        LIST_CHANGES.prompts.load(Ordering::Relaxed),
        LIST_CHANGES.resources.load(Ordering::Relaxed),
    ]
}

/// Opens the stream: the SSE head into `out`; the acknowledgement is the job's first message.
/// Types the server cannot honour (prompts or resources it does not have, resource
/// subscriptions) are left out of the acknowledgement and never sent.
pub(crate) fn start(
    core: &Core,
    id: RawId,
    params: &WireValue<'_>,
    out: &mut Vec<u8>,
) -> Outcome<ListenJob> {
    let Some(requested) = params.get("notifications").filter(|n| n.is_object()) else {
        let message = "subscriptions/listen needs params.notifications (a SubscriptionFilter)";
        let (status, code) = (crate::wire::Status::BadRequest, crate::wire::Code::InvalidParams);
        let answer = Answer::Error { status, id: Some(&id), code, message, data: None };
        return crate::core::reply(out, answer, true);
    };
    let asked = |name: &str| requested.get(name).and_then(|v| v.as_bool()).unwrap_or(false);
    let capabilities = core.registry.capabilities();
    let granted = Filter {
        tools: asked("toolsListChanged"),
        prompts: asked("promptsListChanged") && capabilities.get("prompts").is_some(),
        resources: asked("resourcesListChanged") && capabilities.get("resources").is_some(),
    };
    Answer::SseHeadStateless.render(out, true);
    let min = core.cfg.sessions.list_changed_min;
    Outcome::Job(ListenJob {
        id,
        granted,
        seen: counts(),
        reported: [None; 3],
        min,
        acknowledged: false,
    })
}

impl ListenJob {
    /// `_meta` with this subscription's id, as JSON text.
    fn meta(&self) -> String {
        format!("\"_meta\":{{\"{META_SUBSCRIPTION_ID}\":{}}}", self.id.as_str())
    }

    fn push(&self, frames: &mut Vec<u8>, method: &str, extra: &str) {
        let params = format!("{{{extra}{}}}", self.meta());
        let mut message = Vec::with_capacity(96 + params.len());
        jsonrpc::push_notification(&mut message, method, params.as_bytes());
        crate::wire::sse::push_event(frames, None, None, &message);
    }

    /// The acknowledgement, first on the stream.
    fn acknowledge(&self, frames: &mut Vec<u8>) {
        let mut filter = serde_json::Map::new();
        let granted = self.granted;
        for (name, on) in [
            ("toolsListChanged", granted.tools),
            ("promptsListChanged", granted.prompts),
            ("resourcesListChanged", granted.resources),
        ] {
            if on {
                filter.insert(name.into(), serde_json::Value::Bool(true));
            }
        }
        let extra = format!("\"notifications\":{},", serde_json::Value::Object(filter));
        self.push(frames, "notifications/subscriptions/acknowledged", &extra);
    }

    /// The list-changed notifications since the last look, of the granted types, each kind at
    /// most once per `min` (a change inside the window is reported at the first look after
    /// it); true when it wrote some.
    fn changes(&mut self, frames: &mut Vec<u8>) -> bool {
        let (counts, now) = (counts(), Instant::now());
        let kinds = [
            (self.granted.tools, "notifications/tools/list_changed"),
            (self.granted.prompts, "notifications/prompts/list_changed"),
            (self.granted.resources, "notifications/resources/list_changed"),
        ];
        let mut wrote = false;
        for (i, (granted, method)) in kinds.into_iter().enumerate() {
            if counts[i] == self.seen[i] {
                continue;
            }
            if self.reported[i].is_some_and(|at| now < at + self.min) {
                continue;
            }
            if granted {
                self.push(frames, method, "");
                self.reported[i] = Some(now);
                wrote = true;
            }
            self.seen[i] = counts[i];
        }
        wrote
    }

    /// The request's result, sent when the server ends the stream (a drain).
    fn close(&self, frames: &mut Vec<u8>) {
        let result = format!("{{\"resultType\":\"complete\",{}}}", self.meta());
        let mut message = Vec::with_capacity(96 + result.len());
        jsonrpc::push_result(&mut message, &self.id, result.as_bytes());
        crate::wire::sse::push_event(frames, None, None, &message);
    }
}

impl Source for ListenJob {
    fn fill(&mut self, _core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) -> Step {
        if !self.acknowledged {
            self.acknowledge(frames);
            crate::wire::sse::push_chunk(out, frames);
            frames.clear();
            self.acknowledged = true;
        }
        if self.changes(frames) {
            crate::wire::sse::push_chunk(out, frames);
        }
        Step::Open
    }

    fn wake(&mut self) -> impl Future<Output = ()> + '_ {
        monoio::time::sleep(LISTEN_POLL)
    }

    fn keep_alive(&self) -> KeepAlive {
        // Woken every LISTEN_POLL, so the keep-alive is a deadline rather than an idle timer.
        KeepAlive::Every
    }

    fn holds_drain(&self) -> bool {
        false
    }

    fn end_for_drain(&mut self, _core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) {
        self.close(frames);
        crate::wire::sse::push_chunk(out, frames);
        out.extend_from_slice(crate::wire::sse::CHUNK_END);
    }

    fn sent(&mut self, _core: &Core) {}

    fn gone(&mut self, _core: &Core) {}
}
