//! Fuzz target: the cluster's topology document and cluster record
//! (`tern_server::cluster::fuzz::decode`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_server::cluster::fuzz::decode(data));
