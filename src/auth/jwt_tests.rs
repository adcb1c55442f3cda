//! The JWT verifier against hostile tokens, and the key set's refresh (rotation, rate limit,
//! last good set kept, size limit), with real signatures made by the test keys of
//! `tests/auth/keys/` and a real HTTP JWKS source on loopback.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::claims::{Claims, TokenError, TokenVerifier};
use super::jwks::{Jwks, JwksSettings, KeySet};
use super::jwt::{JwtSettings, JwtVerifier};
use crate::config::{Config, AUTH_TOKEN_BYTES_MAX, JWKS_BYTES_MAX};

const RSA_A: &str = include_str!("../../tests/auth/keys/rsa-a.pem");
const RSA_A_PUBLIC: &str = include_str!("../../tests/auth/keys/rsa-a.pub.pem");
const RSA_B: &str = include_str!("../../tests/auth/keys/rsa-b.pem");
const EC: &str = include_str!("../../tests/auth/keys/ec-p256.pem");
const ED: &str = include_str!("../../tests/auth/keys/ed25519.pem");

const RESOURCE: &str = "https://mcp.example/mcp";
const ISSUER: &str = "https://as.example";

fn encoding_key(pem: &str, algorithm: Algorithm) -> EncodingKey {
    match algorithm {
        Algorithm::RS256 | Algorithm::RS384 => EncodingKey::from_rsa_pem(pem.as_bytes()),
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
        other => panic!("no test key for {other:?}"),
    }
    .expect("test key parses")
}

/// `x` of `ed25519.pem`'s public key (jsonwebtoken derives no Ed25519 JWK itself):
/// `openssl pkey -in ed25519.pem -pubout -outform DER | tail -c 32`, base64url.
const ED_PUBLIC_X: &str = "ACz0Q6-2hnCYNJ7CsfqEr9Gh7vWVZeFEi72_dX2vAKM";

/// The public JWK of a test key, named `kid`.
fn public_jwk(pem: &str, algorithm: Algorithm, kid: &str) -> Value {
    if algorithm == Algorithm::EdDSA {
        return json!({ "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": kid, "x": ED_PUBLIC_X });
    }
    let mut jwk = Jwk::from_encoding_key(&encoding_key(pem, algorithm), algorithm).expect("jwk");
    jwk.common.key_id = Some(kid.to_owned());
    serde_json::to_value(jwk).expect("jwk serializes")
}

fn jwks_document(keys: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({ "keys": keys })).expect("serializes")
}

fn standard_keys() -> Vec<Value> {
    vec![
        public_jwk(RSA_A, Algorithm::RS256, "a"),
        public_jwk(EC, Algorithm::ES256, "ec"),
        public_jwk(ED, Algorithm::EdDSA, "ed"),
    ]
}

fn settings() -> JwtSettings {
    JwtSettings {
        resource: RESOURCE.to_owned(),
        issuers: vec![ISSUER.to_owned()],
        leeway: Duration::from_secs(30),
    }
}

fn verifier_over(keys: Arc<Jwks>) -> JwtVerifier {
    JwtVerifier::new(settings(), vec![keys]).expect("settings are complete")
}

