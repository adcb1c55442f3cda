//! Resource URIs as policies compare them: the canonical form (`canonical`) and RFC 6570
//! template matching (`template`). A resource filter (`--upstream-deny-resources`) or scope rule
//! (`--auth-policy`) that compared the string as sent was bypassed by spelling the URI another
//! way (`FILE:`, `..`, `//`, `%73`) against an upstream that normalises paths as file servers
//! do (issue 38). So every decision on a resource is taken on one spelling, and that spelling
//! (or the upstream's own listed one, equal to it in canonical form) is what the upstream gets.
//!
//! The canonical form is RFC 3986 §6.2.2's syntax-based normalisation: the scheme and host in
//! lower case; a percent-escape of an unreserved character decoded and the hex of every other
//! escape in upper case; dot segments removed (§5.2.4). Beyond it: escapes of UTF-8 characters
//! decoded (the IRI form, RFC 3987 §3.2, so `s%C3%A9cret` and `sécret` are one name); ASCII
//! characters a URI may not hold (space, `"`, `<`, …) escaped; and for `file:` (RFC 8089) an
//! empty host for `localhost`, an empty authority when there was none, repeated slashes
//! collapsed and a trailing slash dropped, as a file server resolves them (`NAME+file:` too,
//! the bridge's prefixed form of an upstream's `file:` URI).
//!
//! Refused (`UriError`, the peer's mistake, answered `-32602`): no scheme; a control character,
//! raw or escaped; a `%` not followed by two hex digits; a backslash, raw or escaped, or an
//! escaped `/` in the path (each would change how a server splits the path into segments while
//! the policy saw one segment); a `file:` path that is not absolute; from a client, more than
//! `--resource-uri-bytes-max` bytes (`canonical_bounded`: the template matcher is linear in the
//! URI per template byte).
//!
//! Used by: `core` (the scope rule), `dispatch` (refusing what does not canonicalise, listings),
//! `upstream` (what is forwarded), `auth::policy` and `config::filter` (globs put in the same
//! form). Never: resolves a URI against a base, or looks at a scheme's semantics beyond `file:`.

pub(crate) mod template;

use std::fmt::Write as _;

/// Why a resource URI has no canonical form (the peer's mistake: `-32602`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UriError {
    /// Longer than `--resource-uri-bytes-max` (`canonical_bounded`).
    #[error("longer than {0} bytes (--resource-uri-bytes-max)")]
    TooLong(usize),
    /// No `scheme:` at its start (a relative reference, or a scheme with other characters).
    #[error("no scheme (an absolute URI starts with `scheme:`)")]
    NoScheme,
    /// A control character (U+0000–U+001F, U+007F–U+009F), raw or percent-encoded.
    #[error("a control character, raw or percent-encoded")]
    Control,
    /// A `%` not followed by two hex digits.
    #[error("a malformed percent-escape (`%` must be followed by two hex digits)")]
    BadEscape,
    /// `%2F` in the path: a server that decodes before splitting would see two segments where
    /// the policy saw one.
    #[error("an encoded `/` (%2F) in the path")]
    EncodedSlash,
    /// `\` or `%5C`: some servers take it for a path separator.
    #[error("a backslash, raw or encoded (%5C)")]
    Backslash,
    /// A `file:` URI whose path is not absolute (a server would resolve it against its own
    /// working directory).
    #[error("a file: URI's path must be absolute")]
    RelativeFile,
}

/// Which part of the URI an escape is in: decides what is refused and what is lower-cased.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Authority,
    Path,
    Tail,
}

/// `canonical` of a URI a client named, refused when longer than `max` bytes
/// (`--resource-uri-bytes-max`): the bound of what is matched against templates.
pub(crate) fn canonical_bounded(uri: &str, max: usize) -> Result<String, UriError> {
    if uri.len() > max {
        return Err(UriError::TooLong(max));
    }
    canonical(uri)
}

