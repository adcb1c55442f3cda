//! Unit tests of every `Ring` function at its limits (events_max and bytes_max at N and N+1, a
//! refused payload, growth, chains across evictions), and a proptest of the ring against a
//! `VecDeque` model with the same eviction rule.

use std::collections::VecDeque;

use bytes::Bytes;
use proptest::prelude::*;

use crate::config::REPLAY_BYTES_MOST;

use super::{
    set_spare_pages_max, spare_pages, Event, EventSeq, Evicted, ReplayError, Ring, StreamKey,
    ELIDED_PREFIX, PAGE_BYTES, SLOTS_INITIAL,
};

const A: StreamKey = StreamKey(1);
const B: StreamKey = StreamKey(2);

/// A payload of `len` bytes whose content identifies `tag`, so a lookup returning the wrong
/// event is caught even when lengths match.
fn payload(tag: u64, len: usize) -> Bytes {
    Bytes::from(vec![tag as u8; len])
}

/// Appends and returns the new seq plus everything evicted by this append.
fn append(ring: &mut Ring, stream: StreamKey, len: usize) -> (EventSeq, Vec<Evicted>) {
    let mut evicted = Vec::new();
    let tag = ring.next_seq().0;
    let seq =
        ring.try_append(stream, payload(tag, len), |e| evicted.push(e)).expect("payload fits");
    ring.check_invariants();
    (seq, evicted)
}

/// An event's data as appended: its elided prefix, if any, then its stored bytes.
fn whole(event: &Event<'_>) -> Bytes {
    Bytes::from([event.prefix(), event.payload].concat())
}

fn seqs(replay: super::Replay<'_>) -> Vec<u64> {
    replay.map(|event| event.seq.0).collect()
}

// Goal: a fresh ring is empty and allocates nothing. Method: query every accessor.
#[test]
fn new_ring_is_empty_and_unallocated() {
    let ring = Ring::new(1 << 20, 1 << 30);
    ring.check_invariants();
    assert_eq!(ring.len(), 0);
    assert!(ring.is_empty());
    assert_eq!(ring.bytes(), 0);
    assert_eq!(ring.next_seq(), EventSeq(1));
    assert_eq!(ring.oldest(), None);
    assert_eq!(ring.capacity_slots(), 0);
    assert_eq!(ring.events_max(), 1 << 20);
    assert_eq!(ring.bytes_max(), 1 << 30);
    assert!(ring.get(EventSeq(0)).is_none());
    assert!(ring.get(EventSeq(1)).is_none());
    assert_eq!(ring.newest_in_stream(A), None);
}

// Goal: 100k idle sessions at events_max = 2^20 cost only their `Ring` headers. Method: build
// them and sum the allocated slots; bound the header size.
#[test]
fn idle_rings_allocate_no_slots() {
    let rings: Vec<Ring> = (0..100_000).map(|_| Ring::new(1 << 20, 1 << 30)).collect();
    assert_eq!(rings.iter().map(Ring::capacity_slots).sum::<usize>(), 0);
    assert!(std::mem::size_of::<Ring>() <= 128);
}

// Goal: constructor rejects what `config` must have rejected. Method: each bad argument panics.
#[test]
#[should_panic(expected = "power of two")]
fn new_rejects_zero_events_max() {
    let _ = Ring::new(0, 1);
}

#[test]
#[should_panic(expected = "power of two")]
fn new_rejects_non_power_of_two_events_max() {
    let _ = Ring::new(12, 1);
}

#[test]
#[should_panic(expected = "bytes_max")]
fn new_rejects_zero_bytes_max() {
    let _ = Ring::new(16, 0);
}

// Goal: seqs start at 1 and increase by one across streams; get returns what was appended.
// Method: interleave two streams and read every event back.
#[test]
fn append_assigns_consecutive_seqs_and_get_returns_them() {
    let mut ring = Ring::new(16, 1024);
    for i in 1..=10u64 {
        let stream = if i % 2 == 0 { B } else { A };
        let (seq, evicted) = append(&mut ring, stream, i as usize);
        assert_eq!(seq, EventSeq(i));
        assert!(evicted.is_empty());
        assert_eq!(ring.next_seq(), EventSeq(i + 1));
    }
    assert_eq!(ring.len(), 10);
    assert_eq!(ring.bytes(), (1..=10).sum::<usize>());
    assert_eq!(ring.oldest(), Some(EventSeq(1)));
    for i in 1..=10u64 {
        let event = ring.get(EventSeq(i)).expect("held");
        assert_eq!(event.seq, EventSeq(i));
        assert_eq!(event.stream, if i % 2 == 0 { B } else { A });
        assert_eq!(*event.payload, payload(i, i as usize));
    }
    assert!(ring.get(EventSeq(0)).is_none());
    assert!(ring.get(EventSeq(11)).is_none());
    assert!(ring.get(EventSeq(u64::MAX)).is_none());
}