fn fixed_verifier() -> JwtVerifier {
    let set = KeySet::parse(&jwks_document(&standard_keys())).expect("key set parses");
    verifier_over(Jwks::fixed(set))
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

/// Claims of a token that passes, to be spoiled one field at a time.
fn good_claims() -> Value {
    json!({
        "iss": ISSUER, "sub": "alice", "aud": RESOURCE,
        "exp": now_secs() + 600, "iat": now_secs(), "scope": "tools:read tools:write",
    })
}

fn sign(claims: &Value, pem: &str, algorithm: Algorithm, kid: &str) -> String {
    let mut header = Header::new(algorithm);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &encoding_key(pem, algorithm)).expect("signs")
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn verify(verifier: &JwtVerifier, token: &str) -> Result<Claims, TokenError> {
    verifier.verify(token, SystemTime::now())
}

#[test]
fn each_algorithm_verifies_and_yields_subject_scopes_and_expiry() {
    let verifier = fixed_verifier();
    for (pem, algorithm, kid) in
        [(RSA_A, Algorithm::RS256, "a"), (EC, Algorithm::ES256, "ec"), (ED, Algorithm::EdDSA, "ed")]
    {
        let claims = good_claims();
        let token = sign(&claims, pem, algorithm, kid);
        let got = verify(&verifier, &token).unwrap_or_else(|e| panic!("{algorithm:?}: {e:?}"));
        assert_eq!(&*got.subject, "https://as.example#alice");
        assert_eq!(got.scopes, vec![Box::from("tools:read"), Box::from("tools:write")]);
        let exp = UNIX_EPOCH + Duration::from_secs(claims["exp"].as_u64().expect("exp"));
        assert_eq!(got.expires_at, Some(exp));
    }
}

#[test]
fn scopes_come_from_scp_as_array_or_string_and_aud_may_be_an_array() {
    let verifier = fixed_verifier();
    let mut claims = good_claims();
    claims.as_object_mut().expect("object").remove("scope");
    claims["scp"] = json!(["a", "b"]);
    claims["aud"] = json!(["https://elsewhere.example", RESOURCE]);
    let got = verify(&verifier, &sign(&claims, RSA_A, Algorithm::RS256, "a")).expect("valid");
    assert_eq!(got.scopes, vec![Box::from("a"), Box::from("b")]);
    claims["scp"] = json!("c  d");
    let got = verify(&verifier, &sign(&claims, RSA_A, Algorithm::RS256, "a")).expect("valid");
    assert_eq!(got.scopes, vec![Box::from("c"), Box::from("d")]);
    claims.as_object_mut().expect("object").remove("scp");
    let got = verify(&verifier, &sign(&claims, RSA_A, Algorithm::RS256, "a")).expect("valid");
    assert!(got.scopes.is_empty());
}

#[test]
fn alg_none_is_refused() {
    let verifier = fixed_verifier();
    let header = b64(br#"{"alg":"none","typ":"JWT","kid":"a"}"#);
    let payload = b64(&serde_json::to_vec(&good_claims()).expect("json"));
    for token in [format!("{header}.{payload}."), format!("{header}.{payload}.AAAA")] {
        assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::AlgorithmNotAllowed);
    }
    let header = b64(br#"{"alg":"None","kid":"a"}"#);
    let token = format!("{header}.{payload}.");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::AlgorithmNotAllowed);
}

#[test]
fn hs256_signed_with_the_rsa_public_key_bytes_is_refused() {
    let verifier = fixed_verifier();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("a".to_owned());
    let secret = EncodingKey::from_secret(RSA_A_PUBLIC.as_bytes());
    let token = jsonwebtoken::encode(&header, &good_claims(), &secret).expect("signs");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::AlgorithmNotAllowed);
    // The same with the public key's DER bytes, and every other HMAC.
    for algorithm in [Algorithm::HS384, Algorithm::HS512] {
        let mut header = Header::new(algorithm);
        header.kid = Some("a".to_owned());
        let token = jsonwebtoken::encode(&header, &good_claims(), &secret).expect("signs");
        assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::AlgorithmNotAllowed);
    }
}

#[test]
fn a_token_whose_alg_is_not_its_keys_is_refused() {
    let verifier = fixed_verifier();
    // Signed with the EC key, but names the RSA key.
    let token = sign(&good_claims(), EC, Algorithm::ES256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::AlgorithmNotAllowed);
    // RS384 is not accepted at all, even with an RSA key.
    let token = sign(&good_claims(), RSA_A, Algorithm::RS384, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::AlgorithmNotAllowed);
}

