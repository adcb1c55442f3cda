//! Goal: the owed/replaying counters stay exact through every stream transition, and resume
//! positions are right across evictions. Method: drive `Session` directly, no I/O.
use super::*;
use crate::config::Config;
use bytes::Bytes;

fn session() -> Session {
    let cfg = Config::test_min();
    Session::new(SessionId { node: 0, core: 0, random: 7 }, 0xabcd, LEGACY_VERSIONS[0], &cfg)
}

fn open(s: &mut Session, id: &str) -> StreamKey {
    s.open_stream(StreamKind::Request, Some(RawId::new(id)), 1, None, None).unwrap()
}

#[test]
fn detached_in_flight_stream_is_owed_until_resumed_and_delivered() {
    let mut s = session();
    let k = open(&mut s, "1");
    let e = s.attach(k).unwrap();
    assert_eq!(s.owed_count(), 0);
    s.append(k, Bytes::from_static(b"progress")).unwrap();
    s.detach(k, e);
    assert_eq!(s.owed_count(), 1, "dropped mid-call: owed");
    s.finish(k, Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}"));
    assert_eq!(s.owed_count(), 1, "complete but undelivered: still owed");
    let e2 = s.attach(k).unwrap();
    assert_eq!(s.owed_count(), 0, "attached: not owed");
    let produced = s.stream(k).unwrap().produced();
    s.mark_delivered(k, produced);
    s.detach(k, e2);
    assert_eq!(s.owed_count(), 0);
    assert!(s.stream(k).unwrap().is_settled());
}

#[test]
fn a_quick_call_opened_attached_ends_as_one_attached_after_its_first_poll() {
    // Goal: `open_quick_attached` leaves the stream and the counts as `open_quick_stream` then
    // `attach_fresh` do (the answer path of a quick SSE call), never owed between. Method: both
    // ways on two sessions, compared after the open, the answer, the send and a later attach.
    let (mut a, mut b) = (session(), session());
    let (ka, epoch_a, first_a) = a.open_quick_attached(RawId::new("1"), 1, None, None).unwrap();
    assert_eq!(a.owed_count(), 0, "attached from its opening: never owed");
    let kb = b.open_quick_stream(RawId::new("1"), 1, None, None).unwrap();
    assert_eq!(b.owed_count(), 1, "detached until its writer takes it");
    let (epoch_b, first_b) = b.attach_fresh(kb).unwrap();
    assert_eq!((ka, epoch_a, first_a), (kb, epoch_b, first_b));
    assert_eq!(epoch_a, FIRST_EPOCH);
    let final_event = Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    for (s, k) in [(&mut a, ka), (&mut b, kb)] {
        assert_eq!(s.tally.live.get(), 1);
        assert_eq!(s.attached_unwritten, Unwritten { bytes: 0, events: 1 });
        s.finish(k, final_event.clone());
        assert_eq!(s.owed_count(), 0);
        let produced = s.stream(k).unwrap().produced();
        s.wrote(k, FIRST_EPOCH, produced);
        s.delivered_and_detach(k, FIRST_EPOCH);
        assert_eq!(s.tally.live.get(), 0);
        assert_eq!(s.attached_unwritten, Unwritten::default());
        assert!(s.stream(k).unwrap().is_settled());
        assert_eq!(s.attach(k), Some(FIRST_EPOCH + 1), "the next writer's epoch");
    }
}

#[test]
fn parked_dropped_and_standalone_streams_never_owe() {
    let mut s = session();
    let k = open(&mut s, "1");
    let e = s.attach(k).unwrap();
    s.park(k, e);
    assert!(s.stream(k).unwrap().is_parked());
    assert_eq!(s.owed_count(), 0);
    let k2 = open(&mut s, "2");
    assert_eq!(s.owed_count(), 1);
    s.drop_stream(k2);
    assert_eq!(s.owed_count(), 0);
    let g = s.open_stream(StreamKind::Standalone, None, 0, None, None).unwrap();
    s.append(g, Bytes::from_static(b"note")).unwrap();
    assert_eq!(s.owed_count(), 0);
    s.remove_stream(k);
    s.remove_stream(k2);
    assert_eq!(s.owed_count(), 0);
}

