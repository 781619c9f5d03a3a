//! Fuzz harness for the request parser (`fuzz/fuzz_targets/resp.rs`, and
//! the corpus replay test): arbitrary bytes, fed in chunks whose sizes come
//! from the input itself, must give requests or a protocol error, never a
//! panic, a loop without progress, or a request beyond the limits. (The
//! connection bounds how much unparsed input it keeps.)

use super::{Limits, Parser};

/// Small limits, so the limit checks are reached by short inputs.
const LIMITS: Limits = Limits {
    max_bulk_len: 64,
    max_args: 8,
    max_request_len: 256,
};

/// Parses `data` as a client's byte stream.
pub fn parse_stream(data: &[u8]) {
    // The first byte picks the chunk size, so chunk boundaries are fuzzed too.
    let (chunk, body) = match data.split_first() {
        Some((c, rest)) => (usize::from(*c % 16) + 1, rest),
        None => return,
    };
    let mut parser = Parser::new(LIMITS);
    let mut buf: Vec<u8> = Vec::new();
    for piece in body.chunks(chunk) {
        buf.extend_from_slice(piece);
        // Every step consumes input or yields a request; a buffer of n bytes
        // can hold at most n requests, so more steps than that is a loop.
        for _ in 0..=buf.len() + 1 {
            let step = match parser.parse(&buf) {
                Ok(step) => step,
                Err(_) => return,
            };
            assert!(step.consumed <= buf.len(), "consumed more than the buffer");
            if let Some(args) = &step.request {
                assert!(args.len() <= LIMITS.max_args, "too many arguments accepted");
                let total: usize = args.iter().map(Vec::len).sum();
                assert!(
                    total <= LIMITS.max_request_len,
                    "request larger than the limit"
                );
            }
            let progressed = step.consumed > 0 || step.request.is_some();
            buf.drain(..step.consumed);
            if !progressed {
                break;
            }
        }
    }
}
