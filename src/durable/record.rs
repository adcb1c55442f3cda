//! What a worker hands the mirror thread (`Record`) and what a reader gets back from the store
//! (`SessionImage`): plain data, so neither side needs the other's types. A session is named
//! by its `Mcp-Session-Id` as on the wire (`Arc<str>`, made once per session and shared by
//! every record of it).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::keys::StreamRecord;

/// Bytes a queued record is charged beyond its payload (its own size and the key strings the
/// writer makes for it), so a flood of tiny records is bounded by the byte budget too.
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 96;

/// One ring event as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EventImage {
    /// Its session-wide sequence number.
    pub(crate) seq: u64,
    /// The stream it belongs to.
    pub(crate) stream: u32,
    /// The SSE payload exactly as it was appended to the ring (empty for a priming event).
    pub(crate) data: Bytes,
}

/// A whole session: what a new session writes first, what a rewrite writes after the mirror
/// lost some of it, and what an adopter reads back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionImage {
    /// `Mcp-Session-Id`.
    pub(crate) sid: Arc<str>,
    /// The node that owns it (`--node-id`); in an image read for adoption, the node it was
    /// taken from.
    pub(crate) owner: u8,
    /// Its event-id tag.
    pub(crate) tag: u32,
    /// The tags its event ids had before adoptions, oldest first: `(until, tag)`, the events
    /// below `until` carry `tag` (`Session::tag_of`); empty for a session never adopted.
    pub(crate) earlier_tags: Vec<(u64, u32)>,
    /// The negotiated protocol version.
    pub(crate) version: String,
    /// The subject whose token opened it (authorization on).
    pub(crate) subject: Option<String>,
    /// The client's `initialize` params (capabilities, clientInfo) as JSON.
    pub(crate) client: String,
    /// The logging level's name.
    pub(crate) log: String,
    /// Its request streams: key → record.
    pub(crate) streams: Vec<(u32, StreamRecord)>,
    /// Its ring's events, oldest first, contiguous in `seq`.
    pub(crate) events: Vec<EventImage>,
    /// The sequence number the ring's next event takes (the events' successor, or where an
    /// empty ring starts).
    pub(crate) next_seq: u64,
}

/// Consecutive ring events already packed as the store keeps a run (`keys::pack_event`):
/// `count` events from `first_seq`, `payload_bytes` of payload; `at` is when the first was
/// appended, `first_kept` as for `Record::Event`.
#[derive(Debug)]
pub(crate) struct PackedRun {
    pub(crate) first_seq: u64,
    pub(crate) count: u32,
    pub(crate) packed: Vec<u8>,
    pub(crate) payload_bytes: usize,
    pub(crate) at: Instant,
    pub(crate) first_kept: Option<u64>,
}

/// One change for the store, in the order its core made them.
#[derive(Debug)]
pub(crate) enum Record {
    /// A whole session (created, or rewritten after a gap): replaces whatever the store held.
    Session(Box<SessionImage>),
    /// A request stream opened or changed (finished, settled).
    Stream { sid: Arc<str>, key: u32, record: Box<StreamRecord> },
    /// Consecutive ring events gathered while a tool ran (`SessionMirror::gathering`): one
    /// record for a tool's burst of progress, not one per event.
    Run { sid: Arc<str>, run: PackedRun },
    /// A stream left the session (retention over, or evicted for room).
    StreamGone { sid: Arc<str>, key: u32 },
    /// The ring appended an event; `at` is when, for the lag histogram. `first_kept`: the
    /// ring evicted every event before it to make room (one record, not two, per evicting
    /// append: a full ring evicts at nearly every append). `then`: the record of the event's
    /// own stream as it stands after the event (a stream opened with its priming event, or
    /// finished with its final one), written after the event: one record where there were two.
    /// `gone`: a stream the session dropped just before (the oldest settled one, evicted to make
    /// room for this event's stream): `StreamGone` carried along, a third record saved.
    /// `primed`: the event right before `event` (`seq` one less) is its stream's empty priming
    /// event, written first by this record: a quick call's opening and final event in one
    /// record where there were two (`SessionChange::QuickOpening`); `at` is then the priming's.
    Event {
        sid: Arc<str>,
        primed: bool,
        event: EventImage,
        at: Instant,
        first_kept: Option<u64>,
        then: Option<Box<StreamRecord>>,
        gone: Option<u32>,
    },
    /// The session ended (DELETE or expiry): its keys go.
    End { sid: Arc<str> },
    /// A 2026-07-28 `Idempotency-Key` record (`keys::keyed` names it): running, or done with
    /// its final response.
    Keyed { name: String, fingerprint: u64, node: u8, response: Option<Bytes>, ttl_ms: u64 },
    /// A task (tasks extension) as `tasks/get` would answer it now (`detailed`, JSON), whose
    /// subject may read it, and whether it still runs.
    Task {
        id: String,
        node: u8,
        subject: Option<String>,
        detailed: String,
        running: bool,
        ttl_ms: u64,
    },
}

impl Record {
    /// What the record is charged against its core's byte budget.
    pub(crate) fn charged_bytes(&self) -> usize {
        RECORD_OVERHEAD_BYTES
            + match self {
                Record::Session(image) => {
                    image.client.len()
                        + image.streams.len() * RECORD_OVERHEAD_BYTES
                        + image.events.iter().map(|e| e.data.len() + 32).sum::<usize>()
                }
                Record::Event { event, then, .. } => {
                    event.data.len() + then.as_ref().map_or(0, |_| RECORD_OVERHEAD_BYTES)
                }
                Record::Run { run, .. } => run.packed.len(),
                Record::Keyed { name, response, .. } => {
                    name.len() + response.as_ref().map_or(0, Bytes::len)
                }
                Record::Task { id, detailed, .. } => id.len() + detailed.len(),
                Record::Stream { .. } | Record::StreamGone { .. } | Record::End { .. } => 0,
            }
    }

    /// The session the record belongs to (`None` for keyed records and tasks).
    pub(crate) fn session(&self) -> Option<&Arc<str>> {
        match self {
            Record::Session(image) => Some(&image.sid),
            Record::Stream { sid, .. }
            | Record::StreamGone { sid, .. }
            | Record::Event { sid, .. }
            | Record::Run { sid, .. }
            | Record::End { sid } => Some(sid),
            Record::Keyed { .. } | Record::Task { .. } => None,
        }
    }
}