// Goal: the pages follow what the ring holds (issue 43 §2): none for empty payloads, one
// page for the first bytes, a new page only when the next payload does not fit in the newest,
// a page given back when its last payload is evicted, so at most twice the stored bytes and
// two pages whatever the mix of sizes (`check_invariants`), every payload read back intact.
// Method: equal 100-byte events until the byte budget evicts (40 a page), then 2 000 of
// pseudo-random sizes from 0 to twice a page (the longer ones in blocks of their own).
#[test]
fn pages_follow_what_the_ring_holds() {
    const BYTES_MAX: usize = 40_000;
    let mut ring = Ring::new(1 << 12, BYTES_MAX);
    append(&mut ring, A, 0);
    assert_eq!(ring.capacity_bytes(), 0, "an empty payload needs no page");
    append(&mut ring, A, 100);
    assert_eq!(ring.capacity_bytes(), PAGE_BYTES);
    for n in 2..=40 {
        append(&mut ring, A, 100);
        assert_eq!(ring.capacity_bytes(), PAGE_BYTES, "{n} payloads of 100 bytes in one page");
    }
    append(&mut ring, A, 100);
    assert_eq!(ring.capacity_bytes(), 2 * PAGE_BYTES, "the 41st starts a page");
    for _ in 0..1_000 {
        append(&mut ring, A, 100);
    }
    assert_eq!(ring.bytes(), BYTES_MAX, "at the byte budget");
    // 400 payloads: ten full pages, or eleven while the oldest is partly evicted.
    assert!(ring.capacity_bytes() <= 11 * PAGE_BYTES, "{}", ring.capacity_bytes());
    let mut x = 12_345u64;
    for _ in 0..2_000 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let len = (x >> 33) as usize % (2 * PAGE_BYTES + 1);
        let (seq, _) = append(&mut ring, if len.is_multiple_of(2) { A } else { B }, len);
        let held = ring.get(seq).expect("the newest is held");
        assert_eq!(*held.payload, payload(seq.0, len));
    }
    for seq in ring.oldest().expect("held").0..ring.next_seq().0 {
        let event = ring.get(EventSeq(seq)).expect("held");
        assert!(event.payload.iter().all(|&b| b == seq as u8), "intact");
    }
    // Small events evict the large ones: the blocks and pages go with them.
    for _ in 0..400 {
        append(&mut ring, A, 100);
    }
    assert!(ring.capacity_bytes() <= 11 * PAGE_BYTES, "{}", ring.capacity_bytes());
}

// Goal: a payload of exactly `PAGE_BYTES` lies in a page, one byte longer in a block of its
// own (the limit), and the page after a block is a new one; a ring whose only page empties
// writes it again from its start. Method: append at both sizes and read back.
#[test]
fn a_payload_longer_than_a_page_gets_a_block_of_its_own() {
    let mut ring = Ring::new(4, 1 << 20);
    append(&mut ring, A, PAGE_BYTES);
    assert_eq!(ring.capacity_bytes(), PAGE_BYTES, "a page's worth fits a page");
    append(&mut ring, A, PAGE_BYTES + 1);
    assert_eq!(ring.capacity_bytes(), 2 * PAGE_BYTES + 1, "one byte more: a block");
    let (seq, _) = append(&mut ring, B, 10);
    assert_eq!(ring.capacity_bytes(), 3 * PAGE_BYTES + 1, "after a block, a page");
    assert_eq!(*ring.get(seq).expect("held").payload, payload(seq.0, 10));
    for _ in 0..4 {
        append(&mut ring, B, 0);
    }
    assert_eq!(ring.bytes(), 0, "every payload evicted");
    assert_eq!(ring.capacity_bytes(), PAGE_BYTES, "the newest page is kept");
    let (seq, _) = append(&mut ring, B, 20);
    assert_eq!(ring.capacity_bytes(), PAGE_BYTES, "and written again");
    assert_eq!(*ring.get(seq).expect("held").payload, payload(seq.0, 20));
}

