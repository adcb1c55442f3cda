//! The sessions section: legacy sessions, their streams and replay rings, SSE timing, the
//! migration boundary's waits, and the buffers a session and a core may hold; its defaults,
//! validation and flags.
//!
//! Owns: `SessionsConfig` and its flags. Never: holds a session.

use std::time::Duration;

use super::error::{at_most, nonzero, ConfigError};

/// The smallest window of a large event one stream batch carries, and so the smallest write
/// buffer (`--write-buffer-bytes`): a batch always makes this much progress.
pub(crate) const WINDOW_BYTES_MIN: usize = 4096;
/// Live sessions on one core. Over it: `initialize` gets 503 with -32603.
pub(crate) const SESSIONS_PER_CORE_MAX: usize = 100_000;
/// Request streams retained per session (running, owed or completed-and-retained). Over it,
/// when none can be evicted: 429 with -32603.
pub(crate) const STREAMS_PER_SESSION_MAX: usize = 256;
/// Events held per session ring (power of two: slot = seq & mask).
pub(crate) const REPLAY_EVENTS_MAX: usize = 4096;
/// Payload bytes held per session ring.
pub(crate) const REPLAY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The largest `--replay-events`: a ring's slot keeps the distance to its stream's next event
/// in 32 bits (16-byte slots, issue 43 §2). Over it: the server does not start.
pub(crate) const REPLAY_EVENTS_MOST: usize = 1 << 31;
/// The largest `--replay-bytes` (4 GiB − 1): a ring's held bytes, and a payload's length, fit
/// 32 bits (a slot once kept its payload's offset in them). Over it: the server does not start.
pub(crate) const REPLAY_BYTES_MOST: usize = u32::MAX as usize;
/// Empty replay pages (4 KiB each, `replay::page`) one core keeps for its rings' next
/// payloads (`--replay-spare-pages`), made at the core's start: a page freed by one session's
/// eviction or end is the next page of another without the allocator. More are freed. A cache,
/// never a budget: a ring that finds none allocates one, so no session can starve the others
/// (each ring is bounded by `--replay-bytes`, all of a core's by `--core-buffer-bytes`). 64:
/// 256 KiB a core, the growth of a hundred echo sessions' rings by two pages each.
pub(crate) const REPLAY_SPARE_PAGES_MAX: usize = 64;
/// How long a completed, delivered request stream stays resumable and deduplicable.
pub(crate) const STREAM_RETENTION_SECS: u64 = 300;
/// Idle time after which a session expires (then 404).
pub(crate) const SESSION_IDLE_SECS: u64 = 600;
/// Per session and kind (tools, prompts, resources), at most one `…/list_changed` notification
/// is sent per this many milliseconds (`--list-changed-min-ms`); one that arrives inside the
/// window goes out once at its end, standing for all of them. 250 ms: a human sees no lag, and
/// an upstream flooding 2000 a second costs each client 4 a second (and 4 re-lists), not 2000.
pub(crate) const LIST_CHANGED_MIN_MS: u64 = 250;
/// `retry:` field of every priming event (SEP-1699), in milliseconds.
pub(crate) const SSE_RETRY_MS: u64 = 1000;
/// Keep-alive comment interval on an SSE connection; a dead peer shows up as a failed write.
pub(crate) const SSE_KEEPALIVE_SECS: u64 = 15;
/// How long the first write of a new request stream whose call is still running waits for
/// more (`--sse-first-write-hold-us`; 0 writes at once): a call that answers within it (a
/// bridged echo: tens of µs) goes out as head, priming event and response in one send instead
/// of two, one loopback TCP send and one client wake-up fewer per call. A longer call's head
/// is this much later. A 2026-07-28 call sends nothing before its answer anyway; it waits as
/// well, so a quick answer comes without the stream's peer-watch poll armed and cancelled
/// first, and a client that closes its stream meanwhile is seen at most this much later.
pub(crate) const SSE_FIRST_WRITE_HOLD_US: u64 = 1000;
/// The largest `--sse-first-write-hold-us` (1 s): past it, a client would wait for the head
/// of a running call long enough to think it lost.
pub(crate) const SSE_FIRST_WRITE_HOLD_US_MAX: u64 = 1_000_000;
/// How long a POST is held while the session owes a stream before 409 -31004.
pub(crate) const OWED_WAIT_MS: u64 = 2000;
/// How long an owed stream waits for a resume before it is abandoned (counted).
pub(crate) const OWED_TIMEOUT_SECS: u64 = 60;
/// Bytes of SSE frames one connection buffers for one send (`--write-buffer-bytes`): a batch of
/// events, or one window of an event larger than this (written in windows across sends). With
/// the ring, it bounds what a session's slow reader can make the server hold: `--replay-bytes`
/// plus this per connection (issue 11 §2). 256 KiB coalesces thousands of small events per send
/// (runtime-notes §4: one chunk per flush is 40× cheaper than one per event).
pub(crate) const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// POSTs one session may have held at the migration boundary at once (CONTRACT §4 step 4,
/// `--max-held-per-session`). Each keeps its request in memory until it runs, so this bounds
/// that memory by this × `--max-body-bytes`; one more gets 409 -31004 at once (resume first).
/// 16: far more than a client has in flight while it ought to be resuming.
pub(crate) const HELD_PER_SESSION_MAX: usize = 16;
/// Replay-ring bytes all sessions of one core may hold together (`--core-buffer-bytes`). Over
/// it, new request streams are refused with 503 (`Retry-After`) rather than growing; running
/// streams go on (each ring stays within `--replay-bytes`). 1 GiB: 256 sessions with full 4 MiB
/// rings per core.
pub(crate) const CORE_BUFFER_BYTES: usize = 1024 * 1024 * 1024;
/// The part of a session ring (1/N of `--replay-events` and of `--replay-bytes`) that the
/// events of its attached streams not yet written may fill before tidemark stops reading the
/// upstreams of their running calls (backpressure, CONTRACT §3) until a writer has sent some.
/// Half: a producer is checked once per upstream message, so each overshoots by at most one
/// message, and the other half is room for what producers that do not wait (built-in tools,
/// streams whose client is gone) add meanwhile; only more than that from them makes the
/// oldest-first eviction reach an attached stream's unwritten events. A 2026-07-28 call's pending notifications pause at the
/// same share of `--replay-bytes`, and past the whole of it are dropped (counted).
pub(crate) const UNWRITTEN_SHARE_DIVISOR: usize = 2;

