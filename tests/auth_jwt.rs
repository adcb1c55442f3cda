//! Goal: JWT access tokens over the wire (issue 38, findings 3, 5 and 10; CONTRACT §8), both io
//! drivers: a signing key dropped from the JWK Set stops working at the next request on a
//! keep-alive connection that had it cached (whether the set is re-read on its interval or on
//! SIGHUP); a cached verification is redone after `--auth-cache-secs`, and an `exp` the clock
//! cannot represent is refused rather than never expiring; fractional `exp`/`nbf` verify;
//! subjects are namespaced: a JWT whose `sub` equals a static token's subject, or another
//! issuer's token with the same `sub`, is another subject (404 on the session), and a token
//! signed with issuer B's key but claiming issuer A is refused (401).
//!
//! Method: the real binary with `--auth-jwks-file` key sets in a temporary directory, tokens
//! signed here with the test keys of `tests/auth/keys/`, raw HTTP/1.1 over blocking sockets;
//! `--threads 1`, so a keep-alive connection is never handed to another core (which would
//! rebuild its cache and hide what is tested).

mod support;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use support::*;

const RSA_A: &str = include_str!("auth/keys/rsa-a.pem");
const RSA_B: &str = include_str!("auth/keys/rsa-b.pem");
const RESOURCE: &str = "https://mcp.example/mcp";
const ISSUER_A: &str = "https://as-a.example";
const ISSUER_B: &str = "https://as-b.example";

/// A 2026-07-28 `server/discover`: a request that needs a token and no session.
const DISCOVER: &str = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
const DISCOVER_HEADERS: [(&str, &str); 2] =
    [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "server/discover")];

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidemark-jwt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn rsa(pem: &str) -> EncodingKey {
    EncodingKey::from_rsa_pem(pem.as_bytes()).expect("test key parses")
}

/// A JWK Set document of the public halves of `keys` (PEM, kid).
fn jwks(keys: &[(&str, &str)]) -> String {
    let keys: Vec<Value> = keys
        .iter()
        .map(|(pem, kid)| {
            let mut jwk = Jwk::from_encoding_key(&rsa(pem), Algorithm::RS256).expect("jwk");
            jwk.common.key_id = Some((*kid).to_owned());
            serde_json::to_value(jwk).expect("jwk serializes")
        })
        .collect();
    json!({ "keys": keys }).to_string()
}

fn write(path: &Path, text: &str) {
    // Write-then-rename: the refresher never reads a half-written file.
    let part = path.with_extension("part");
    std::fs::write(&part, text).expect("write");
    std::fs::rename(&part, path).expect("rename");
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

/// The claims of a valid token of `iss` for `sub`, ten minutes long.
fn claims(iss: &str, sub: &str) -> Value {
    json!({ "iss": iss, "sub": sub, "aud": RESOURCE, "exp": now_secs() + 600, "iat": now_secs() })
}

/// `claims` signed RS256 with `pem`, naming `kid`.
fn sign(claims: &Value, pem: &str, kid: &str) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &rsa(pem)).expect("signs")
}

/// The flags of a server for `RESOURCE` with one thread, plus `args`.
fn start(driver: &str, args: &[&str]) -> Server {
    let mut all = vec!["--threads", "1", "--auth-resource", RESOURCE];
    all.extend_from_slice(args);
    Server::with_admin(driver, &all)
}

/// A server of issuer A alone, whose key set holds key `a`, plus `args`.
fn issuer_a(driver: &str, name: &str, args: &[&str]) -> Server {
    let file = temp_dir(&format!("{name}-{driver}")).join("jwks.json");
    write(&file, &jwks(&[(RSA_A, "a")]));
    let mut all = vec!["--auth-issuer", ISSUER_A, "--auth-jwks-file", file.to_str().expect("path")];
    all.extend_from_slice(args);
    start(driver, &all)
}

/// A `server/discover` with `token` on `conn` (a kept-alive connection); the status.
fn discover_on(server: &Server, conn: &mut TcpStream, token: &str) -> u16 {
    let bearer = format!("Bearer {token}");
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.extend_from_slice(&DISCOVER_HEADERS);
    h.push(("Authorization", &bearer));
    send(conn, &request("POST", &server.path, &server.host(), &h, Some(DISCOVER)));
    read_response(conn).status
}

/// A `server/discover` with `token` on a new connection; the status.
fn discover(server: &Server, token: &str) -> u16 {
    discover_on(server, &mut server.connect(), token)
}

fn post_as(server: &Server, token: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let bearer = format!("Bearer {token}");
    let mut all = headers.to_vec();
    all.push(("Authorization", &bearer));
    post(server, &all, body)
}

fn verifications(server: &Server) -> u64 {
    metric(&scrape(&server.metrics()), "tidemark_auth_verifications_total")
}

