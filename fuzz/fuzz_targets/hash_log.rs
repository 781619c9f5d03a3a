//! Fuzz target: `tern_stress::fuzz::hash_log` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_stress::fuzz::hash_log(data));
