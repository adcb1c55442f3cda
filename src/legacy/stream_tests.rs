//! Goal: `fill_batch` keeps a connection's write buffer within `--write-buffer-bytes` whatever
//! the event size (issue 11 §2): a large event goes out in windows across batches and
//! reassembles exactly, small events still share a batch, an event evicted mid-way cuts the
//! connection, and nothing ends a response in the middle of an event. Method: drive a real
//! `Session` (no I/O) through the writer's calls (`fill_batch`, then `after_send`, as
//! `runtime::conn::write_stream` does), parse the concatenated output as SSE and compare.

use super::*;
use crate::config::Config;
use crate::legacy::session::{event_id_into, SessionId, StreamKind, LEGACY_VERSIONS};
use crate::wire::jsonrpc::RawId;
use crate::wire::notification::PROGRESS_PREFIX;
use bytes::Bytes;

const RETRY_MS: u64 = 1000;
/// `id: ` + `\n` + `data: ` + `\n` + `\n`: the framing of one whole event around its id and
/// payload (no `retry:` line: only priming events carry one).
const FRAME: usize = 4 + 1 + 6 + 1 + 1;
/// `id: ` + `\n` + `data: `: what a first window carries besides its id and payload bytes.
const WINDOW_HEAD: usize = 4 + 1 + 6;
/// `\n\n`: what the last window carries besides its payload bytes.
const WINDOW_TAIL: usize = 2;

fn session(replay_bytes: usize, replay_events: usize) -> Session {
    let cfg = {
        let mut edited = Config::test_min();
        edited.sessions.replay_bytes_max = replay_bytes;
        edited.sessions.replay_events_max = replay_events;
        edited
    };
    Session::new(SessionId { node: 0, core: 0, random: 7 }, 0xabcd, LEGACY_VERSIONS[0], &cfg)
}

/// A request stream as `legacy::request` opens it: attached, written from its priming event.
fn open(s: &mut Session, request_id: &str) -> (StreamKey, u64, Cursor) {
    let key = s
        .open_stream(StreamKind::Request, Some(RawId::new(request_id)), 1, None, None)
        .expect("room for a stream");
    let (epoch, first) = s.attach_fresh(key).expect("attach");
    (key, epoch, Cursor::from(EventSeq(0), Some(first)))
}

/// `len` ASCII bytes, position-stamped (`<tag:i>` pieces), so a lost, repeated or reordered
/// window shows up in the comparison.
fn payload(tag: u32, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(len + 32);
    let mut i = 0u64;
    while p.len() < len {
        p.extend_from_slice(format!("<{tag}:{i}>").as_bytes());
        i += 1;
    }
    p.truncate(len);
    p
}

/// A final JSON-RPC response to `id` whose whole length is `len`.
fn response(id: &str, len: usize) -> Vec<u8> {
    let mut p = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"text\":\"").into_bytes();
    let fill = len - p.len() - 3;
    p.extend_from_slice(&payload(9, fill));
    p.extend_from_slice(b"\"}}");
    assert_eq!(p.len(), len);
    p
}

fn wire_id(s: &Session, key: StreamKey, seq: EventSeq) -> String {
    let mut id = [0u8; crate::legacy::session::EVENT_ID_LEN_MAX];
    let n = event_id_into(&mut id, s.tag, key, seq);
    String::from_utf8(id[..n].to_vec()).expect("ascii id")
}

/// One batch of the writer, as `conn::write_stream` runs it: `fill_batch` into an empty frame
/// buffer, then (when something is sent or the response ends) `after_send`.
fn batch(
    s: &mut Session,
    key: StreamKey,
    epoch: u64,
    cursor: &mut Cursor,
    rewrite: Option<&Rewrite>,
    budget: usize,
) -> (Batch, Vec<u8>) {
    let mut out = Vec::new();
    let b = fill_batch(s, key, epoch, cursor, rewrite, RETRY_MS, &mut out, budget);
    let sends = !out.is_empty() || b != Batch::More;
    if sends && b != Batch::Cut && b != Batch::Superseded {
        after_send(s, key, epoch, cursor.after, b);
    }
    (b, out)
}

/// One parsed SSE event.
#[derive(Debug, PartialEq)]
struct Sse {
    id: Option<String>,
    retry: Option<u64>,
    data: Vec<u8>,
}

