//! Fuzz target: the RESP request parser (`tern_server::resp::fuzz::parse_stream`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_server::resp::fuzz::parse_stream(data));
