//! The durable mirror (`--durable redis://…`, CONTRACT §10). This module owns the store's key
//! schema: every key name, entry id and field encoding is made by a function of `keys`, so the
//! writer (each core's records, drained by the mirror thread) and the reader (a peer adopting a
//! dead node's sessions) can never disagree on a byte.
//!
//! ## The schema (Redis 7 / Valkey)
//! All keys start with `tm:`. `SID` is a session id as on the wire (38 hex digits), `NODE` a
//! node id in decimal.
//!
//! | key | type | what |
//! | --- | --- | --- |
//! | `tm:lease:NODE` | string | the node's liveness lease: its boot id (16 hex digits), `SET … PX lease`; renewed every third of `--durable-lease-ms` by the mirror thread; absent = the node is dead |
//! | `tm:s:SID` | hash | the session: `owner` (node id in decimal, changed only by `ADOPT_SCRIPT`), `tag` (the session's event-id tag, decimal u32), `rev` (protocol version), `subject` (absent without authorization), `caps` (the client's capabilities, JSON), `info` (its clientInfo, JSON), `log` (the logging level), `durable` (`1`, or `0` while the mirror of this session is incomplete: never adopted then) |
//! | `tm:st:SID` | hash | one field per request stream, the stream key in decimal → `StreamRecord` JSON |
//! | `tm:ev:SID` | stream | one entry per ring event, id `event_entry_id(seq)` = `SEQ-1`; fields `s` (stream key, decimal), `d` (the event's payload bytes exactly as the ring holds them), `f` (`1` on a stream's final event; absent otherwise). Trimmed with `XTRIM … MINID event_entry_id(oldest kept)` as the ring evicts |
//! | `tm:k:SUBJ:KEY` | hash | a 2026-07-28 `Idempotency-Key` record: `SUBJ` the subject's bytes in hex (`-` without one), `KEY` the header as sent; fields `fp` (the params fingerprint, decimal u64), `state` (`running` or `done`), `node`, `result` (the final JSON-RPC response, when done) |
//! | `tm:t:TASK` | hash | a task (tasks extension), `TASK` its id as on the wire: `state` (its status string), `node`, `subject`, `result` (the final result JSON, when there is one), `updated` (unix ms) |
//!
//! Invariant the writer keeps: per session the store holds a gap-free prefix of the ring. When a
//! record of a session cannot be queued or written, the session is marked not durable
//! (`durable` = `0` when the store is reachable) and nothing more of it is written until a whole
//! rewrite of it succeeds. A reader therefore never replays a silent gap: events the store lacks
//! end their stream with `-31006` (outcome unknown).
//!
//! Every key of a session carries the session's TTL (`PEXPIRE`: `--session-idle-secs` plus
//! `--stream-retention-secs`, renewed on each write), keyed records and tasks their own
//! retention, so the store's memory is bounded by the node's own limits.

// The mirror thread and adoption build on these; until they land only the tests use them.
#[allow(dead_code)]
pub(crate) mod keys;
