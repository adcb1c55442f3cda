//! Why an exchange with an HTTP upstream failed: the one error enum of this transport.
//!
//! Owns: `HttpError`, each variant naming its culprit, and which variants are a break worth
//! resuming (`is_break`).
//! Called by: every file of this folder but `url.rs`; the transport turns it into the JSON-RPC
//! error of the call that failed (`fail_request` in `mod.rs`).
//! Never: carries a `String` or a byte of the upstream's input (variants are `Copy`), or uses
//! another file of this folder.

/// Why an exchange with the upstream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HttpError {
    /// The OS or the upstream: connecting, writing or reading failed (refused, reset, …).
    #[error("connection failed: {0}")]
    Io(std::io::ErrorKind),
    /// The upstream: no connection or no answer within the deadline.
    #[error("no answer within the deadline")]
    Timeout,
    /// The upstream closed the connection before the response ended.
    #[error("the upstream closed the connection mid-response")]
    Closed,
    /// The upstream: a response head beyond `HEAD_BYTES_MAX`.
    #[error("response head larger than 64 KiB")]
    HeadTooLarge,
    /// The upstream: a response head that is not HTTP/1.x.
    #[error("malformed response head")]
    BadHead,
    /// The upstream: a chunked body that breaks RFC 9112 §7.1.
    #[error("malformed chunked body")]
    BadChunk,
    /// The upstream: a JSON body, SSE line or event beyond `--upstream-line-bytes`.
    #[error("body or event larger than --upstream-line-bytes")]
    TooLarge,
    /// The upstream: a 2xx response that is neither JSON nor an event stream.
    #[error("response is neither application/json nor text/event-stream")]
    ContentType,
    /// Us: the transport was shut down.
    #[error("the transport was shut down")]
    Stopped,
}

impl HttpError {
    /// A stream that broke (rather than misbehaved): worth resuming.
    pub(super) fn is_break(self) -> bool {
        matches!(self, HttpError::Closed | HttpError::Io(_))
    }
}
