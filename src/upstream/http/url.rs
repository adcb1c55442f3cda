//! The upstream's URL (`--upstream http://HOST[:PORT][/PATH][?QUERY]`) and its address.
//!
//! Owns: which URL forms are accepted and why one is refused (`parse_url`, `UrlError`), and
//! the address (`resolve`): an IP literal as is; a host name looked up with the system
//! resolver once per core, the first time that core connects to it, and remembered for the
//! life of the thread.
//! Called by: `HttpTransport::connect` (`mod.rs`), when an upstream session starts; the
//! client-side bridge (`connect`), once at its start.
//! Never: accepts `https://`, user info or a character that could break the request line, or
//! looks a name up again on a core that resolved it (the lookup blocks the thread).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// A parsed `http://HOST[:PORT][/PATH][?QUERY]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The host without IPv6 brackets.
    host: String,
    port: u16,
    /// The `Host` header: the authority as written.
    pub(crate) authority: String,
    /// The request target: path and query, `/` when none was given.
    pub(crate) target: String,
}

/// Why an upstream URL is not usable (the operator's `--upstream` flag is the culprit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UrlError {
    #[error("only http:// URLs are supported")]
    Scheme,
    #[error("the URL has no host")]
    NoHost,
    #[error("user info (user@host) is not supported")]
    UserInfo,
    #[error("the port is not a number from 1 to 65535")]
    Port,
    #[error("the URL contains a character not allowed in it (space, control, '#' or non-ASCII)")]
    Character,
    #[error("the host is not a name, an IPv4 address or a bracketed IPv6 address")]
    Host,
}

pub(crate) fn parse_url(url: &str) -> Result<Endpoint, UrlError> {
    let rest = url.strip_prefix("http://").ok_or(UrlError::Scheme)?;
    // RFC 3986 characters only: the target goes into a request line as is.
    if !rest.bytes().all(|b| b.is_ascii_graphic() && b != b'#') {
        return Err(UrlError::Character);
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(split);
    if authority.contains('@') {
        return Err(UrlError::UserInfo);
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (inside, after) = v6.split_once(']').ok_or(UrlError::Host)?;
        if inside.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(UrlError::Host);
        }
        (inside, after.strip_prefix(':'))
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(UrlError::NoHost);
    }
    let is_name = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
    if !authority.starts_with('[') && !host.bytes().all(is_name) {
        return Err(UrlError::Host);
    }
    let port = match port {
        None => 80,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => match p.parse() {
            Ok(0) | Err(_) => return Err(UrlError::Port),
            Ok(port) => port,
        },
        Some(_) => return Err(UrlError::Port),
    };
    let target = match target {
        "" => "/".to_owned(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_owned(),
    };
    Ok(Endpoint { host: host.to_owned(), port, authority: authority.to_owned(), target })
}

/// The address of `endpoint`: an IP literal as is, a name looked up once per core (see the
/// file doc) and remembered for the life of the thread.
pub(crate) fn resolve(endpoint: &Endpoint) -> Result<SocketAddr, String> {
    if let Ok(ip) = endpoint.host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, endpoint.port));
    }
    thread_local! {
        // Keyed by the `--upstream` hosts, a handful: bounded by the flags.
        static RESOLVED: RefCell<HashMap<(String, u16), SocketAddr>> = RefCell::default();
    }
    let key = (endpoint.host.clone(), endpoint.port);
    if let Some(addr) = RESOLVED.with(|r| r.borrow().get(&key).copied()) {
        return Ok(addr);
    }
    let addr = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", endpoint.host))?
        .next()
        .ok_or_else(|| format!("{} has no address", endpoint.host))?;
    RESOLVED.with(|r| r.borrow_mut().insert(key, addr));
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_address_parts_and_a_request_target() {
        // Goal: every accepted URL form yields host, port (80 by default), the Host header and a
        // target starting with '/'. Method: table.
        let cases = [
            ("http://127.0.0.1:8000/mcp", "127.0.0.1", 8000, "127.0.0.1:8000", "/mcp"),
            ("http://localhost/mcp", "localhost", 80, "localhost", "/mcp"),
            ("http://example.com", "example.com", 80, "example.com", "/"),
            ("http://h:9?x=1", "h", 9, "h:9", "/?x=1"),
            ("http://[::1]:3000/a/b?c", "::1", 3000, "[::1]:3000", "/a/b?c"),
            ("http://[::1]/", "::1", 80, "[::1]", "/"),
        ];
        for (url, host, port, authority, target) in cases {
            let endpoint = parse_url(url).expect(url);
            assert_eq!(endpoint.host, host, "{url}");
            assert_eq!(endpoint.port, port, "{url}");
            assert_eq!(endpoint.authority, authority, "{url}");
            assert_eq!(endpoint.target, target, "{url}");
        }
    }

    #[test]
    fn unusable_urls_are_refused_with_the_reason() {
        // Goal: each reject path names its cause. Method: table.
        let cases = [
            ("https://h/mcp", UrlError::Scheme),
            ("ftp://h", UrlError::Scheme),
            ("http:///mcp", UrlError::NoHost),
            ("http://:80/mcp", UrlError::NoHost),
            ("http://u:p@h/mcp", UrlError::UserInfo),
            ("http://h:0/", UrlError::Port),
            ("http://h:65536/", UrlError::Port),
            ("http://h:/", UrlError::Port),
            ("http://h:8x/", UrlError::Port),
            ("http://h/a b", UrlError::Character),
            ("http://h/a#frag", UrlError::Character),
            ("http://h/\r\nX: y", UrlError::Character),
            ("http://h\u{e9}/", UrlError::Character),
            ("http://[::1/", UrlError::Host),
            ("http://[nothost]/", UrlError::Host),
            ("http://a%20b/", UrlError::Host),
        ];
        for (url, error) in cases {
            assert_eq!(parse_url(url), Err(error), "{url}");
        }
    }

    #[test]
    fn ip_literals_need_no_lookup() {
        // Goal: an IP literal becomes the address as is (no resolver call). Method: v4 and v6.
        let v4 = parse_url("http://10.1.2.3:7/").expect("parses");
        assert_eq!(resolve(&v4), Ok("10.1.2.3:7".parse().expect("addr")));
        let v6 = parse_url("http://[::1]:7/").expect("parses");
        assert_eq!(resolve(&v6), Ok("[::1]:7".parse().expect("addr")));
    }
}
