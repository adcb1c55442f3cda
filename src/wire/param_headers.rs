//! MCP 2026-07-28's request headers that mirror the body (SEP-2243), as values: the
//! `=?base64?…?=` sentinel a value travels in when it is no plain header text (`encode`,
//! `decode`), and a tool's `x-mcp-header` declarations (`declared`): which argument each
//! `Mcp-Param-{Name}` header mirrors, or why the declarations are invalid. Both directions use
//! it: the endpoint checks a client's `Mcp-Param-*` headers against the declarations of the
//! tool it calls, and the bridge, a client of a 2026-07-28 upstream, sends them.
//!
//! The rules are the spec's as the official SDKs (TypeScript, Python, rmcp) apply them: a
//! declaration sits on a property reached from the schema root through `properties` keys only
//! (nested objects included; never under `items`, `anyOf`, `$defs`…, never on the root), names
//! a non-empty RFC 9110 token unique in the tool ignoring case, and is on a `string`, `integer`
//! or `boolean` property (`number` is excluded: a float's text is not portable). A tool with
//! one invalid declaration is invalid as a whole: a conforming client drops it.
//!
//! Owns: `HeaderParam`, `declared`, `rendered`, `encode`, `decode`. Never: reads or writes a
//! request.

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;

/// The schema keyword of a declaration.
const KEYWORD: &str = "x-mcp-header";

/// The property types a declaration may sit on.
const PRIMITIVE_TYPES: [&str; 3] = ["string", "integer", "boolean"];

/// Keywords whose value is one subschema (JSON Schema 2020-12 applicators): a declaration
/// below one of them is off the `properties` chain.
const SUBSCHEMA_ONE: [&str; 11] = [
    "items",
    "contains",
    "unevaluatedItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];

/// Keywords whose value is a list of subschemas.
const SUBSCHEMA_LIST: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];

/// Keywords whose value is a map of subschemas (other than `properties`).
const SUBSCHEMA_MAP: [&str; 4] = ["patternProperties", "dependentSchemas", "$defs", "definitions"];

/// One `x-mcp-header` declaration of a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeaderParam {
    /// The header is `Mcp-Param-{name}`.
    pub(crate) name: String,
    /// The `properties` keys from the arguments' root to the value it mirrors.
    pub(crate) path: Box<[String]>,
}

impl HeaderParam {
    /// The header's full name.
    pub(crate) fn header(&self) -> String {
        format!("Mcp-Param-{}", self.name)
    }
}

/// The declarations of a tool's input schema (none for most tools), or why they are invalid.
/// The walk enters only the schema keywords (never instance data such as `default` or
/// `const`, never a `$ref`), so it ends on any JSON value.
pub(crate) fn declared(input_schema: &Value) -> Result<Vec<HeaderParam>, String> {
    let mut found: Vec<HeaderParam> = Vec::new();
    // (the `properties` path to this position, `None` once off the chain; the position)
    let mut stack: Vec<(Option<Vec<String>>, &Value)> = vec![(Some(Vec::new()), input_schema)];
    while let Some((path, node)) = stack.pop() {
        let Value::Object(schema) = node else { continue };
        if let Some(header) = schema.get(KEYWORD) {
            found.push(declaration(path.as_deref(), header, schema.get("type"))?);
        }
        for (keyword, value) in schema {
            match (keyword.as_str(), value) {
                ("properties", Value::Object(properties)) => {
                    for (name, sub) in properties {
                        let below = path.as_ref().map(|p| {
                            let mut p = p.clone();
                            p.push(name.clone());
                            p
                        });
                        stack.push((below, sub));
                    }
                }
                (k, sub) if SUBSCHEMA_ONE.contains(&k) => stack.push((None, sub)),
                (k, Value::Array(subs)) if SUBSCHEMA_LIST.contains(&k) => {
                    stack.extend(subs.iter().map(|sub| (None, sub)));
                }
                (k, Value::Object(subs)) if SUBSCHEMA_MAP.contains(&k) => {
                    stack.extend(subs.values().map(|sub| (None, sub)));
                }
                _ => {}
            }
        }
    }
    for (i, a) in found.iter().enumerate() {
        if let Some(b) = found[..i].iter().find(|b| b.name.eq_ignore_ascii_case(&a.name)) {
            return Err(format!(
                "{KEYWORD} `{}` of `{}` repeats `{}` of `{}` (names are compared ignoring case)",
                a.name,
                a.path.join("."),
                b.name,
                b.path.join(".")
            ));
        }
    }
    Ok(found)
}

