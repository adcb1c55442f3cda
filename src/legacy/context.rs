//! The legacy path's side of a tool call's `CallContext`: every message a provider sends during
//! a call (progress, logs, server→client requests) becomes an event of that call's request
//! stream in the session's replay ring, so it is resumable like the result (MCP 2025-11-25
//! transports: messages SHOULD relate to the originating request).
//!
//! A producer that can wait (the bridge's upstream reader) asks `room` before each message:
//! while the call's client is attached and has not been written its share of the ring, it waits
//! for the writer instead of making the ring evict what that client has not got (CONTRACT §3).
//!
//! Called by: providers, through `CallContext`. Never: writes to a socket (the stream's writer
//! does), or keeps the session alive (it holds a `Weak`).

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::legacy::list_changed::{self, Verdict, Windows};
use crate::legacy::replay::StreamKey;
use crate::legacy::session::{ClientAnswer, PendingClientRequest, Session};
use crate::legacy::stream::encode_event;
use crate::provider::{
    CallSink, LocalBoxFuture, LogLevel, NotifySink, ProviderError, ProviderResult, Value,
};
use crate::signal::Signal;
use crate::wire::jsonrpc;
use crate::wire::notification::{log_params, push_progress};
use crate::wire::Code;

/// The sink of one request stream's context.
pub(crate) struct StreamSink {
    pub session: Weak<RefCell<Session>>,
    pub key: StreamKey,
}

/// Sinks a core keeps for the next calls (`stream_sink`): one whose call ended is reused in
/// place, so a call allocates no sink. A spare holds a `Weak` of its last session, which keeps
/// at most that session's allocation (not its state) until the spare is reused.
pub(crate) const SPARE_SINKS_KEPT: usize = 8;

thread_local! {
    /// The core's sinks, in use by a call (shared) or spare (held only here).
    static SPARE_SINKS: RefCell<Vec<Rc<StreamSink>>> = const { RefCell::new(Vec::new()) };
}

/// The sink of a call on stream `key` of `session`: a spare one no call holds any more,
/// repointed, else a new one (kept as a spare while fewer than `SPARE_SINKS_KEPT` are).
pub(crate) fn stream_sink(session: Weak<RefCell<Session>>, key: StreamKey) -> Rc<StreamSink> {
    SPARE_SINKS.with(|spares| {
        let mut spares = spares.borrow_mut();
        let free = spares.iter_mut().find(|s| Rc::strong_count(s) == 1 && Rc::weak_count(s) == 0);
        // `get_mut` succeeds exactly for such a sink: held by nothing but this list.
        if let Some(spare) = free {
            if let Some(sink) = Rc::get_mut(spare) {
                *sink = StreamSink { session, key };
                return spare.clone();
            }
        }
        let sink = Rc::new(StreamSink { session, key });
        if spares.len() < SPARE_SINKS_KEPT {
            spares.push(sink.clone());
        }
        sink
    })
}

impl StreamSink {
    /// Appends one message to the stream. A message too large for the ring ends the request
    /// with an error (`Session::append`); one for a stream that already ended is dropped, as
    /// its tool has been told to stop.
    fn append(&self, payload: Vec<u8>) {
        if let Some(session) = self.session.upgrade() {
            let _ended = session.borrow_mut().append(self.key, payload);
        }
    }
}

