//! libFuzzer entry of the `event_id` target; the check is `tidemark_fuzz::event_id::check`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::event_id::check(data));
