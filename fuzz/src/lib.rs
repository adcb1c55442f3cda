//! The checks behind tidemark's fuzz targets, one module per target. Each `check` takes the
//! fuzzer's bytes, drives the code under test and panics (a libFuzzer crash) when a property
//! fails; returning means the input was fine.
//!
//! Called by: `fuzz_targets/*.rs` (libFuzzer, instrumented builds through cargo-fuzz) and
//! `tests/corpus.rs` (a plain `cargo test` replay of `corpus/<target>/`). Never: reaches
//! anything but loopback (the `endpoint` target starts its own server on 127.0.0.1:0).
//!
//! - `http_head` drives `parse_head`: ranges stay inside the head, the head alone parses the
//!   same, and every proper prefix of a head is "need more bytes".
//! - `jsonrpc` drives `decode`, `canonical_params` and `fingerprint`: canonical params decode
//!   to themselves; key order and a top-level `_meta` never change the fingerprint.
//! - `event_id` drives `parse_event_id` and `push_event_id`: parse ∘ push is the identity; an
//!   id that parses re-encodes to one that parses the same.
//! - `sse` drives `push_event`: a WHATWG decoder sees exactly the encoded event (id, retry,
//!   data).
//! - `endpoint` drives a server in this process over loopback TCP: it still answers a
//!   well-formed request after every input.

pub mod endpoint;
pub mod event_id;
pub mod http_head;
pub mod jsonrpc;
pub mod sse;

/// The fuzz targets, by name (the file names in `fuzz_targets/` and the corpus folders).
pub const TARGETS: [&str; 5] = ["http_head", "jsonrpc", "event_id", "sse", "endpoint"];

/// Runs target `name`'s check on `data`; `false` for an unknown name.
pub fn check(name: &str, data: &[u8]) -> bool {
    match name {
        "http_head" => http_head::check(data),
        "jsonrpc" => jsonrpc::check(data),
        "event_id" => event_id::check(data),
        "sse" => sse::check(data),
        "endpoint" => endpoint::check(data),
        _ => return false,
    }
    true
}
