//! libFuzzer entry of the `sse` target; the check is `tidemark_fuzz::sse::check`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::sse::check(data));