#[test]
fn expired_and_not_yet_valid_tokens_are_refused_past_the_leeway() {
    let verifier = fixed_verifier();
    let mut claims = good_claims();
    claims["exp"] = json!(now_secs() - 100);
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::Expired);
    // Within the 30 s leeway: still good.
    claims["exp"] = json!(now_secs() - 10);
    assert!(verify(&verifier, &sign(&claims, RSA_A, Algorithm::RS256, "a")).is_ok());
    // The caller's clock decides: the same token an hour later is expired.
    claims["exp"] = json!(now_secs() + 600);
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    let later = SystemTime::now() + Duration::from_secs(3600);
    assert_eq!(verifier.verify(&token, later).unwrap_err(), TokenError::Expired);

    let mut claims = good_claims();
    claims["nbf"] = json!(now_secs() + 100);
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::NotYetValid);
    claims["nbf"] = json!(now_secs() + 10);
    assert!(verify(&verifier, &sign(&claims, RSA_A, Algorithm::RS256, "a")).is_ok());
}

#[test]
fn wrong_audience_and_wrong_issuer_are_refused() {
    let verifier = fixed_verifier();
    let mut claims = good_claims();
    claims["aud"] = json!("https://other-resource.example/mcp");
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::WrongAudience);
    claims["aud"] = json!(["https://a.example", "https://b.example"]);
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::WrongAudience);

    let mut claims = good_claims();
    claims["iss"] = json!("https://evil-as.example");
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::WrongIssuer);
    claims["iss"] = json!("https://other-as.example");
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::WrongIssuer);
}

#[test]
fn each_issuer_verifies_only_with_its_own_keys_and_names_namespaced_subjects() {
    // Goal (issue 38 finding 5): with two issuers, a token is checked only with the keys of
    // the issuer its `iss` names: issuer B's key does not make a token claiming `iss: A` pass
    // (under A's kid or B's), and the subject is the issuer and `sub` together, so the same
    // `sub` from two issuers is two subjects. Method: two fixed key sets, one RSA key each.
    const OTHER: &str = "https://other-as.example";
    let set = |pem: &str, kid: &str| {
        let document = jwks_document(&[public_jwk(pem, Algorithm::RS256, kid)]);
        Jwks::fixed(KeySet::parse(&document).expect("parses"))
    };
    let mut two = settings();
    two.issuers = vec![ISSUER.to_owned(), OTHER.to_owned()];
    let verifier =
        JwtVerifier::new(two, vec![set(RSA_A, "a"), set(RSA_B, "b")]).expect("two issuers");
    let a = verify(&verifier, &sign(&good_claims(), RSA_A, Algorithm::RS256, "a")).expect("A");
    let mut claims = good_claims();
    claims["iss"] = json!(OTHER);
    let b = verify(&verifier, &sign(&claims, RSA_B, Algorithm::RS256, "b")).expect("B");
    assert_eq!(&*a.subject, "https://as.example#alice");
    assert_eq!(&*b.subject, "https://other-as.example#alice");
    // B's key, claiming A: A's set has no `b`, and A's `a` is not B's key.
    let forged = sign(&good_claims(), RSA_B, Algorithm::RS256, "b");
    assert_eq!(verify(&verifier, &forged).unwrap_err(), TokenError::UnknownKey);
    let forged = sign(&good_claims(), RSA_B, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &forged).unwrap_err(), TokenError::BadSignature);
    // A's key, claiming B.
    let forged = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &forged).unwrap_err(), TokenError::UnknownKey);
    claims["iss"] = json!("https://evil-as.example");
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::WrongIssuer);
    claims.as_object_mut().expect("object").remove("iss");
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::Malformed);
}

