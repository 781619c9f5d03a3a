//! RESP replies: the type, an incremental parser, and command encoding.

use crate::error::Error;

/// Deepest nesting of arrays accepted in a reply.
const MAX_DEPTH: usize = 32;
/// Longest bulk string or array accepted (a server never sends more to
/// this client; a larger length is damage).
const MAX_LEN: usize = 1 << 30;

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Simple(String),
    /// `-CODE message`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or `_`.
    Nil,
    /// An array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The error's code (`MOVED`, `ASK`, `TRYAGAIN`, ...), if an error.
    pub fn error_code(&self) -> Option<&str> {
        match self {
            Reply::Error(e) => e.split(' ').next(),
            _ => None,
        }
    }

    /// For `-MOVED slot host:port` and `-ASK slot host:port`: the slot and
    /// the address.
    pub fn redirect(&self) -> Option<(u16, &str)> {
        let Reply::Error(e) = self else { return None };
        let mut parts = e.split(' ');
        match parts.next() {
            Some("MOVED" | "ASK") => {}
            _ => return None,
        }
        let slot = parts.next()?.parse().ok()?;
        Some((slot, parts.next()?))
    }
}

/// Appends the RESP encoding of `args` to `out`.
pub fn encode(out: &mut Vec<u8>, args: &[Vec<u8>]) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Parses one reply from the front of `buf`: `Ok(None)` if `buf` holds
/// only part of one, else the reply and the bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, Error> {
    parse_at(buf, 0, 0)
}

fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], at + end + 2))
}

fn text(b: &[u8]) -> Result<String, Error> {
    String::from_utf8(b.to_vec()).map_err(|_| Error::Protocol("a status line is not UTF-8".into()))
}

fn number(b: &[u8]) -> Result<i64, Error> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Protocol(format!("bad number {:?}", String::from_utf8_lossy(b))))
}

fn length(b: &[u8]) -> Result<Option<usize>, Error> {
    match number(b)? {
        -1 => Ok(None),
        n if (0..=MAX_LEN as i64).contains(&n) => Ok(Some(n as usize)),
        n => Err(Error::Protocol(format!("bad length {n}"))),
    }
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, Error> {
    if depth > MAX_DEPTH {
        return Err(Error::Protocol("replies nested too deeply".into()));
    }
    let Some(&tag) = buf.get(at) else {
        return Ok(None);
    };
    let Some((body, next)) = line(buf, at + 1) else {
        return Ok(None);
    };
    let reply = match tag {
        b'+' => Reply::Simple(text(body)?),
        b'-' => Reply::Error(text(body)?),
        b':' => Reply::Int(number(body)?),
        b'_' => Reply::Nil,
        b'$' => match length(body)? {
            None => Reply::Nil,
            Some(n) => {
                let end = next + n;
                if buf.len() < end + 2 {
                    return Ok(None);
                }
                if &buf[end..end + 2] != b"\r\n" {
                    return Err(Error::Protocol("a bulk string does not end in CRLF".into()));
                }
                return Ok(Some((Reply::Bulk(buf[next..end].to_vec()), end + 2)));
            }
        },
        b'*' => match length(body)? {
            None => Reply::Nil,
            Some(n) => {
                let mut items = Vec::with_capacity(n.min(1024));
                let mut pos = next;
                for _ in 0..n {
                    match parse_at(buf, pos, depth + 1)? {
                        None => return Ok(None),
                        Some((r, p)) => {
                            items.push(r);
                            pos = p;
                        }
                    }
                }
                return Ok(Some((Reply::Array(items), pos)));
            }
        },
        t => {
            return Err(Error::Protocol(format!(
                "unknown reply type {:?}",
                char::from(t)
            )))
        }
    };
    Ok(Some((reply, next)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_type_and_waits_for_the_rest() {
        let wire = b"+OK\r\n-MOVED 3999 127.0.0.1:7002\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n$1\r\nx\r\n*1\r\n:1\r\n_\r\n";
        let mut replies = Vec::new();
        let mut at = 0;
        while let Some((r, n)) = parse(&wire[at..]).unwrap() {
            replies.push(r);
            at += n;
        }
        assert_eq!(at, wire.len());
        assert_eq!(replies[0], Reply::Simple("OK".into()));
        assert_eq!(replies[1].redirect(), Some((3999, "127.0.0.1:7002")));
        assert_eq!(replies[1].error_code(), Some("MOVED"));
        assert_eq!(replies[2], Reply::Int(42));
        assert_eq!(replies[3], Reply::Bulk(b"abc".to_vec()));
        assert_eq!(replies[4], Reply::Nil);
        assert_eq!(
            replies[5],
            Reply::Array(vec![
                Reply::Bulk(b"x".to_vec()),
                Reply::Array(vec![Reply::Int(1)])
            ])
        );
        assert_eq!(replies[6], Reply::Nil);
        // Every strict prefix of a reply is incomplete, never an error.
        let one = b"*2\r\n$3\r\nabc\r\n:7\r\n";
        for cut in 0..one.len() {
            assert_eq!(parse(&one[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn damage_is_an_error() {
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b"$3\r\nabcd\r\n").is_err());
        assert!(parse(b":x\r\n").is_err());
        assert!(parse(b"$-5\r\n").is_err());
        let deep = "*1\r\n".repeat(100);
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn encodes_commands() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET".to_vec(), b"k".to_vec(), b"".to_vec()]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }
}