const _: () = assert!(REPLAY_EVENTS_MAX.is_power_of_two());
const _: () =
    assert!(REPLAY_EVENTS_MAX <= REPLAY_EVENTS_MOST && REPLAY_BYTES_MAX <= REPLAY_BYTES_MOST);
const _: () = assert!(UNWRITTEN_SHARE_DIVISOR >= 2 && REPLAY_EVENTS_MAX >= UNWRITTEN_SHARE_DIVISOR);
const _: () = assert!(OWED_WAIT_MS < OWED_TIMEOUT_SECS * 1000);

/// How a request POST is answered (CONTRACT §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResponseMode {
    /// `tools/call` as SSE (it may emit progress, logs, server→client requests), the rest JSON.
    Auto,
    /// Every request as SSE.
    Sse,
    /// Every request as one JSON body.
    Json,
}

/// Whether the migration boundary (CONTRACT §4 steps 2–4) is enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MigrationPolicy {
    /// Enforced (default).
    Strict,
    /// Skipped: what the official SDK servers do today; for comparison runs only.
    Off,
}

/// Legacy sessions and their streams: how requests are answered, the migration boundary,
/// the per-core and per-session bounds, the replay ring, SSE timing and buffers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionsConfig {
    /// How request POSTs are answered, SSE or JSON (`--response-mode`).
    pub response_mode: ResponseMode,
    /// Whether the migration boundary is enforced (`--migration-policy`).
    pub migration_policy: MigrationPolicy,
    /// Live sessions on one core (`--max-sessions-per-core`, `SESSIONS_PER_CORE_MAX`); over it:
    /// `initialize` gets 503 with -32603.
    pub sessions_per_core_max: usize,
    /// Request streams retained per session (`--max-streams-per-session`,
    /// `STREAMS_PER_SESSION_MAX`); over it, when none can be evicted: 429 with -32603.
    pub streams_per_session_max: usize,
    /// Events held per session replay ring (`--replay-events`, `REPLAY_EVENTS_MAX`); a power of
    /// two.
    pub replay_events_max: usize,
    /// Payload bytes held per session replay ring (`--replay-bytes`, `REPLAY_BYTES_MAX`).
    pub replay_bytes_max: usize,
    /// Empty replay pages one core keeps for the next payloads (`--replay-spare-pages`,
    /// `REPLAY_SPARE_PAGES_MAX`); more are freed.
    pub replay_spare_pages_max: usize,
    /// How long a completed, delivered request stream stays resumable and deduplicable
    /// (`--stream-retention-secs`, `STREAM_RETENTION_SECS`).
    pub stream_retention: Duration,
    /// Idle time after which a session expires and gets 404 (`--session-idle-secs`,
    /// `SESSION_IDLE_SECS`).
    pub session_idle: Duration,
    /// The least time between two list-changed notifications of one kind to one legacy
    /// session (`--list-changed-min-ms`, `LIST_CHANGED_MIN_MS`).
    pub list_changed_min: Duration,
    /// `retry:` field of every priming event, in milliseconds (`--sse-retry-ms`, `SSE_RETRY_MS`).
    pub sse_retry_ms: u64,
    /// Keep-alive comment interval on an SSE connection (`--sse-keepalive-secs`,
    /// `SSE_KEEPALIVE_SECS`).
    pub sse_keepalive: Duration,
    /// How long a new request stream's first write waits for its running call
    /// (`--sse-first-write-hold-us`, `SSE_FIRST_WRITE_HOLD_US`; zero: no wait).
    pub sse_first_write_hold: Duration,
    /// How long a POST is held while its session owes a stream (`--owed-wait-ms`, `OWED_WAIT_MS`);
    /// then 409 -31004. Shorter than `owed_timeout`.
    pub owed_wait: Duration,
    /// How long an owed stream waits for a resume before it is abandoned (`--owed-timeout-secs`,
    /// `OWED_TIMEOUT_SECS`).
    pub owed_timeout: Duration,
    /// `--write-buffer-bytes` (`WRITE_BUFFER_BYTES`, at least `WINDOW_BYTES_MIN`).
    pub write_buffer_bytes: usize,
    /// `--core-buffer-bytes` (`CORE_BUFFER_BYTES`).
    pub core_buffer_bytes: usize,
    /// `--max-held-per-session` (`HELD_PER_SESSION_MAX`).
    pub held_per_session_max: usize,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            response_mode: ResponseMode::Auto,
            migration_policy: MigrationPolicy::Strict,
            sessions_per_core_max: SESSIONS_PER_CORE_MAX,
            streams_per_session_max: STREAMS_PER_SESSION_MAX,
            replay_events_max: REPLAY_EVENTS_MAX,
            replay_bytes_max: REPLAY_BYTES_MAX,
            replay_spare_pages_max: REPLAY_SPARE_PAGES_MAX,
            stream_retention: Duration::from_secs(STREAM_RETENTION_SECS),
            session_idle: Duration::from_secs(SESSION_IDLE_SECS),
            list_changed_min: Duration::from_millis(LIST_CHANGED_MIN_MS),
            sse_retry_ms: SSE_RETRY_MS,
            sse_keepalive: Duration::from_secs(SSE_KEEPALIVE_SECS),
            sse_first_write_hold: Duration::from_micros(SSE_FIRST_WRITE_HOLD_US),
            owed_wait: Duration::from_millis(OWED_WAIT_MS),
            owed_timeout: Duration::from_secs(OWED_TIMEOUT_SECS),
            write_buffer_bytes: WRITE_BUFFER_BYTES,
            core_buffer_bytes: CORE_BUFFER_BYTES,
            held_per_session_max: HELD_PER_SESSION_MAX,
        }
    }
}

