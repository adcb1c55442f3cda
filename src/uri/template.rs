//! RFC 6570 URI templates matched against a canonical URI: could some expansion of the template
//! (levels 1–4: `{var}`, `{+var}`, `{#var}`, `{.var}`, `{/var}`, `{;var}`, `{?var}`,
//! `{&var}`, several variables, explode `*` and prefix `:n`) have produced it? The bridge
//! forwards a `resources/read` of a URI its upstream never listed only when one of the
//! upstream's templates matches it (issue 38).
//!
//! Leniently: each expression is read as the set of strings its operator can produce for any
//! values (`{var}`: unreserved characters, escapes and `,`; `{+var}`: any URI character;
//! `{/var}`: `/`-led segments; `{?var}`: `?name=value&…`; …), prefix lengths and variable
//! names are not checked, and an expression may always expand to nothing (an undefined
//! variable). A template is thereby a regular language, matched by one left-to-right pass per
//! part over the set of positions reached so far: O(URI × template) time, no backtracking, no
//! recursion. A malformed template (an unclosed `{`) matches nothing.
//!
//! Never: extracts the variables' values (nothing needs them), or matches a URI not in
//! canonical form (the caller's job, `super::canonical`).

/// One piece of a template.
enum Piece {
    /// Text outside expressions, compared byte for byte (after `literal`'s normalisation).
    Literal(String),
    /// An expression: the character that leads it (`None` for `{var}` and `{+var}`) and the
    /// class of the characters after it.
    Expression { lead: Option<u8>, class: Class },
}

/// What characters an expression's expansion holds after its lead.
#[derive(Clone, Copy)]
enum Class {
    /// Unreserved characters, escapes, `,` and `=` (a list or an exploded map).
    Simple,
    /// Any URI character (`+`, `#`).
    Reserved,
    /// `Simple` plus one more separator (`/`, `;`, `&`).
    With(u8),
}

impl Class {
    fn holds(self, b: u8) -> bool {
        let simple = b >= 0x80
            || b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~' | b'%' | b',' | b'=');
        match self {
            Class::Simple => simple,
            Class::Reserved => simple || b":/?#[]@!$&'()*+;".contains(&b),
            Class::With(extra) => simple || b == extra,
        }
    }
}

/// Whether `uri` (canonical) is an expansion of `template`.
pub(crate) fn matches(template: &str, uri: &str) -> bool {
    let Some(pieces) = parse(template) else { return false };
    let uri = uri.as_bytes();
    let n = uri.len();
    let mut active = vec![false; n + 1];
    let mut next = vec![false; n + 1];
    active[0] = true;
    for piece in &pieces {
        next.iter_mut().for_each(|b| *b = false);
        match piece {
            Piece::Literal(text) => {
                let text = text.as_bytes();
                for p in (0..=n).filter(|&p| active[p]) {
                    if uri[p..].starts_with(text) {
                        next[p + text.len()] = true;
                    }
                }
            }
            Piece::Expression { lead, class } => step(uri, &active, &mut next, *lead, *class),
        }
        std::mem::swap(&mut active, &mut next);
        if !active.contains(&true) {
            return false;
        }
    }
    active[n]
}

/// The positions an expression can end at, from those it can start at (`active`): the start
/// itself (an empty expansion) and, after its lead (if any), every run of `class`.
fn step(uri: &[u8], active: &[bool], next: &mut [bool], lead: Option<u8>, class: Class) {
    // `open`: a run of the expansion reaches position p.
    let mut open = false;
    for p in 0..active.len() {
        if active[p] {
            next[p] = true;
        }
        let starts = match lead {
            None => active[p],
            Some(lead) => active[p] && uri.get(p) == Some(&lead),
        };
        if open {
            next[p] = true;
        }
        let continues =
            (open || (lead.is_none() && starts)) && uri.get(p).is_some_and(|&b| class.holds(b));
        open = continues || (lead.is_some() && starts);
    }
}

/// The template's pieces; `None` when an expression is not closed or is empty.
fn parse(template: &str) -> Option<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut rest = template;
    let mut first = true;
    while !rest.is_empty() {
        let open = rest.find('{').unwrap_or(rest.len());
        if open > 0 {
            pieces.push(Piece::Literal(literal(&rest[..open], first)?));
        }
        first = false;
        rest = &rest[open..];
        let Some(body) = rest.strip_prefix('{') else { break };
        let close = body.find('}')?;
        let spec = &body[..close];
        rest = &body[close + 1..];
        let (lead, class) = match spec.as_bytes().first()? {
            b'+' => (None, Class::Reserved),
            b'#' => (Some(b'#'), Class::Reserved),
            b'.' => (Some(b'.'), Class::Simple),
            b'/' => (Some(b'/'), Class::With(b'/')),
            b';' => (Some(b';'), Class::With(b';')),
            b'?' => (Some(b'?'), Class::With(b'&')),
            b'&' => (Some(b'&'), Class::With(b'&')),
            _ => (None, Class::Simple),
        };
        pieces.push(Piece::Expression { lead, class });
    }
    Some(pieces)
}