/// One declaration at `path` (`None`: off the `properties` chain), checked.
fn declaration(
    path: Option<&[String]>,
    header: &Value,
    kind: Option<&Value>,
) -> Result<HeaderParam, String> {
    let path = match path {
        Some([]) => return Err(format!("{KEYWORD} on the schema root, not on a property")),
        None => {
            return Err(format!(
                "{KEYWORD} on a position not reached through `properties` alone (under items, \
                 anyOf, $defs or the like)"
            ))
        }
        Some(path) => path,
    };
    let at = path.join(".");
    let Some(name) = header.as_str() else {
        return Err(format!("property `{at}`: {KEYWORD} is not a string"));
    };
    if !crate::http::is_token(name.as_bytes()) {
        return Err(format!("property `{at}`: {KEYWORD} {name:?} is not an RFC 9110 token"));
    }
    let kind = kind.and_then(Value::as_str);
    if !kind.is_some_and(|k| PRIMITIVE_TYPES.contains(&k)) {
        return Err(format!(
            "property `{at}`: {KEYWORD} is allowed only on string, integer or boolean \
             properties (its type is {})",
            kind.unwrap_or("not one string")
        ));
    }
    Ok(HeaderParam { name: name.to_owned(), path: path.into() })
}

/// The header value that mirrors `param` in `arguments`: `None` when the value is absent,
/// null or no scalar (the header is then left out, as the spec says).
pub(crate) fn rendered(param: &HeaderParam, arguments: &Value) -> Option<String> {
    let value = param.path.iter().try_fold(arguments, |node, key| node.get(key.as_str()))?;
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    Some(encode(&text))
}

/// A value as a header carries it: as is when it is printable ASCII without leading or
/// trailing space (and does not itself look like the sentinel), else the `=?base64?…?=`
/// sentinel of its UTF-8 bytes.
pub(crate) fn encode(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (b' '..=b'~').contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with("=?");
    if plain {
        value.to_owned()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(value.as_bytes()))
    }
}

