//! Secrets embedded in a setting's value, hidden for printing (`--print-config`): a URL's
//! user-info password (`https://user:PASSWORD@host`), a query parameter whose name looks secret
//! (`?client_secret=…`), and in a command line (a stdio upstream's) a `--flag=value` or
//! `--flag value` whose flag name looks secret (`--api-key=…`). Each secret is replaced by
//! `REDACTED`; the rest of the value is kept, so the operator still sees which upstream or
//! endpoint it is.
//!
//! Called by `layers::print_config` on every string value. Never: decides which whole keys are
//! withheld (that is `layers::SECRET_KEYS`), or changes a value anything acts on (only text
//! meant for a human passes through here).

/// What a secret is replaced by.
pub(crate) const REDACTED: &str = "<redacted>";

/// Parts of a parameter or flag name that mark its value secret (matched case-insensitively
/// anywhere in the name, so `client_secret`, `X-Api-Key` and `--access-token` all match).
const SECRET_WORDS: &[&str] = &[
    "secret",
    "password",
    "passwd",
    "pwd",
    "token",
    "key",
    "credential",
    "auth",
    "bearer",
    "private",
    "cookie",
    "signature",
];

/// Whether a parameter or flag called `name` would carry a secret.
pub(crate) fn looks_secret(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| lower.contains(word))
}

/// `value` with every embedded secret replaced by `REDACTED` (see the module doc).
pub(crate) fn redact(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    // Set after a word `--secret-flag` without `=`: the next word is its value.
    let mut value_follows = false;
    for (index, word) in value.split(' ').enumerate() {
        if index > 0 {
            out.push(' ');
        }
        if word.is_empty() {
            continue;
        }
        if value_follows && !word.starts_with('-') {
            out.push_str(REDACTED);
            value_follows = false;
            continue;
        }
        let flag = word.strip_prefix("--").or_else(|| word.strip_prefix('-'));
        value_follows = flag.is_some_and(|name| !name.contains('=') && looks_secret(name));
        out.push_str(&redact_word(word, flag));
    }
    out
}

/// One space-separated word: a secret `--flag=value`'s value, else the URL parts.
fn redact_word(word: &str, flag: Option<&str>) -> String {
    if let Some((name, _)) = flag.and_then(|f| f.split_once('=')) {
        if looks_secret(name) {
            let at = word.len() - flag.map_or(0, str::len) + name.len() + 1;
            return format!("{}{REDACTED}", &word[..at]);
        }
    }
    redact_query(&redact_userinfo(word))
}

/// Each `scheme://user:password@host` in `text` with its password replaced.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(scheme_end) = rest.find("://") {
        let authority_start = scheme_end + 3;
        out.push_str(&rest[..authority_start]);
        rest = &rest[authority_start..];
        let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_len];
        if let Some(at) = authority.rfind('@') {
            if let Some(colon) = authority[..at].find(':') {
                out.push_str(&authority[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
                rest = &rest[authority_len..];
                continue;
            }
        }
        out.push_str(authority);
        rest = &rest[authority_len..];
    }
    out.push_str(rest);
    out
}

/// The values of a query's secret-looking parameters replaced (the query after `?`, up to `#`).
fn redact_query(text: &str) -> String {
    let Some(question) = text.find('?') else { return text.to_owned() };
    let end = text[question..].find('#').map_or(text.len(), |i| question + i);
    let pairs: Vec<String> = text[question + 1..end]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if looks_secret(name) => format!("{name}={REDACTED}"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{}{}{}", &text[..=question], pairs.join("&"), &text[end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_values_are_redacted_and_the_rest_kept() {
        // Goal: each embedded secret of issue 38's finding 10 is hidden, nothing else changes.
        // Method: a table of values and what printing them shows.
        let cases = [
            ("https://alice:hunter2@api.example/mcp", "https://alice:<redacted>@api.example/mcp"),
            ("api=https://u:p@h:8443/mcp", "api=https://u:<redacted>@h:8443/mcp"),
            ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),
            ("redis://:pw@10.0.0.5:6379/0", "redis://:<redacted>@10.0.0.5:6379/0"),
            ("http://alice@collector:4318", "http://alice@collector:4318"),
            (
                "https://idp/jwks?client_id=tm&client_secret=s3&x=1#f",
                "https://idp/jwks?client_id=tm&client_secret=<redacted>&x=1#f",
            ),
            (
                "gh=stdio:server --api-key=abc --verbose --token xyz --port 1",
                "gh=stdio:server --api-key=<redacted> --verbose --token <redacted> --port 1",
            ),
            ("s=stdio:tool -password=pw", "s=stdio:tool -password=<redacted>"),
            ("client=6/m/2", "client=6/m/2"),
            ("*=file:///srv/secret/*", "*=file:///srv/secret/*"),
            ("/etc/tidemark/key.pem", "/etc/tidemark/key.pem"),
        ];
        for (value, shown) in cases {
            assert_eq!(redact(value), shown, "{value}");
        }
    }
}