/// Parses complete SSE text strictly: every event ends with a blank line, only `id:`,
/// `retry:` and `data:` fields occur, `data:` lines join with `\n` (WHATWG HTML §9.2.6).
fn parse(text: &[u8]) -> Vec<Sse> {
    assert!(text.is_empty() || text.ends_with(b"\n\n"), "output ends mid-event");
    let mut events = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.windows(2).position(|w| w == b"\n\n").expect("event end");
        let block = &rest[..end];
        rest = &rest[end + 2..];
        let mut ev = Sse { id: None, retry: None, data: Vec::new() };
        let mut lines = 0;
        for line in block.split(|&b| b == b'\n') {
            if let Some(v) = line.strip_prefix(b"id: ") {
                ev.id = Some(String::from_utf8(v.to_vec()).expect("ascii id"));
            } else if let Some(v) = line.strip_prefix(b"retry: ") {
                ev.retry = Some(std::str::from_utf8(v).expect("ascii").parse().expect("ms"));
            } else if let Some(v) = line.strip_prefix(b"data: ") {
                if lines > 0 {
                    ev.data.push(b'\n');
                }
                ev.data.extend_from_slice(v);
                lines += 1;
            } else {
                panic!("unexpected SSE line {:?}", String::from_utf8_lossy(line));
            }
        }
        events.push(ev);
    }
    events
}

