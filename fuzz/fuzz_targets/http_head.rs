//! libFuzzer entry of the `http_head` target; the check is `tidemark_fuzz::http_head::check`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::http_head::check(data));