// Goal: the core's spare pages are bounded by `--replay-spare-pages` (at N every page given
// back is kept, at N+1 the one over is freed), a ring takes spares before it allocates, and a
// dropped ring gives its pages back. Method: on this test's thread (the list is per thread,
// as per core), rings of full pages dropped and made again, counting the spares.
#[test]
fn spare_pages_are_kept_up_to_their_bound() {
    const SPARES_MAX: usize = 4;
    set_spare_pages_max(SPARES_MAX, false);
    let ring_of = |pages: usize| {
        let mut ring = Ring::new(1 << 10, 1 << 20);
        for _ in 0..pages {
            append(&mut ring, A, PAGE_BYTES);
        }
        assert_eq!(ring.capacity_bytes(), pages * PAGE_BYTES);
        ring
    };
    assert_eq!(spare_pages(), 0);
    drop(ring_of(SPARES_MAX));
    assert_eq!(spare_pages(), SPARES_MAX, "at the bound every page is kept");
    let ring = ring_of(SPARES_MAX + 1);
    assert_eq!(spare_pages(), 0, "the ring took the spares first");
    drop(ring);
    assert_eq!(spare_pages(), SPARES_MAX, "one over the bound is freed");
    // Evicted pages go back too.
    let mut ring = ring_of(2);
    assert_eq!(spare_pages(), SPARES_MAX - 2);
    for _ in 0..(1 << 10) {
        append(&mut ring, B, 0);
    }
    assert_eq!(ring.capacity_bytes(), PAGE_BYTES, "its newest page kept, emptied");
    assert_eq!(spare_pages(), SPARES_MAX - 1, "the oldest given back");
    set_spare_pages_max(1, false);
    assert_eq!(spare_pages(), 1, "a lower bound frees the spares over it");
    set_spare_pages_max(SPARES_MAX, true);
    assert_eq!(spare_pages(), SPARES_MAX, "filled at a core's start");
}

// Goal: events_max at N fits, N+1 evicts exactly the oldest one. Method: for several N, append
// N events, then one more, and check the eviction report and the held range.
#[test]
fn events_max_at_n_and_n_plus_one() {
    for n in [1usize, 2, 4, 16, 64] {
        let mut ring = Ring::new(n, REPLAY_BYTES_MOST);
        for _ in 0..n {
            let (_, evicted) = append(&mut ring, A, 1);
            assert!(evicted.is_empty(), "n = {n}");
        }
        assert_eq!(ring.len(), n);
        let (seq, evicted) = append(&mut ring, B, 1);
        assert_eq!(seq, EventSeq(n as u64 + 1));
        let expected_next = (n > 1).then_some(EventSeq(2));
        assert_eq!(
            evicted,
            vec![Evicted { stream: A, seq: EventSeq(1), next_in_stream: expected_next, bytes: 1 }],
            "n = {n}"
        );
        assert_eq!(ring.len(), n);
        assert_eq!(ring.oldest(), Some(EventSeq(2)));
        assert!(ring.get(EventSeq(1)).is_none());
        assert_eq!(ring.capacity_slots(), n);
    }
}

// Goal: bytes_max at the limit fits, one byte over evicts oldest-first until it fits. Method:
// fill to exactly bytes_max, then add one byte, then add a payload equal to bytes_max.
#[test]
fn bytes_max_at_limit_and_one_over() {
    let mut ring = Ring::new(64, 10);
    append(&mut ring, A, 4);
    let (_, evicted) = append(&mut ring, B, 6);
    assert!(evicted.is_empty());
    assert_eq!(ring.bytes(), 10);
    let (seq, evicted) = append(&mut ring, A, 1);
    assert_eq!(seq, EventSeq(3));
    assert_eq!(
        evicted,
        vec![Evicted { stream: A, seq: EventSeq(1), next_in_stream: None, bytes: 4 }],
        "seq 3 of A is stored after the eviction report"
    );
    assert_eq!(ring.bytes(), 7);
    assert_eq!(ring.len(), 2);
    // A payload of exactly bytes_max empties the ring, reporting in seq order.
    let (seq, evicted) = append(&mut ring, B, 10);
    let evicted_seqs: Vec<u64> = evicted.iter().map(|e| e.seq.0).collect();
    assert_eq!(evicted_seqs, vec![2, 3]);
    assert_eq!(ring.len(), 1);
    assert_eq!(ring.bytes(), 10);
    assert_eq!(ring.oldest(), Some(seq));
}

