use super::*;

fn parse_all(input: &[u8], chunk: usize) -> Result<Vec<Args>, ProtocolError> {
    let mut p = Parser::new(Limits::default());
    let mut buf = Vec::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            let step = p.parse(&buf)?;
            buf.drain(..step.consumed);
            let got = step.request.is_some();
            if let Some(r) = step.request {
                out.push(r);
            }
            if !got && step.consumed == 0 {
                break;
            }
        }
    }
    Ok(out)
}

#[test]
fn multibulk_in_any_chunking() {
    let input = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n";
    for chunk in 1..input.len() + 1 {
        let got = parse_all(input, chunk).unwrap();
        assert_eq!(
            got,
            vec![
                vec![b"GET".to_vec(), b"k".to_vec()],
                vec![b"SET".to_vec(), b"k".to_vec(), b"".to_vec()]
            ],
            "chunk {chunk}"
        );
    }
}

#[test]
fn inline_commands_and_quotes() {
    let got = parse_all(b"PING\r\nset a \"b c\\x41\\n\"\r\n\r\necho 'x\\'y'\n", 3).unwrap();
    assert_eq!(got[0], vec![b"PING".to_vec()]);
    assert_eq!(
        got[1],
        vec![b"set".to_vec(), b"a".to_vec(), b"b cA\n".to_vec()]
    );
    assert_eq!(got[2], vec![b"echo".to_vec(), b"x'y".to_vec()]);
    assert_eq!(
        parse_all(b"set \"a\r\n", 100).unwrap_err().0,
        "unbalanced quotes in request"
    );
}

/// Regression: a NUL byte in an inline command used to make the parser
/// report progress without consuming input, so the connection looped
/// and buffered without bound.
#[test]
fn inline_command_with_nul_byte_does_not_loop() {
    let input = b"se\0t a b\r\nPING\r\n\0\r\n";
    let mut p = Parser::new(Limits::default());
    let mut buf = input.to_vec();
    for _ in 0..64 {
        match p.parse(&buf) {
            Err(_) => return,
            Ok(step) if step.request.is_none() && step.consumed == 0 => break,
            Ok(step) => {
                assert!(
                    step.consumed > 0 || step.request.is_some(),
                    "progress without consuming"
                );
                buf.drain(..step.consumed);
            }
        }
    }
    assert!(
        buf.len() < input.len(),
        "the parser must consume or reject the input"
    );
}

/// Regression (found by the `resp` fuzz target): inline requests were
/// not held to the argument-count and size limits.
#[test]
fn inline_requests_obey_the_limits() {
    let limits = Limits {
        max_bulk_len: 4,
        max_args: 2,
        max_request_len: 6,
    };
    for (input, msg) in [
        (&b"a b c\r\n"[..], "invalid multibulk length"),
        (b"abcde\r\n", "invalid bulk length"),
        (b"abcd efg\r\n", "request exceeds client-query-buffer-limit"),
    ] {
        let e = Parser::new(limits).parse(input).unwrap_err();
        assert!(e.0.starts_with(msg), "{input:?}: {}", e.0);
    }
    assert!(Parser::new(limits)
        .parse(b"ab cd\r\n")
        .unwrap()
        .request
        .is_some());
}

