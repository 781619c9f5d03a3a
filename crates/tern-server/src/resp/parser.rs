//! Incremental, bounded RESP request parser.
//!
//! Requests are either multibulk arrays (`*N\r\n$len\r\n…\r\n`, what every
//! client library sends) or inline commands (`PING\r\n`, what a person types
//! into telnet). The parser keeps its progress between calls, so a request
//! that arrives in many small reads is never re-scanned from the start, and
//! it checks every length against [`Limits`] *before* buffering the bytes.
//! It never panics on any input; malformed input yields a [`ProtocolError`]
//! whose text matches the one Redis sends.

use std::fmt;

/// Largest inline request or length line, bytes (as in Redis).
pub const MAX_INLINE_LEN: usize = 64 * 1024;

/// Limits applied while parsing.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted bulk string (argument), bytes.
    pub max_bulk_len: usize,
    /// Largest accepted number of arguments in one request.
    pub max_args: usize,
    /// Largest accepted request (sum of its arguments), bytes.
    pub max_request_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 << 20,
            max_args: 1 << 20,
            max_request_len: 1 << 30,
        }
    }
}

/// Limits for connections that have not authenticated yet (as Redis does).
pub const UNAUTHENTICATED_LIMITS: Limits = Limits {
    max_bulk_len: 16 * 1024,
    max_args: 10,
    max_request_len: 10 * 16 * 1024,
};

/// A malformed request; the connection must be closed after replying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(msg.into()))
}

/// One parsed request: the command name and its arguments.
pub type Args = Vec<Vec<u8>>;

/// What one call to [`Parser::parse`] produced.
#[derive(Debug, PartialEq, Eq)]
pub struct Step {
    /// Bytes of the input consumed; drop them before the next call.
    pub consumed: usize,
    /// A complete request, if one finished.
    pub request: Option<Args>,
}

/// Parser state carried between calls.
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    /// Arguments still expected in the current multibulk request (0: none in progress).
    remaining: usize,
    /// Arguments of the current multibulk request.
    args: Args,
    /// Length of the bulk string whose header was read, awaiting its bytes.
    bulk: Option<usize>,
    /// Bytes of the arguments of the current request parsed so far.
    held: usize,
}

impl Parser {
    /// A parser with `limits`.
    pub fn new(limits: Limits) -> Self {
        Parser {
            limits,
            remaining: 0,
            args: Vec::new(),
            bulk: None,
            held: 0,
        }
    }

    /// Replaces the limits (e.g. after authentication).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Whether a request is partly parsed.
    pub fn in_progress(&self) -> bool {
        self.remaining > 0
    }

    /// Bytes of the partly parsed request already taken out of the input.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Bytes still needed before the pending bulk argument completes, if
    /// one is pending (a hint for buffer reservation).
    pub fn pending_bulk(&self) -> Option<usize> {
        self.bulk.map(|n| n + 2)
    }

    /// Parses from `buf`, which starts where the previous call stopped
    /// consuming. Returns how much was consumed and, when one completed, a
    /// request. Call again while `consumed > 0` or a request came back.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        let mut pos = 0;
        if self.remaining == 0 {
            let Some(&first) = buf.first() else {
                return Ok(Step {
                    consumed: 0,
                    request: None,
                });
            };
            if first != b'*' {
                return parse_inline(buf, &self.limits);
            }
            let Some((line, next)) = read_line(buf, 0, "too big mbulk count string")? else {
                return Ok(Step {
                    consumed: 0,
                    request: None,
                });
            };
            let n =
                parse_int(&line[1..]).ok_or(ProtocolError("invalid multibulk length".into()))?;
            if n > self.limits.max_args as i64 || n > i32::MAX as i64 {
                return err("invalid multibulk length");
            }
            pos = next;
            if n <= 0 {
                return Ok(Step {
                    consumed: pos,
                    request: None,
                });
            }
            self.remaining = n as usize;
            self.args = Vec::with_capacity((n as usize).min(1024));
        }
        while self.remaining > 0 {
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    let Some(&first) = buf.get(pos) else { break };
                    if first != b'$' {
                        return err(format!("expected '$', got '{}'", first as char));
                    }
                    let Some((line, next)) = read_line(buf, pos, "too big bulk count string")?
                    else {
                        break;
                    };
                    let len = parse_int(&line[1..])
                        .filter(|&l| l >= 0 && (l as u64) <= self.limits.max_bulk_len as u64)
                        .ok_or(ProtocolError("invalid bulk length".into()))?
                        as usize;
                    if self.held + len > self.limits.max_request_len {
                        return err(format!(
                            "request exceeds client-query-buffer-limit ({} bytes); send smaller requests or raise the limit",
                            self.limits.max_request_len
                        ));
                    }
                    pos = next;
                    self.bulk = Some(len);
                    len
                }
            };
            let avail = buf.len() - pos;
            if avail < len + 2 {
                break;
            }
            if &buf[pos + len..pos + len + 2] != b"\r\n" {
                return err("expected CRLF after bulk string");
            }
            self.args.push(buf[pos..pos + len].to_vec());
            self.held += len;
            pos += len + 2;
            self.bulk = None;
            self.remaining -= 1;
        }
        if self.remaining == 0 {
            self.held = 0;
            return Ok(Step {
                consumed: pos,
                request: Some(std::mem::take(&mut self.args)),
            });
        }
        Ok(Step {
            consumed: pos,
            request: None,
        })
    }
}

