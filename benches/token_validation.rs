//! Static bearer-token validation (`--auth-tokens`) on the request path: a keep-alive request
//! whose token the connection validated already (`cached`: one SHA-256 of the token and a
//! constant-time digest compare) against a connection's first request (`uncached`: the digest
//! looked up in the set and compared in constant time, then the claims copied into the
//! connection's cache), and a token no entry has (`unknown`: what every refused request costs),
//! for sets of 10, 1 000 and 10 000 tokens.
//! Budget: each ≤ 2 µs and flat in the set's size.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tidemark::bench_support::{Config, TokenValidation};

/// A token file of `n` tokens in the temporary directory; the last one's text.
fn token_file(n: usize) -> (std::path::PathBuf, String) {
    let path =
        std::env::temp_dir().join(format!("tidemark-bench-tokens-{n}-{}", std::process::id()));
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!("tok-{i:08}-0123456789abcdef0123456789abcdef user{i} read,write\n"));
    }
    std::fs::write(&path, text).expect("write tokens");
    (path, format!("tok-{:08}-0123456789abcdef0123456789abcdef", n - 1))
}

fn validation(c: &mut Criterion) {
    let mut g = c.benchmark_group("static_token");
    g.throughput(Throughput::Elements(1));
    for n in [10usize, 1_000, 10_000] {
        let (path, token) = token_file(n);
        let mut cfg = Config::default();
        cfg.auth.tokens_file = Some(path.clone());
        let v = TokenValidation::new(&cfg);
        assert!(v.cached(token.as_bytes()), "the token validates");
        g.bench_with_input(BenchmarkId::new("cached", n), &n, |b, _| {
            b.iter(|| v.cached(black_box(token.as_bytes())))
        });
        g.bench_with_input(BenchmarkId::new("uncached", n), &n, |b, _| {
            b.iter(|| v.uncached(black_box(token.as_bytes())))
        });
        let unknown = token.replace("tok-", "bad-");
        assert!(!v.uncached(unknown.as_bytes()), "an unknown token is refused");
        g.bench_with_input(BenchmarkId::new("unknown", n), &n, |b, _| {
            b.iter(|| v.uncached(black_box(unknown.as_bytes())))
        });
        let _ = std::fs::remove_file(path);
    }
    g.finish();
}

criterion_group!(benches, validation);
criterion_main!(benches);