#[test]
fn fractional_times_are_accepted_and_unrepresentable_ones_refused() {
    // Goal (issue 38 finding 10): RFC 7519 §2 NumericDates may be fractional: such `exp` and
    // `nbf` verify, a token is valid strictly before `exp` and from `nbf` on (to the
    // sub-second), and an `exp` past what the clock can represent is refused, never "never
    // expires". Method: tokens with fractional and huge times, verified at chosen instants.
    let verifier = fixed_verifier();
    let mut claims = good_claims();
    let exp = now_secs() as f64 + 600.5;
    claims["exp"] = json!(exp);
    claims["nbf"] = json!(now_secs() as f64 - 0.25);
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    let got = verify(&verifier, &token).expect("fractional exp and nbf");
    assert_eq!(got.expires_at, Some(UNIX_EPOCH + Duration::from_secs_f64(exp)));
    // With no leeway: valid just before exp, refused at exp exactly.
    let strict = JwtVerifier::new(
        JwtSettings { leeway: Duration::ZERO, ..settings() },
        vec![Jwks::fixed(KeySet::parse(&jwks_document(&standard_keys())).expect("parses"))],
    )
    .expect("settings");
    let at = |secs: f64| UNIX_EPOCH + Duration::from_secs_f64(secs);
    assert!(strict.verify(&token, at(exp - 0.01)).is_ok());
    assert_eq!(strict.verify(&token, at(exp)).unwrap_err(), TokenError::Expired);
    let nbf = now_secs() as f64 + 0.5;
    claims["nbf"] = json!(nbf);
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(strict.verify(&token, at(nbf - 0.01)).unwrap_err(), TokenError::NotYetValid);
    assert!(strict.verify(&token, at(nbf)).is_ok());
    for huge in [json!(u64::MAX), json!(1.0e19), json!(9.3e18)] {
        let mut claims = good_claims();
        claims["exp"] = huge.clone();
        let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
        assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::Malformed, "{huge}");
    }
}

#[test]
fn required_claims_missing_make_the_token_malformed() {
    let verifier = fixed_verifier();
    for claim in ["exp", "sub", "aud", "iss"] {
        let mut claims = good_claims();
        claims.as_object_mut().expect("object").remove(claim);
        let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
        assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::Malformed, "no {claim}");
    }
    let mut claims = good_claims();
    claims["sub"] = json!("");
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::Malformed);
}

#[test]
fn an_unknown_kid_is_refused() {
    let verifier = fixed_verifier();
    let token = sign(&good_claims(), RSA_B, Algorithm::RS256, "b");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::UnknownKey);
    // A key the set has under another kid does not help a token naming none.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = None;
    let token =
        jsonwebtoken::encode(&header, &good_claims(), &encoding_key(RSA_A, Algorithm::RS256))
            .expect("signs");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::UnknownKey);
}

#[test]
fn a_tampered_payload_or_signature_is_refused() {
    let verifier = fixed_verifier();
    for (pem, algorithm, kid) in
        [(RSA_A, Algorithm::RS256, "a"), (EC, Algorithm::ES256, "ec"), (ED, Algorithm::EdDSA, "ed")]
    {
        let token = sign(&good_claims(), pem, algorithm, kid);
        let parts: Vec<&str> = token.split('.').collect();
        let mut claims = good_claims();
        claims["sub"] = json!("mallory");
        let forged = b64(&serde_json::to_vec(&claims).expect("json"));
        let tampered = format!("{}.{forged}.{}", parts[0], parts[2]);
        assert_eq!(verify(&verifier, &tampered).unwrap_err(), TokenError::BadSignature);
        // The other key's signature over the same header and payload.
        let other = sign(&good_claims(), RSA_B, Algorithm::RS256, "a");
        let spliced =
            format!("{}.{}.{}", parts[0], parts[1], other.split('.').nth(2).expect("sig"));
        assert!(verify(&verifier, &spliced).is_err());
    }
}

#[test]
fn oversize_and_garbage_tokens_are_malformed() {
    let verifier = fixed_verifier();
    let mut claims = good_claims();
    claims["pad"] = json!("x".repeat(AUTH_TOKEN_BYTES_MAX));
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert!(token.len() > AUTH_TOKEN_BYTES_MAX);
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::Malformed);
    // At the limit it is read (and here verifies).
    let mut claims = good_claims();
    claims["pad"] = json!("");
    let base = sign(&claims, RSA_A, Algorithm::RS256, "a").len();
    let fill = (AUTH_TOKEN_BYTES_MAX - base) * 3 / 4;
    claims["pad"] = json!("x".repeat(fill));
    let token = sign(&claims, RSA_A, Algorithm::RS256, "a");
    assert!(token.len() <= AUTH_TOKEN_BYTES_MAX && token.len() > AUTH_TOKEN_BYTES_MAX - 8);
    assert!(verify(&verifier, &token).is_ok());
    let hundred_kib = "a".repeat(100 * 1024);
    for token in ["", "abc", "a.b", "a.b.c.d", "!!!.@@@.###", hundred_kib.as_str()] {
        assert_eq!(verify(&verifier, token).unwrap_err(), TokenError::Malformed, "{token:.20}");
    }
}