/// Goal (finding 3): a key dropped from the JWK Set stops at the next request on the
/// connection that had a token of it cached, not only on new connections; a token of a key
/// that stays keeps working on its connection. Both ways the set is read again: its refresh
/// interval (`--auth-jwks-refresh-secs 1`) and SIGHUP (with an hour's interval). Method: two
/// kept-alive connections (one per key), the file rewritten without key `a`, then wait until a
/// new connection is refused and ask again on the old ones.
#[test]
fn a_dropped_key_stops_on_open_connections() {
    for driver in DRIVERS {
        for (how, refresh) in [("refresh", "1"), ("sighup", "3600")] {
            let ctx = format!("{driver} {how}");
            let file = temp_dir(&format!("drop-{driver}-{how}")).join("jwks.json");
            write(&file, &jwks(&[(RSA_A, "a"), (RSA_B, "b")]));
            let path = file.to_str().expect("path");
            let server = start(
                driver,
                &[
                    "--auth-issuer",
                    ISSUER_A,
                    "--auth-jwks-file",
                    path,
                    "--auth-jwks-refresh-secs",
                    refresh,
                    "--auth-jwks-min-refetch-secs",
                    "1",
                ],
            );
            let of_a = sign(&claims(ISSUER_A, "alice"), RSA_A, "a");
            let of_b = sign(&claims(ISSUER_A, "bob"), RSA_B, "b");
            let (mut conn_a, mut conn_b) = (server.connect(), server.connect());
            assert_eq!(discover_on(&server, &mut conn_a, &of_a), 200, "{ctx}");
            assert_eq!(discover_on(&server, &mut conn_a, &of_a), 200, "{ctx}: cached");
            assert_eq!(discover_on(&server, &mut conn_b, &of_b), 200, "{ctx}");
            write(&file, &jwks(&[(RSA_B, "b")]));
            if how == "sighup" {
                server.signal("HUP");
            }
            wait_until(Duration::from_secs(15), &format!("{ctx}: key a refused anew"), || {
                discover(&server, &of_a) == 401
            });
            assert_eq!(
                discover_on(&server, &mut conn_a, &of_a),
                401,
                "{ctx}: the dropped key still served its open connection"
            );
            assert_eq!(discover_on(&server, &mut conn_b, &of_b), 200, "{ctx}: key b stays");
        }
    }
}

/// Goal (finding 3): a cached verification lives at most `--auth-cache-secs` whatever the
/// token's `exp` (here the year 33658). Method: `--auth-cache-secs 1`, three requests
/// on one connection, the third after the second has passed (elapsed time is what is tested,
/// so this one sleeps), counting verifications.
#[test]
fn a_cached_verification_lives_at_most_the_cache_lifetime() {
    for driver in DRIVERS {
        let server = issuer_a(driver, "lifetime", &["--auth-cache-secs", "1"]);
        let mut far = claims(ISSUER_A, "alice");
        far["exp"] = json!(1_000_000_000_000_u64);
        let token = sign(&far, RSA_A, "a");
        let mut conn = server.connect();
        let before = verifications(&server);
        assert_eq!(discover_on(&server, &mut conn, &token), 200, "{driver}");
        assert_eq!(discover_on(&server, &mut conn, &token), 200, "{driver}");
        assert_eq!(verifications(&server), before + 1, "{driver}: the second was cached");
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(discover_on(&server, &mut conn, &token), 200, "{driver}");
        assert_eq!(verifications(&server), before + 2, "{driver}: verified again after 1 s");
    }
}

/// Goal (finding 3): an `exp` past what the clock can represent (2^64 − 1, where the old
/// cache's expiry overflowed to "never") is refused, not taken as "never expires"; a far but
/// representable one (the year 33658) is accepted.
#[test]
fn an_exp_past_the_clock_is_refused() {
    for driver in DRIVERS {
        let server = issuer_a(driver, "never", &[]);
        let mut never = claims(ISSUER_A, "alice");
        never["exp"] = json!(u64::MAX);
        let token = sign(&never, RSA_A, "a");
        assert_eq!(discover(&server, &token), 401, "{driver}: exp 2^64-1 accepted");
        never["exp"] = json!(1_000_000_000_000_u64);
        assert_eq!(discover(&server, &sign(&never, RSA_A, "a")), 200, "{driver}: a far exp");
    }
}

/// Goal (finding 10): RFC 7519 NumericDates may be fractional: a token with `exp` and `nbf`
/// like 1765000600.5 is accepted; one whose fractional `exp` has passed is refused.
#[test]
fn fractional_exp_and_nbf_are_accepted() {
    for driver in DRIVERS {
        let server = issuer_a(driver, "fraction", &["--auth-leeway-secs", "0"]);
        let mut fractional = claims(ISSUER_A, "alice");
        fractional["exp"] = json!(now_secs() as f64 + 600.5);
        fractional["nbf"] = json!(now_secs() as f64 - 0.5);
        assert_eq!(discover(&server, &sign(&fractional, RSA_A, "a")), 200, "{driver}");
        fractional["exp"] = json!(now_secs() as f64 - 0.5);
        assert_eq!(discover(&server, &sign(&fractional, RSA_A, "a")), 401, "{driver}: expired");
    }
}

/// A token file: `admin` (a static subject).
const TOKENS: &str = "tok-admin admin\n";

