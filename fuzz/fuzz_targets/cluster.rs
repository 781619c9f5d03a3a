//! Fuzz target: the cluster's topology document, cluster record and value dumps
//! (`tern_server::cluster::fuzz::decode`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_server::cluster::fuzz::decode(data));
