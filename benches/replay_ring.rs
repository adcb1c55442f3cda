//! Criterion micro-benchmarks of the per-session replay ring (`tidemark::legacy::replay::Ring`).
//!
//! Budget: `lookup` (get of a random held event) < 20 ns, flat from 16 to 2^20 events: the slot
//! is `seq & mask`, so capacity must not show up in the time except through cache misses.
//! `append` (steady state: ring full, every append evicts the oldest) and `replay_100` (per
//! replayed event, stream interleaved with another) must stay flat across capacities too: an
//! append never scans, a replay visits only its own stream's events.
//!
//! Every group runs at 16, 1024, 65536 and 2^20 events with a byte budget that never binds.
//! Payloads are clones of one static `Bytes` (no refcount traffic, no allocator) so the numbers
//! are the ring's own cost.
//!
//! Measured (2-core AMD EPYC VM, 32 MiB L3, shared and loaded; median): append 21–22 ns at every
//! capacity; lookup 8.8–9.1 ns up to 65536 events, 29 ns at 2^20; replay ≈ 2.7 ns per event.
//! The 2^20 lookup misses the budget because its slot array (56 bytes a slot, 56 MiB) exceeds the
//! L3, so a uniformly random seq pays a DRAM access and a TLB miss: the index math is flat, the
//! memory hierarchy is not. A resume looks up a recent id, which is near the hot tail.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tidemark::bench_support::*;

const CAPACITIES: [usize; 4] = [16, 1024, 65536, 1 << 20];
const BYTES_MAX: usize = usize::MAX;
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
                black_box(ring.get(black_box(seq)).map(|event| event.payload.len()))
            })
        });
    }
    group.finish();
}

fn replay_100(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay_100");
    for events_max in CAPACITIES {
        let ring = full_ring(events_max);
        // Stream A holds events_max / 2 events; replay the newest 100 of them (fewer when the
        // ring is smaller: 7 at 16 events).
        let count = 100.min(events_max / 2 - 1);
        let a_newest = ring.next_seq().0 - 2;
        let after = EventSeq(a_newest - 2 * count as u64);
        assert_eq!(ring.replay_after(STREAM_A, after).count(), count);
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(BenchmarkId::from_parameter(events_max), |b| {
            b.iter(|| {
                let mut bytes = 0usize;
                for event in ring.replay_after(STREAM_A, black_box(after)) {
                    bytes += event.payload.len();
                }
                black_box(bytes)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, append, lookup, replay_100);
criterion_main!(benches);
