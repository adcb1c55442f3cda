//! `event_id`: the SSE event id / `Last-Event-ID` codec (`<tag:8 hex>-<stream hex>-<seq hex>`).
//!
//! Input: arbitrary bytes, used twice: as a `Last-Event-ID` header value for `parse_event_id`,
//! and (first 16 bytes) as a (tag, stream, seq) triple for `push_event_id`.
//!
//! Properties: no panic; a triple encodes to at most `EVENT_ID_LEN_MAX` lowercase-hex bytes that
//! parse back to the same triple; an id that parses re-encodes to an id that parses the same and
//! is never longer; ids that parse are plain ASCII without SSE line breaks or NUL.

use tidemark::fuzz_support::{parse_event_id, push_event_id, EventSeq, StreamKey};

/// `legacy::session::EVENT_ID_LEN_MAX`.
const EVENT_ID_LEN_MAX: usize = 34;

pub fn check(data: &[u8]) {
    if let Some((tag, stream, seq)) = parse_event_id(data) {
        assert!(data.iter().all(|&b| b == b'-' || b.is_ascii_hexdigit()), "accepted {data:?}");
        let mut again = Vec::new();
        push_event_id(&mut again, tag, stream, seq);
        assert!(again.len() <= data.len(), "re-encoding grew: {data:?} → {again:?}");
        assert_eq!(parse_event_id(&again), Some((tag, stream, seq)), "{again:?}");
    }

    let mut raw = [0u8; 16];
    let n = data.len().min(16);
    raw[..n].copy_from_slice(&data[..n]);
    let tag = u32::from_le_bytes(raw[0..4].try_into().expect("invariant: 4 bytes"));
    let stream = StreamKey(u32::from_le_bytes(raw[4..8].try_into().expect("invariant: 4 bytes")));
    let seq = EventSeq(u64::from_le_bytes(raw[8..16].try_into().expect("invariant: 8 bytes")));
    let mut text = Vec::new();
    push_event_id(&mut text, tag, stream, seq);
    assert!(text.len() <= EVENT_ID_LEN_MAX, "{text:?} longer than {EVENT_ID_LEN_MAX}");
    assert!(text.iter().all(|&b| b == b'-' || matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    assert_eq!(parse_event_id(&text), Some((tag, stream, seq)), "{text:?}");
}