/// A header value as the sender meant it: the `=?base64?…?=` sentinel decoded, anything else
/// as is. `None`: a sentinel whose payload is not Base64, or a plain value with characters a
/// header may not carry. A plain value is borrowed: checking the `Mcp-Name` of every
/// 2026-07-28 request allocates nothing (issue 40 §1); only a sentinel's bytes are decoded into
/// a buffer of their own.
pub(crate) fn decode(value: &[u8]) -> Option<Cow<'_, [u8]>> {
    if let Some(inner) = value.strip_prefix(b"=?base64?").and_then(|v| v.strip_suffix(b"?=")) {
        return STANDARD.decode(inner).ok().map(Cow::Owned);
    }
    let visible = value.iter().all(|&b| b == b' ' || b == b'\t' || (0x21..0x7f).contains(&b));
    visible.then_some(Cow::Borrowed(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(properties: Value) -> Value {
        json!({ "type": "object", "properties": properties })
    }

    #[test]
    fn declarations_on_the_properties_chain_are_found_nested_ones_included() {
        // Goal: top-level and nested declarations, with their paths. Method: one schema.
        let s = schema(json!({
            "region": { "type": "string", "x-mcp-header": "Region" },
            "query": { "type": "string" },
            "scope": { "type": "object", "properties": {
                "tenant": { "type": "integer", "x-mcp-header": "Tenant" } } },
        }));
        let mut got = declared(&s).expect("valid");
        got.sort_by(|a, b| a.name.cmp(&b.name));
        let paths: Vec<(String, String)> =
            got.iter().map(|p| (p.header(), p.path.join("."))).collect();
        assert_eq!(
            paths,
            [
                ("Mcp-Param-Region".to_owned(), "region".to_owned()),
                ("Mcp-Param-Tenant".to_owned(), "scope.tenant".to_owned())
            ]
        );
        assert_eq!(declared(&json!({ "type": "object" })), Ok(Vec::new()));
        assert_eq!(declared(&json!(null)), Ok(Vec::new()));
    }

    #[test]
    fn every_invalid_declaration_is_refused() {
        // Goal: each rule the SDKs apply rejects the tool. Method: one schema per rule, and
        // instance data or a property merely named like the keyword is no declaration.
        let invalid = [
            json!({ "type": "object", "x-mcp-header": "Root" }),
            schema(json!({ "n": { "type": "number", "x-mcp-header": "N" } })),
            schema(json!({ "a": { "type": "array", "x-mcp-header": "A" } })),
            schema(json!({ "u": { "x-mcp-header": "U" } })),
            schema(json!({ "r": { "type": "string", "x-mcp-header": "" } })),
            schema(json!({ "r": { "type": "string", "x-mcp-header": "bad:name" } })),
            schema(json!({ "r": { "type": "string", "x-mcp-header": "a\r\nb" } })),
            schema(json!({ "r": { "type": "string", "x-mcp-header": 7 } })),
            schema(json!({
                "a": { "type": "string", "x-mcp-header": "Region" },
                "b": { "type": "string", "x-mcp-header": "region" } })),
            schema(json!({ "ids": { "type": "array",
                "items": { "type": "string", "x-mcp-header": "Id" } } })),
            schema(json!({ "t": { "oneOf": [{ "type": "string", "x-mcp-header": "T" }] } })),
            json!({ "type": "object", "$defs": { "r": { "type": "string", "x-mcp-header": "R" } } }),
        ];
        for s in invalid {
            assert!(declared(&s).is_err(), "{s}");
        }
        let not_declarations = schema(json!({
            "x-mcp-header": { "type": "string" },
            "r": { "type": "string", "default": { "x-mcp-header": "D" } },
        }));
        assert_eq!(declared(&not_declarations), Ok(Vec::new()));
    }

    #[test]
    fn values_are_rendered_as_the_spec_sends_them() {
        // Goal: scalars as text (sentinel where needed), absent / null / objects left out.
        let param = |path: &[&str]| HeaderParam {
            name: "X".into(),
            path: path.iter().map(|s| s.to_string()).collect(),
        };
        let args = json!({ "s": "us-west1", "u": "café", "i": 42, "b": true, "n": null,
                           "o": { "deep": "x" } });
        assert_eq!(rendered(&param(&["s"]), &args).as_deref(), Some("us-west1"));
        assert_eq!(rendered(&param(&["u"]), &args), Some(encode("café")));
        assert_eq!(rendered(&param(&["i"]), &args).as_deref(), Some("42"));
        assert_eq!(rendered(&param(&["b"]), &args).as_deref(), Some("true"));
        assert_eq!(rendered(&param(&["o", "deep"]), &args).as_deref(), Some("x"));
        for absent in [&["n"][..], &["o"], &["missing"], &["s", "below"]] {
            assert_eq!(rendered(&param(absent), &args), None, "{absent:?}");
        }
    }

    #[test]
    fn the_sentinel_round_trips_what_is_no_plain_header_text() {
        // Goal: encode/decode agree; plain values pass as they are. Method: table.
        assert_eq!(encode("echo"), "echo");
        assert_eq!(encode("café"), format!("=?base64?{}?=", STANDARD.encode("café")));
        assert_eq!(encode(" x"), "=?base64?IHg=?=");
        assert_eq!(
            encode("=?base64?eA==?="),
            format!("=?base64?{}?=", STANDARD.encode("=?base64?eA==?="))
        );
        for text in ["echo", "café", " x", "a\r\nb", "", "=?x"] {
            assert_eq!(
                decode(encode(text).as_bytes()).as_deref(),
                Some(text.as_bytes()),
                "{text:?}"
            );
        }
        assert_eq!(decode(b"=?base64?!!?="), None);
        assert_eq!(decode(b"a\x01b"), None);
    }
}