#[test]
fn settings_without_resource_or_issuer_are_refused() {
    let keys = Jwks::fixed(KeySet::default());
    let mut incomplete = settings();
    incomplete.resource.clear();
    assert!(JwtVerifier::new(incomplete, vec![keys.clone()]).is_err());
    let mut incomplete = settings();
    incomplete.issuers.clear();
    assert!(JwtVerifier::new(incomplete, vec![keys.clone()]).is_err());
    assert!(JwtVerifier::new(settings(), vec![keys.clone(), keys]).is_err(), "unpaired");
}

#[test]
fn key_sets_skip_hmac_and_mislabelled_keys_and_refuse_oversize_documents() {
    let mut keys = standard_keys();
    keys.push(json!({ "kty": "oct", "kid": "hmac", "k": "c2VjcmV0" }));
    let mut mislabelled = public_jwk(RSA_B, Algorithm::RS256, "mislabelled");
    mislabelled["alg"] = json!("ES256");
    keys.push(mislabelled);
    let mut encryption = public_jwk(RSA_B, Algorithm::RS256, "enc");
    encryption["use"] = json!("enc");
    keys.push(encryption);
    keys.push(json!({ "kty": "EC", "crv": "P-384", "kid": "p384", "x": "AA", "y": "AA" }));
    keys.push(json!({ "kty": "weird" }));
    let set = KeySet::parse(&jwks_document(&keys)).expect("parses");
    assert_eq!(set.len(), 3);
    assert!(set.find(Some("hmac"), Algorithm::HS256).is_none());
    assert!(set.find(Some("mislabelled"), Algorithm::RS256).is_none());
    assert!(set.find(Some("enc"), Algorithm::RS256).is_none());

    let mut big = jwks_document(&standard_keys());
    big.truncate(big.len() - 2);
    big.extend_from_slice(b", \"pad\": \"");
    big.resize(JWKS_BYTES_MAX + 1 - 2, b'x');
    big.extend_from_slice(b"\"}");
    assert!(KeySet::parse(&big).is_err());
    assert!(KeySet::parse(b"{\"keys\": []}").is_err());
    assert!(KeySet::parse(b"not json").is_err());
}