impl CallSink for StreamSink {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(session) = self.session.upgrade() else { return };
        let event = {
            // Written while the token is borrowed (no clone of it).
            let s = session.borrow();
            let Some(token) = s.stream(self.key).and_then(|s| s.progress_token.as_ref()) else {
                return;
            };
            encode_event(|out| push_progress(out, token.as_str(), progress, total, message))
        };
        let _ended = session.borrow_mut().append(self.key, &event);
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        let Some(session) = self.session.upgrade() else { return };
        if level < session.borrow().log_level {
            return;
        }
        let mut payload = Vec::with_capacity(96);
        let params = serde_json::to_vec(&log_params(level.as_str(), logger, data))
            .unwrap_or_else(|_| b"{}".to_vec());
        jsonrpc::push_notification(&mut payload, "notifications/message", &params);
        self.append(payload);
    }

    fn request(
        &self,
        method: &str,
        params: Value,
    ) -> LocalBoxFuture<'static, ProviderResult<Value>> {
        let Some(session) = self.session.upgrade() else {
            return Box::pin(async { Err(ProviderError::Cancelled) });
        };
        let key = self.key;
        let answer: Rc<RefCell<Option<ClientAnswer>>> = Rc::new(RefCell::new(None));
        let signal = Rc::new(Signal::default());
        {
            let mut s = session.borrow_mut();
            if s.pending_client_len() >= s.pending_client_max() {
                return Box::pin(std::future::ready(
                    Err(ProviderError::too_many_client_requests()),
                ));
            }
            let pending = PendingClientRequest {
                stream: key,
                answer: answer.clone(),
                signal: signal.clone(),
            };
            let id = s.add_pending_client(pending);
            let mut payload = Vec::with_capacity(128);
            // JSON-RPC params are an object or absent, never null: a request without params
            // (roots/list relayed from an upstream) goes out with an empty object.
            let params = match params {
                Value::Null => b"{}".to_vec(),
                params => serde_json::to_vec(&params).unwrap_or_else(|_| b"{}".to_vec()),
            };
            jsonrpc::push_request(&mut payload, id, method, &params);
            let _ended = s.append(key, payload);
        }
        let weak = Rc::downgrade(&session);
        Box::pin(async move {
            loop {
                let notified = signal.notified();
                if let Some(outcome) = answer.borrow_mut().take() {
                    return outcome.map_err(client_error);
                }
                let gone = weak.upgrade().is_none_or(|s| {
                    let s = s.borrow();
                    s.closed || s.stream(key).is_none_or(|st| st.is_cancelled())
                });
                if gone {
                    return Err(ProviderError::Cancelled);
                }
                notified.await;
            }
        })
    }

    fn close_connection(&self) {
        if let Some(session) = self.session.upgrade() {
            session.borrow_mut().request_close(self.key);
        }
    }

    fn is_cancelled(&self) -> bool {
        self.session
            .upgrade()
            .is_none_or(|s| s.borrow().stream(self.key).is_none_or(|st| st.is_cancelled()))
    }

    fn cancelled(&self) -> LocalBoxFuture<'static, ()> {
        Box::pin(crate::legacy::stream::cancelled(self.session.clone(), self.key))
    }

    fn has_room(&self) -> bool {
        self.session.upgrade().is_none_or(|s| s.borrow().has_room(self.key))
    }

    fn room(&self) -> LocalBoxFuture<'static, ()> {
        let (session, key) = (self.session.clone(), self.key);
        Box::pin(async move {
            loop {
                // Single-core: nothing changes between the check and the wait's registration.
                let room = {
                    let Some(rc) = session.upgrade() else { return };
                    let s = rc.borrow();
                    match s.stream(key) {
                        Some(st) if !s.has_room(key) => st.signals(),
                        _ => return,
                    }
                };
                room.room.notified().await;
            }
        })
    }
}

/// A JSON-RPC `error` object from the client as a provider error.
fn client_error(e: Value) -> ProviderError {
    ProviderError::ClientError {
        code: e.get("code").and_then(Value::as_i64).unwrap_or(Code::InternalError.value()),
        message: e.get("message").and_then(Value::as_str).unwrap_or("client error").to_owned(),
    }
}

/// The sink of a session's `Notifier`: session-level messages become events of the session's
/// standalone GET stream (replayable like any event); without one open they are dropped. Its
/// list changes are coalesced per kind (`list_changed`, `--list-changed-min-ms`).
///
/// Its minimum is 32-bit milliseconds, not a `Duration`: the `Rc` is then 40 bytes, where 48
/// went to mimalloc's 64-byte class (its aligned path serves an 8-aligned request of a size
/// that is not a power of two from the class of size + 7): one per idle session (issue 40 §4).
pub(crate) struct SessionNotifier {
    session: Weak<RefCell<Session>>,
    /// `--list-changed-min-ms` (saturating at `u32::MAX`, 49 days).
    list_changed_min_ms: u32,
    /// Shared with the trailing sends it schedules.
    windows: std::cell::OnceCell<Rc<Windows>>,
}

impl SessionNotifier {
    pub(crate) fn new(
        session: &Rc<RefCell<Session>>,
        list_changed_min: Duration,
    ) -> SessionNotifier {
        // The windows are made by the first list change: most sessions never see one.
        let windows = std::cell::OnceCell::new();
        let list_changed_min_ms = u32::try_from(list_changed_min.as_millis()).unwrap_or(u32::MAX);
        SessionNotifier { session: Rc::downgrade(session), list_changed_min_ms, windows }
    }
}

/// Appends `method` with `params` to the session's standalone stream, if it has one open.
fn notify_session(session: &Weak<RefCell<Session>>, method: &str, params: Value) {
    let Some(session) = session.upgrade() else { return };
    let mut s = session.borrow_mut();
    let Some(key) = s.standalone() else { return };
    // Built by serde_json: `method` may come from an upstream and is escaped here.
    let mut message = serde_json::json!({ "jsonrpc": "2.0", "method": method });
    if let (false, Some(object)) = (params.is_null(), message.as_object_mut()) {
        object.insert("params".into(), params);
    }
    let Ok(payload) = serde_json::to_vec(&message) else { return };
    let _ended = s.append(key, payload);
}