impl SessionsConfig {
    /// The section of the parsed flags.
    pub(crate) fn from_flags(
        modes: ModeFlags,
        sessions: SessionFlags,
        buffers: BufferFlags,
    ) -> SessionsConfig {
        SessionsConfig {
            response_mode: match modes.response_mode {
                ModeFlag::Auto => ResponseMode::Auto,
                ModeFlag::Sse => ResponseMode::Sse,
                ModeFlag::Json => ResponseMode::Json,
            },
            migration_policy: match modes.migration_policy {
                PolicyFlag::Strict => MigrationPolicy::Strict,
                PolicyFlag::Off => MigrationPolicy::Off,
            },
            sessions_per_core_max: sessions.max_sessions_per_core,
            streams_per_session_max: sessions.max_streams_per_session,
            replay_events_max: sessions.replay_events,
            replay_bytes_max: sessions.replay_bytes,
            replay_spare_pages_max: sessions.replay_spare_pages,
            stream_retention: Duration::from_secs(sessions.stream_retention_secs),
            session_idle: Duration::from_secs(sessions.session_idle_secs),
            list_changed_min: Duration::from_millis(sessions.list_changed_min_ms),
            sse_retry_ms: sessions.sse_retry_ms,
            sse_keepalive: Duration::from_secs(sessions.sse_keepalive_secs),
            sse_first_write_hold: Duration::from_micros(sessions.sse_first_write_hold_us),
            owed_wait: Duration::from_millis(sessions.owed_wait_ms),
            owed_timeout: Duration::from_secs(sessions.owed_timeout_secs),
            write_buffer_bytes: buffers.write_buffer_bytes,
            core_buffer_bytes: buffers.core_buffer_bytes,
            held_per_session_max: buffers.max_held_per_session,
        }
    }

