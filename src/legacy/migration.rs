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
    /// The request carries no key.
    None,
    /// A key this session has not seen: a new call by the client's own word, so never a
    /// retry by params (step 2), though step 4 may hold it.
    Unseen,
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
    /// A retained, unsettled stream with the same JSON-RPC id: this POST retries it.
    pub retry_by_id: Option<StreamKey>,
    /// An owed or parked stream with the same method+params: this POST retries it when it
    /// carries no key and its id names no retained stream (a retry with a new id). `facts`
    /// looks it up only then (and under the strict policy): elsewhere it is `None`.
    pub retry_by_params: Option<StreamKey>,
    /// A retained, settled stream with the same JSON-RPC id.
    pub reused_id_of: Option<StreamKey>,
    /// The request may run again safely (read-only method, or a tool annotated readOnlyHint or
    /// idempotentHint).
    pub idempotent: bool,
    /// The session has an owed stream or a replay being written.
    pub session_owes: bool,
}

/// How step 2 recognised a retry; the client reads it in `data.matchedBy` of the -31001, so a
/// call that only looks like another (same method and params) can be re-sent with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchedBy {
    /// The same JSON-RPC id: the client's own request.
    Id,
    /// The same method and params under a new id: maybe a retry, maybe another call.
    Params,
}

impl MatchedBy {
    /// The value of `data.matchedBy` (CONTRACT §4 step 2).
    pub fn as_str(self) -> &'static str {
        match self {
            MatchedBy::Id => "id",
            MatchedBy::Params => "params",
        }
    }
}

/// What to do with the POST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Step 1: answer with that stream, replayed from its first message, then live.
    Deduplicated(StreamKey),
    /// Step 1: 422, -31005.
    KeyReused,
    /// Step 2: 409, -31001, with the stream's Last-Event-ID hint and how it matched. Nothing
    /// runs.
    RetryOfOwed(StreamKey, MatchedBy),
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
        KeyMatch::None | KeyMatch::Unseen => {}
    }
    if !f.strict {
        return Decision::Fresh;
    }
    if let Some(stream) = f.retry_by_id {
        return Decision::RetryOfOwed(stream, MatchedBy::Id);
    }
    // A retained id names its own request (steps 2 and 3), never another call's stream.
    let new_id = f.reused_id_of.is_none();
    if let (KeyMatch::None, true, Some(stream)) = (f.key, new_id, f.retry_by_params) {
        return Decision::RetryOfOwed(stream, MatchedBy::Params);
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
    const D: StreamKey = StreamKey(4);

    /// Goal: every combination of the inputs gets the decision the five ordered steps give.
    /// Method: enumerate all 2·4·2·2·2·2·2 = 256 fact sets and compare with an independent,
    /// deliberately literal reading of CONTRACT §4.
    #[test]
    fn exhaustive_decision_table() {
        let keys =
            [KeyMatch::None, KeyMatch::Unseen, KeyMatch::SameRequest(A), KeyMatch::OtherRequest];
        let mut seen = 0;
        for strict in [true, false] {
            for key in keys {
                for retry_by_id in [None, Some(B)] {
                    for retry_by_params in [None, Some(D)] {
                        for reused_id_of in [None, Some(C)] {
                            for idempotent in [true, false] {
                                for session_owes in [true, false] {
                                    let f = Facts {
                                        strict,
                                        key,
                                        retry_by_id,
                                        retry_by_params,
                                        reused_id_of,
                                        idempotent,
                                        session_owes,
                                    };
                                    assert_eq!(decide(f), literal(f), "{f:?}");
                                    seen += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(seen, 256);
    }

    /// CONTRACT §4 read step by step, as a chain of ifs.
    fn literal(f: Facts) -> Decision {
        if f.key == KeyMatch::SameRequest(A) {
            Decision::Deduplicated(A)
        } else if f.key == KeyMatch::OtherRequest {
            Decision::KeyReused
        } else if !f.strict {
            Decision::Fresh
        } else if f.retry_by_id.is_some() {
            Decision::RetryOfOwed(B, MatchedBy::Id)
        } else if f.key == KeyMatch::None && f.reused_id_of.is_none() && f.retry_by_params.is_some()
        {
            Decision::RetryOfOwed(D, MatchedBy::Params)
        } else if f.reused_id_of.is_some() && !f.idempotent {
            Decision::IdReused(C)
        } else if f.session_owes {
            Decision::Hold
        } else {
            Decision::Fresh
        }
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
