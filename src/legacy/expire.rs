//! The legacy era's periodic work on one core, asked by `endpoint::Endpoint::expire` at each of
//! the runtime's reaper ticks: owed streams nobody resumed within `--owed-timeout-secs` are
//! abandoned, settled request streams past `--stream-retention-secs` forgotten, sessions idle
//! past `--session-idle-secs` ended; the gauges cheaper to count here than on every change are
//! sampled (`tidemark_streams_live`, `_streams_owed`, `_ring_bytes`,
//! `_durable_sessions_not_durable`). And whether a call still runs here (`is_quiet`, for the
//! drain).
//!
//! Cost: a tick walks every session of the core and each session's streams (the gauges need
//! the walk): O(sessions + streams) per `REAP_INTERVAL`, not O(due), off the request path.
//! Measured (issue 39 item 3; the tests below, optimized, no LTO; two streams a session, none
//! due): a tick at 4 sessions about 0.3 µs (3 060 instructions under callgrind), at 10 000
//! about 1.5 ms (6.65 M instructions, 665 a session: 0.6 % of a core at one tick per 250 ms).
//! Deadlines kept in order (a timer wheel) are issue 40.
//!
//! Never: ends a session that is not idle, or runs during a request (single-threaded core).

use std::time::Instant;

use super::core::{end_session, LegacyCore, SessionEnd};
use super::session::StreamKind;

impl LegacyCore {
    /// One reaper tick at `now` over every session of this core.
    pub(crate) fn expire(&self, now: Instant) {
        let sessions = self.sessions.borrow().all();
        let (mut live, mut owed, mut not_durable) = (0u64, 0u64, 0u64);
        for rc in sessions {
            let mut s = rc.borrow_mut();
            for st in s.streams().filter(|st| st.kind == StreamKind::Request) {
                live += u64::from(st.is_attached());
                owed += u64::from(st.is_owed());
            }
            let (abandoned, expired) =
                s.overdue(now, self.cfg.sessions.owed_timeout, self.cfg.sessions.stream_retention);
            for k in abandoned {
                crate::logging::limited!(
                    crate::logging::Kind::Loss,
                    tracing::Level::WARN,
                    session = %s.id.to_header(),
                    stream = k.0,
                    core = s.id.core,
                    node = s.id.node,
                    culprit = "peer",
                    reason = "not resumed within --owed-timeout-secs",
                    "owed stream abandoned"
                );
                s.drop_stream(k);
                self.metrics.owed_abandoned_total.inc();
            }
            for k in expired {
                s.remove_stream(k);
            }
            if s.is_observed() && !s.mirror_catch_up() {
                not_durable += 1;
            }
            if s.is_expired(now, self.cfg.sessions.session_idle) {
                let id = s.id;
                drop(s);
                end_session(self, &id, SessionEnd::Expired);
            }
        }
        let m = &self.metrics;
        m.streams_live.set(live);
        m.streams_owed.set(owed);
        m.durable_sessions_not_durable.set(not_durable);
        m.ring_bytes.set(self.buffered_bytes.get() as u64);
    }

    /// No legacy request stream of this core is running. Owed streams are not waited for: their
    /// clients cannot reconnect to a draining server.
    pub(crate) fn is_quiet(&self) -> bool {
        let sessions = self.sessions.borrow().all();
        let running = sessions.iter().any(|rc| {
            rc.borrow().streams().any(|st| st.kind == StreamKind::Request && st.is_running())
        });
        !running
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the cost of one reaper tick (`LegacyCore::expire`) at a handful of sessions and at
    //! 10 000, each with two request streams, none due (the steady state: the tick walks and
    //! finds nothing). Method: a core with no provider, sessions inserted directly, ticks
    //! timed. A measurement, not a check: run with `--ignored --nocapture` in an optimized
    //! build.

    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::Arc;
    use std::time::Instant;

    use super::LegacyCore;
    use crate::config::Config;
    use crate::core::{Core, Rate};
    use crate::dispatch::Registry;
    use crate::legacy::session::{Session, SessionId, StreamKind, LEGACY_VERSIONS};
    use crate::provider::testing::run;
    use crate::wire::jsonrpc::RawId;

    /// A legacy core holding `sessions` sessions of two request streams each.
    fn core_with(sessions: usize) -> LegacyCore {
        let cfg = {
            let mut edited = Config::default();
            edited.sessions.sessions_per_core_max = sessions;
            edited
        };
        let shared = Rc::new(Core {
            rate: Rate::new(&cfg, 1),
            cfg: Arc::new(cfg.clone()),
            index: 0,
            threads: 1,
            registry: run(Registry::build(Vec::new())),
            metrics: Arc::default(),
            auth: None,
            draining: Cell::new(false),
            mirror: None,
            reader: None,
        });
        let legacy = LegacyCore::new(shared);
        for i in 0..sessions {
            let id = SessionId { node: 0, core: 0, random: i as u128 + 1 };
            let mut s = Session::new(id, 1, LEGACY_VERSIONS[0], &cfg);
            for n in 0..2u64 {
                let rid = Some(RawId::from(n.to_string()));
                s.open_stream(StreamKind::Request, rid, n, None, None).expect("room");
            }
            legacy.sessions.borrow_mut().insert(s);
        }
        legacy
    }

    /// Times `ticks` reaper ticks over `sessions` sessions, none due.
    fn time_ticks(sessions: usize, ticks: u32) {
        let legacy = core_with(sessions);
        legacy.expire(Instant::now());
        let started = Instant::now();
        for _ in 0..ticks {
            legacy.expire(Instant::now());
        }
        let per_tick = started.elapsed() / ticks;
        assert_eq!(legacy.sessions.borrow().len(), sessions, "none was due");
        println!("reaper tick at {sessions} sessions: {per_tick:?}");
    }

    #[test]
    #[ignore = "a measurement: run with --ignored --nocapture in an optimized build"]
    fn cost_of_a_reaper_tick_at_4_sessions() {
        time_ticks(4, 20_000);
    }

    #[test]
    #[ignore = "a measurement: run with --ignored --nocapture in an optimized build"]
    fn cost_of_a_reaper_tick_at_10_000_sessions() {
        time_ticks(10_000, 200);
    }
}
