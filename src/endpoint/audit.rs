//! The audit trail's door (`--audit-log`, docs/audit.md): an admitted POST of `tools/call`,
//! `resources/read` or `prompts/get` becomes an `audit::Call` before its era serves it, and
//! gets its line when it ends: at once for a whole answer (its outcome read off the rendered
//! bytes), at its run's end for a legacy call (`Session::audit_at_end`, whether or not a
//! connection is there to see it), at its stream's end for a 2026-07-28 call (`Audited`).
//! A 2026-07-28 call answered with a task names it (`task_created`) and leaves a copy of itself
//! with the task (`end`), which writes the task's own line when it ends (`"task":"<id>"`).
//! A request handed to its owner core is audited there.
//!
//! Owns: which requests are audited and what their line says of them. Only reached when the
//! flag is set (`endpoint::post` tests `Core::audit` once; `endpoint::audited` serves the
//! request and hands its call to what ends it).

use std::future::Future;

use simd_json::prelude::*;

use crate::audit::{self, Call, Ending, Pending};
use crate::core::{Admitted, Core, KeepAlive, Source, Step};
use crate::legacy::{LegacyCore, SseJob};
use crate::modern::tasks::TaskStore;
use crate::provider::SessionRef;
use crate::wire::jsonrpc::{Body, Message};
use crate::wire::WireValue;

use super::admit::Era;

/// The call an admitted request is, when its method is audited.
pub(super) fn begin(edge: &LegacyCore, era: Era, admitted: &Admitted<'_>) -> Option<Call> {
    let Body::Single(Message::Request { id, method, params }) = &admitted.body else {
        return None;
    };
    let (method, name_field) = match *method {
        "tools/call" => ("tools/call", "name"),
        "prompts/get" => ("prompts/get", "name"),
        "resources/read" => ("resources/read", "uri"),
        _ => return None,
    };
    let req = admitted.req;
    let name = params.get(name_field).and_then(ValueIntoString::into_string).unwrap_or("");
    let header = |r| req.header(r).and_then(|v| std::str::from_utf8(v).ok()).map(Box::from);
    let revision = match era {
        Era::Legacy => match crate::legacy::session_version(edge, req) {
            Some(version) => version.into(),
            None => header(&req.head.protocol_version).unwrap_or_else(|| "legacy".into()),
        },
        Era::Modern => crate::wire::revision::MODERN_VERSION.into(),
    };
    Some(Call {
        started: std::time::Instant::now(),
        method,
        id: id.as_str().into(),
        name: name.into(),
        arguments_sha256: arguments_sha256(method, params),
        session: header(&req.head.session_id),
        subject: req.subject().map(Box::from),
        client: client_of(params),
        era: revision,
        upstream: upstream_of(edge, method, name),
        idempotency_key: header(&req.head.idempotency_key),
        trace_id: trace_id(req),
        task: audit::TaskMark::None,
    })
}

/// SHA-256 of the canonical text (`wire::jsonrpc::canonical_params`) of a call's `arguments`
/// (`{}` when absent), or of a read's params (its URI).
fn arguments_sha256(method: &str, params: &WireValue<'_>) -> [u8; 32] {
    let mut text = String::with_capacity(64);
    let hashed = match method {
        "resources/read" => Some(*params),
        _ => params.get("arguments"),
    };
    match hashed {
        Some(value) => crate::wire::jsonrpc::canonical_params(value, &mut text),
        None => text.push_str("{}"),
    }
    audit::sha256(text.as_bytes())
}

/// `name/version` of the request's `_meta` clientInfo (2026-07-28), when given.
fn client_of(params: &WireValue<'_>) -> Option<Box<str>> {
    let info = params.get("_meta")?.get(crate::wire::revision::META_CLIENT_INFO)?;
    let name = info.get("name").and_then(ValueIntoString::into_string).unwrap_or("");
    let version = info.get("version").and_then(ValueIntoString::into_string).unwrap_or("");
    Some(format!("{name}/{version}").into())
}

/// The upstream a bridged tool belongs to (its provider's name; none for a built-in tool).
fn upstream_of(core: &Core, method: &str, name: &str) -> Option<Box<str>> {
    if method != "tools/call" {
        return None;
    }
    let route = core.registry.tool(SessionRef::STATELESS, name)?;
    if crate::provider::builtin::as_builtin(route.provider.as_ref()).is_some() {
        return None;
    }
    Some(route.provider.name().into())
}

/// The trace id of the request's span (tracing on) or of its `traceparent` header.
fn trace_id(req: &crate::core::Request<'_>) -> Option<Box<str>> {
    let parent = req.trace().or_else(|| {
        let value = crate::http::header_named(req.head_bytes, "traceparent")?;
        crate::trace::TraceParent::parse(value)
    })?;
    let hex: String = parent.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    Some(hex.into())
}