#[test]
fn empty_multibulk_is_skipped() {
    assert_eq!(
        parse_all(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", 1)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn malformed_input_is_an_error() {
    let cases: &[(&[u8], &str)] = &[
        (b"*x\r\n", "invalid multibulk length"),
        (b"*1\r\n:1\r\n", "expected '$', got ':'"),
        (b"*1\r\n$-1\r\n", "invalid bulk length"),
        (b"*1\r\n$abc\r\n", "invalid bulk length"),
        (b"*1\r\n$1\r\nab\r\n", "expected CRLF after bulk string"),
        (b"*99999999999\r\n", "invalid multibulk length"),
    ];
    for (input, msg) in cases {
        assert_eq!(parse_all(input, 1000).unwrap_err().0, *msg, "{input:?}");
    }
}

#[test]
fn limits_are_checked_before_buffering() {
    let mut p = Parser::new(Limits {
        max_bulk_len: 10,
        max_args: 2,
        max_request_len: 15,
    });
    assert!(p.parse(b"*3\r\n").is_err());
    let mut p = Parser::new(Limits {
        max_bulk_len: 10,
        max_args: 2,
        max_request_len: 15,
    });
    let s = p.parse(b"*1\r\n").unwrap();
    assert_eq!(s.consumed, 4);
    assert_eq!(p.parse(b"$11\r\n").unwrap_err().0, "invalid bulk length");
    let mut p = Parser::new(Limits {
        max_bulk_len: 10,
        max_args: 2,
        max_request_len: 15,
    });
    let s = p.parse(b"*2\r\n$8\r\n12345678\r\n").unwrap();
    assert_eq!(s.consumed, 18);
    assert!(p
        .parse(b"$8\r\n")
        .unwrap_err()
        .0
        .starts_with("request exceeds"));
}

#[test]
fn too_long_lines_are_rejected() {
    let long = vec![b'a'; MAX_INLINE_LEN + 10];
    assert_eq!(
        parse_all(&long, 1 << 20).unwrap_err().0,
        "too big inline request"
    );
    let mut mb = b"*".to_vec();
    mb.extend(std::iter::repeat_n(b'1', MAX_INLINE_LEN + 10));
    assert_eq!(
        parse_all(&mb, 1 << 20).unwrap_err().0,
        "too big mbulk count string"
    );
}

#[test]
fn integers_follow_redis_rules() {
    assert_eq!(parse_int(b"0"), Some(0));
    assert_eq!(parse_int(b"-12"), Some(-12));
    assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
    for bad in [
        &b""[..],
        b"01",
        b"+1",
        b" 1",
        b"-0",
        b"9223372036854775808",
        b"1a",
        b"-",
    ] {
        assert_eq!(parse_int(bad), None, "{bad:?}");
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..20_000 {
        let mut input = Vec::new();
        for _ in 0..(x % 40) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let alphabet = b"*$\r\n0123-x \"'\\\0\x0b\xff";
            input.push(alphabet[(x % alphabet.len() as u64) as usize]);
        }
        let _ = parse_all(&input, (x % 7) as usize + 1);
    }
}

/// Requests parsed into the buffers of earlier ones read exactly as if
/// parsed fresh (no byte of an earlier, longer argument shows), in any
/// chunking, and the parser keeps no more than its bound of buffers.
#[test]
fn recycled_buffers_carry_nothing_over() {
    let mut input = Vec::new();
    let mut want = Vec::new();
    for i in 0..200usize {
        let key = format!("key-{}", "k".repeat(i % 37));
        let value = vec![b'a' + (i % 26) as u8; (i * 97) % 5000];
        input.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n", key.len()).as_bytes(),
        );
        input.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
        input.extend_from_slice(&value);
        input.extend_from_slice(b"\r\n");
        want.push(vec![b"SET".to_vec(), key.into_bytes(), value]);
        // A GET with a short key after a long value.
        input.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        want.push(vec![b"GET".to_vec(), b"k".to_vec()]);
    }
    for chunk in [1, 7, 64, 4096, input.len()] {
        let mut p = Parser::new(Limits::default());
        let mut buf = Vec::new();
        let mut got = Vec::new();
        for piece in input.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                let step = p.parse(&buf).unwrap();
                buf.drain(..step.consumed);
                let Some(r) = step.request else {
                    if step.consumed == 0 {
                        break;
                    }
                    continue;
                };
                got.push(r.clone());
                p.recycle(r);
                assert_spare_within_bounds(&p);
            }
        }
        assert_eq!(got, want, "chunk {chunk}");
    }
}

/// What the parser keeps spare, counted in full, against its bound.
fn assert_spare_within_bounds(p: &Parser) {
    let header = std::mem::size_of::<Vec<u8>>();
    let held: usize = p
        .spare_args
        .iter()
        .map(|a| a.capacity().max(16) + header)
        .chain(
            p.spare_lists
                .iter()
                .map(|l| (l.capacity() * header).max(16) + header),
        )
        .sum();
    assert_eq!(p.spare_bytes, held);
    assert!(held <= SPARE_BYTES, "{held} bytes kept spare");
}

/// Regression: only the buffers' capacities were counted, so one request
/// of thousands of one-byte arguments left thousands of spare buffers
/// (their headers and smallest blocks uncounted), about 40 times the
/// bound, held for as long as the connection lived.
#[test]
fn many_tiny_arguments_leave_no_more_than_the_bound_spare() {
    let n = 16_384;
    let mut input = format!("*{}\r\n$4\r\nSADD\r\n", n + 1).into_bytes();
    for _ in 0..n {
        input.extend_from_slice(b"$1\r\nx\r\n");
    }
    let mut p = Parser::new(Limits::default());
    let step = p.parse(&input).unwrap();
    assert_eq!(step.consumed, input.len());
    let args = step.request.unwrap();
    assert_eq!(args.len(), n + 1);
    p.recycle(args);
    assert_spare_within_bounds(&p);
    // Reused, they come back out of the count.
    let step = p.parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap();
    assert_eq!(step.request.unwrap(), vec![b"GET".to_vec(), b"k".to_vec()]);
    assert_spare_within_bounds(&p);
}

/// What a partly received request holds counts its arguments' headers
/// too: a million empty arguments hold tens of MiB of `Vec` headers and
/// list, not nothing.
#[test]
fn held_counts_empty_arguments() {
    let mut p = Parser::new(Limits::default());
    let mut input = b"*1001\r\n".to_vec();
    for _ in 0..1000 {
        input.extend_from_slice(b"$0\r\n\r\n");
    }
    let step = p.parse(&input).unwrap();
    assert!(step.request.is_none());
    assert_eq!(step.consumed, input.len());
    assert!(p.held() >= 1000 * ARG_HEADER, "held {}", p.held());
}
