//! `Source`: one response stream as the connection's driver sees it (`runtime::stream`), the
//! seam between the socket-level loop and each era's stream. A source says what is ready
//! (`fill`), what to wait on for more (`wake`), how it ends (`Step`), what the drain's end
//! writes (`end_for_drain`) and what a peer that went away means (`gone`); the driver owns the
//! waiting, the keep-alive comment, the peer-closed check, the drain and the writes.
//!
//! Implemented by each era for its own streams: the legacy ring stream (`legacy::SseJob`),
//! and the 2026-07-28 call, keyed observer and `subscriptions/listen` stream (`modern`).
//! Driven monomorphised (`async fn drive<S: Source>`): no box and no allocation per request
//! or event comes from this seam.
//! Never: names a socket, a runtime or an era; a source never awaits inside `fill`.

use std::future::Future;

use super::Core;

/// What a stream's `fill` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The stream goes on: write what is in the output (maybe nothing), then wait.
    Open,
    /// The stream's last bytes are in the output (its final event and the chunked body's last
    /// chunk, or a whole answer: a JSON response, a retry's 409 after its wait): write them;
    /// then the connection serves its next request when `reusable`.
    Ended { reusable: bool },
    /// Stop now and write nothing more (the output is dropped), then close the connection:
    /// another writer took the stream over, or the stream is cut as a network cut would be
    /// (no last chunk, so the client resumes).
    Cut,
}

/// When the driver sends the SSE keep-alive comment (`--sse-keepalive-ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeepAlive {
    /// None now (nothing streamed yet, or a body that is not SSE).
    Off,
    /// After an interval with nothing written, counted from each wait's start.
    Idle,
    /// Every interval from the stream's start, whatever else was written (a stream whose
    /// wake is a poll timer, which would otherwise restart an idle count forever).
    Every,
}

/// One response stream a connection writes after the request was handled. The driver calls,
/// in a loop: `fill` (then writes, `sent` or `gone`), and when nothing was ready, waits on
/// `wake`, the drain, the keep-alive timer and the peer's socket. The output buffer holds the
/// response head before the first `fill` when the era rendered it already; `frames` is the
/// connection's scratch buffer, empty at each call.
pub(crate) trait Source {
    /// Appends what is ready to `out` (a head not rendered yet, SSE chunks, the end), at most
    /// about `core.cfg.write_buffer_bytes` of frames; never awaits.
    fn fill(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>) -> Step;

    /// Completes when `fill` may find more (an event, the outcome, a timeout of the stream's
    /// own). Asked after a `fill` that found nothing to write; dropped when another branch of
    /// the wait wins, so it must hold no buffer.
    fn wake(&mut self) -> impl Future<Output = ()> + '_;

    /// How the keep-alive comment is timed now (asked before each wait).
    fn keep_alive(&self) -> KeepAlive;

    /// True when a drain waits for this stream to end; false for one that waits for messages
    /// that may never come (a standalone GET, a listen stream), which the drain counts as
    /// idle and ends at its end with the others.
    fn holds_drain(&self) -> bool;

    /// The drain's end reached the stream after a `fill` that did not end it: appends its last
    /// bytes (the last chunk, a result, or a 503 when nothing was streamed). The connection
    /// then closes.
    fn end_for_drain(&mut self, core: &Core, out: &mut Vec<u8>, frames: &mut Vec<u8>);

    /// The output was written whole.
    fn sent(&mut self, core: &Core);

    /// The peer went away (it closed its end, or a write failed): detach, cancel, or nothing,
    /// as the stream's revision says. Nothing more is written.
    fn gone(&mut self, core: &Core);
}