/// Polls `check` for up to five seconds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_rotated_key_is_found_after_the_background_refetch_and_bad_files_keep_the_last_set() {
    let dir = std::env::temp_dir().join(format!("tidemark-jwks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("jwks.json");
    std::fs::write(&path, jwks_document(&[public_jwk(RSA_A, Algorithm::RS256, "a")]))
        .expect("write");
    let keys = Jwks::start(JwksSettings {
        file: Some(path.clone()),
        url: None,
        refresh: Duration::from_secs(3600),
        min_refetch: Duration::from_millis(300),
    })
    .expect("file is usable");
    let verifier = verifier_over(keys.clone());
    let old = sign(&good_claims(), RSA_A, Algorithm::RS256, "a");
    let new = sign(&good_claims(), RSA_B, Algorithm::RS256, "b");
    assert!(verify(&verifier, &old).is_ok());

    // The authorization server rotates: kid b appears. The first token naming it is refused at
    // once (no wait on a worker); the refresher picks the new set up and later tokens pass.
    let keys_ab =
        [public_jwk(RSA_A, Algorithm::RS256, "a"), public_jwk(RSA_B, Algorithm::RS256, "b")];
    std::fs::write(&path, jwks_document(&keys_ab)).expect("write");
    let started = Instant::now();
    assert_eq!(verify(&verifier, &new).unwrap_err(), TokenError::UnknownKey);
    assert!(started.elapsed() < Duration::from_millis(100), "the verifier waited");
    eventually("kid b after the refetch", || verify(&verifier, &new).is_ok());
    // Issue 38 finding 3: a read with other keys counts a change (the endpoint's caches then
    // verify again); a read of the same document, or a failed one below, counts none.
    let changes = verifier.key_changes();
    assert!(changes >= 1, "the rotation counted no change");
    let (reads_before, _) = keys.reads();
    keys.request_refetch();
    eventually("a read of the same set", || keys.reads().0 > reads_before);
    assert_eq!(verifier.key_changes(), changes, "the same keys counted as a change");

    // A flood of unknown kids makes at most one read per min_refetch.
    let (reads_before, _) = keys.reads();
    let flood_start = Instant::now();
    let stranger = sign(&good_claims(), RSA_B, Algorithm::RS256, "stranger");
    while flood_start.elapsed() < Duration::from_millis(700) {
        assert_eq!(verify(&verifier, &stranger).unwrap_err(), TokenError::UnknownKey);
    }
    std::thread::sleep(Duration::from_millis(400));
    let (reads_after, _) = keys.reads();
    let allowed = 1 + (flood_start.elapsed().as_millis() / 300) as u64;
    assert!(reads_after - reads_before <= allowed, "{} reads", reads_after - reads_before);
    assert!(reads_after > reads_before, "the flood asked for no read");

    // A broken file: the last good set stays.
    std::fs::write(&path, b"{ broken").expect("write");
    let (_, failures_before) = keys.reads();
    keys.request_refetch();
    eventually("the failed read", || keys.reads().1 > failures_before);
    assert!(verify(&verifier, &new).is_ok());
    assert!(verify(&verifier, &old).is_ok());
    assert_eq!(verifier.key_changes(), changes, "a failed read counted as a change");
    // Key a dropped: a change, and a token of it is refused.
    std::fs::write(&path, jwks_document(&[public_jwk(RSA_B, Algorithm::RS256, "b")]))
        .expect("write");
    keys.request_refetch();
    eventually("the drop of key a", || verifier.key_changes() > changes);
    assert_eq!(verify(&verifier, &old).unwrap_err(), TokenError::UnknownKey);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A loopback HTTP server answering every request with the current `(status, body)`.
fn serve_jwks(answer: Arc<ArcSwap<(u16, Vec<u8>)>>, hits: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            hits.fetch_add(1, Ordering::SeqCst);
            let answer = answer.load_full();
            let (status, body) = (answer.0, &answer.1);
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body);
        }
    });
    format!("http://{address}/jwks")
}

#[test]
fn a_url_source_is_fetched_refreshed_and_its_failures_keep_the_last_good_set() {
    let answer = Arc::new(ArcSwap::from_pointee((
        200,
        jwks_document(&[public_jwk(RSA_A, Algorithm::RS256, "a")]),
    )));
    let hits = Arc::new(AtomicUsize::new(0));
    let url = serve_jwks(answer.clone(), hits.clone());
    let keys = Jwks::start(JwksSettings {
        file: None,
        url: Some(url),
        refresh: Duration::from_millis(200),
        min_refetch: Duration::from_millis(100),
    })
    .expect("starts");
    let verifier = verifier_over(keys.clone());
    let old = sign(&good_claims(), RSA_A, Algorithm::RS256, "a");
    let new = sign(&good_claims(), RSA_B, Algorithm::RS256, "b");
    assert!(verify(&verifier, &old).is_ok());

    // A 500, then an oversize body: each fails, and the keys stay.
    answer.store(Arc::new((500, Vec::new())));
    let (_, failures) = keys.reads();
    eventually("the 500", || keys.reads().1 > failures);
    assert!(verify(&verifier, &old).is_ok());
    let mut oversize = jwks_document(&[public_jwk(RSA_B, Algorithm::RS256, "b")]);
    oversize.resize(JWKS_BYTES_MAX + 10, b' ');
    answer.store(Arc::new((200, oversize)));
    let (_, failures) = keys.reads();
    eventually("the oversize body", || keys.reads().1 > failures);
    assert_eq!(verify(&verifier, &new).unwrap_err(), TokenError::UnknownKey);
    assert!(verify(&verifier, &old).is_ok());

    // The periodic refresh brings the rotated set (no unknown kid needed).
    let keys_ab =
        [public_jwk(RSA_A, Algorithm::RS256, "a"), public_jwk(RSA_B, Algorithm::RS256, "b")];
    answer.store(Arc::new((200, jwks_document(&keys_ab))));
    eventually("the rotated set", || verify(&verifier, &new).is_ok());
    assert!(hits.load(Ordering::SeqCst) >= 4);

    // The refresher ends with its key set.
    drop(verifier);
    drop(keys);
    std::thread::sleep(Duration::from_millis(1500));
    let settled = hits.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(hits.load(Ordering::SeqCst), settled, "the refresher outlived its key set");
}

