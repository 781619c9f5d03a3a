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
    /// Argument buffers of finished requests, for the next ones (see
    /// [`Parser::recycle`]).
    spare_args: Vec<Vec<u8>>,
    /// What the spare buffers and lists hold, counted by [`spare_cost`]
    /// (at most [`SPARE_BYTES`]).
    spare_bytes: usize,
    /// Argument lists of finished requests.
    spare_lists: Vec<Args>,
}

/// Bytes of argument buffers a parser keeps for reuse: enough for a
/// pipeline of small commands, little beside thousands of connections.
const SPARE_BYTES: usize = 16 << 10;
/// Longest argument list kept for reuse.
const SPARE_LIST_LEN: usize = 64;

/// Memory a spare buffer of `capacity` bytes (or a spare list of
/// `capacity` arguments, at [`ARG_HEADER`] bytes each) costs: its bytes,
/// at least the allocator's smallest block, plus its own header in the
/// list that keeps it. A request of thousands of one-byte arguments must
/// not leave thousands of spare buffers behind.
fn spare_cost(capacity: usize) -> usize {
    capacity.max(16) + ARG_HEADER
}

/// Bytes of one argument's `Vec` header.
const ARG_HEADER: usize = std::mem::size_of::<Vec<u8>>();

/// What an argument of a partly received request holds beyond its bytes:
/// its header in the list (which may be half empty after doubling) and
/// the smallest allocation.
const ARG_COST: usize = 2 * ARG_HEADER + 16;

impl Parser {
    /// A parser with `limits`.
    pub fn new(limits: Limits) -> Self {
        Parser {
            limits,
            remaining: 0,
            args: Vec::new(),
            bulk: None,
            held: 0,
            spare_args: Vec::new(),
            spare_bytes: 0,
            spare_lists: Vec::new(),
        }
    }

    /// Takes back the arguments of a request that has run, so the next
    /// requests parse into their buffers: a pipelined `SET` otherwise costs
    /// four allocations and four frees on the connection's thread. Keeps at
    /// most [`SPARE_BYTES`] of buffers and lists, all costs counted
    /// ([`spare_cost`]), and drops the rest.
    pub fn recycle(&mut self, mut args: Args) {
        for mut a in args.drain(..) {
            let cost = spare_cost(a.capacity());
            if a.capacity() == 0 || self.spare_bytes + cost > SPARE_BYTES {
                continue;
            }
            a.clear();
            self.spare_bytes += cost;
            self.spare_args.push(a);
        }
        let cost = spare_cost(args.capacity() * ARG_HEADER);
        if args.capacity() <= SPARE_LIST_LEN && self.spare_bytes + cost <= SPARE_BYTES {
            self.spare_bytes += cost;
            self.spare_lists.push(args);
        }
    }

    /// A buffer holding `bytes`, reused if one is spare.
    fn arg(&mut self, bytes: &[u8]) -> Vec<u8> {
        match self.spare_args.pop() {
            Some(mut a) => {
                self.spare_bytes -= spare_cost(a.capacity());
                a.extend_from_slice(bytes);
                a
            }
            None => bytes.to_vec(),
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

    /// Bytes of the partly parsed request already taken out of the input,
    /// with what each argument holds beyond its bytes.
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
            let want = (n as usize).min(1024);
            self.args = match self.spare_lists.pop() {
                Some(mut list) => {
                    self.spare_bytes -= spare_cost(list.capacity() * ARG_HEADER);
                    list.reserve(want);
                    list
                }
                None => Vec::with_capacity(want),
            };
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
            let arg = self.arg(&buf[pos..pos + len]);
            self.args.push(arg);
            self.held += len + ARG_COST;
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
mod tests;