/// The canonical form of `uri` (see the module doc), or why it has none.
pub(crate) fn canonical(uri: &str) -> Result<String, UriError> {
    if uri.chars().any(char::is_control) {
        return Err(UriError::Control);
    }
    if uri.contains('\\') {
        return Err(UriError::Backslash);
    }
    let (scheme, rest) = uri.split_once(':').ok_or(UriError::NoScheme)?;
    // `_` is not in RFC 3986's scheme set, but an upstream's name (`NAME+scheme:`, the
    // bridge's prefix) may hold it.
    let scheme_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.' | '_');
    if !scheme.starts_with(|c: char| c.is_ascii_alphabetic()) || !scheme.chars().all(scheme_char) {
        return Err(UriError::NoScheme);
    }
    let scheme = scheme.to_ascii_lowercase();
    // `NAME+file:` is a `file:` URI of upstream NAME as clients see it (the bridge's prefix):
    // a policy rule on it must meet every spelling as the unprefixed one does.
    let file = scheme.rsplit('+').next() == Some("file");
    let (rest, fragment) = split_off(rest, '#');
    let (hier, query) = split_off(rest, '?');
    let (authority, path) = match hier.strip_prefix("//") {
        Some(after) => {
            let end = after.find('/').unwrap_or(after.len());
            (Some(&after[..end]), &after[end..])
        }
        None => (None, hier),
    };
    let mut out = String::with_capacity(uri.len() + 8);
    out.push_str(&scheme);
    out.push(':');
    let authority = match authority {
        Some(a) => Some(host_lowered(&normalise_escapes(a, Part::Authority)?)),
        None if file => Some(String::new()),
        None => None,
    };
    if let Some(authority) = &authority {
        out.push_str("//");
        let local = file && authority.eq_ignore_ascii_case("localhost");
        out.push_str(if local { "" } else { authority });
    }
    let mut path = normalise_escapes(path, Part::Path)?;
    if file && path.is_empty() {
        path.push('/');
    }
    if file {
        if !path.starts_with('/') {
            return Err(UriError::RelativeFile);
        }
        path = collapse_slashes(&path);
    }
    let mut path = remove_dot_segments(&path);
    if file && path.len() > 1 && path.ends_with('/') {
        path.pop();
    }
    if authority.is_none() && path.starts_with("//") {
        // `x:/.//a` is not `x://a` (whose `a` is a host): keep a `/.` as RFC 3986 §5.3 asks.
        out.push_str("/.");
    }
    out.push_str(&path);
    for (mark, tail) in [('?', query), ('#', fragment)] {
        if let Some(tail) = tail {
            out.push(mark);
            out.push_str(&normalise_escapes(tail, Part::Tail)?);
        }
    }
    Ok(out)
}

/// The message of a `-32602` for `uri`, which has no canonical form because of `why`: the
/// URI's first 256 characters (a refused URI may be as long as a body) and the reason.
pub(crate) fn refusal(uri: &str, why: UriError) -> String {
    let shown: String = uri.chars().take(256).collect();
    format!("resource uri {shown:?} refused: {why}")
}

/// A glob of resource URIs (a filter's, a policy rule's) in the form the URIs it is matched
/// against take: its canonical form when it has one (`FILE:///srv/*` → `file:///srv/*`), else
/// itself (`*secret*` has no scheme).
pub(crate) fn canonical_glob(glob: &str) -> String {
    canonical(glob).unwrap_or_else(|_| glob.to_owned())
}

/// `text` split at the first `mark`: before, and after (`None` without one).
fn split_off(text: &str, mark: char) -> (&str, Option<&str>) {
    match text.split_once(mark) {
        Some((before, after)) => (before, Some(after)),
        None => (text, None),
    }
}

/// The host of an authority (after any `userinfo@`) in lower case; the user info keeps its
/// case (it is case-sensitive).
fn host_lowered(authority: &str) -> String {
    match authority.rsplit_once('@') {
        Some((user, host)) => format!("{user}@{}", host.to_ascii_lowercase()),
        None => authority.to_ascii_lowercase(),
    }
}

/// Whether `b` is an RFC 3986 unreserved character.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Whether ASCII `b` may stand in a URI unescaped (unreserved, reserved, or `%`).
fn uri_char(b: u8) -> bool {
    unreserved(b) || b"%:/?#[]@!$&'()*+,;=".contains(&b)
}

/// The value of a hex digit.
fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `text` with its escapes normalised: unreserved ones decoded, runs of escaped bytes that
/// form UTF-8 characters decoded, the rest with upper-case hex; ASCII characters a URI may not
/// hold escaped. Refuses malformed escapes, escaped control characters, and in the path an
/// escaped `/` or `\`.
fn normalise_escapes(text: &str, part: Part) -> Result<String, UriError> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut high: Vec<u8> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let b = bytes[at];
        if b != b'%' {
            flush_high(&mut high, &mut out);
            let c = text[at..].chars().next().expect("invariant: at is a char boundary");
            if c.is_ascii() && !uri_char(b) {
                let _ = write!(out, "%{b:02X}");
            } else {
                out.push(c);
            }
            at += c.len_utf8();
            continue;
        }
        let digits = bytes.get(at + 1..at + 3).ok_or(UriError::BadEscape)?;
        let (Some(h), Some(l)) = (hex(digits[0]), hex(digits[1])) else {
            return Err(UriError::BadEscape);
        };
        let byte = h << 4 | l;
        at += 3;
        if byte >= 0x80 {
            high.push(byte);
            continue;
        }
        flush_high(&mut high, &mut out);
        match byte {
            0..=0x1F | 0x7F => return Err(UriError::Control),
            b'/' if part == Part::Path => return Err(UriError::EncodedSlash),
            b'\\' if part != Part::Tail => return Err(UriError::Backslash),
            b if unreserved(b) => out.push(b as char),
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    flush_high(&mut high, &mut out);
    Ok(out)
}

