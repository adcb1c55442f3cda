//! When each session of one core must next be looked at by the reaper: a hashed timer wheel
//! (`SessionTimers`) of `TIMER_SLOTS` slots of `TIMER_TICK` each, one entry per session (its
//! key and the tick it is due), kept by `SessionTable` (armed on insert, cancelled on remove).
//!
//! Why a wheel and not a heap: arming and cancelling are O(1) (a push, and a swap-remove in
//! one slot), popping what is due touches only due entries, and the reaper's own granularity
//! (`REAP_INTERVAL`) is the slot width, so nothing finer is needed. Deadlines past the wheel's
//! span (`TIMER_SLOTS` ticks, 17 min) are clamped to its last slot: such a session is looked at
//! once more per turn of the wheel and re-armed, not missed.
//!
//! An entry's tick is never later than the session's earliest deadline (idle expiry, an owed
//! stream's timeout, a settled stream's retention), and may be earlier: activity only moves
//! deadlines later, so the hot path leaves the wheel alone, and the reaper, finding a session
//! due that is not, re-arms it at its real deadline. The one exception is a session armed far
//! away (idle, no open request stream) that gets a request: a stream it opens may owe or settle
//! within `soonest` (the shortest of `--owed-timeout-secs`, `--stream-retention-secs` and
//! `--session-idle-secs`), so the request brings its entry that close (`keep_close`), at most
//! once per such period. A new session is armed the same way.
//!
//! Memory: one entry (24 bytes) per live session, and slots emptied by the reaper give their
//! capacity back once large. Never: looks at a session (that is `legacy::expire`).

use std::time::{Duration, Instant};

/// Slots of the wheel: its span is `TIMER_SLOTS × TIMER_TICK` (about 17 minutes).
pub(crate) const TIMER_SLOTS: usize = 4096;

/// Width of one slot: the reaper's interval, the finest resolution expiry ever had.
pub(crate) const TIMER_TICK: Duration = Duration::from_millis(250);

/// `Session::timer_due` of a session off the wheel: popped, being looked at by the reaper, which
/// re-arms or ends it (so ending it need not search its slot).
pub(crate) const NOT_ARMED: u32 = u32::MAX;

/// A drained slot keeping more capacity than this gives it back (entries, 24 bytes each).
const SLOT_CAPACITY_KEPT: usize = 256;

/// One session's place on the wheel: its table key (`SessionId::random`, split so the entry is
/// 24 bytes, not 32) and the tick it is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    key: [u64; 2],
    due: u32,
}

impl Entry {
    fn new(random: u128, due: u32) -> Entry {
        Entry { key: [random as u64, (random >> 64) as u64], due }
    }

    fn random(&self) -> u128 {
        u128::from(self.key[0]) | (u128::from(self.key[1]) << 64)
    }
}

/// The wheel of one core's sessions (see the module doc).
pub(crate) struct SessionTimers {
    slots: Vec<Vec<Entry>>,
    /// Tick 0.
    epoch: Instant,
    /// The first tick not yet drained: every entry due before it has been popped.
    cursor: u32,
    /// `SessionTimers::soonest` in whole ticks.
    soonest_ticks: u32,
    /// Entries on the wheel.
    len: usize,
}

impl SessionTimers {
    /// An empty wheel starting now; `soonest`: the shortest time in which a stream opened by a
    /// request can come due (see the module doc).
    pub(crate) fn new(soonest: Duration) -> SessionTimers {
        let soonest_ticks = (soonest.as_millis() / TIMER_TICK.as_millis()).max(1);
        SessionTimers {
            slots: (0..TIMER_SLOTS).map(|_| Vec::new()).collect(),
            epoch: Instant::now(),
            cursor: 0,
            soonest_ticks: u32::try_from(soonest_ticks).unwrap_or(u32::MAX),
            len: 0,
        }
    }