// Goal: a payload larger than bytes_max is refused and leaves the ring exactly as it was, and
// the assuming variant panics on it. Method: snapshot every accessor before and after.
#[test]
fn payload_too_large_is_refused_with_ring_unchanged() {
    let mut ring = Ring::new(4, 8);
    for _ in 0..5 {
        append(&mut ring, A, 2);
    }
    let snapshot = |ring: &Ring| {
        let held: Vec<(u64, u32, Bytes, Option<EventSeq>)> = (0..8)
            .filter_map(|seq| ring.get(EventSeq(seq)))
            .map(|e| (e.seq.0, e.stream.0, Bytes::copy_from_slice(e.payload), e.next_in_stream))
            .collect();
        (ring.len(), ring.bytes(), ring.next_seq(), ring.oldest(), ring.capacity_slots(), held)
    };
    let before = snapshot(&ring);
    let mut evictions = 0;
    let result = ring.try_append(B, payload(0, 9), |_| evictions += 1);
    assert_eq!(result, Err(ReplayError::PayloadTooLarge { len: 9, bytes_max: 8 }));
    assert_eq!(evictions, 0);
    ring.check_invariants();
    assert_eq!(snapshot(&ring), before);
    assert_eq!(ring.newest_in_stream(B), None);
    // Refusal before the first append allocates nothing either.
    let mut fresh = Ring::new(4, 1);
    assert!(fresh.try_append(A, payload(0, 2), |_| {}).is_err());
    assert_eq!(fresh.capacity_slots(), 0);
    assert_eq!(fresh.next_seq(), EventSeq(1));
}

#[test]
#[should_panic(expected = "bytes_max")]
fn append_assume_fits_panics_on_oversized_payload() {
    let mut ring = Ring::new(4, 1);
    ring.append_assume_fits(A, payload(0, 2), |_| {});
}

// Goal: the assuming variant behaves like try_append for fitting payloads. Method: priming
// (empty) events through it, with evictions by count.
#[test]
fn append_assume_fits_appends_and_evicts() {
    let mut ring = Ring::new(2, 1);
    let mut evicted = Vec::new();
    for expected in 1..=3 {
        let seq = ring.append_assume_fits(A, Bytes::new(), |e| evicted.push(e.seq.0));
        assert_eq!(seq, EventSeq(expected));
    }
    ring.check_invariants();
    assert_eq!(evicted, vec![1]);
}

// Goal: empty payloads (priming events) count against events_max but not bytes_max. Method:
// bytes_max 1, append 10 empty events into events_max 4.
#[test]
fn empty_payloads_count_as_events_not_bytes() {
    let mut ring = Ring::new(4, 1);
    let mut evicted_total = 0;
    for _ in 0..10 {
        let (_, evicted) = append(&mut ring, A, 0);
        evicted_total += evicted.len();
    }
    assert_eq!(ring.len(), 4);
    assert_eq!(ring.bytes(), 0);
    assert_eq!(evicted_total, 6);
    assert_eq!(ring.get(EventSeq(10)).expect("held").payload.len(), 0);
}

// Goal: the slot array starts small, doubles only when full, stops at events_max, and every
// lookup stays right across each growth and after wrapping. Method: append 3 × events_max events
// over three streams, checking capacity and all held events after each append.
#[test]
fn growth_keeps_every_lookup_right() {
    let events_max = 256;
    let mut ring = Ring::new(events_max, REPLAY_BYTES_MOST);
    let stream_of = |seq: u64| StreamKey((seq % 3) as u32);
    for seq in 1..=3 * events_max as u64 {
        let (got, _) = append(&mut ring, stream_of(seq), (seq % 7) as usize);
        assert_eq!(got, EventSeq(seq));
        let held = seq.min(events_max as u64) as usize;
        let expected_slots = held.next_power_of_two().max(SLOTS_INITIAL).min(events_max);
        assert_eq!(ring.capacity_slots(), expected_slots, "after seq {seq}");
        if seq.is_power_of_two() || seq > events_max as u64 {
            let oldest = ring.oldest().expect("non-empty").0;
            for held_seq in oldest..=seq {
                let event = ring.get(EventSeq(held_seq)).expect("held");
                assert_eq!(event.stream, stream_of(held_seq));
                assert_eq!(*event.payload, payload(held_seq, (held_seq % 7) as usize));
                let next = held_seq + 3;
                assert_eq!(event.next_in_stream, (next <= seq).then_some(EventSeq(next)));
            }
        }
    }
}

// Goal: events_max below the initial slot count allocates only events_max slots.
#[test]
fn small_events_max_allocates_only_events_max_slots() {
    for events_max in [1usize, 2, 4, 8] {
        let mut ring = Ring::new(events_max, 64);
        append(&mut ring, A, 1);
        assert_eq!(ring.capacity_slots(), events_max);
    }
}

