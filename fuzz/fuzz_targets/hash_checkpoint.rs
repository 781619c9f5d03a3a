//! Fuzz target: `tern_stress::fuzz::hash_checkpoint` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_stress::fuzz::hash_checkpoint(data));