    /// Checks the section's values.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[
            ("max-sessions-per-core", self.sessions_per_core_max as u128),
            ("max-streams-per-session", self.streams_per_session_max as u128),
            ("replay-bytes", self.replay_bytes_max as u128),
            ("replay-spare-pages", self.replay_spare_pages_max as u128),
            ("session-idle-secs", self.session_idle.as_millis()),
            ("list-changed-min-ms", self.list_changed_min.as_millis()),
            ("sse-keepalive-secs", self.sse_keepalive.as_millis()),
            ("owed-wait-ms", self.owed_wait.as_millis()),
            ("owed-timeout-secs", self.owed_timeout.as_millis()),
            ("stream-retention-secs", self.stream_retention.as_millis()),
            ("sse-retry-ms", u128::from(self.sse_retry_ms)),
            ("core-buffer-bytes", self.core_buffer_bytes as u128),
            ("max-held-per-session", self.held_per_session_max as u128),
        ])?;
        if !self.replay_events_max.is_power_of_two() {
            return Err(ConfigError::NotPowerOfTwo(self.replay_events_max));
        }
        at_most(&[
            ("replay-events", self.replay_events_max, REPLAY_EVENTS_MOST),
            ("replay-bytes", self.replay_bytes_max, REPLAY_BYTES_MOST),
        ])?;
        if self.owed_wait >= self.owed_timeout {
            return Err(ConfigError::OwedWaitTooLong);
        }
        if self.write_buffer_bytes < WINDOW_BYTES_MIN {
            return Err(ConfigError::WriteBufferTooSmall(WINDOW_BYTES_MIN));
        }
        let hold = u64::try_from(self.sse_first_write_hold.as_micros()).unwrap_or(u64::MAX);
        if hold > SSE_FIRST_WRITE_HOLD_US_MAX {
            return Err(ConfigError::FirstWriteHoldTooLong(hold, SSE_FIRST_WRITE_HOLD_US_MAX));
        }
        Ok(())
    }
}

/// `--response-mode`'s values.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum ModeFlag {
    Auto,
    Sse,
    Json,
}

/// `--migration-policy`'s values.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum PolicyFlag {
    Strict,
    Off,
}