impl NotifySink for SessionNotifier {
    fn notify(&self, method: &str, params: Value) {
        let Some(kind) = list_changed::kind_of(method) else {
            return notify_session(&self.session, method, params);
        };
        let windows = self.windows.get_or_init(Rc::default);
        let min = Duration::from_millis(u64::from(self.list_changed_min_ms));
        match windows.offer(kind, Instant::now(), min) {
            Verdict::Send => notify_session(&self.session, method, params),
            Verdict::Trail(at) => {
                let (session, windows) = (self.session.clone(), windows.clone());
                monoio::spawn(async move {
                    monoio::time::sleep(at.saturating_duration_since(Instant::now())).await;
                    windows.trailed(kind, Instant::now());
                    notify_session(&session, list_changed::METHODS[kind], Value::Null);
                });
                count_coalesced();
            }
            Verdict::Coalesce => count_coalesced(),
        }
    }

    fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        let passes = self.session.upgrade().is_some_and(|s| level >= s.borrow().log_level);
        if passes {
            self.notify("notifications/message", log_params(level.as_str(), logger, data));
        }
    }

    fn is_open(&self) -> bool {
        self.session.upgrade().is_some_and(|s| !s.borrow().closed)
    }
}

/// A list change that did not go out on its own (`tidemark_list_changed_coalesced_total`).
fn count_coalesced() {
    if let Some(metrics) = crate::metrics::this_core() {
        metrics.list_changed_coalesced.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::legacy::session::{SessionId, StreamKind};
    use crate::wire::jsonrpc::RawId;

    #[test]
    fn sinks_are_reused_once_their_call_ended_and_kept_up_to_their_limit() {
        // Goal: a call's sink is a spare one when a call ended (no allocation), pointed at
        // the new stream, and at most `SPARE_SINKS_KEPT` are kept. Method: hold one more
        // than the limit at once, let them go, ask again.
        let spares = || SPARE_SINKS.with(|s| s.borrow().len());
        SPARE_SINKS.with(|s| s.borrow_mut().clear());
        let held: Vec<Rc<StreamSink>> =
            (0..=SPARE_SINKS_KEPT as u32).map(|k| stream_sink(Weak::new(), StreamKey(k))).collect();
        assert_eq!(spares(), SPARE_SINKS_KEPT);
        let kept = Rc::as_ptr(&held[0]);
        drop(held);
        let sink = stream_sink(Weak::new(), StreamKey(99));
        assert_eq!(Rc::as_ptr(&sink), kept, "a spare reused");
        assert_eq!(sink.key, StreamKey(99));
        let other = stream_sink(Weak::new(), StreamKey(100));
        assert_ne!(Rc::as_ptr(&other), kept, "one in use is not handed out twice");
        assert_eq!(spares(), SPARE_SINKS_KEPT);
    }

    #[test]
    fn server_to_client_requests_stop_at_the_pending_limit() {
        // Goal: the pending server→client requests of a session are bounded
        // (`--max-pending-client-requests`): at N they wait, the N+1th fails at once with
        // -32603 naming the flag. Method: a session with a limit of 2 and a stream's sink.
        let mut cfg = Config::test_min();
        cfg.modern.client_requests_pending_max = 2;
        let version = crate::wire::revision::LEGACY_VERSIONS[0];
        let mut s = Session::new(SessionId { node: 0, core: 0, random: 7 }, 1, version, &cfg);
        let key = s.open_stream(StreamKind::Request, Some(RawId::new("1")), 1, None, None);
        let session = Rc::new(RefCell::new(s));
        let sink = StreamSink { session: Rc::downgrade(&session), key: key.expect("opens") };
        let waiting: Vec<_> = (0..2).map(|_| sink.request("roots/list", Value::Null)).collect();
        assert_eq!(session.borrow().pending_client_len(), 2, "at the limit both wait");
        let past = sink.request("roots/list", Value::Null);
        let got = ready_now(past);
        assert_eq!(got, Some(Err(ProviderError::too_many_client_requests())));
        assert!(got.is_some_and(|r| r.is_err_and(|e| e.to_string().contains("--max-pending"))));
        drop(waiting);
    }

    /// The future's value when it is ready at its first poll.
    fn ready_now<T>(f: LocalBoxFuture<'static, T>) -> Option<T> {
        let mut f = f;
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