#[test]
fn replaying_counter_follows_the_flag() {
    let mut s = session();
    let k = open(&mut s, "1");
    s.append(k, Bytes::from_static(b"a")).unwrap();
    let first = s.stream(k).unwrap().first;
    let e = s.attach_resume(k, first).unwrap();
    assert_eq!(s.replaying_count(), 1);
    assert!(s.owes());
    s.detach(k, e);
    assert_eq!(s.replaying_count(), 0);
}

#[test]
fn superseded_writer_cannot_detach_the_new_one() {
    let mut s = session();
    let k = open(&mut s, "1");
    let old = s.attach(k).unwrap();
    let new = s.attach(k).unwrap();
    s.detach(k, old);
    assert_eq!(s.stream(k).unwrap().writer(), Writer::Attached { epoch: new, replaying: false });
    assert_eq!(s.owed_count(), 0);
}

#[test]
fn resume_start_exact_then_gap_after_eviction() {
    let mut s = session();
    let k = open(&mut s, "1");
    let first = s.stream(k).unwrap().first;
    let a = s.append(k, Bytes::from_static(b"a")).unwrap();
    assert_eq!(s.resume_start(k, first), Ok(ResumeStart::From(a)));
    assert_eq!(s.resume_start(k, a), Ok(ResumeStart::Caught));
    assert_eq!(s.resume_start(k, EventSeq(a.0 + 1)), Err(CursorError::Future));
    // test_min holds 16 events: push the stream's early events out.
    for _ in 0..20 {
        s.append(k, Bytes::from_static(b"x")).unwrap();
    }
    match s.resume_start(k, first) {
        Ok(ResumeStart::Gap { lost_to }) => assert!(lost_to > a),
        other => panic!("expected a gap, got {other:?}"),
    }
    let last = s.stream(k).unwrap().produced();
    assert_eq!(s.resume_start(k, last), Ok(ResumeStart::Caught));
}

#[test]
fn foreign_stream_cursor_is_refused() {
    let mut s = session();
    let k1 = open(&mut s, "1");
    let k2 = open(&mut s, "2");
    let a2 = s.append(k2, Bytes::from_static(b"a")).unwrap();
    assert_eq!(s.resume_start(k1, a2), Err(CursorError::Foreign));
}

#[test]
fn stream_table_limit_evicts_settled_first_then_refuses() {
    let mut s = session();
    let keys: Vec<StreamKey> = (0..4).map(|i| open(&mut s, &i.to_string())).collect();
    assert_eq!(open_err(&mut s), Some(OpenError::TooManyStreams), "all in flight: refused at N+1");
    s.drop_stream(keys[0]);
    assert!(open_err(&mut s).is_none(), "a settled stream makes room");
    assert!(s.stream(keys[0]).is_none());
}

fn open_err(s: &mut Session) -> Option<OpenError> {
    s.open_stream(StreamKind::Request, Some(RawId::new("x")), 2, None, None).err()
}

#[test]
fn event_ids_round_trip_and_reject_garbage() {
    let mut out = Vec::new();
    push_event_id(&mut out, 0xdeadbeef, StreamKey(5), EventSeq(0x1234));
    assert_eq!(out, b"deadbeef-5-1234");
    let mut widest = Vec::new();
    push_event_id(&mut widest, u32::MAX, StreamKey(u32::MAX), EventSeq(u64::MAX));
    assert_eq!(widest.len(), EVENT_ID_LEN_MAX);
    let mut zero = Vec::new();
    push_event_id(&mut zero, 0, StreamKey(0), EventSeq(0));
    assert_eq!(zero, b"00000000-0-0");
    assert_eq!(parse_event_id(&out), Some((0xdeadbeef, StreamKey(5), EventSeq(0x1234))));
    for bad in
        ["", "x", "deadbeef-5", "deadbeef-5-1-2", "DEADBEEF-5-1", "deadbee-5-1", "deadbeef--1"]
    {
        assert_eq!(parse_event_id(bad.as_bytes()), None, "{bad}");
    }
}

