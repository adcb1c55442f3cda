//! The legacy era's periodic work on one core, asked by `endpoint::Endpoint::expire` at each of
//! the runtime's reaper ticks: owed streams nobody resumed within `--owed-timeout-secs` are
//! abandoned, settled request streams past `--stream-retention-secs` forgotten, sessions idle
//! past `--session-idle-secs` ended; and the gauges (`tidemark_streams_live`, `_streams_owed`,
//! `_ring_bytes` from the core's `CoreTally`, `_durable_sessions_not_durable`) sampled. And
//! whether a call still runs here (`is_quiet`, for the drain).
//!
//! Cost: O(due). The sessions come off the core's timer wheel (`session::timers`) when one of
//! their deadlines may have come, at most `REAP_BATCH` and about `REAP_STEP_TIME` per call so
//! that a burst of expiries cannot stall the event loop (the runtime calls again after a pause
//! while more are due); a session looked at whose deadline moved (a request since) is re-armed
//! at its real deadline. One exception: a session past its idle time that a stream still keeps
//! (a client holding its GET stream, a tool running long) is looked at every tick until it
//! lets go, since nothing else tells the reaper when it does. Left O(sessions): with
//! `--durable`, the tick's rewrite of sessions not durable (`catch_up_mirrors`), and `is_quiet`
//! (the drain only).
//!
//! Never: ends a session that is not idle, or runs during a request (single-threaded core).

use std::time::Instant;

use super::core::{end_session, LegacyCore, SessionEnd};
use super::session::{SessionRc, StreamKind};

/// Sessions looked at per `expire` call at most.
pub(crate) const REAP_BATCH: usize = 64;

/// Time one `expire` call may take before it stops early (read every `REAP_CLOCK_EVERY`
/// sessions): half the event loop's stall budget (issue 40: 100 µs), whatever an expiry costs
/// on this machine (measured: 64 of them took over 100 µs in a quarter of the steps of an
/// expiry burst at 100 000 sessions on the loaded 2-core machine).
const REAP_STEP_TIME: std::time::Duration = std::time::Duration::from_micros(50);

/// Sessions between two reads of the clock in `expire`.
const REAP_CLOCK_EVERY: usize = 8;

impl LegacyCore {
    /// Looks at the sessions due by `now`, at most `REAP_BATCH` of them and for about
    /// `REAP_STEP_TIME`: `None` when none was due (the step did nothing), else whether more
    /// are due.
    pub(crate) fn expire(&self, now: Instant) -> Option<bool> {
        let tick = self.sessions.borrow().timers.tick_of(now);
        let began = Instant::now();
        for looked in 0..REAP_BATCH {
            if looked % REAP_CLOCK_EVERY == REAP_CLOCK_EVERY - 1 && began.elapsed() > REAP_STEP_TIME
            {
                return Some(true);
            }
            let popped = {
                let mut table = self.sessions.borrow_mut();
                table.timers.pop_due(tick).map(|key| table.by_key(key))
            };
            match popped {
                None => return (looked > 0).then_some(false),
                Some(None) => {}
                Some(Some(session)) => self.look_at(&session, now, tick),
            }
        }
        Some(true)
    }

    /// One session off the wheel at `now` (tick `tick`): its overdue streams go, it ends when
    /// idle past its time, else it goes back on the wheel at its next deadline.
    fn look_at(&self, rc: &SessionRc, now: Instant, tick: u32) {
        let cfg = &self.cfg.sessions;
        let mut s = rc.borrow_mut();
        // Off the wheel now: its entry is free (another session may take it).
        s.timer_entry = super::session::timers::NOT_ARMED;
        let (abandoned, expired) = s.overdue(now, cfg.owed_timeout, cfg.stream_retention);
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
        if s.is_expired(now, cfg.session_idle) {
            let id = s.id;
            drop(s);
            end_session(self, &id, SessionEnd::Expired);
            return;
        }
        let mut table = self.sessions.borrow_mut();
        let due = table.timers.tick_of(s.next_deadline(now, cfg)).max(tick + 1);
        table.rearm(&mut s, due);
    }