/// Finds the line starting at `start`; `None` if it is not complete yet.
/// Returns the line without its terminator and the offset after it.
fn read_line<'a>(
    buf: &'a [u8],
    start: usize,
    too_big: &str,
) -> Result<Option<(&'a [u8], usize)>, ProtocolError> {
    let rest = &buf[start..];
    let limit = rest.len().min(MAX_INLINE_LEN + 2);
    match rest[..limit].iter().position(|&b| b == b'\n') {
        Some(i) => {
            let end = if i > 0 && rest[i - 1] == b'\r' {
                i - 1
            } else {
                i
            };
            Ok(Some((&rest[..end], start + i + 1)))
        }
        None if rest.len() > MAX_INLINE_LEN => err(too_big),
        None => Ok(None),
    }
}

/// Parses a decimal integer as Redis's `string2ll` does (no spaces, no '+').
pub fn parse_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = (d - b'0') as i64;
        v = if neg {
            v.checked_mul(10)?.checked_sub(d)?
        } else {
            v.checked_mul(10)?.checked_add(d)?
        };
    }
    if neg && v == 0 {
        return None;
    }
    Some(v)
}

/// An inline request, held to the same limits as a multibulk one.
fn parse_inline(buf: &[u8], limits: &Limits) -> Result<Step, ProtocolError> {
    let Some((line, next)) = read_line(buf, 0, "too big inline request")? else {
        return Ok(Step {
            consumed: 0,
            request: None,
        });
    };
    let args = split_args(line).ok_or(ProtocolError("unbalanced quotes in request".into()))?;
    if args.len() > limits.max_args {
        return err("invalid multibulk length");
    }
    if args.iter().any(|a| a.len() > limits.max_bulk_len) {
        return err("invalid bulk length");
    }
    let total: usize = args.iter().map(Vec::len).sum();
    if total > limits.max_request_len {
        return err(format!(
            "request exceeds client-query-buffer-limit ({} bytes); send smaller requests or raise the limit",
            limits.max_request_len
        ));
    }
    Ok(Step {
        consumed: next,
        request: if args.is_empty() { None } else { Some(args) },
    })
}

/// C's `isspace`.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline request into arguments as Redis's `sdssplitargs` does:
/// whitespace separated, with "double quotes" (C escapes, `\xHH`) and
/// 'single quotes'. `None` on unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Args> {
    // A NUL ends the request, as the C string it is in Redis.
    let line = match line.iter().position(|&b| b == 0) {
        Some(end) => &line[..end],
        None => line,
    };
    let mut out = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i >= n {
            return Some(out);
        }
        let mut cur = Vec::new();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 3 < n && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex_val(line[i + 2]), hex_val(line[i + 3])) {
                        cur.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < n {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        o => o,
                    });
                } else if c == b'"' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
                i += 1;
            } else if in_sq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    cur.push(b'\'');
                    i += 2;
                    continue;
                }
                if c == b'\'' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else {
                if i >= n {
                    break;
                }
                match line[i] {
                    c if is_space(c) => break,
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    c => cur.push(c),
                }
                i += 1;
            }
        }
        out.push(cur);
    }
}

#[cfg(test)]
mod tests {
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
}