// Goal: next_in_stream links each event to its stream's next one, and newest_in_stream follows
// appends. Method: interleave A and B and read the links.
#[test]
fn chains_link_events_of_the_same_stream() {
    let mut ring = Ring::new(16, 1024);
    for stream in [A, B, A, A, B] {
        append(&mut ring, stream, 1);
    }
    let next = |seq| ring.get(EventSeq(seq)).expect("held").next_in_stream;
    assert_eq!(next(1), Some(EventSeq(3)));
    assert_eq!(next(2), Some(EventSeq(5)));
    assert_eq!(next(3), Some(EventSeq(4)));
    assert_eq!(next(4), None);
    assert_eq!(next(5), None);
    assert_eq!(ring.newest_in_stream(A), Some(EventSeq(4)));
    assert_eq!(ring.newest_in_stream(B), Some(EventSeq(5)));
    assert_eq!(ring.newest_in_stream(StreamKey(9)), None);
}

// Goal: replay_after yields exactly the stream's later events in order, and reports an unknown
// start for every id it cannot start from. Method: one table of (stream, after) cases.
#[test]
fn replay_after_yields_only_its_stream_in_order() {
    let mut ring = Ring::new(16, 1024);
    for stream in [A, B, A, B, B, A, A] {
        append(&mut ring, stream, 1);
    }
    let cases: [(StreamKey, u64, &[u64], bool); 9] = [
        (A, 1, &[3, 6, 7], false),
        (A, 3, &[6, 7], false),
        (A, 7, &[], false),
        (B, 2, &[4, 5], false),
        (B, 5, &[], false),
        (A, 2, &[], true), // another stream's event
        (A, 0, &[], true), // "none"
        (A, 8, &[], true), // not appended yet
        (StreamKey(9), 1, &[], true),
    ];
    for (stream, after, expected, unknown) in cases {
        let replay = ring.replay_after(stream, EventSeq(after));
        assert_eq!(replay.start_unknown(), unknown, "{stream:?} after {after}");
        assert_eq!(seqs(replay), expected, "{stream:?} after {after}");
    }
}

// Goal: iter_from starts at its argument (inclusive) and follows that event's stream; an unheld
// start is unknown. Method: table of starts.
#[test]
fn iter_from_walks_the_chain_inclusive() {
    let mut ring = Ring::new(16, 1024);
    for stream in [A, B, A, B, A] {
        append(&mut ring, stream, 1);
    }
    let cases: [(u64, &[u64], bool); 5] = [
        (1, &[1, 3, 5], false),
        (2, &[2, 4], false),
        (5, &[5], false),
        (0, &[], true),
        (6, &[], true),
    ];
    for (first, expected, unknown) in cases {
        let replay = ring.iter_from(EventSeq(first));
        assert_eq!(replay.start_unknown(), unknown, "from {first}");
        assert_eq!(seqs(replay), expected, "from {first}");
    }
}

// Goal: a replay interrupted after some events can be resumed at peek_seq with iter_from,
// without repeating or skipping. Method: take two, then resume.
#[test]
fn replay_resumes_at_peek_seq() {
    let mut ring = Ring::new(16, 1024);
    for stream in [A, B, A, B, A, A] {
        append(&mut ring, stream, 1);
    }
    let mut replay = ring.replay_after(A, EventSeq(1));
    assert_eq!(replay.peek_seq(), Some(EventSeq(3)));
    assert_eq!(replay.size_hint().0, 1);
    let first: Vec<u64> = replay.by_ref().take(2).map(|e| e.seq.0).collect();
    assert_eq!(first, vec![3, 5]);
    let resume = replay.peek_seq().expect("one left");
    assert_eq!(seqs(ring.iter_from(resume)), vec![6]);
    assert_eq!(seqs(replay.clone()), vec![6]);
    replay.next();
    assert_eq!(replay.peek_seq(), None);
    assert_eq!(replay.next(), None);
    assert_eq!(replay.size_hint(), (0, Some(0)));
}