/// A literal as a canonical URI spells it: the scheme (the template's leading text up to `:`)
/// in lower case, escapes normalised; `None` when an escape is malformed.
fn literal(text: &str, first: bool) -> Option<String> {
    let (scheme, rest) = match text.split_once(':') {
        Some((scheme, rest)) if first && !scheme.contains('/') => {
            (format!("{}:", scheme.to_ascii_lowercase()), rest)
        }
        _ => (String::new(), text),
    };
    let rest = super::normalise_escapes(rest, super::Part::Tail).ok()?;
    Some(scheme + &rest)
}

#[cfg(test)]
mod tests {
    use super::matches;

    /// Goal: each operator of RFC 6570 levels 1–4 matches its expansions and not more; a
    /// template's scheme is compared in lower case; a malformed template matches nothing.
    #[test]
    fn operators() {
        for (template, uri, want) in [
            ("http://example.com/~{username}/", "http://example.com/~fred/", true),
            ("http://example.com/~{username}/", "http://example.com/~fred/x/", false),
            ("file:///srv/public/{name}", "file:///srv/public/a.txt", true),
            ("file:///srv/public/{name}", "file:///srv/public/", true),
            ("file:///srv/public/{name}", "file:///srv/public/a/b", false),
            ("file:///srv/public/{name}", "file:///srv/secret/key", false),
            ("file:///srv/public/{name}.txt", "file:///srv/public/x.txt", true),
            ("file:///srv/public/{name}.txt", "file:///srv/public/x.md", false),
            ("file:///srv/{+path}", "file:///srv/secret/key", true),
            ("file:///srv/{+path}", "file:///etc/passwd", false),
            ("file:///srv{/segments*}", "file:///srv/a/b", true),
            ("file:///srv{/segments*}", "file:///srv", true),
            ("file:///srv{/segments*}", "file:///srvx", false),
            ("file:///srv{/a,b}/x", "file:///srv/1/2/x", true),
            ("http://h/search{?q,lang}", "http://h/search?q=cat&lang=en", true),
            ("http://h/search{?q,lang}", "http://h/search", true),
            ("http://h/search{?q,lang}", "http://h/search?q=a#b", false),
            ("http://h/s?fixed=1{&x}", "http://h/s?fixed=1&x=2", true),
            ("http://h/p{#f}", "http://h/p#a/b", true),
            ("http://h/p{#f}", "http://h/p/a", false),
            ("file:///a/b{.ext}", "file:///a/b.txt", true),
            ("file:///a/b{.ext}", "file:///a/b", true),
            ("http://h/m{;x,y}", "http://h/m;x=1;y=2", true),
            ("http://h/m{;x,y}", "http://h/m/x", false),
            ("x:{var:3}", "x:abc", true),
            ("x:{keys*}", "x:a=1,b=2", true),
            ("x:{a}{b}{c}", "x:", true),
            ("x:{a}-{b}", "x:1-2", true),
            ("x:{a}-{b}", "x:12", false),
            ("FILE:///srv/{x}", "file:///srv/a", true),
            ("file:///srv/%7e{x}", "file:///srv/~a", true),
            ("file:///srv/{x}", "file:///srv/%C3%A9", true),
            ("file:///srv/{x}", "file:///srv/é", true),
            ("file:///{x", "file:///a", false),
            ("file:///{}", "file:///", false),
            ("test://template/{id}/data", "test://template/123/data", true),
            ("test://template/{id}/data", "test://template/1/2/data", false),
        ] {
            assert_eq!(matches(template, uri), want, "{template} vs {uri}");
        }
    }

    /// Goal: the pass is linear per piece: a long URI against a template of many expressions
    /// answers at once (no backtracking blow-up).
    #[test]
    fn no_blow_up() {
        let uri = format!("x:{}b", "a".repeat(crate::config::RESOURCE_URI_BYTES_MAX - 3));
        let template = format!("x:{}c", "{a}".repeat(64));
        let start = std::time::Instant::now();
        assert!(!matches(&template, &uri));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }
}
