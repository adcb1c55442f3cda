//! Criterion micro-benchmarks of the per-session replay ring (`tidemark::legacy::replay::Ring`)
//! and of a resume over it as the server runs one.
//!
//! Budget: `lookup` (get of a random held event) < 20 ns, flat from 16 to 2^20 events: the slot
//! is `seq & mask`, so capacity must not show up in the time except through cache misses.
//! `append` (steady state: ring full, every append evicts the oldest) and `resume_100` (per
//! resent event, stream interleaved with another) must stay flat across capacities too: an
//! append never scans, and a resume (`Session::resume_start`, O(1), then `Ring::iter_from`
//! along the stream's chain, as `legacy::stream::fill_batch` does; SSE encoding not included)
//! visits only its own stream's events.
//!
//! Every group runs at 16, 1024, 65536 and 2^20 events with a byte budget that never binds.
//! Payloads are clones of one static `Bytes` (no refcount traffic, no allocator) so the numbers
//! are the ring's own cost (plus, for a resume, the session's one stream-table probe).
//!
//! Measured (2-core AMD EPYC VM, 32 MiB L3, shared and loaded; median): append 21–22 ns at every
//! capacity; lookup 8.8–9.1 ns up to 65536 events, 29 ns at 2^20; resume 2.7–4 ns per resent
//! event, its O(1) start included (100 events in 268–400 ns at every capacity from 1024, the
//! spread is the machine's load, not the capacity; 17–19 ns for a 16-event ring's 7 events).
//! The 2^20 lookup missed the budget because its slot array (40 bytes a slot then, 40 MiB; 24
//! bytes and 24 MiB since issue 43 §2, not re-measured) exceeded the L3, so a uniformly random seq pays a DRAM access and a TLB miss: the index math is flat, the
//! memory hierarchy is not. A resume looks up a recent id, which is near the hot tail.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tidemark::bench_support::*;

const CAPACITIES: [usize; 4] = [16, 1024, 65536, 1 << 20];
/// No byte bound in effect: the largest a ring takes (`--replay-bytes` at most 4 GiB − 1, its
/// slots keep offsets in 32 bits).
const BYTES_MAX: usize = u32::MAX as usize;
/// A typical small JSON-RPC notification.
static PAYLOAD: [u8; 128] = [b'x'; 128];
const STREAM_A: StreamKey = StreamKey(1);
const STREAM_B: StreamKey = StreamKey(2);

/// A ring of `events_max` slots filled to capacity, streams A and B alternating (A gets odd seqs).
fn full_ring(events_max: usize) -> Ring {
    let mut ring = Ring::new(events_max, BYTES_MAX);
    let payload = Bytes::from_static(&PAYLOAD);
    for i in 0..events_max {
        let stream = if i % 2 == 0 { STREAM_A } else { STREAM_B };
        ring.try_append(stream, payload.clone(), |_| {}).expect("payload fits");
    }
    ring
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements(1));
    for events_max in CAPACITIES {
        let mut ring = full_ring(events_max);
        let payload = Bytes::from_static(&PAYLOAD);
        let mut turn = 0u32;
        group.bench_function(BenchmarkId::from_parameter(events_max), |b| {
            b.iter(|| {
                turn ^= 1;
                let stream = StreamKey(1 + turn);
                let seq = ring.try_append(stream, payload.clone(), |evicted| {
                    black_box(evicted);
                });
                black_box(seq)
            })
        });
    }
    group.finish();
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(1));
    for events_max in CAPACITIES {
        let ring = full_ring(events_max);
        let oldest = ring.oldest().expect("full").0;
        let mask = events_max as u64 - 1;
        // xorshift64: a random held seq per iteration, so large rings really miss the cache.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        group.bench_function(BenchmarkId::from_parameter(events_max), |b| {
            b.iter(|| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let seq = EventSeq(oldest + (state & mask));
                black_box(ring.get(black_box(seq)).map(|event| event.len()))
            })
        });
    }
    group.finish();
}

/// A session of `events_max` events (ring full, nothing evicted) on two request streams, A and
/// B, alternating: A's priming event is seq 1, B's seq 2, then A gets every odd seq. The limits
/// are sized for the case: two streams, and exactly the bytes the payloads need.
fn interleaved_session(events_max: usize) -> (Session, StreamKey) {
    // `Config` is #[non_exhaustive]: adjusted field by field, as an embedder does.
    let mut cfg = Config::default();
    cfg.sessions.replay_events_max = events_max;
    cfg.sessions.replay_bytes_max = events_max * PAYLOAD.len();
    cfg.sessions.streams_per_session_max = 2;
    let mut session =
        Session::new(SessionId { node: 0, core: 0, random: 1 }, 1, LEGACY_VERSIONS[0], &cfg);
    let mut open = |id: &str, fingerprint| {
        let id = Some(RawId::new(id));
        session.open_stream(StreamKind::Request, id, fingerprint, None, None).expect("room")
    };
    let (a, b) = (open("1", 1), open("2", 2));
    let payload = Bytes::from_static(&PAYLOAD);
    for i in 2..events_max {
        let stream = if i % 2 == 0 { a } else { b };
        session.append(stream, payload.clone()).expect("payload fits");
    }
    assert_eq!(session.ring.len(), events_max);
    assert_eq!(session.ring.oldest(), Some(EventSeq(1)), "nothing evicted");
    (session, a)
}

/// A resume as the server does it (`legacy::stream::fill_batch`): `Session::resume_start` finds
/// the first event after the client's cursor in O(1), then `Ring::iter_from` walks the stream's
/// chain, stopping at the first event of another stream. SSE encoding is not measured.
fn resume_100(c: &mut Criterion) {
    let mut group = c.benchmark_group("resume_100");
    for events_max in CAPACITIES {
        let (session, a) = interleaved_session(events_max);
        // Stream A holds events_max / 2 events (its priming event first); resume after the one
        // that leaves its newest 100 to send (7 at 16 events: everything after the priming).
        let count = 100.min(events_max / 2 - 1);
        let a_newest = session.ring.newest_in_stream(a).expect("A holds events").0;
        let after = EventSeq(a_newest - 2 * count as u64);
        let resume = |after: EventSeq| -> (usize, usize) {
            let first = match session.resume_start(a, after) {
                Ok(ResumeStart::From(first)) => first,
                other => panic!("a held cursor with a backlog resumes from an event: {other:?}"),
            };
            let (mut events, mut bytes) = (0usize, 0usize);
            for event in session.ring.iter_from(first) {
                if event.stream != a {
                    break;
                }
                events += 1;
                bytes += event.len();
            }
            (events, bytes)
        };
        assert_eq!(resume(after), (count, count * PAYLOAD.len()));
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(BenchmarkId::from_parameter(events_max), |b| {
            b.iter(|| black_box(resume(black_box(after))))
        });
    }
    group.finish();
}

criterion_group!(benches, append, lookup, resume_100);
criterion_main!(benches);
