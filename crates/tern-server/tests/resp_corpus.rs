//! Replays the RESP parser's fuzz corpus (`fuzz/corpus/resp`) and random
//! inputs through the fuzz harness, so `cargo test` catches regressions
//! without the fuzzer.
#![allow(clippy::unwrap_used)]

use tern_server::resp::fuzz::parse_stream;

#[test]
fn resp_fuzz_corpus_replays_without_panics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/resp");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        parse_stream(&data);
        // Every prefix too: a stream cut anywhere.
        for cut in 0..data.len() {
            parse_stream(&data[..cut]);
        }
        n += 1;
    }
    assert!(n >= 5, "the corpus should hold the seed inputs, found {n}");
}

#[test]
fn random_streams_never_panic() {
    let mut x = 0x9E3779B97F4A7C15u64;
    let alphabet = b"*$:+-\r\n0123456789 \"'\\x\0GETSEabc";
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 48) as usize;
        let data: Vec<u8> = (0..len)
            .map(|i| alphabet[((x >> (i % 50)) as usize + i * 7) % alphabet.len()])
            .collect();
        parse_stream(&data);
    }
}