    /// The tick `at` falls in.
    pub(crate) fn tick_of(&self, at: Instant) -> u32 {
        let ticks = at.saturating_duration_since(self.epoch).as_millis() / TIMER_TICK.as_millis();
        // Far below `NOT_ARMED` even a whole span later: 2^32 ticks are 34 years.
        u32::try_from(ticks).unwrap_or(u32::MAX).min(NOT_ARMED - 2 * TIMER_SLOTS as u32)
    }

    /// Entries on the wheel.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Puts session `random` on the wheel, due at tick `due` (clamped to the wheel's span, and
    /// never before the cursor: a slot already drained would wait a whole turn). Returns the
    /// tick it was put at, which the session keeps (`Session::timer_due`) for `cancel`.
    pub(crate) fn arm(&mut self, random: u128, due: u32) -> u32 {
        let last = self.cursor.saturating_add(TIMER_SLOTS as u32 - 1);
        let due = due.clamp(self.cursor, last);
        self.slots[due as usize % TIMER_SLOTS].push(Entry::new(random, due));
        self.len += 1;
        due
    }

    /// Takes session `random`'s entry, put at tick `due`, off the wheel; O(entries of its slot)
    /// (a DELETE, an expiry found by a request, a request bringing a far entry close).
    pub(crate) fn cancel(&mut self, random: u128, due: u32) {
        if due == NOT_ARMED {
            return;
        }
        let slot = &mut self.slots[due as usize % TIMER_SLOTS];
        if let Some(i) = slot.iter().position(|e| *e == Entry::new(random, due)) {
            slot.swap_remove(i);
            self.len -= 1;
        }
    }

    /// The latest tick a session touched by a request now may stay armed at (see the module
    /// doc). From the cursor, which is at most one past the current tick, so no clock is read
    /// on the request path; a cursor lagging behind only makes it earlier.
    pub(crate) fn latest_after_request(&self) -> u32 {
        self.cursor.saturating_sub(1).saturating_add(self.soonest_ticks)
    }

    /// Pops one entry due by tick `now` (its session's key), advancing the cursor over slots
    /// drained; `None` when nothing more is due. The session is off the wheel until re-armed.
    pub(crate) fn pop_due(&mut self, now: u32) -> Option<u128> {
        while self.cursor <= now {
            let slot = &mut self.slots[self.cursor as usize % TIMER_SLOTS];
            if let Some(entry) = slot.pop() {
                debug_assert!(entry.due == self.cursor, "invariant: an entry sits in its due slot");
                self.len -= 1;
                return Some(entry.random());
            }
            if slot.capacity() > SLOT_CAPACITY_KEPT {
                *slot = Vec::new();
            }
            self.cursor += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_out_at_their_tick_and_not_before() {
        let mut wheel = SessionTimers::new(Duration::from_secs(60));
        assert_eq!(wheel.arm(7, 3), 3);
        assert_eq!(wheel.arm(8, 5), 5);
        assert_eq!(wheel.pop_due(2), None);
        assert_eq!(wheel.pop_due(4), Some(7));
        assert_eq!(wheel.pop_due(4), None);
        assert_eq!(wheel.pop_due(9), Some(8));
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn a_deadline_past_the_span_is_clamped_and_one_before_the_cursor_lifted() {
        let mut wheel = SessionTimers::new(Duration::from_secs(60));
        assert_eq!(wheel.pop_due(10), None);
        assert_eq!(wheel.arm(1, 2), 11, "a drained slot is never armed");
        let far = wheel.arm(2, u32::MAX - 5);
        assert_eq!(far, 11 + TIMER_SLOTS as u32 - 1);
        assert_eq!(wheel.pop_due(11), Some(1));
        assert_eq!(wheel.pop_due(far - 1), None);
        assert_eq!(wheel.pop_due(far), Some(2));
    }

    #[test]
    fn a_cancelled_entry_never_comes_out() {
        let mut wheel = SessionTimers::new(Duration::from_secs(60));
        let (a, b) = (wheel.arm(1, 4), wheel.arm(2, 4));
        wheel.cancel(1, a);
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.pop_due(4), Some(2));
        assert_eq!(wheel.pop_due(4), None);
        let _ = b;
    }
}