#[test]
fn eviction_takes_the_oldest_settled_and_skips_one_being_resumed() {
    let mut s = session();
    let keys: Vec<StreamKey> = (0..4).map(|i| open(&mut s, &i.to_string())).collect();
    // Settle 2, then 0, then 1 (settle order, not key order, decides).
    for &i in &[2usize, 0, 1] {
        s.drop_stream(keys[i]);
    }
    let resumed = s.attach(keys[2]).unwrap();
    assert!(open_err(&mut s).is_none());
    assert!(s.stream(keys[2]).is_some(), "attached: skipped");
    assert!(s.stream(keys[0]).is_none(), "oldest settled not attached: evicted");
    s.detach(keys[2], resumed);
    assert!(s.open_stream(StreamKind::Request, Some(RawId::new("y")), 3, None, None).is_ok());
    assert!(s.stream(keys[2]).is_none(), "back in line at the front once detached");
    assert!(s.stream(keys[1]).is_some());
}

#[test]
fn an_attached_stream_has_room_until_its_unwritten_share_and_again_once_written() {
    // Goal: backpressure's O(1) question (issue 17 item 7): an attached, running stream has room
    // below half the ring (test_min: 16 events → 8) in events not yet written, none at it, room
    // again once its writer sent them; a detached stream always has room (eviction answers a
    // client that is gone), and evictions keep the count exact. Method: drive `Session`.
    let mut s = session();
    let k = open(&mut s, "1");
    let (epoch, _) = s.attach_fresh(k).unwrap();
    let unwritten = |s: &Session| s.stream(k).map(|st| st.unwritten.events).unwrap();
    assert_eq!(unwritten(&s), 1, "the priming event");
    for _ in 0..6 {
        s.append(k, Bytes::from_static(b"p")).unwrap();
    }
    assert!(s.has_room(k), "7 unwritten (N - 1): room");
    let mut last = s.append(k, Bytes::from_static(b"p")).unwrap();
    assert!(!s.has_room(k), "8 unwritten (N): no room");
    s.wrote(k, epoch, EventSeq(last.0 - 1));
    assert_eq!(unwritten(&s), 1, "all but the last were written");
    assert!(s.has_room(k));
    s.detach(k, epoch);
    for _ in 0..40 {
        last = s.append(k, Bytes::from_static(b"p")).unwrap();
    }
    assert!(s.has_room(k), "detached: room whatever it holds");
    assert_eq!(unwritten(&s), s.ring.len(), "evicted unwritten events left the count");
    let epoch = s.attach(k).unwrap();
    assert!(!s.has_room(k), "a resumed writer behind: no room");
    s.wrote(k, epoch, last);
    assert_eq!(unwritten(&s), 0);
    assert_eq!(s.stream(k).unwrap().unwritten.bytes, 0);
    assert!(s.has_room(k));
}

#[test]
fn the_share_counts_every_attached_stream_of_the_session() {
    // Goal: eviction is ring-wide, so two attached streams' unwritten events together are
    // bounded: with 4 unwritten on each (8 = N), neither has room; one writer's sends or its
    // detach give both room back. Method: drive `Session` (test_min: 16 events → share 8).
    let mut s = session();
    let (a, b) = (open(&mut s, "1"), open(&mut s, "2"));
    let (ea, _) = s.attach_fresh(a).unwrap();
    let (eb, _) = s.attach_fresh(b).unwrap();
    for _ in 0..3 {
        s.append(a, Bytes::from_static(b"p")).unwrap();
    }
    s.append(b, Bytes::from_static(b"p")).unwrap();
    let last_b = s.append(b, Bytes::from_static(b"p")).unwrap();
    assert!(s.has_room(a) && s.has_room(b), "4 + 3 = 7 unwritten (N - 1): room");
    s.append(b, Bytes::from_static(b"p")).unwrap();
    assert!(!s.has_room(a) && !s.has_room(b), "4 + 4 = 8 (N): no room for either");
    s.wrote(b, eb, last_b);
    assert!(s.has_room(a), "b's writer sent 3 of its 4: 5 left, room again");
    for _ in 0..3 {
        s.append(b, Bytes::from_static(b"p")).unwrap();
    }
    assert!(!s.has_room(a), "8 again");
    s.detach(b, eb);
    assert!(s.has_room(a), "b's client left: its events no longer count");
    s.detach(a, ea);
}

