//! Replies and their RESP2/RESP3 encodings.

/// One reply, encoded per the connection's protocol version.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// A simple string (`+...`); must not contain CR or LF.
    Simple(String),
    /// An error (`-CODE message`); the text starts with the error code.
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Nil,
    /// A missing array: `*-1` in RESP2, `_` in RESP3.
    NilArray,
    /// An array.
    Array(Vec<Reply>),
    /// A map: a flat array in RESP2, `%` in RESP3.
    Map(Vec<(Reply, Reply)>),
    /// A set: an array in RESP2, `~` in RESP3.
    Set(Vec<Reply>),
    /// Text: a bulk string in RESP2, a verbatim string (`=`, `txt:`) in RESP3.
    Verbatim(String),
}

impl Reply {
    /// An error reply with `ERR ` in front of `msg`.
    pub fn err(msg: impl AsRef<str>) -> Reply {
        Reply::Error(format!("ERR {}", msg.as_ref()))
    }

    /// A bulk string from text.
    pub fn text(s: impl Into<String>) -> Reply {
        Reply::Bulk(s.into().into_bytes())
    }

    /// About how many bytes the encoding takes (to bound what a
    /// connection holds before it writes replies out).
    pub fn size_hint(&self) -> usize {
        match self {
            Reply::Simple(s) | Reply::Error(s) | Reply::Verbatim(s) => s.len() + 16,
            Reply::Bulk(b) => b.len() + 16,
            Reply::Array(items) | Reply::Set(items) => {
                16 + items.iter().map(Reply::size_hint).sum::<usize>()
            }
            Reply::Map(pairs) => {
                16 + pairs
                    .iter()
                    .map(|(k, v)| k.size_hint() + v.size_hint())
                    .sum::<usize>()
            }
            Reply::Ok | Reply::Int(_) | Reply::Nil | Reply::NilArray => 16,
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the encoding of this reply to `out`.
    pub fn encode(&self, out: &mut Vec<u8>, resp3: bool) {
        match self {
            Reply::Ok => out.extend_from_slice(b"+OK\r\n"),
            Reply::Simple(s) => line(out, b'+', &clean(s)),
            Reply::Error(s) => line(out, b'-', &clean(s)),
            Reply::Int(i) => line(out, b':', &i.to_string()),
            Reply::Bulk(b) => bulk(out, b'$', b),
            Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::NilArray if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                line(out, b'*', &items.len().to_string());
                items.iter().for_each(|r| r.encode(out, resp3));
            }
            Reply::Set(items) => {
                line(
                    out,
                    if resp3 { b'~' } else { b'*' },
                    &items.len().to_string(),
                );
                items.iter().for_each(|r| r.encode(out, resp3));
            }
            Reply::Map(pairs) => {
                if resp3 {
                    line(out, b'%', &pairs.len().to_string());
                } else {
                    line(out, b'*', &(pairs.len() * 2).to_string());
                }
                for (k, v) in pairs {
                    k.encode(out, resp3);
                    v.encode(out, resp3);
                }
            }
            Reply::Verbatim(s) if resp3 => {
                let mut body = b"txt:".to_vec();
                body.extend_from_slice(s.as_bytes());
                bulk(out, b'=', &body);
            }
            Reply::Verbatim(s) => bulk(out, b'$', s.as_bytes()),
        }
    }
}

fn clean(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

fn line(out: &mut Vec<u8>, tag: u8, s: &str) {
    out.push(tag);
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, tag: u8, b: &[u8]) {
    line(out, tag, &b.len().to_string());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, resp3: bool) -> String {
        let mut out = Vec::new();
        r.encode(&mut out, resp3);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn encodings_per_protocol() {
        assert_eq!(enc(&Reply::Nil, false), "$-1\r\n");
        assert_eq!(enc(&Reply::Nil, true), "_\r\n");
        let m = Reply::Map(vec![(Reply::text("a"), Reply::Int(1))]);
        assert_eq!(enc(&m, false), "*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&m, true), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&Reply::Verbatim("x".into()), true), "=5\r\ntxt:x\r\n");
        assert_eq!(
            enc(&Reply::err("bad\r\nthing"), false),
            "-ERR bad  thing\r\n"
        );
        assert_eq!(enc(&Reply::Set(vec![Reply::Ok]), true), "~1\r\n+OK\r\n");
    }
}