// Goal: chains stay right across evictions: an evicted event reports its successor, the
// survivors still link, an evicted `after` reports an unknown start, and a stream whose events
// were all evicted starts a fresh chain. Method: events_max 4 with A/B interleaved.
#[test]
fn chains_survive_evictions() {
    let mut ring = Ring::new(4, 1024);
    for stream in [A, B, A, B] {
        append(&mut ring, stream, 1);
    }
    let (_, evicted) = append(&mut ring, A, 1); // seq 5 evicts seq 1 (A → 3)
    assert_eq!(
        evicted,
        vec![Evicted { stream: A, seq: EventSeq(1), next_in_stream: Some(EventSeq(3)), bytes: 1 }]
    );
    assert_eq!(ring.get(EventSeq(3)).expect("held").next_in_stream, Some(EventSeq(5)));
    assert_eq!(seqs(ring.replay_after(A, EventSeq(3))), vec![5]);
    assert_eq!(seqs(ring.iter_from(EventSeq(3))), vec![3, 5]);
    let gone = ring.replay_after(A, EventSeq(1));
    assert!(gone.start_unknown());
    assert_eq!(seqs(gone), Vec::<u64>::new());
    assert!(ring.iter_from(EventSeq(1)).start_unknown());

    // Evict all of B (seqs 2 and 4) by appending A three more times.
    let mut evicted_all = Vec::new();
    for _ in 0..3 {
        evicted_all.extend(append(&mut ring, A, 1).1);
    }
    let b_reports: Vec<Evicted> = evicted_all.into_iter().filter(|e| e.stream == B).collect();
    assert_eq!(b_reports.len(), 2);
    assert_eq!(b_reports[0].next_in_stream, Some(EventSeq(4)));
    assert_eq!(b_reports[1].next_in_stream, None);
    assert_eq!(ring.newest_in_stream(B), None);
    let (seq, _) = append(&mut ring, B, 1);
    assert_eq!(ring.newest_in_stream(B), Some(seq));
    assert_eq!(seqs(ring.iter_from(seq)), vec![seq.0]);
}

// Goal: one append that must evict several events reports them in seq order, each with the
// successor it had at that moment. Method: a byte-bound eviction of three events.
#[test]
fn evictions_are_reported_in_seq_order() {
    let mut ring = Ring::new(16, 6);
    for stream in [A, B, A] {
        append(&mut ring, stream, 2);
    }
    let (_, evicted) = append(&mut ring, B, 6);
    assert_eq!(
        evicted,
        vec![
            Evicted { stream: A, seq: EventSeq(1), next_in_stream: Some(EventSeq(3)), bytes: 2 },
            Evicted { stream: B, seq: EventSeq(2), next_in_stream: None, bytes: 2 },
            Evicted { stream: A, seq: EventSeq(3), next_in_stream: None, bytes: 2 },
        ]
    );
    assert_eq!(ring.oldest(), Some(EventSeq(4)));
    assert_eq!(ring.newest_in_stream(A), None);
}

// Goal: issue 43 §2, a progress notification's fixed opening is not stored: the buffer grows
// by the bytes after it only, while `bytes` and `bytes_max` (and each eviction's report) count
// the whole payload, so the byte budget stays a bound on what the buffer holds; every read gives
// the opening back as `prefix`, and a payload that is only the opening is not a priming event.
// Method: 100 progress-like payloads of 53 bytes after the prefix in a ring bounded by bytes,
// then one that is exactly the prefix; compare accounting, capacity, reads and evictions.
#[test]
fn progress_opening_is_counted_but_not_stored() {
    let whole_len = ELIDED_PREFIX.len() + 53;
    let bytes_max = 64 * whole_len;
    let mut ring = Ring::new(1 << 10, bytes_max);
    let mut evicted = Vec::new();
    for tag in 1..=100u64 {
        let data = [ELIDED_PREFIX, &payload(tag, 53)].concat();
        ring.try_append(A, &data, |e| evicted.push(e)).expect("fits");
        ring.check_invariants();
    }
    assert_eq!(ring.len(), 64, "the byte budget counts whole payloads");
    assert_eq!(ring.bytes(), 64 * whole_len);
    assert_eq!(evicted.len(), 36);
    assert!(evicted.iter().all(|e| e.bytes == whole_len), "evictions report whole payloads");
    assert!(ring.capacity_bytes() <= 2 * PAGE_BYTES, "only the bytes after the opening are held");
    for event in ring.replay_after(A, EventSeq(40)) {
        assert_eq!(event.prefix(), ELIDED_PREFIX);
        assert_eq!(event.payload, &payload(event.seq.0, 53)[..]);
        assert_eq!((event.len(), event.whole()), (whole_len, None));
    }
    let seq = ring.try_append(B, ELIDED_PREFIX, |_| {}).expect("fits");
    ring.check_invariants();
    let event = ring.get(seq).expect("held");
    assert_eq!((event.prefix(), event.payload), (ELIDED_PREFIX, &b""[..]));
    assert!(!event.is_empty(), "the opening alone is data, not a priming event");
    let plain = ring.try_append(B, b"{\"jsonrpc\":\"2.0\",\"id\":1}", |_| {}).expect("fits");
    let event = ring.get(plain).expect("held");
    assert_eq!(event.whole(), Some(&b"{\"jsonrpc\":\"2.0\",\"id\":1}"[..]));
}