    /// Samples the gauges, once a reaper tick; with `--durable`, first rewrites each session
    /// that is not durable to the store (when it is up and has room).
    pub(crate) fn sample(&self) {
        {
            let table = self.sessions.borrow();
            // Bounded memory: between steps, exactly one wheel entry per session.
            debug_assert_eq!(table.timers.len(), table.len(), "invariant: one entry a session");
        }
        let m = &self.metrics;
        if self.mirror.is_some() {
            m.durable_sessions_not_durable.set(self.catch_up_mirrors());
        }
        m.streams_live.set(self.tally.live.get() as u64);
        m.streams_owed.set(self.tally.owed.get() as u64);
        m.ring_bytes.set(self.tally.ring_bytes.get() as u64);
    }

    /// Walks every session (`--durable` only): each one not durable is queued whole again.
    /// Sessions still not durable.
    fn catch_up_mirrors(&self) -> u64 {
        let sessions = self.sessions.borrow().all();
        let mut not_durable = 0;
        for rc in sessions {
            let mut s = rc.borrow_mut();
            if s.is_observed() && !s.mirror_catch_up() {
                not_durable += 1;
            }
        }
        not_durable
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
    //! Goal: the reaper looks at a session only when one of its deadlines may have come, and
    //! ends it (or drops its owed streams) exactly at the tick past the deadline, a deadline
    //! moved by activity included; and the cost of a tick with nothing due at a handful of
    //! sessions and at 10 000 (a measurement: `--ignored --nocapture`, optimized). Method: a
    //! core with no provider, sessions inserted directly, ticks at instants given (no sleep).

    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::{LegacyCore, REAP_BATCH};
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
            audit: None,
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

    /// Runs the reaper steps of one tick at `at`; how many steps it took.
    fn tick(legacy: &LegacyCore, at: Instant) -> usize {
        let mut steps = 1;
        while legacy.expire(at) == Some(true) {
            steps += 1;
        }
        steps
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn owed_streams_go_at_their_timeout_and_the_session_at_its_moved_idle_deadline() {
        let legacy = core_with(1);
        let id = SessionId { node: 0, core: 0, random: 1 };
        let session = legacy.sessions.borrow().get(&id).expect("inserted");
        let born = session.borrow().last_active;
        let (owed, idle) = (legacy.cfg.sessions.owed_timeout, legacy.cfg.sessions.session_idle);
        assert_eq!(owed, secs(60), "the defaults this test is written for");
        assert_eq!(idle, secs(600));
        tick(&legacy, born + owed - secs(1));
        assert_eq!(session.borrow().streams().count(), 2, "not owed that long yet");
        tick(&legacy, born + owed + secs(1));
        assert_eq!(legacy.metrics.owed_abandoned_total.get(), 2, "abandoned at the timeout");
        // Activity moves the idle deadline without touching the wheel: the session is looked
        // at when its old deadline comes, found alive, and re-armed at the new one.
        session.borrow_mut().last_active = born + secs(300);
        tick(&legacy, born + idle + secs(1));
        assert_eq!(legacy.sessions.borrow().len(), 1, "active 300 s in: not idle yet");
        tick(&legacy, born + secs(300) + idle - secs(1));
        assert_eq!(legacy.sessions.borrow().len(), 1, "one second before its deadline");
        tick(&legacy, born + secs(300) + idle + secs(1));
        assert!(legacy.sessions.borrow().is_empty(), "ended at its moved deadline");
        assert_eq!(legacy.sessions.borrow().timers.len(), 0, "its entry went with it");
    }

    #[test]
    fn a_burst_of_expiries_is_cut_into_bounded_steps_and_nothing_due_takes_one() {
        let sessions = 3 * REAP_BATCH + 1;
        let legacy = core_with(sessions);
        let now = Instant::now();
        assert_eq!(legacy.expire(now), None, "nothing due: a step that finds nothing says so");
        assert_eq!(tick(&legacy, now), 1, "nothing due: one step that finds nothing");
        assert_eq!(legacy.sessions.borrow().timers.len(), sessions, "one entry a session");
        let steps = tick(&legacy, now + secs(601));
        assert!(steps >= 4, "{sessions} expiries, {REAP_BATCH} a step at most: {steps} steps");
        assert!(legacy.sessions.borrow().is_empty());
    }

    /// Times `ticks` reaper ticks over `sessions` sessions, none due.
    fn time_ticks(sessions: usize, ticks: u32) {
        let legacy = core_with(sessions);
        while legacy.expire(Instant::now()) == Some(true) {}
        let started = Instant::now();
        for _ in 0..ticks {
            while legacy.expire(Instant::now()) == Some(true) {}
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