/// Appends a run of escaped bytes ≥ 0x80: as characters when they are UTF-8 and none is a
/// control character, else as escapes with upper-case hex.
fn flush_high(high: &mut Vec<u8>, out: &mut String) {
    if high.is_empty() {
        return;
    }
    match std::str::from_utf8(high) {
        Ok(text) if !text.chars().any(char::is_control) => out.push_str(text),
        _ => {
            for b in high.iter() {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    high.clear();
}

/// A `file:` path with each run of `/` made one.
fn collapse_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

/// RFC 3986 §5.2.4, segment by segment: `.` segments dropped, `..` removing the segment before
/// it (never above the root), the trailing slash of a path ending in `.` or `..` kept.
fn remove_dot_segments(path: &str) -> String {
    if !path.split('/').any(|s| s == "." || s == "..") {
        return path.to_owned();
    }
    let absolute = path.starts_with('/');
    let body = if absolute { &path[1..] } else { path };
    let mut kept: Vec<&str> = Vec::new();
    let segments: Vec<&str> = body.split('/').collect();
    let last = segments.len() - 1;
    let mut trailing = false;
    for (index, segment) in segments.into_iter().enumerate() {
        match segment {
            "." => trailing = index == last,
            ".." => {
                kept.pop();
                trailing = index == last;
            }
            s => {
                kept.push(s);
                trailing = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    if absolute {
        out.push('/');
    }
    out.push_str(&kept.join("/"));
    if trailing && !out.is_empty() && !out.ends_with('/') {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: every spelling of issue 38's secret, and more, has one canonical form.
    #[test]
    fn spellings_of_one_file_are_one() {
        let want = "file:///srv/secret/key";
        for spelling in [
            "file:///srv/secret/key",
            "FILE:///srv/secret/key",
            "File:///srv/secret/key",
            "file:///srv/public/../secret/key",
            "file:///srv//secret/key",
            "file:///srv/./secret/key",
            "file:///srv/%73ecret/key",
            "file:///srv/%73%65%63%72%65%74/%6b%65%79",
            "file:////srv/secret/key",
            "file:/srv/secret/key",
            "file://localhost/srv/secret/key",
            "file://LOCALHOST/srv/secret/key",
            "file:///srv/secret/key/",
            "file:///srv/secret/key/.",
            "file:///srv/secret/key//",
            "file:///srv/public/%2e%2e/secret/key",
            "file:///srv/public/%2E%2E/secret/key",
            "file:///srv/public/.%2e/secret/key",
            "file:///../../srv/secret/key",
            "file:///srv/secret/x/../key",
            "file:///srv/secret/./././key",
            "file:///srv/a/b/c/../../../secret/key",
            "file:///srv/%2e/secret/key",
        ] {
            assert_eq!(canonical(spelling).as_deref(), Ok(want), "{spelling}");
        }
    }

    /// Goal: RFC 3986 §6.2.2 for other schemes: scheme and host lower case, user info, path
    /// and query case kept; escapes of unreserved characters decoded, others' hex upper-cased;
    /// dot segments removed; repeated slashes kept (only `file:` collapses them).
    #[test]
    fn generic_normalisation() {
        for (input, want) in [
            ("HTTP://User@Example.COM:80/A/%7e/b", "http://User@example.com:80/A/~/b"),
            ("http://h/a?x=%2f", "http://h/a?x=%2F"),
            ("http://h/a%3fb", "http://h/a%3Fb"),
            ("http://h//a//b", "http://h//a//b"),
            ("http://h/a/./b/../c", "http://h/a/c"),
            ("urn:x:y", "urn:x:y"),
            ("x:/.//a", "x:/.//a"),
            ("x:/a/..//b", "x:/.//b"),
            ("mem:a/../b", "mem:b"),
            ("test://template/a\"b/data", "test://template/a%22b/data"),
            ("file:///a b", "file:///a%20b"),
            ("file:///s%C3%A9cret", "file:///sécret"),
            ("file:///sécret", "file:///sécret"),
            ("file:///%ff", "file:///%FF"),
            ("file:///%c2%85", "file:///%C2%85"),
            ("a+file:///x", "a+file:///x"),
            ("My_Up+FILE:///x", "my_up+file:///x"),
            ("a+file:////srv//x/../y/", "a+file:///srv/y"),
            ("a+file://localhost/x", "a+file:///x"),
            ("svn+ssh://h//x", "svn+ssh://h//x"),
            ("file:///", "file:///"),
            ("file://", "file:///"),
            ("x:?%41#%42", "x:?A#B"),
        ] {
            assert_eq!(canonical(input).as_deref(), Ok(want), "{input}");
        }
        assert_eq!(canonical("http://h/a/%2f"), Err(UriError::EncodedSlash));
    }

    /// Goal: what has no canonical form is refused, naming why.
    #[test]
    fn refusals() {
        for (input, want) in [
            ("/srv/secret/key", UriError::NoScheme),
            ("srv/secret:key", UriError::NoScheme),
            ("1x:y", UriError::NoScheme),
            ("file:///srv/secret%2Fkey", UriError::EncodedSlash),
            ("file:///srv/secret%2fkey", UriError::EncodedSlash),
            ("file:///srv/secret%5Ckey", UriError::Backslash),
            ("file:///srv\\secret", UriError::Backslash),
            ("file:///srv/%", UriError::BadEscape),
            ("file:///srv/%4", UriError::BadEscape),
            ("file:///srv/%zz", UriError::BadEscape),
            ("file:///srv/%00", UriError::Control),
            ("file:///srv/a?%0A", UriError::Control),
            ("file:///srv/\u{1}", UriError::Control),
            ("file:///srv/\u{85}", UriError::Control),
            ("file:srv/secret", UriError::RelativeFile),
        ] {
            assert_eq!(canonical(input), Err(want), "{input:?}");
        }
    }

    /// Goal: the length limit holds at N and refuses N+1.
    #[test]
    fn length_limit() {
        let head = "file:///";
        let at = format!("{head}{}", "a".repeat(100 - head.len()));
        assert!(canonical_bounded(&at, 100).is_ok());
        let over = format!("{at}a");
        assert_eq!(canonical_bounded(&over, 100), Err(UriError::TooLong(100)));
    }

    /// Goal: a canonical form is its own canonical form (idempotent), so comparing canonical
    /// forms is an equivalence.
    #[test]
    fn idempotent() {
        for input in [
            "FILE://LocalHost//srv/./a/../b/%7E%41%c3%a9/",
            "HTTP://X.Y/%2e%2E/a?b=%3d#%7e",
            "file:///a%20b/%FF",
        ] {
            let once = canonical(input).expect("canonical");
            assert_eq!(canonical(&once).as_deref(), Ok(once.as_str()), "{input}");
        }
    }

    proptest::proptest! {
        /// Goal: a canonical form is a fixed point for URI-like text built from the pieces
        /// that normalisation rewrites (dot segments, escapes, slashes, case, `localhost`,
        /// UTF-8), and nothing panics. Method: proptest over a grammar of those pieces.
        #[test]
        fn canonical_is_a_fixed_point(
            scheme in "(file|FILE|x|a\\+file|Http)",
            authority in "(//(localhost|LOCALHOST|Ex.Am|u@H|)){0,1}",
            path in "(/|\\.|\\.\\.|%2[eE]|%[0-9a-fA-F]{2}|%C3%A9|[a-zA-Z~_ ]|é|;|=|%){0,24}",
            tail in "(\\?|#|%41|%2f|a|/){0,4}",
        ) {
            let uri = format!("{scheme}:{authority}{path}{tail}");
            if let Ok(once) = canonical(&uri) {
                proptest::prop_assert_eq!(canonical(&once), Ok(once.clone()), "{}", uri);
            }
        }

        /// Goal: arbitrary text never panics the canonical form or the template matcher.
        #[test]
        fn arbitrary_text_never_panics(uri in "\\PC{0,40}", template in "\\PC{0,40}") {
            let _ = canonical(&uri);
            let _ = template::matches(&template, &uri);
        }
    }

    /// Goal: globs take the canonical form when they have one, and are kept otherwise.
    #[test]
    fn globs() {
        assert_eq!(canonical_glob("FILE:///srv//secret/*"), "file:///srv/secret/*");
        assert_eq!(canonical_glob("*secret*"), "*secret*");
        assert_eq!(canonical_glob("file:///s?cret/*"), "file:///s?cret/*");
    }
}