#[test]
fn the_flags_make_a_verifier_only_with_a_key_source_and_a_resource_and_issuer() {
    // Goal: `JwtVerifier::from_config` (the integrator's one call) makes none without JWKS
    // flags, refuses a missing resource/issuer or an unusable file, and otherwise verifies
    // with the file's keys and `--auth-leeway-secs`. Method: Configs from flags.
    let none = Config::try_from_args(["tidemark"]).expect("parses");
    assert!(JwtVerifier::from_config(&none, RESOURCE, &[ISSUER.to_owned()]).expect("ok").is_none());
    let path = std::env::temp_dir().join(format!("tidemark-jwks-cfg-{}.json", std::process::id()));
    std::fs::write(&path, jwks_document(&standard_keys())).expect("write");
    let file = path.to_str().expect("utf-8");
    let cfg =
        Config::try_from_args(["tidemark", "--auth-jwks-file", file, "--auth-leeway-secs", "0"])
            .expect("parses");
    assert!(JwtVerifier::from_config(&cfg, "", &[ISSUER.to_owned()]).is_err());
    assert!(JwtVerifier::from_config(&cfg, RESOURCE, &[]).is_err());
    let verifier = JwtVerifier::from_config(&cfg, RESOURCE, &[ISSUER.to_owned()])
        .expect("usable")
        .expect("a verifier");
    assert!(verify(&verifier, &sign(&good_claims(), ED, Algorithm::EdDSA, "ed")).is_ok());
    let mut claims = good_claims();
    claims["exp"] = json!(now_secs() - 1);
    let token = sign(&claims, ED, Algorithm::EdDSA, "ed");
    assert_eq!(verify(&verifier, &token).unwrap_err(), TokenError::Expired, "no leeway");
    std::fs::write(&path, b"[]").expect("write");
    assert!(JwtVerifier::from_config(&cfg, RESOURCE, &[ISSUER.to_owned()]).is_err());
    let _ = std::fs::remove_file(&path);
}

/// The real authorization server's settings, from `scripts/auth.sh` (tests/auth/provider.mjs).
struct RealServer {
    issuer: String,
    resource: String,
    agent: ureq::Agent,
}

impl RealServer {
    fn from_env() -> RealServer {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| panic!("{name} unset: run scripts/auth.sh"))
        };
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        RealServer {
            issuer: var("TIDEMARK_AUTH_ISSUER"),
            resource: var("TIDEMARK_AUTH_RESOURCE"),
            agent,
        }
    }

    fn json(&self, mut response: ureq::http::Response<ureq::Body>) -> Value {
        let status = response.status();
        let text = response.body_mut().read_to_string().expect("body");
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).expect("JSON")
    }

    /// The `jwks_uri` the server's discovery document names.
    fn jwks_uri(&self) -> String {
        let url = format!("{}/.well-known/openid-configuration", self.issuer);
        let discovery = self.json(self.agent.get(&url).call().expect("discovery"));
        assert_eq!(discovery["issuer"], json!(self.issuer));
        discovery["jwks_uri"].as_str().expect("jwks_uri").to_owned()
    }

    /// An access token from the client credentials grant with a resource indicator.
    fn token(&self, scope: &str) -> String {
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", "tidemark-test"),
            ("client_secret", "tidemark-test-secret"),
            ("resource", self.resource.as_str()),
            ("scope", scope),
        ];
        let url = format!("{}/token", self.issuer);
        let answer = self.json(self.agent.post(&url).send_form(form).expect("token request"));
        answer["access_token"].as_str().expect("access_token").to_owned()
    }

    fn control(&self, path: &str) -> Value {
        let url = format!("{}/control/{path}", self.issuer);
        self.json(self.agent.post(&url).send_empty().expect("control"))
    }
}

