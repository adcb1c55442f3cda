//! The migration decision on the hot path: find the session (per-core table), gather the facts
//! (request-id, fingerprint and idempotency-key maps, owed and replaying counters) and decide.
//! Budget: ≤ 20 ns, flat from 16 to 1 M buffered events and from 10 to 100 k sessions on a core
//! (issue 4 §7). The fingerprint (canonical JSON of the params) is request parsing, measured
//! separately in `fingerprint`.
use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tidemark::bench_support::*;

/// A session with `streams` settled request streams, one owed stream, and `events` events.
fn session(random: u128, events: usize, cfg: &Config) -> Session {
    let mut s = Session::new(SessionId { node: 0, core: 0, random }, 1, LEGACY_VERSIONS[0], cfg);
    let mut keys = Vec::new();
    for i in 0..8u64 {
        let id = RawId::from(i.to_string());
        let k = s.open_stream(StreamKind::Request, Some(id), i, None, None).expect("room");
        keys.push(k);
    }
    let payload =
        Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}");
    for i in 0..events {
        s.append(keys[i % keys.len()], payload.clone()).expect("fits");
    }
    s
}

fn by_events(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide_by_buffered_events");
    g.throughput(Throughput::Elements(1));
    for events in [16usize, 1024, 65_536, 1 << 20] {
        let mut cfg = Config::default();
        cfg.sessions.replay_events_max = events;
        cfg.sessions.replay_bytes_max = 1 << 30;
        let mut table = SessionTable::new(10);
        let id = SessionId { node: 0, core: 0, random: 42 };
        table.insert(session(42, events, &cfg));
        let rid = RawId::new("12345");
        g.bench_with_input(BenchmarkId::from_parameter(events), &events, |b, _| {
            b.iter(|| {
                let s = table.get(black_box(&id)).expect("present");
                let s = s.borrow();
                let f =
                    facts(MigrationPolicy::Strict, &s, black_box(&rid), black_box(7), None, false);
                decide(f)
            })
        });
    }
    g.finish();
}

fn by_sessions(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide_by_sessions");
    g.throughput(Throughput::Elements(1));
    let mut cfg = Config::default();
    cfg.sessions.replay_events_max = 16;
    for sessions in [10usize, 1000, 100_000] {
        let mut table = SessionTable::new(sessions);
        let mut ids = Vec::with_capacity(sessions);
        for i in 0..sessions {
            let random = (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
            table.insert(session(random, 16, &cfg));
            ids.push(SessionId { node: 0, core: 0, random });
        }
        let rid = RawId::new("12345");
        let mut i = 0usize;
        g.bench_with_input(BenchmarkId::from_parameter(sessions), &sessions, |b, _| {
            b.iter(|| {
                i = (i + 7919) % ids.len();
                let s = table.get(&ids[i]).expect("present");
                let s = s.borrow();
                decide(facts(MigrationPolicy::Strict, &s, black_box(&rid), 7, None, false))
            })
        });
    }
    g.finish();
}

fn fingerprinting(c: &mut Criterion) {
    let mut body = br#"{"name":"slow_counter","arguments":{"steps":10,"delay_ms":50},"_meta":{"progressToken":7}}"#.to_vec();
    let tape = simd_json::to_tape(&mut body).expect("json");
    let params = tape.as_value();
    c.bench_function("fingerprint_tools_call", |b| {
        b.iter(|| fingerprint(black_box("tools/call"), black_box(&params)))
    });
}

criterion_group!(benches, by_events, by_sessions, fingerprinting);
criterion_main!(benches);
