//! JWT access-token verification, cold (issue 18 item 7): every call decodes the token, finds
//! its key in the JWK Set (one arc-swap load and a hash probe), checks the signature and the
//! claims, and builds the `Claims` (subject, scopes). One per algorithm tidemark accepts: RS256
//! (2048-bit), ES256 (P-256), EdDSA (Ed25519), with the test keys of `tests/auth/keys/`. The
//! cached path (a token already seen on the connection) is measured with the request path.
use std::hint::black_box;
use std::time::{SystemTime, UNIX_EPOCH};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use tidemark::bench_support::JwtVerifier;

const RSA: &str = include_str!("../tests/auth/keys/rsa-a.pem");
const EC: &str = include_str!("../tests/auth/keys/ec-p256.pem");
const ED: &str = include_str!("../tests/auth/keys/ed25519.pem");
/// `x` of `ed25519.pem`'s public key (jsonwebtoken derives no Ed25519 JWK itself).
const ED_PUBLIC_X: &str = "ACz0Q6-2hnCYNJ7CsfqEr9Gh7vWVZeFEi72_dX2vAKM";
const RESOURCE: &str = "https://mcp.example/mcp";
const ISSUER: &str = "https://as.example";

fn verify_cold(c: &mut Criterion) {
    let rsa = EncodingKey::from_rsa_pem(RSA.as_bytes()).expect("rsa");
    let ec = EncodingKey::from_ec_pem(EC.as_bytes()).expect("ec");
    let ed = EncodingKey::from_ed_pem(ED.as_bytes()).expect("ed");
    let public = |key: &EncodingKey, algorithm, kid: &str| {
        let mut jwk = Jwk::from_encoding_key(key, algorithm).expect("jwk");
        jwk.common.key_id = Some(kid.to_owned());
        serde_json::to_value(jwk).expect("json")
    };
    let keys = serde_json::json!({ "keys": [
        public(&rsa, Algorithm::RS256, "rsa"),
        public(&ec, Algorithm::ES256, "ec"),
        { "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": "ed", "x": ED_PUBLIC_X },
    ]});
    let verifier = JwtVerifier::new(&serde_json::to_vec(&keys).expect("json"), RESOURCE, ISSUER);
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    // An access token as oidc-provider issues one (RFC 9068 claims).
    let claims = serde_json::json!({
        "jti": "VIULVl9HoerH6tXEeVG0nRO1P6_b6aA752GidvO83Fy", "sub": "tidemark-test",
        "iat": secs, "exp": secs + 300, "scope": "tools:read tools:write",
        "client_id": "tidemark-test", "iss": ISSUER, "aud": RESOURCE,
    });
    let mut group = c.benchmark_group("jwt_verify_cold");
    group.throughput(Throughput::Elements(1));
    for (name, algorithm, key, kid) in [
        ("RS256", Algorithm::RS256, &rsa, "rsa"),
        ("ES256", Algorithm::ES256, &ec, "ec"),
        ("EdDSA", Algorithm::EdDSA, &ed, "ed"),
    ] {
        let mut header = Header::new(algorithm);
        header.kid = Some(kid.to_owned());
        header.typ = Some("at+jwt".to_owned());
        let token = jsonwebtoken::encode(&header, &claims, key).expect("signs");
        // The subject is namespaced by its issuer: `ISS#SUB` (docs/security.md).
        let subject = ISSUER.len() + "#tidemark-test".len();
        assert_eq!(verifier.verify(&token, now), Some(subject), "{name} verifies");
        group.bench_with_input(BenchmarkId::from_parameter(name), &token, |b, token| {
            b.iter(|| verifier.verify(black_box(token), now))
        });
    }
    group.finish();
}

/// How a worker core reads the shared key set once per token: `arc-swap`'s load (what `Jwks`
/// does) against an `RwLock<Arc<_>>` read, uncontended and while another thread keeps reading
/// (every core reads; only the refresher writes, rarely).
#[allow(clippy::disallowed_types)] // the RwLock is the comparison, not a design
fn key_set_read(c: &mut Criterion) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, RwLock};

    let swap = Arc::new(arc_swap::ArcSwap::from_pointee(vec![1u8; 64]));
    let lock = Arc::new(RwLock::new(Arc::new(vec![1u8; 64])));
    let mut group = c.benchmark_group("key_set_read");
    group.throughput(Throughput::Elements(1));
    for contended in [false, true] {
        let stop = Arc::new(AtomicBool::new(false));
        let reader = contended.then(|| {
            let (swap, lock, stop) = (swap.clone(), lock.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    black_box(swap.load()[0]);
                    black_box(lock.read().expect("lock")[0]);
                }
            })
        });
        let label = if contended { "with_another_reader" } else { "alone" };
        group.bench_function(BenchmarkId::new("arc_swap", label), |b| {
            b.iter(|| black_box(swap.load()[0]))
        });
        group.bench_function(BenchmarkId::new("rwlock", label), |b| {
            b.iter(|| black_box(lock.read().expect("lock")[0]))
        });
        stop.store(true, Ordering::Relaxed);
        if let Some(reader) = reader {
            reader.join().expect("reader");
        }
    }
    group.finish();
}

criterion_group!(benches, verify_cold, key_set_read);
criterion_main!(benches);