// Goal: Debug output names counters, never payload bytes (STYLE: never log payloads).
#[test]
fn debug_omits_payloads() {
    let mut ring = Ring::new(4, 64);
    ring.try_append(A, Bytes::from_static(b"secret"), |_| {}).expect("fits");
    let text = format!("{ring:?} {:?}", ring.replay_after(A, EventSeq(0)));
    assert!(text.contains("head"));
    assert!(!text.contains("secret"));
}

/// The model: held events in order, evicted by the same rule as the ring.
struct Model {
    events: VecDeque<(StreamKey, EventSeq, Bytes)>,
    next_seq: u64,
    bytes: usize,
    events_max: usize,
    bytes_max: usize,
}

impl Model {
    fn new(events_max: usize, bytes_max: usize) -> Model {
        Model { events: VecDeque::new(), next_seq: 1, bytes: 0, events_max, bytes_max }
    }

    fn append(&mut self, stream: StreamKey, payload: Bytes) -> Result<Vec<Evicted>, ReplayError> {
        if payload.len() > self.bytes_max {
            return Err(ReplayError::PayloadTooLarge {
                len: payload.len(),
                bytes_max: self.bytes_max,
            });
        }
        let mut evicted = Vec::new();
        while self.events.len() == self.events_max || self.bytes + payload.len() > self.bytes_max {
            let (old_stream, old_seq, old_payload) = self.events.pop_front().expect("non-empty");
            self.bytes -= old_payload.len();
            evicted.push(Evicted {
                stream: old_stream,
                seq: old_seq,
                next_in_stream: self.stream_from(old_stream, old_seq.0 + 1).first().copied(),
                bytes: old_payload.len(),
            });
        }
        self.bytes += payload.len();
        self.events.push_back((stream, EventSeq(self.next_seq), payload));
        self.next_seq += 1;
        Ok(evicted)
    }

    fn get(&self, seq: EventSeq) -> Option<&(StreamKey, EventSeq, Bytes)> {
        self.events.iter().find(|event| event.1 == seq)
    }

    /// Held seqs of `stream` that are ≥ `from`.
    fn stream_from(&self, stream: StreamKey, from: u64) -> Vec<EventSeq> {
        self.events
            .iter()
            .filter(|event| event.0 == stream && event.1 .0 >= from)
            .map(|event| event.1)
            .collect()
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// `elided`: the payload opens with `ELIDED_PREFIX` (a progress notification).
    Append {
        stream: u32,
        len: usize,
        elided: bool,
    },
    Get {
        pick: u64,
    },
    ReplayAfter {
        stream: u32,
        pick: u64,
    },
    IterFrom {
        pick: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u32..=5, 0usize..=64, any::<bool>())
            .prop_map(|(stream, len, elided)| Op::Append { stream, len, elided }),
        1 => any::<u64>().prop_map(|pick| Op::Get { pick }),
        2 => (1u32..=5, any::<u64>()).prop_map(|(stream, pick)| Op::ReplayAfter { stream, pick }),
        1 => any::<u64>().prop_map(|pick| Op::IterFrom { pick }),
    ]
}

/// A seq in 0..=next_seq: "none", every ever-appended seq, and one not yet appended.
fn pick_seq(model: &Model, pick: u64) -> EventSeq {
    EventSeq(pick % (model.next_seq + 1))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    // Goal: the ring is observably the model. Method: random capacities and operation
    // sequences; after each operation compare every result, the eviction reports, the counters,
    // the allocation bound, and run the O(n) invariant check.
    #[test]
    fn ring_matches_model(
        events_max in (0u32..=6).prop_map(|k| 1usize << k),
        bytes_max in 1usize..=1024,
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let mut ring = Ring::new(events_max, bytes_max);
        let mut model = Model::new(events_max, bytes_max);
        let mut len_max_seen = 0usize;
        for op in ops {
            match op {
                Op::Append { stream, len, elided } => {
                    check_append(&mut ring, &mut model, stream, len, elided)?
                }
                Op::Get { pick } => check_get(&ring, &model, pick_seq(&model, pick))?,
                Op::ReplayAfter { stream, pick } => {
                    check_replay_after(&ring, &model, StreamKey(stream), pick_seq(&model, pick))?
                }
                Op::IterFrom { pick } => check_iter_from(&ring, &model, pick_seq(&model, pick))?,
            }
            len_max_seen = len_max_seen.max(ring.len());
            check_counters(&ring, &model, len_max_seen)?;
        }
    }
}

