//! The seed's migration boundary as one pure decision (CONTRACT §4): given what the session
//! knows about a request POST, say whether it runs, replays a deduplicated stream, is held, or
//! is refused. O(1), no I/O, no clock: the session keeps the counters it reads up to date on
//! every stream transition.
//!
//! Called by `transport` for every JSON-RPC *request* POST on a legacy session (notifications,
//! responses, GET and DELETE never come here: they are never held or refused).

use crate::legacy::replay::StreamKey;

/// What an `Idempotency-Key` lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyMatch {
    /// No key, or a key this session has not seen.
    None,
    /// Seen, with the same method and params: that stream answers.
    SameRequest(StreamKey),
    /// Seen, with other method or params.
    OtherRequest,
}

/// Everything the decision reads; each field is an O(1) lookup or counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// `--migration-policy strict` (false = off: skip steps 2–4, as the SDKs do today).
    pub strict: bool,
    pub key: KeyMatch,
    /// A retained stream that this POST retries: same JSON-RPC id and not settled, or same
    /// method+params and owed or parked.
    pub retry_of: Option<StreamKey>,
    /// A retained, settled stream with the same JSON-RPC id.
    pub reused_id_of: Option<StreamKey>,
    /// The request may run again safely (read-only method, or a tool annotated readOnlyHint or
    /// idempotentHint).
    pub idempotent: bool,
    /// The session has an owed stream or a replay being written.
    pub session_owes: bool,
}

/// What to do with the POST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Step 1: answer with that stream, replayed from its first message, then live.
    Deduplicated(StreamKey),
    /// Step 1: 422, -31005.
    KeyReused,
    /// Step 2: 409, -31001, with the stream's Last-Event-ID hint. Nothing runs.
    RetryOfOwed(StreamKey),
    /// Step 3: 409, -31002, with the hint to fetch the original answer by GET.
    IdReused(StreamKey),
    /// Step 4: wait until nothing is owed and no replay is being written, then decide again.
    Hold,
    /// Step 5: run it.
    Fresh,
}

/// The five steps, in order.
pub fn decide(f: Facts) -> Decision {
    match f.key {
        KeyMatch::SameRequest(stream) => return Decision::Deduplicated(stream),
        KeyMatch::OtherRequest => return Decision::KeyReused,
        KeyMatch::None => {}
    }
    if !f.strict {
        return Decision::Fresh;
    }
    if let Some(stream) = f.retry_of {
        return Decision::RetryOfOwed(stream);
    }
    if let Some(stream) = f.reused_id_of {
        if !f.idempotent {
            return Decision::IdReused(stream);
        }
    }
    if f.session_owes {
        return Decision::Hold;
    }
    Decision::Fresh
}

/// Methods that read only (CONTRACT §4 step 3); `tools/call` depends on the tool.
pub(crate) fn method_is_idempotent(method: &str) -> bool {
    matches!(
        method,
        "ping" | "resources/read" | "prompts/get" | "completion/complete" | "initialize"
    ) || method.ends_with("/list")
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: StreamKey = StreamKey(1);
    const B: StreamKey = StreamKey(2);
    const C: StreamKey = StreamKey(3);

    /// Goal: every combination of the inputs gets the decision the five ordered steps give.
    /// Method: enumerate all 2·3·2·2·2·2 = 96 fact sets and compare with an independent,
    /// deliberately literal reading of CONTRACT §4.
    #[test]
    fn exhaustive_decision_table() {
        let mut seen = 0;
        for strict in [true, false] {
            for key in [KeyMatch::None, KeyMatch::SameRequest(A), KeyMatch::OtherRequest] {
                for retry_of in [None, Some(B)] {
                    for reused_id_of in [None, Some(C)] {
                        for idempotent in [true, false] {
                            for session_owes in [true, false] {
                                let f = Facts {
                                    strict,
                                    key,
                                    retry_of,
                                    reused_id_of,
                                    idempotent,
                                    session_owes,
                                };
                                let want = if key == KeyMatch::SameRequest(A) {
                                    Decision::Deduplicated(A)
                                } else if key == KeyMatch::OtherRequest {
                                    Decision::KeyReused
                                } else if !strict {
                                    Decision::Fresh
                                } else if retry_of.is_some() {
                                    Decision::RetryOfOwed(B)
                                } else if reused_id_of.is_some() && !idempotent {
                                    Decision::IdReused(C)
                                } else if session_owes {
                                    Decision::Hold
                                } else {
                                    Decision::Fresh
                                };
                                assert_eq!(decide(f), want, "{f:?}");
                                seen += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(seen, 96);
    }

    #[test]
    fn read_only_methods() {
        for m in [
            "ping",
            "tools/list",
            "resources/list",
            "prompts/list",
            "resources/templates/list",
            "resources/read",
            "prompts/get",
            "completion/complete",
        ] {
            assert!(method_is_idempotent(m), "{m}");
        }
        for m in ["tools/call", "logging/setLevel", "resources/subscribe", "sampling/createMessage"]
        {
            assert!(!method_is_idempotent(m), "{m}");
        }
    }
}
