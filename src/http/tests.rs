//! Goal: the head parser accepts what RFC 9112 allows, refuses what it must, and never panics.
use super::*;
use proptest::prelude::*;

fn parse(s: &str) -> Result<Option<RequestHead>, ParseError> {
    parse_head(s.as_bytes(), 1024, 16)
}

#[test]
fn parses_post_with_mcp_headers() {
    let raw = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Type: application/json\r\n\
               Accept: application/json, text/event-stream\r\nMcp-Session-Id: abc\r\n\
               Content-Length: 12\r\n\r\n{\"a\":1}";
    let head = parse(raw).unwrap().unwrap();
    assert_eq!(head.method(), Method::Post);
    assert_eq!(&raw[head.path.clone()], "/mcp");
    assert_eq!(head.content_length, Some(12));
    assert_eq!(&raw[head.session_id.clone().unwrap()], "abc");
    assert!(head.keep_alive);
    assert_eq!(&raw[head.head_len..], "{\"a\":1}");
}

#[test]
fn kept_names_match_in_any_case_and_nothing_else() {
    let known: &[&[u8]] = &[
        b"host",
        b"accept",
        b"mcp-name",
        b"connection",
        b"content-length",
        b"mcp-protocol-version",
        b"transfer-encoding",
        b"last-event-id",
    ];
    for &k in known {
        assert!(is_named(k, k));
        assert!(is_named(&k.to_ascii_uppercase(), k));
        for at in 0..k.len() {
            let mut other = k.to_vec();
            // Every token byte but the right one (in either case) at one place: no match.
            for b in (0u8..=127).filter(|&b| is_token(&[b]) && b.to_ascii_lowercase() != k[at]) {
                other[at] = b;
                assert!(!is_named(&other, k), "{:?} as {:?}", String::from_utf8_lossy(&other), k);
            }
        }
        assert!(!is_named(&k[1..], k));
    }
}

#[test]
fn partial_head_needs_more_bytes() {
    assert_eq!(parse("POST /mcp HTTP/1.1\r\nHost: x\r\n"), Ok(None));
}

#[test]
fn limits_at_n_and_n_plus_one() {
    let mut ok = String::from("GET / HTTP/1.1\r\nHost: h\r\n");
    for i in 0..15 {
        ok.push_str(&format!("X-{i}: v\r\n"));
    }
    ok.push_str("\r\n");
    assert!(parse(&ok).unwrap().is_some());
    let over = ok.replacen("GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nX-extra: v\r\n", 1);
    assert_eq!(parse(&over), Err(ParseError::TooManyHeaders));

    let filler = |n: usize| format!("GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n", "a".repeat(n));
    let base = filler(0).len();
    assert!(parse(&filler(1024 - base)).unwrap().is_some());
    assert_eq!(parse(&filler(1025 - base)), Err(ParseError::HeadTooLarge));
    assert_eq!(parse(&"a".repeat(1025)), Err(ParseError::HeadTooLarge));
    assert_eq!(
        parse_head(format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(1100)).as_bytes(), 1024, 16),
        Err(ParseError::HeadTooLarge)
    );
}

#[test]
fn bad_content_length_is_refused() {
    for raw in [
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9999999999999999999\r\n\r\n",
    ] {
        assert_eq!(parse(raw), Err(ParseError::BadContentLength), "{raw}");
    }
}

#[test]
fn host_must_be_present_once_and_origin_once() {
    for raw in [
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nOrigin: x\r\nOrigin: y\r\n\r\n",
    ] {
        assert_eq!(parse(raw), Err(ParseError::BadHost), "{raw}");
    }
}

/// Goal: a single-valued MCP header given twice with different values is reported (by the
/// name of its second line), an identical repeat is not, and other headers are not affected.
#[test]
fn conflicting_single_valued_headers_are_reported() {
    let cases: [(&str, Option<&str>); 12] = [
        ("Mcp-Param-Region: a\r\nmcp-param-region: b", Some("mcp-param-region")),
        ("Mcp-Param-A: a\r\nMcp-Param-B: b\r\nMcp-Param-A:  a ", None),
        ("Mcp-Param-A: a\r\nMcp-Param-B: b\r\nMcp-Param-B: c", Some("Mcp-Param-B")),
        ("Mcp-Name: a\r\nMcp-Name: b", Some("Mcp-Name")),
        ("Mcp-Session-Id: a\r\nMcp-Session-Id: b", Some("Mcp-Session-Id")),
        ("Mcp-Session-Id: a\r\nmcp-session-id:  b ", Some("mcp-session-id")),
        ("MCP-Protocol-Version: 1\r\nMCP-Protocol-Version: 2", Some("MCP-Protocol-Version")),
        ("Last-Event-ID: 1\r\nX: y\r\nLast-Event-ID: 2", Some("Last-Event-ID")),
        ("Idempotency-Key: k\r\nIdempotency-Key: K", Some("Idempotency-Key")),
        ("Mcp-Session-Id: a\r\nMcp-Session-Id:   a", None),
        ("Accept: text/html\r\nAccept: text/event-stream", None),
        ("Mcp-Session-Id: a\r\nLast-Event-ID: a", None),
    ];
    for (headers, want) in cases {
        let raw = format!("GET / HTTP/1.1\r\nHost: h\r\n{headers}\r\n\r\n");
        let head = parse(&raw).unwrap().unwrap();
        assert_eq!(head.conflict.map(|r| &raw[r]), want, "{headers}");
    }
}

#[test]
fn connection_close_and_http10() {
    let head = parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").unwrap().unwrap();
    assert!(!head.keep_alive);
    let head = parse("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
    assert!(!head.keep_alive);
}

#[test]
fn media_types() {
    assert!(lists_media_type(b"application/json, text/event-stream", b"text/event-stream"));
    assert!(lists_media_type(b"text/event-stream;q=0.9", b"text/event-stream"));
    assert!(lists_media_type(b"*/*", b"application/json"));
    assert!(!lists_media_type(b"text/html", b"application/json"));
    assert!(is_media_type(b"application/json; charset=utf-8", b"application/json"));
    assert!(!is_media_type(b"text/plain", b"application/json"));
}

#[test]
fn numbers_encode_without_allocating() {
    let mut out = Vec::new();
    push_decimal(&mut out, 0);
    push_decimal(&mut out, 18446744073709551615);
    push_hex(&mut out, 255);
    assert_eq!(out, b"018446744073709551615ff");
}

proptest! {
    #[test]
    fn never_panics_and_ranges_stay_inside(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(Some(head)) = parse_head(&bytes, 512, 16) {
            prop_assert!(head.head_len <= bytes.len());
            prop_assert!(head.path.end <= head.head_len);
        }
    }

    #[test]
    fn round_trips_generated_heads(path in "/[a-z]{0,20}", value in "[a-zA-Z0-9-]{1,40}") {
        let raw = format!("POST {path} HTTP/1.1\r\nHost: h\r\nMcp-Session-Id: {value}\r\n\r\n");
        let head = parse_head(raw.as_bytes(), 1024, 16).unwrap().unwrap();
        prop_assert_eq!(&raw[head.path.clone()], path.as_str());
        prop_assert_eq!(&raw[head.session_id.clone().unwrap()], value.as_str());
        prop_assert_eq!(head.head_len, raw.len());
    }
}
