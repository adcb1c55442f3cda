//! When each session of one core must next be looked at by the reaper: a hashed timer wheel
//! (`SessionTimers`) of `TIMER_SLOTS` slots of `TIMER_TICK` each, one entry per session (its
//! key and the tick it is due), kept by `SessionTable` (armed on insert, cancelled on remove).
//!
//! Why a wheel and not a heap: arming and cancelling are O(1), popping what is due touches
//! only due entries, and the reaper's own granularity (`REAP_INTERVAL`) is the slot width, so
//! nothing finer is needed. Deadlines past the wheel's span (`TIMER_SLOTS` ticks, 17 min) are
//! clamped to its last slot: such a session is looked at once more per turn of the wheel and
//! re-armed, not missed.
//!
//! Why a slab: the entries live in one vector per core, each slot a doubly linked list through
//! it (`Entry::prev`, `Entry::next`), and a session keeps its entry's index
//! (`Session::timer_entry`). Cancelling unlinks that entry (O(1), no search of its slot), and
//! an entry freed (popped, cancelled) goes on a free list the next arm takes from: re-arming,
//! and bringing an entry close, allocate nothing once the slab has held as many sessions as the
//! core holds now. A slot of its own vector allocated on the first push after it drained
//! (tests/allocations.rs caught those on the request path).
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
//! Memory: 28 bytes an entry, one per live session, plus the slot heads (16 KiB). The slab
//! keeps the most entries it ever held (the core's peak of live sessions, at most
//! `--max-sessions-per-core`): it does not shrink, as the session table's map does not, since
//! moving live entries would mean finding each one's session (O(sessions) in one step, a stall)
//! and the peak's 28 bytes a session are under 5 % of what those sessions held (about 600 B
//! each). Never: looks at a session (that is `legacy::expire`).

use std::time::{Duration, Instant};

/// Slots of the wheel: its span is `TIMER_SLOTS × TIMER_TICK` (about 17 minutes).
pub(crate) const TIMER_SLOTS: usize = 4096;

/// Width of one slot: the reaper's interval, the finest resolution expiry ever had.
pub(crate) const TIMER_TICK: Duration = Duration::from_millis(250);

/// `Session::timer_entry` of a session off the wheel: popped, being looked at by the reaper,
/// which re-arms or ends it. Also the end of a list (`Entry::prev`, `Entry::next`, a slot's
/// head, the free list), and `Entry::due` of a free entry: no live index or tick reaches it.
pub(crate) const NOT_ARMED: u32 = u32::MAX;

/// The end of a list of entries.
const END: u32 = NOT_ARMED;

/// `Entry::due` of an entry on the free list (`tick_of` stays far below it).
const FREE: u32 = NOT_ARMED;

/// One slot of the slab: a session's place on the wheel, its table key (`SessionId::random`,
/// in four words so that the entry is 28 bytes, not 32) and the tick it is due, linked to the
/// entries before and after it in its slot; or a free entry (`due == FREE`), linked by `next`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: [u32; 4],
    due: u32,
    prev: u32,
    next: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 28);

/// `random` in an entry's four words.
fn split(random: u128) -> [u32; 4] {
    [random as u32, (random >> 32) as u32, (random >> 64) as u32, (random >> 96) as u32]
}

/// The key an entry's four words hold.
fn join(key: [u32; 4]) -> u128 {
    key.iter().rev().fold(0, |whole, &word| whole << 32 | u128::from(word))
}

/// The wheel of one core's sessions (see the module doc).
pub(crate) struct SessionTimers {
    /// Every entry, armed or free; an armed one keeps its index until it is popped or
    /// cancelled (its session holds the index).
    entries: Vec<Entry>,
    /// The first entry of each slot's list, `END` when the slot is empty.
    heads: Box<[u32]>,
    /// The first free entry, `END` when every entry is armed.
    free: u32,
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
            entries: Vec::new(),
            heads: vec![END; TIMER_SLOTS].into_boxed_slice(),
            free: END,
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
    /// never before the cursor: a slot already drained would wait a whole turn). Returns its
    /// entry's index, which the session keeps (`Session::timer_entry`) for `due` and `cancel`;
    /// `NOT_ARMED` only when the slab already holds 2^32 − 1 entries (over 100 GiB of them).
    pub(crate) fn arm(&mut self, random: u128, due: u32) -> u32 {
        let last = self.cursor.saturating_add(TIMER_SLOTS as u32 - 1);
        let due = due.clamp(self.cursor, last);
        let Some(index) = self.take_free() else {
            return NOT_ARMED;
        };
        let slot = due as usize % TIMER_SLOTS;
        let next = self.heads[slot];
        self.entries[index as usize] = Entry { key: split(random), due, prev: END, next };
        if next != END {
            self.entries[next as usize].prev = index;
        }
        self.heads[slot] = index;
        self.len += 1;
        index
    }