/// Goal (finding 5, takeover a): a static token's subject and a JWT's `sub` are two
/// namespaces: a JWT with `sub: admin` gets the 404 of an unknown session on the session the
/// static token `admin` opened, and opens and keeps a session of its own; the static token
/// keeps its session. Method: one issuer, a token file, the legacy era.
#[test]
fn a_jwt_never_continues_a_static_tokens_session() {
    for driver in DRIVERS {
        let dir = temp_dir(&format!("static-{driver}"));
        let (tokens, file) = (dir.join("tokens"), dir.join("jwks.json"));
        write(&tokens, TOKENS);
        write(&file, &jwks(&[(RSA_A, "a")]));
        let server = start(
            driver,
            &[
                "--auth-tokens",
                tokens.to_str().expect("path"),
                "--auth-issuer",
                ISSUER_A,
                "--auth-jwks-file",
                file.to_str().expect("path"),
            ],
        );
        let jwt = sign(&claims(ISSUER_A, "admin"), RSA_A, "a");
        let sid = open_session_with_token(&server, "tok-admin");
        let ping = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;
        let r = post_as(&server, &jwt, &[("Mcp-Session-Id", &sid)], ping);
        assert_eq!(r.status, 404, "{driver}: a JWT sub admin continued the static admin's session");
        let own = open_session_with_token(&server, &jwt);
        assert_eq!(post_as(&server, &jwt, &[("Mcp-Session-Id", &own)], ping).status, 200);
        let r = post_as(&server, "tok-admin", &[("Mcp-Session-Id", &own)], ping);
        assert_eq!(r.status, 404, "{driver}: the static admin continued the JWT's session");
        let r = post_as(&server, "tok-admin", &[("Mcp-Session-Id", &sid)], ping);
        assert_eq!(r.status, 200, "{driver}: the owner lost its session");
    }
}

/// Goal (finding 5, takeovers b and c): with two issuers, each with its own key set
/// (`--auth-jwks-file ISSUER=PATH`), issuer B's `sub: x` is not issuer A's `sub: x` (404 on
/// A's session, which A's next token continues), and a token signed with B's key that claims
/// `iss: A` is refused (401) whichever kid it names. Method: two key files, the legacy era.
#[test]
fn issuers_are_namespaces_and_verify_only_with_their_own_keys() {
    for driver in DRIVERS {
        let dir = temp_dir(&format!("issuers-{driver}"));
        let (file_a, file_b) = (dir.join("a.json"), dir.join("b.json"));
        write(&file_a, &jwks(&[(RSA_A, "a")]));
        write(&file_b, &jwks(&[(RSA_B, "b")]));
        let source_a = format!("{ISSUER_A}={}", file_a.display());
        let source_b = format!("{ISSUER_B}={}", file_b.display());
        let server = start(
            driver,
            &[
                "--auth-issuer",
                ISSUER_A,
                "--auth-issuer",
                ISSUER_B,
                "--auth-jwks-file",
                &source_a,
                "--auth-jwks-file",
                &source_b,
            ],
        );
        let of_a = sign(&claims(ISSUER_A, "x"), RSA_A, "a");
        let of_b = sign(&claims(ISSUER_B, "x"), RSA_B, "b");
        let sid = open_session_with_token(&server, &of_a);
        let ping = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;
        let r = post_as(&server, &of_b, &[("Mcp-Session-Id", &sid)], ping);
        assert_eq!(r.status, 404, "{driver}: issuer B's sub x continued issuer A's session");
        let mut again = claims(ISSUER_A, "x");
        again["jti"] = json!("another token");
        let again = sign(&again, RSA_A, "a");
        let r = post_as(&server, &again, &[("Mcp-Session-Id", &sid)], ping);
        assert_eq!(r.status, 200, "{driver}: A's next token lost the session");
        for kid in ["a", "b"] {
            let forged = sign(&claims(ISSUER_A, "x"), RSA_B, kid);
            let r = post_as(&server, &forged, &[("Mcp-Session-Id", &sid)], ping);
            assert_eq!(r.status, 401, "{driver} kid {kid}: B's key verified a token of A");
        }
    }
}

/// Goal: with several issuers, a key source that names none is refused at start, naming the
/// flag and the `ISSUER=` form (its keys would otherwise verify every issuer's tokens).
#[test]
fn several_issuers_need_each_source_to_name_its_issuer() {
    let file = temp_dir("bare").join("jwks.json");
    write(&file, &jwks(&[(RSA_A, "a")]));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", "127.0.0.1:0", "--auth-resource", RESOURCE])
        .args(["--auth-issuer", ISSUER_A, "--auth-issuer", ISSUER_B])
        .args(["--auth-jwks-file", file.to_str().expect("path")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    // Bounded: a binary that accepts the set-up would serve forever.
    let status = exit_within(&mut child, Duration::from_secs(10));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("it started with a key source of no issuer beside two issuers");
    }
    assert!(!status.expect("exited").success(), "it started with a source of no issuer");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(stderr.contains("--auth-jwks-file") && stderr.contains("ISSUER="), "{stderr}");
}