fn header_of(token: &str) -> Value {
    let header = token.split('.').next().expect("header");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).expect("base64");
    serde_json::from_slice(&bytes).expect("header JSON")
}

#[test]
#[ignore = "needs the real authorization server: scripts/auth.sh runs it"]
fn real_authorization_server_tokens_verify_through_its_jwks_url_across_a_rotation() {
    // Goal (issue 18 item 7): tokens a real OAuth authorization server (oidc-provider) issues
    // for our resource by the client credentials grant with a resource indicator verify through
    // its JWKS URL, found by discovery, in each algorithm; a token for this resource is refused
    // by a verifier of another resource or issuer; after the server rotates its signing key the
    // first token with the new kid is refused at once and the background refetch makes later
    // ones pass, while tokens of the old key still verify.
    let server = RealServer::from_env();
    let keys = Jwks::start(JwksSettings {
        file: None,
        url: Some(server.jwks_uri()),
        refresh: Duration::from_secs(3600),
        min_refetch: Duration::from_millis(500),
    })
    .expect("starts");
    let jwt_settings = JwtSettings {
        resource: server.resource.clone(),
        issuers: vec![server.issuer.clone()],
        leeway: Duration::from_secs(30),
    };
    let verifier = JwtVerifier::new(jwt_settings.clone(), vec![keys.clone()]).expect("settings");
    for alg in ["ES256", "EdDSA", "RS256"] {
        server.control(&format!("alg/{alg}"));
        let token = server.token("tools:read");
        assert_eq!(header_of(&token)["alg"], json!(alg));
        let claims = verify(&verifier, &token).unwrap_or_else(|e| panic!("{alg}: {e:?}"));
        assert_eq!(&*claims.subject, format!("{}#tidemark-test", server.issuer));
        assert_eq!(claims.scopes, vec![Box::from("tools:read")]);
        assert!(claims.expires_at.expect("exp") > SystemTime::now());
    }
    let both = verify(&verifier, &server.token("tools:read tools:write")).expect("valid");
    assert_eq!(both.scopes, vec![Box::from("tools:read"), Box::from("tools:write")]);

    let old = server.token("tools:read");
    let mut elsewhere = jwt_settings.clone();
    elsewhere.resource = "https://another-resource.example/mcp".to_owned();
    let elsewhere = JwtVerifier::new(elsewhere, vec![keys.clone()]).expect("settings");
    assert_eq!(verify(&elsewhere, &old).unwrap_err(), TokenError::WrongAudience);
    let mut stranger = jwt_settings;
    stranger.issuers = vec!["https://another-issuer.example".to_owned()];
    let stranger = JwtVerifier::new(stranger, vec![keys.clone()]).expect("settings");
    assert_eq!(verify(&stranger, &old).unwrap_err(), TokenError::WrongIssuer);

    let rotated = server.control("rotate");
    let new = server.token("tools:read");
    assert_eq!(header_of(&new)["kid"], rotated["kid"]);
    assert_eq!(verify(&verifier, &new).unwrap_err(), TokenError::UnknownKey);
    eventually("the rotated key", || verify(&verifier, &new).is_ok());
    assert!(verify(&verifier, &old).is_ok(), "a token of the old key still verifies");
    let (reads, failures) = keys.reads();
    assert_eq!(failures, 0);
    assert!(reads >= 2, "the refetch after the unknown kid: {reads} reads");
}