/// A session observed by a durable mirror over a real queue (store up, epoch 1), already
/// durable (its first image taken off the queue), and the queue's drain.
fn mirrored() -> (Session, crate::durable::queue::Drain) {
    use crate::durable::queue::{channel, MirrorState};
    use std::sync::atomic::Ordering;
    let (queue, producer, drain) = channel(64, 1 << 20);
    let state = std::sync::Arc::new(MirrorState::default());
    state.epoch.store(1, Ordering::Release);
    state.up.store(true, Ordering::Release);
    let metrics = std::sync::Arc::new(crate::metrics::CoreMetrics::default());
    let wait = std::time::Duration::from_millis(10);
    let tap = crate::durable::CoreTap::new(queue, producer, state, 1, wait, wait, metrics);
    let mut s = session();
    let (name, client) = (std::sync::Arc::from(s.id.to_header()), std::sync::Arc::from("{}"));
    s.mirror = Some(Box::new(SessionMirror::new(Rc::new(tap), name, client)));
    let mut drain = drain;
    assert!(s.mirror_catch_up(), "the store is up: the first image makes it durable");
    assert!(matches!(
        drain.pop().map(|q| q.record),
        Some(crate::durable::record::Record::Session(_))
    ));
    (s, drain)
}

/// The records queued since the last call, by shape: `open` (an empty event with its stream's
/// record), `primed` (an opening joined with its final event), `run N`, `event+stream`.
fn queued(drain: &mut crate::durable::queue::Drain) -> Vec<String> {
    use crate::durable::record::Record;
    std::iter::from_fn(|| drain.pop())
        .map(|q| match q.record {
            Record::Event { primed: true, then: Some(_), .. } => "primed".to_owned(),
            Record::Event { event, then: Some(_), .. } if event.data.is_empty() => "open".into(),
            Record::Event { then: Some(_), .. } => "event+stream".into(),
            Record::Event { then: None, .. } => "event".into(),
            Record::Run { run, .. } => format!("run {}", run.count),
            Record::Stream { .. } => "stream".into(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn the_mirror_hears_a_quick_call_as_one_record_and_a_slow_one_as_its_opening_run_and_final() {
    // Goal: the changes a session reports to its observer make the records the mirror's
    // brackets made before (`open_quick_stream` then one reported poll that finishes the call:
    // one `primed` record; progress in that poll: the opening, one run, the final with its
    // stream; a plain opening alone at once). Method: a real queue, drained after each step.
    let (mut s, mut drain) = mirrored();
    let quick = s.open_quick_stream(RawId::new("1"), 1, None, None).unwrap();
    assert!(queued(&mut drain).is_empty(), "a quick call's opening waits for its first poll");
    s.poll_began();
    s.finish(quick, Bytes::from_static(b"{\"result\":{}}"));
    s.poll_ended();
    assert_eq!(queued(&mut drain), ["primed"]);
    // Opened attached to its writer (a quick call on SSE): the same one record.
    let (attached, _, _) = s.open_quick_attached(RawId::new("4"), 4, None, None).unwrap();
    assert!(queued(&mut drain).is_empty(), "a quick call's opening waits for its first poll");
    s.poll_began();
    s.finish(attached, Bytes::from_static(b"{\"result\":{}}"));
    s.poll_ended();
    assert_eq!(queued(&mut drain), ["primed"]);

    let slow = s.open_quick_stream(RawId::new("2"), 2, None, None).unwrap();
    s.poll_began();
    s.append(slow, Bytes::from_static(b"progress 1")).unwrap();
    s.append(slow, Bytes::from_static(b"progress 2")).unwrap();
    s.finish(slow, Bytes::from_static(b"{\"result\":{}}"));
    s.poll_ended();
    assert_eq!(queued(&mut drain), ["open", "run 2", "event+stream"]);

    let plain = open(&mut s, "3");
    assert_eq!(queued(&mut drain), ["open"], "not deferred: queued at once");
    s.poll_began();
    s.append(plain, Bytes::from_static(b"progress")).unwrap();
    s.poll_ended();
    assert_eq!(queued(&mut drain), ["run 1"]);
    assert!(s.is_durable());
}

/// The block a session's own allocation (`SessionRc`: the `Rc` counts, the `RefCell` flag and
/// the `Session`) takes: mimalloc's 384-byte size class. mimalloc 3 serves an 8-aligned
/// request (every Rust allocation through the `mimalloc` crate) of a size that is not a power
/// of two from the class of `size + 7` when that class has no free block at hand, which is the
/// steady state of a class only such requests use: so the allocation must fit in 384 − 7
/// (376 B now). An idle session's whole heap cost is held by tests/idle_session.rs
/// (`IDLE_SESSION_HEAP_BYTES_BUDGET`) against the real server; this catches a field that grows
/// the struct first (it was 912 B, in the 1 024-byte class, before issue 40 boxed the durable
/// mirror and the maps few sessions use; 448 B before the id's 8-byte packing, the 32-bit
/// counters and limits, the revision's index and the held-POST signal in `Rare`).
const SESSION_BLOCK_BYTES: usize = 384;

#[test]
fn a_session_allocation_fits_its_size_class() {
    let allocation =
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<std::cell::RefCell<Session>>();
    let served = allocation + std::mem::align_of::<std::cell::RefCell<Session>>() - 1;
    assert!(
        served <= SESSION_BLOCK_BYTES,
        "Rc<RefCell<Session>> takes {allocation} B, which mimalloc serves from a class over \
         {SESSION_BLOCK_BYTES} B: box what an idle session does not use (see `Rare`)"
    );
}

#[test]
fn sessions_whose_keys_collide_are_both_kept_found_and_removed() {
    let cfg = Config::default();
    let id = |high: u128| SessionId { node: 0, core: 0, random: high << 64 | 7 };
    let mut table = SessionTable::new(4);
    for high in [1, 2, 3] {
        table.insert(Session::new(id(high), 1, LEGACY_VERSIONS[0], &cfg));
    }
    assert_eq!((table.len(), table.all().len()), (3, 3), "one keyed, two beside it");
    for high in [1, 2, 3] {
        assert_eq!(table.get(&id(high)).map(|s| s.borrow().id), Some(id(high)));
    }
    assert!(table.get(&id(4)).is_none(), "the same key, another id");
    assert!(table.remove(&id(1)).is_some_and(|s| s.borrow().closed), "the keyed one");
    assert!(table.remove(&id(3)).is_some(), "one beside it");
    assert!(table.remove(&id(3)).is_none(), "gone");
    assert_eq!(table.get(&id(2)).map(|s| s.borrow().id), Some(id(2)), "still found");
    assert_eq!(table.len(), 1);
}

#[test]
fn a_whole_image_holds_every_streams_events_in_ring_order() {
    // Goal: the image a session is rewritten with (after a store outage) holds every event the
    // ring holds, of every stream, so the store has no gap for an adopter to refuse (the
    // image once held only the oldest event's stream: a second call's events were missing).
    // Method: two streams' events interleaved, then the image's sequence numbers and streams.
    let mut s = session();
    let (a, b) = (open(&mut s, "1"), open(&mut s, "2"));
    for (key, text) in [(a, "a1"), (b, "b1"), (a, "a2"), (b, "b2")] {
        s.append(key, Bytes::from(text)).unwrap();
    }
    let sid: std::sync::Arc<str> = std::sync::Arc::from("sid");
    let image = s.image(&sid, "{}", 1);
    let first = s.ring.oldest().expect("events held").0;
    let seqs: Vec<u64> = image.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (first..s.ring.next_seq().0).collect::<Vec<_>>(), "every held event");
    let streams: Vec<u32> = image.events.iter().map(|e| e.stream).collect();
    assert!(streams.contains(&a.0) && streams.contains(&b.0), "both streams: {streams:?}");
    assert_eq!(image.next_seq, s.ring.next_seq().0);
}

#[test]
fn an_event_ids_tag_is_its_eight_hex_digits_at_every_nibble_value() {
    // Goal: `hex8` (the tag's digits in one word) writes what the digit loop wrote. Method:
    // every nibble value at every position, the ends, and a spread of tags, against `format!`.
    let mut tags = vec![0, 1, 9, 10, 15, 16, u32::MAX, 0x8000_0000, 0x0abc_def9, 0x1234_5678];
    for shift in (0..32).step_by(4) {
        tags.extend((0..16u32).map(|nibble| nibble << shift));
    }
    tags.extend((0..1000u32).map(|i| i.wrapping_mul(0x9e37_79b9)));
    for tag in tags {
        assert_eq!(hex8(tag), *format!("{tag:08x}").as_bytes(), "tag {tag:#x}");
    }
}