fn check_append(
    ring: &mut Ring,
    model: &mut Model,
    stream: u32,
    len: usize,
    elided: bool,
) -> Result<(), TestCaseError> {
    let stream = StreamKey(stream);
    let content = payload(model.next_seq, len);
    let content = if elided { Bytes::from([ELIDED_PREFIX, &content].concat()) } else { content };
    let mut evicted = Vec::new();
    let got = ring.try_append(stream, content.clone(), |e| evicted.push(e));
    let next_before = model.next_seq;
    match model.append(stream, content) {
        Ok(expected) => {
            prop_assert_eq!(got, Ok(EventSeq(next_before)));
            prop_assert_eq!(evicted, expected);
        }
        Err(expected) => {
            prop_assert_eq!(got, Err(expected));
            prop_assert!(evicted.is_empty());
        }
    }
    Ok(())
}

fn check_get(ring: &Ring, model: &Model, seq: EventSeq) -> Result<(), TestCaseError> {
    let got = ring.get(seq);
    match model.get(seq) {
        None => prop_assert!(got.is_none()),
        Some((stream, _, content)) => {
            let got = got.expect("held in model");
            prop_assert_eq!(got.seq, seq);
            prop_assert_eq!(got.stream, *stream);
            prop_assert_eq!(whole(&got), content);
            prop_assert_eq!(got.len(), content.len());
            let next = model.stream_from(*stream, seq.0 + 1).first().copied();
            prop_assert_eq!(got.next_in_stream, next);
        }
    }
    Ok(())
}

fn check_replay_after(
    ring: &Ring,
    model: &Model,
    stream: StreamKey,
    after: EventSeq,
) -> Result<(), TestCaseError> {
    let replay = ring.replay_after(stream, after);
    let unknown = replay.start_unknown();
    let got: Vec<(StreamKey, EventSeq, Bytes)> =
        replay.map(|e| (e.stream, e.seq, whole(&e))).collect();
    match model.get(after) {
        Some((held_stream, _, _)) if *held_stream == stream => {
            prop_assert!(!unknown);
            let expected: Vec<(StreamKey, EventSeq, Bytes)> = model
                .stream_from(stream, after.0 + 1)
                .into_iter()
                .map(|seq| model.get(seq).expect("held").clone())
                .collect();
            prop_assert_eq!(got, expected);
        }
        _ => {
            prop_assert!(unknown);
            prop_assert!(got.is_empty());
        }
    }
    Ok(())
}

fn check_iter_from(ring: &Ring, model: &Model, first: EventSeq) -> Result<(), TestCaseError> {
    let replay = ring.iter_from(first);
    let unknown = replay.start_unknown();
    let got: Vec<EventSeq> = replay.map(|e| e.seq).collect();
    match model.get(first) {
        Some((stream, _, _)) => {
            prop_assert!(!unknown);
            prop_assert_eq!(got, model.stream_from(*stream, first.0));
        }
        None => {
            prop_assert!(unknown);
            prop_assert!(got.is_empty());
        }
    }
    Ok(())
}

/// Counters, per-stream newest, the O(n) invariants, and the allocation bound: slots follow the
/// high-water mark of held events, never events_max.
fn check_counters(ring: &Ring, model: &Model, len_max_seen: usize) -> Result<(), TestCaseError> {
    ring.check_invariants();
    prop_assert_eq!(ring.len(), model.events.len());
    prop_assert_eq!(ring.is_empty(), model.events.is_empty());
    prop_assert_eq!(ring.bytes(), model.bytes);
    prop_assert_eq!(ring.next_seq(), EventSeq(model.next_seq));
    prop_assert_eq!(ring.oldest(), model.events.front().map(|e| e.1));
    for stream in (1..=5).map(StreamKey) {
        let newest = model.events.iter().rev().find(|e| e.0 == stream).map(|e| e.1);
        prop_assert_eq!(ring.newest_in_stream(stream), newest);
    }
    if len_max_seen == 0 {
        prop_assert_eq!(ring.capacity_slots(), 0);
    } else {
        let bound = (2 * len_max_seen).max(SLOTS_INITIAL.min(model.events_max));
        prop_assert!(ring.capacity_slots() <= bound);
    }
    Ok(())
}