/// Writes a call's line from its answer. A 2026-07-28 `tools/call` answered with a
/// `CreateTaskResult` (`tasks`: the store of the core that created it) names the task on its
/// line, and hands a copy of itself to the task, which writes the task's end line when it ends.
pub(super) fn end(mut pending: Pending, answer: &[u8], tasks: Option<&TaskStore>) {
    let ending = crate::wire::jsonrpc::audit_ending(answer);
    if let (Some(tasks), Ending::Result { .. }) = (tasks, ending) {
        if let Some(task) = created_task(answer) {
            tasks.audit_at_end(task, &mut pending);
        }
    }
    pending.end(ending);
}

/// The `taskId` of a `CreateTaskResult` (`"resultType":"task"`) in a rendered answer's final
/// response; `None` for any other answer. Task ids are hex (`tasks::TaskId`): no escapes.
fn created_task(answer: &[u8]) -> Option<&str> {
    use memchr::memmem;
    let start = memmem::rfind(answer, crate::wire::jsonrpc::RESPONSE_PREFIX)?;
    let message = &answer[start..];
    memmem::find(message, b"\"resultType\":\"task\"")?;
    const TASK_ID: &[u8] = b"\"taskId\":\"";
    let id = &message[memmem::find(message, TASK_ID)? + TASK_ID.len()..];
    let id = &id[..memchr::memchr(b'"', id)?];
    std::str::from_utf8(id).ok()
}

/// A legacy call answered with a stream: a dedup hit ends now, a fresh call when its run does
/// (`Session::audit_at_end`), whether or not a connection is there to see it.
pub(super) fn ends_with_run(job: &SseJob, pending: Pending) {
    if job.is_retry() {
        return pending.end(Ending::Dedup);
    }
    let (session, key) = job.stream();
    session.borrow_mut().audit_at_end(key, pending);
}

/// A 2026-07-28 response stream whose call is audited: its line is written from the final
/// answer the stream renders, or as cancelled when the client goes or the drain ends it first.
pub(crate) struct Audited<S> {
    pub(crate) inner: S,
    pending: Option<Pending>,
    /// The store of this core's tasks, where a call that became a task leaves its end line.
    tasks: TaskStore,
}

impl<S> Audited<S> {
    pub(super) fn new(inner: S, pending: Pending, tasks: TaskStore) -> Audited<S> {
        Audited { inner, pending: Some(pending), tasks }
    }

    fn end(&mut self, ending: Ending) {
        if let Some(pending) = self.pending.take() {
            pending.end(ending);
        }
    }
}

impl<S: Source> Source for Audited<S> {
    fn fill(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) -> Step {
        let before = out.len();
        let step = self.inner.fill(core, out, frames);
        if let Step::Ended { .. } = step {
            if let Some(pending) = self.pending.take() {
                end(pending, &out[before..], Some(&self.tasks));
            }
        }
        step
    }

    fn wake(&mut self) -> impl Future<Output = ()> + '_ {
        self.inner.wake()
    }

    fn keep_alive(&self) -> KeepAlive {
        self.inner.keep_alive()
    }

    fn first_write_hold(&self, core: &Core) -> Option<std::time::Duration> {
        self.inner.first_write_hold(core)
    }

    fn holds_drain(&self) -> bool {
        self.inner.holds_drain()
    }

    fn end_for_drain(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) {
        self.inner.end_for_drain(core, out, frames);
        self.end(Ending::Cancelled);
    }

    fn sent(&mut self, core: &Core) {
        self.inner.sent(core);
    }

    fn gone(&mut self, core: &Core) {
        self.inner.gone(core);
        self.end(Ending::Cancelled);
    }
}

#[cfg(test)]
mod tests {
    use super::created_task;

    #[test]
    fn a_create_task_result_names_its_task_and_nothing_else_does() {
        // Goal: only a final response whose result is a `CreateTaskResult` gives a task id.
        // Method: a JSON answer, an SSE answer, an ordinary result, a task id in a tool's text.
        let created = r#"{"jsonrpc":"2.0","id":1,"result":{"createdAt":"x","resultType":"task","status":"working","taskId":"0001ab","ttlMs":1}}"#;
        assert_eq!(
            created_task(format!("HTTP/1.1 200 OK\r\n\r\n{created}").as_bytes()),
            Some("0001ab")
        );
        let sse = format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"x\"}}\n\ndata: {created}\n\n"
        );
        assert_eq!(created_task(sse.as_bytes()), Some("0001ab"));
        let plain = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"resultType\":\"task\",\"taskId\":\"0001ab\"}"}]}}"#;
        assert_eq!(created_task(plain.as_bytes()), None, "escaped in a text: not a task");
        assert_eq!(created_task(b"HTTP/1.1 503 Service Unavailable\r\n\r\n"), None);
    }
}
