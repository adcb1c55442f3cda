//! libFuzzer entry of the `endpoint` target; the check is `tidemark_fuzz::endpoint::check`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::endpoint::check(data));
