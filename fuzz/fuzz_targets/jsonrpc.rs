//! libFuzzer entry of the `jsonrpc` target; the check is `tidemark_fuzz::jsonrpc::check`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::jsonrpc::check(data));