    /// An entry to fill: the first free one, else a new one at the slab's end (which allocates
    /// only when the slab is at its capacity). `None`: no index is left.
    fn take_free(&mut self) -> Option<u32> {
        if self.free != END {
            let index = self.free;
            self.free = self.entries[index as usize].next;
            return Some(index);
        }
        let index = u32::try_from(self.entries.len()).ok().filter(|&index| index != END)?;
        self.entries.push(Entry { key: [0; 4], due: FREE, prev: END, next: END });
        Some(index)
    }

    /// The tick entry `entry` is due; `NOT_ARMED` for a session off the wheel.
    pub(crate) fn due(&self, entry: u32) -> u32 {
        self.entries.get(entry as usize).map_or(NOT_ARMED, |e| e.due)
    }

    /// Takes session `random`'s entry `entry` off the wheel, in O(1) (a DELETE, an expiry found
    /// by a request, a request bringing a far entry close). An entry that is not `random`'s
    /// (free, or another session's since) is left alone.
    pub(crate) fn cancel(&mut self, random: u128, entry: u32) {
        let Some(e) = self.entries.get(entry as usize) else {
            return;
        };
        if e.due != FREE && e.key == split(random) {
            self.release(entry);
        }
    }

    /// Unlinks armed entry `index` from its slot and puts it on the free list; returns what it
    /// held.
    fn release(&mut self, index: u32) -> Entry {
        let entry = self.entries[index as usize];
        match entry.prev {
            END => self.heads[entry.due as usize % TIMER_SLOTS] = entry.next,
            prev => self.entries[prev as usize].next = entry.next,
        }
        if entry.next != END {
            self.entries[entry.next as usize].prev = entry.prev;
        }
        let freed = &mut self.entries[index as usize];
        (freed.due, freed.prev, freed.next) = (FREE, END, self.free);
        self.free = index;
        self.len -= 1;
        entry
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
            let head = self.heads[self.cursor as usize % TIMER_SLOTS];
            if head != END {
                let entry = self.release(head);
                debug_assert!(entry.due == self.cursor, "invariant: an entry sits in its due slot");
                return Some(join(entry.key));
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
        let seven = wheel.arm(7, 3);
        assert_eq!(wheel.due(seven), 3);
        let eight = wheel.arm(8, 5);
        assert_eq!(wheel.due(eight), 5);
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
        let early = wheel.arm(1, 2);
        assert_eq!(wheel.due(early), 11, "a drained slot is never armed");
        let far = wheel.arm(2, u32::MAX - 5);
        let far = wheel.due(far);
        assert_eq!(far, 11 + TIMER_SLOTS as u32 - 1);
        assert_eq!(wheel.pop_due(11), Some(1));
        assert_eq!(wheel.pop_due(far - 1), None);
        assert_eq!(wheel.pop_due(far), Some(2));
    }

    #[test]
    fn a_cancelled_entry_never_comes_out_wherever_it_sits_in_its_slot() {
        for cancelled in 0..3u128 {
            let mut wheel = SessionTimers::new(Duration::from_secs(60));
            let entries: Vec<u32> = (0..3u128).map(|key| wheel.arm(key, 4)).collect();
            wheel.cancel(cancelled, entries[cancelled as usize]);
            assert_eq!(wheel.len(), 2);
            let mut out: Vec<u128> = std::iter::from_fn(|| wheel.pop_due(4)).collect();
            out.sort_unstable();
            let rest: Vec<u128> = (0..3).filter(|&key| key != cancelled).collect();
            assert_eq!(out, rest, "cancelled {cancelled}");
        }
    }

    #[test]
    fn a_stale_entry_index_cancels_nothing() {
        let mut wheel = SessionTimers::new(Duration::from_secs(60));
        let first = wheel.arm(1, 4);
        wheel.cancel(1, first);
        let reused = wheel.arm(2, 4);
        assert_eq!(reused, first, "the freed entry is taken again");
        wheel.cancel(1, first);
        wheel.cancel(1, first);
        wheel.cancel(3, NOT_ARMED);
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.pop_due(4), Some(2));
    }

    #[test]
    fn re_arming_reuses_the_slab_and_keys_survive_whole() {
        let mut wheel = SessionTimers::new(Duration::from_secs(60));
        let key = |n: u128| n << 100 | n << 64 | n << 33 | n;
        for n in 0..1000 {
            wheel.arm(key(n), 1 + n as u32 % 7);
        }
        let capacity = wheel.entries.capacity();
        for turn in 0..20u32 {
            let now = 8 * (turn + 1);
            let mut popped = 0;
            while let Some(random) = wheel.pop_due(now) {
                assert!((0..1000).any(|n| key(n) == random), "a key comes back whole");
                wheel.arm(random, now + 1 + random as u32 % 7);
                popped += 1;
            }
            assert_eq!(popped, 1000);
        }
        assert_eq!(wheel.entries.len(), 1000, "no entry beyond the sessions armed");
        assert_eq!(wheel.entries.capacity(), capacity, "re-arming never grew the slab");
    }
}