#[test]
fn an_event_of_three_budgets_goes_out_in_windows_within_the_budget() {
    // Goal: issue 11 §2: an event of 3×budget bytes is written over 3–4 batches, none larger
    // than budget + one event's SSE head, and the windows reassemble to exactly the payload
    // under the event's id; the cursor passes the event only once it is whole. Method: for the
    // smallest budget (the priming event then goes alone) and a larger one (it shares the first
    // batch), append the event, run batches until the writer waits, check each one.
    //
    // The bound, from `fill_batch`: a batch stops adding whole events once it holds `budget`
    // bytes and adds one only if its payload fits the room left, so whole events overshoot by
    // at most one event's framing (`FRAME` + id); a first window is the head (`WINDOW_HEAD` +
    // id) plus exactly the room left; a later window is at most `budget` payload bytes plus
    // `WINDOW_TAIL`. So every batch is ≤ budget + FRAME + id length, and a first window
    // is exactly budget + WINDOW_HEAD + id length.
    for budget in [WINDOW_BYTES_MIN, 4 * WINDOW_BYTES_MIN] {
        let mut s = session(1 << 20, 64);
        let (key, epoch, mut cursor) = open(&mut s, "1");
        let priming = s.stream(key).unwrap().first;
        let big = payload(1, 3 * budget);
        let seq = s.append(key, Bytes::from(big.clone())).unwrap();
        let id = wire_id(&s, key, seq);
        let bound = budget + FRAME + id.len();
        let mut all = Vec::new();
        let mut carrying = 0; // batches that carry bytes of the big event
        let mut sent_before = 0;
        for n in 0.. {
            assert!(n < 10, "budget {budget}: the event never completed");
            let (b, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
            assert_eq!(b, Batch::More, "budget {budget}: the stream goes on");
            assert!(!out.is_empty(), "budget {budget}: every batch makes progress");
            assert!(out.len() <= bound, "budget {budget}: batch {n} is {} bytes", out.len());
            let text = String::from_utf8_lossy(&out);
            if text.contains(&id) {
                // The first window: head plus exactly the room the batch had left.
                assert_eq!(out.len(), budget + WINDOW_HEAD + id.len(), "budget {budget}");
            }
            all.extend_from_slice(&out);
            match cursor.partial {
                Some((p, sent)) => {
                    assert_eq!(p, seq);
                    assert!(sent > sent_before && sent < big.len(), "budget {budget}: {sent}");
                    sent_before = sent;
                    assert_eq!(cursor.after, priming, "budget {budget}: not past a partial event");
                    assert!(s.stream(key).unwrap().written() < seq, "not written while partial");
                    carrying += 1;
                }
                None if cursor.after == seq => {
                    carrying += 1;
                    assert!(out.ends_with(b"\n\n"));
                    assert!(out.len() <= budget + WINDOW_TAIL, "budget {budget}: last window");
                    assert_eq!(s.stream(key).unwrap().written(), seq);
                    break;
                }
                None => assert_eq!(cursor.after, priming, "budget {budget}: only priming"),
            }
        }
        assert!((3..=4).contains(&carrying), "budget {budget}: {carrying} batches");
        let events = parse(&all);
        assert_eq!(events.len(), 2, "budget {budget}: priming and the event, once each");
        assert_eq!(events[1].id.as_deref(), Some(id.as_str()));
        assert_eq!(events[1].retry, None);
        assert!(events[1].data == big, "budget {budget}: the windows reassemble the payload");
        // Nothing more to write: the writer waits for the next event.
        let (b, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        assert_eq!((b, out.len()), (Batch::More, 0));
    }
}

#[test]
fn small_events_are_still_coalesced_up_to_the_budget() {
    // Goal: windowing does not cost the coalescing of small events (runtime-notes §4: one
    // send per batch, not per event). Method: 200 events of 100 bytes, budget 4096: each batch
    // holds many whole events, stops only when the next would not fit, stays within the bound,
    // and all events arrive once, in order.
    let budget = WINDOW_BYTES_MIN;
    let mut s = session(1 << 20, 256);
    let (key, epoch, mut cursor) = open(&mut s, "1");
    let _ = batch(&mut s, key, epoch, &mut cursor, None, budget); // the priming event
    let mut want = Vec::new();
    for i in 0..200u32 {
        let p = payload(i, 100);
        let seq = s.append(key, Bytes::from(p.clone())).unwrap();
        want.push((wire_id(&s, key, seq), p));
    }
    let frame = FRAME + want.iter().map(|(id, _)| id.len()).max().unwrap();
    let mut got = Vec::new();
    let mut batches = 0;
    loop {
        let (b, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        assert_eq!(b, Batch::More);
        if out.is_empty() {
            break;
        }
        batches += 1;
        assert!(cursor.partial.is_none(), "small events are never split");
        assert!(out.len() <= budget + frame, "batch of {} bytes", out.len());
        let events = parse(&out);
        if got.len() + events.len() < want.len() {
            // Not the last batch: it stopped because the next event did not fit.
            assert!(out.len() + 100 > budget, "batch of {} bytes stopped early", out.len());
            assert!(events.len() > 1, "coalesced: {} events in a batch", events.len());
        }
        got.extend(events.into_iter().map(|e| (e.id.unwrap(), e.data)));
    }
    assert_eq!(got, want, "every event once, in order");
    let per_event = FRAME + want[0].0.len() + 100;
    assert!(batches <= 200 * per_event / budget + 1, "{batches} batches for 200 events");
}

#[test]
fn an_event_evicted_while_partially_written_cuts_the_connection() {
    // Goal: a windowed event the ring evicts before its last window is not finished from
    // nowhere nor skipped silently: the batch is `Cut` (the connection closes without the last
    // chunk), the writer lets go, and the client's resume from its last whole event gets the
    // -31003 gap. Method: write the first window of a 3×budget final response, then evict it
    // (by another stream's large event, and by a flood of small events of its own stream that
    // reuse its ring slot), then run the next batch and a resume.
    let budget = WINDOW_BYTES_MIN;
    for own_stream in [false, true] {
        let ctx = if own_stream { "evicted by its own stream" } else { "by another stream" };
        let (replay_bytes, replay_events) = (4 * budget, 16);
        let mut s = session(replay_bytes, replay_events);
        let (key, epoch, mut cursor) = open(&mut s, "1");
        let priming = s.stream(key).unwrap().first;
        let big = payload(1, 3 * budget);
        let seq = s.append(key, Bytes::from(big)).unwrap();
        let (_, first) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        let (_, window) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        assert!(first.len() + window.len() > budget && cursor.partial.is_some(), "{ctx}");
        if own_stream {
            for i in 0..replay_events as u32 {
                s.append(key, Bytes::from(payload(i, 10))).unwrap();
            }
            s.finish(key, Bytes::from(response("1", 64)));
        } else {
            let (other, _, _) = open(&mut s, "2");
            s.finish(other, Bytes::from(response("2", replay_bytes - 3 * budget + 1)));
        }
        assert!(s.ring.get(seq).is_none(), "{ctx}: the event is evicted");
        let (b, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        assert_eq!(b, Batch::Cut, "{ctx}");
        assert!(out.is_empty(), "{ctx}: nothing of the evicted event is made up");
        assert_eq!(cursor.after, priming, "{ctx}: the cursor stays at the last whole event");
        after_send(&mut s, key, epoch, cursor.after, b);
        assert!(!s.stream(key).unwrap().is_attached(), "{ctx}: the writer let go");
        // The client resumes from its last whole event (the priming event): a gap.
        let epoch = s.attach_resume(key, priming).expect("resume");
        let mut cursor = Cursor::after(priming);
        let (b, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        assert_eq!(b, Batch::Gap, "{ctx}");
        let gap = parse(&out);
        assert_eq!(gap.len(), 1, "{ctx}");
        let text = String::from_utf8_lossy(&gap[0].data);
        assert!(text.contains("-31003") && text.contains("lostTo"), "{ctx}: {text}");
    }
}

/// Something that happens to a stream while (or before) its writer is in an event.
type Change = fn(&mut Session, StreamKey);

#[test]
fn nothing_ends_the_response_in_the_middle_of_an_event() {
    // Goal: once an event is half written, the response goes on until it is whole, whatever
    // happens to the stream meanwhile (an end there would leave the client a torn event and no
    // way to know). Method: a 3×budget event, then the stream is finished (a small final
    // response after it), dropped, or asked to park its connection (SEP-1699) — before the
    // first batch (so the first window and the end meet in one batch) or after the first
    // window — or the big event is itself the final response. Every batch that ends the
    // response (not `More`) has no event half written and ends on an event's blank line; every
    // event written is whole; a finished stream delivers the big event and its final response.
    let finish_small = |s: &mut Session, key| s.finish(key, Bytes::from(response("1", 64)));
    let cases: [(&str, Batch, Change); 4] = [
        ("finished after it", Batch::Ended, finish_small),
        ("dropped", Batch::Dropped, |s, key| s.drop_stream(key)),
        ("park requested", Batch::Park, |s, key| s.request_close(key)),
        ("it is the final response", Batch::Ended, |_, _| {}),
    ];
    for budget in [WINDOW_BYTES_MIN, 4 * WINDOW_BYTES_MIN] {
        for early in [true, false] {
            for (case, want, change) in cases {
                let ctx = format!("{case}, budget {budget}, early {early}");
                let mut s = session(1 << 20, 64);
                let (key, epoch, mut cursor) = open(&mut s, "1");
                let big = if case == "it is the final response" {
                    response("1", 3 * budget)
                } else {
                    payload(1, 3 * budget)
                };
                let seq = if case == "it is the final response" {
                    s.finish(key, Bytes::from(big.clone()));
                    s.stream(key).unwrap().final_seq().unwrap()
                } else {
                    s.append(key, Bytes::from(big.clone())).unwrap()
                };
                let mut changed = false;
                if early {
                    change(&mut s, key);
                    changed = true;
                }
                let mut all = Vec::new();
                let end = (0..20)
                    .find_map(|_| {
                        let (b, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
                        all.extend_from_slice(&out);
                        if b != Batch::More {
                            assert!(cursor.partial.is_none(), "{ctx}: {b:?} mid-event");
                            assert!(out.ends_with(b"\n\n"), "{ctx}: {b:?} after a torn event");
                            return Some(b);
                        }
                        if cursor.partial.is_some() && !changed {
                            change(&mut s, key);
                            changed = true;
                        }
                        None
                    })
                    .unwrap_or_else(|| panic!("{ctx}: the response never ended"));
                assert_eq!(end, want, "{ctx}");
                let events = parse(&all);
                let id = wire_id(&s, key, seq);
                let written = events.iter().find(|e| e.id.as_deref() == Some(id.as_str()));
                if let Some(ev) = written {
                    assert!(ev.data == big, "{ctx}: the big event arrived whole");
                }
                if want == Batch::Ended {
                    assert!(written.is_some(), "{ctx}: the big event was delivered");
                    let last = events.last().unwrap();
                    assert!(last.data.starts_with(b"{\"jsonrpc\""), "{ctx}: the final response");
                }
            }
        }
    }
}

#[test]
fn the_priming_event_keeps_its_retry_field() {
    // Goal: SEP-1699: the priming event still carries `retry:` when a large event follows it,
    // in the same batch or not, and no other event does. Method: a stream with a 3×budget
    // event, for a budget that puts the priming event alone and one where the first window
    // shares its batch; the first batch starts with the exact priming frame.
    for budget in [WINDOW_BYTES_MIN, 4 * WINDOW_BYTES_MIN] {
        let mut s = session(1 << 20, 64);
        let (key, epoch, mut cursor) = open(&mut s, "1");
        let priming = s.stream(key).unwrap().first;
        s.append(key, Bytes::from(payload(1, 3 * budget))).unwrap();
        let (b, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        assert_eq!(b, Batch::More);
        let frame = format!("id: {}\nretry: {RETRY_MS}\ndata: \n\n", wire_id(&s, key, priming));
        assert!(out.starts_with(frame.as_bytes()), "budget {budget}: {out:?}");
        let mut all = out;
        while cursor.partial.is_some() || cursor.after == priming {
            let (_, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
            all.extend_from_slice(&out);
        }
        let events = parse(&all);
        assert_eq!(events[0].retry, Some(RETRY_MS), "budget {budget}");
        assert!(events[0].data.is_empty());
        assert!(events[1..].iter().all(|e| e.retry.is_none()), "budget {budget}");
    }
}

#[test]
fn a_rewritten_large_final_response_is_windowed_correctly() {
    // Goal: a deduplicated retry (CONTRACT §4 step 1) of a call whose progress and final
    // response are larger than the budget gets them windowed like any other: the windows
    // reassemble to the *rewritten* payloads (the retry's JSON-RPC id and progress token, whose
    // lengths differ from the original's), under the original event ids, each batch within the
    // bound. Method: a finished stream with a 2×budget progress event and a 3×budget final
    // response; a second writer attaches with a `Rewrite` as `legacy::deduplicated` does and
    // writes until `Ended`.
    let budget = WINDOW_BYTES_MIN;
    let mut s = session(1 << 20, 64);
    let key = s
        .open_stream(StreamKind::Request, Some(RawId::new("1")), 1, None, Some("5".into()))
        .unwrap();
    let first = s.stream(key).unwrap().first;
    let mut progress = PROGRESS_PREFIX.to_vec();
    progress.extend_from_slice(b"5,\"progress\":1,\"message\":\"");
    progress.extend_from_slice(&payload(2, 2 * budget));
    progress.extend_from_slice(b"\"}}");
    let progress_seq = s.append(key, Bytes::from(progress.clone())).unwrap();
    let original = response("1", 3 * budget);
    s.finish(key, Bytes::from(original.clone()));
    let final_seq = s.stream(key).unwrap().final_seq().unwrap();
    let rewrite = Rewrite {
        id: RawId::new("\"retry-of-1\""),
        progress_token: Some(("\"tok-x\"".into(), "5".into())),
    };
    let epoch = s.attach(key).unwrap();
    let mut cursor = Cursor::from(first, Some(first));
    let bound = budget + FRAME + wire_id(&s, key, final_seq).len();
    let mut all = Vec::new();
    let mut batches = 0;
    let end = loop {
        let (b, out) = batch(&mut s, key, epoch, &mut cursor, Some(&rewrite), budget);
        assert!(out.len() <= bound, "batch of {} bytes", out.len());
        all.extend_from_slice(&out);
        batches += 1;
        assert!(batches < 12, "never ended");
        if b != Batch::More {
            break b;
        }
    };
    assert_eq!(end, Batch::Ended);
    assert!(batches >= 5, "two large events need several windows: {batches} batches");
    let events = parse(&all);
    assert_eq!(events.len(), 3, "priming, progress, final response");
    let mut want_progress = PROGRESS_PREFIX.to_vec();
    want_progress.extend_from_slice(b"\"tok-x\"");
    want_progress.extend_from_slice(&progress[PROGRESS_PREFIX.len() + 1..]);
    assert_eq!(events[1].id.as_deref(), Some(wire_id(&s, key, progress_seq).as_str()));
    assert!(events[1].data == want_progress, "the progress token is rewritten");
    let mut want_final = jsonrpc::RESPONSE_PREFIX.to_vec();
    want_final.extend_from_slice(b"\"retry-of-1\"");
    want_final.extend_from_slice(&original[jsonrpc::response_body_offset(&RawId::new("1"))..]);
    assert_eq!(events[2].id.as_deref(), Some(wire_id(&s, key, final_seq).as_str()));
    assert!(events[2].data == want_final, "the final response carries the retry's id");
    assert_ne!(want_final.len(), original.len(), "the rewrite changed the length");
}

#[test]
fn a_line_break_inside_a_window_starts_a_data_line() {
    // Goal: a windowed event keeps `sse::push_event`'s rule that a line break in the data
    // starts a new `data:` line, including a break on a window's edge. Method: a 3×budget
    // payload with `\n` at the first window's last byte, the next window's first byte and
    // elsewhere; reassemble and compare.
    let budget = WINDOW_BYTES_MIN;
    let mut s = session(1 << 20, 64);
    let (key, epoch, mut cursor) = open(&mut s, "1");
    let _ = batch(&mut s, key, epoch, &mut cursor, None, budget); // the priming event
    let mut big = payload(1, 3 * budget);
    for at in [budget - 1, budget, budget + 17, 2 * budget + 5] {
        big[at] = b'\n';
    }
    s.append(key, Bytes::from(big.clone())).unwrap();
    let mut all = Vec::new();
    loop {
        let (_, out) = batch(&mut s, key, epoch, &mut cursor, None, budget);
        if out.is_empty() {
            break;
        }
        all.extend_from_slice(&out);
    }
    let events = parse(&all);
    assert_eq!(events.len(), 1);
    assert!(events[0].data == big, "line breaks survive windowing");
}

#[test]
fn the_event_buffer_is_kept_up_to_its_limit_and_events_are_exact() {
    // Goal: `encode_event` reuses one buffer per core (no allocation of its own per event) but
    // never keeps more than `EVENT_SCRATCH_KEEP_BYTES`; the event holds exactly its bytes.
    // Method: events whose buffer grows to the limit and one past it, on this test's thread.
    let capacity = || EVENT_SCRATCH.with(|s| s.borrow().capacity());
    let event = encode_event(|out| {
        out.reserve_exact(EVENT_SCRATCH_KEEP_BYTES);
        out.extend_from_slice(b"{}");
    });
    assert_eq!(&event[..], b"{}");
    assert_eq!(capacity(), 0, "taken while the event is held");
    drop(event);
    assert_eq!(capacity(), EVENT_SCRATCH_KEEP_BYTES, "kept at the limit");
    let event = encode_event(|out| out.extend_from_slice(b"[1]"));
    assert_eq!(&event[..], b"[1]");
    drop(event);
    assert_eq!(capacity(), EVENT_SCRATCH_KEEP_BYTES, "reused, not grown");
    let big = encode_event(|out| out.resize(EVENT_SCRATCH_KEEP_BYTES + 1, b'x'));
    assert_eq!(big.len(), EVENT_SCRATCH_KEEP_BYTES + 1);
    drop(big);
    assert_eq!(capacity(), 0, "let go past the limit");
}

#[test]
fn spare_forwarding_wakers_are_kept_up_to_their_limit_and_only_when_unshared() {
    // Goal: a call finished at its first poll hands its waker back (no allocation for the next
    // call), at most `FORWARD_WAKERS_KEPT` are kept, and one a tool still holds is not reused.
    // Method: hand back one more than the limit, then one whose waker is still cloned.
    let spares = || FORWARD_WAKERS.with(|s| s.borrow().len());
    FORWARD_WAKERS.with(|s| s.borrow_mut().clear());
    for _ in 0..=FORWARD_WAKERS_KEPT {
        keep_forward_wake(Arc::new(ForwardWake(atomic_waker::AtomicWaker::new())));
    }
    assert_eq!(spares(), FORWARD_WAKERS_KEPT);
    let reused = forward_wake();
    assert_eq!(spares(), FORWARD_WAKERS_KEPT - 1);
    let held = Waker::from(reused.clone());
    keep_forward_wake(reused);
    assert_eq!(spares(), FORWARD_WAKERS_KEPT - 1, "a waker still held is not kept");
    drop(held);
}