/// The command line's flags of this section: `--response-mode` and `--migration-policy`. `cli`
/// flattens them into its `Flags` in `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct ModeFlags {
    /// How request POSTs are answered: auto (tools/call as SSE, the rest JSON), sse, json.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) response_mode: ModeFlag,
    /// strict enforces the migration boundary; off behaves like the SDK servers (comparison).
    #[arg(long, value_enum, default_value = "strict")]
    pub(crate) migration_policy: PolicyFlag,
}

/// The command line's flags of this section: the sessions' and streams' bounds and timing. `cli`
/// flattens them into its `Flags` in `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct SessionFlags {
    /// Live legacy sessions per core; over it: initialize gets 503.
    #[arg(long, default_value_t = SESSIONS_PER_CORE_MAX)]
    pub(crate) max_sessions_per_core: usize,
    /// Request streams a session retains (settled ones are evicted first); over it: 429.
    #[arg(long, default_value_t = STREAMS_PER_SESSION_MAX)]
    pub(crate) max_streams_per_session: usize,
    /// Events held per session replay ring (power of two).
    #[arg(long, default_value_t = REPLAY_EVENTS_MAX)]
    pub(crate) replay_events: usize,
    /// Payload bytes held per session replay ring.
    #[arg(long, default_value_t = REPLAY_BYTES_MAX)]
    pub(crate) replay_bytes: usize,
    /// Empty 4 KiB replay pages one core makes at its start and keeps for the next events; more
    /// are freed.
    #[arg(long, default_value_t = REPLAY_SPARE_PAGES_MAX)]
    pub(crate) replay_spare_pages: usize,
    /// How long a settled stream stays resumable and deduplicable; a resume after it: 400.
    #[arg(long, default_value_t = STREAM_RETENTION_SECS)]
    pub(crate) stream_retention_secs: u64,
    /// An idle legacy session expires after this long (404 after).
    #[arg(long, default_value_t = SESSION_IDLE_SECS)]
    pub(crate) session_idle_secs: u64,
    /// Per legacy session (and subscriptions/listen stream) and kind, at most one
    /// tools/prompts/resources list_changed per this many ms; those inside the window go out
    /// as one at its end.
    #[arg(long, default_value_t = LIST_CHANGED_MIN_MS)]
    pub(crate) list_changed_min_ms: u64,
    /// The `retry:` field of priming events: how long a client waits before it resumes.
    #[arg(long, default_value_t = SSE_RETRY_MS)]
    pub(crate) sse_retry_ms: u64,
    /// Interval of the SSE keep-alive comment on a quiet stream.
    #[arg(long, default_value_t = SSE_KEEPALIVE_SECS)]
    pub(crate) sse_keepalive_secs: u64,
    /// A new request stream whose call is running waits this many µs for its answer before
    /// its first write, so a quick answer shares the head's send (0: write at once; max 1 s).
    #[arg(long, default_value_t = SSE_FIRST_WRITE_HOLD_US)]
    pub(crate) sse_first_write_hold_us: u64,
    /// How long a POST is held while its session owes a stream's tail; past it: 409 -31004.
    #[arg(long, default_value_t = OWED_WAIT_MS)]
    pub(crate) owed_wait_ms: u64,
    /// How long an owed stream waits for a resume before it is abandoned (counted).
    #[arg(long, default_value_t = OWED_TIMEOUT_SECS)]
    pub(crate) owed_timeout_secs: u64,
}

/// The command line's flags of this section: the write and replay buffers, and POSTs held at the
/// migration boundary. `cli` flattens them into its `Flags` in `--help`'s order (a section's flags
/// may come in several runs).
#[derive(clap::Args)]
pub(crate) struct BufferFlags {
    /// SSE bytes one connection buffers per send; larger events go out in windows (min 4096).
    #[arg(long, default_value_t = WRITE_BUFFER_BYTES)]
    pub(crate) write_buffer_bytes: usize,
    /// Replay-ring bytes all sessions of one core may hold; over it new streams get 503.
    #[arg(long, default_value_t = CORE_BUFFER_BYTES)]
    pub(crate) core_buffer_bytes: usize,
    /// POSTs one session may have held (while a stream is owed) at once; more get 409 -31004.
    #[arg(long, default_value_t = HELD_PER_SESSION_MAX)]
    pub(crate) max_held_per_session: usize,
}
