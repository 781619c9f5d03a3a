//! Fuzz target: `tern_stress::fuzz::hash_record` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_stress::fuzz::hash_record(data));
