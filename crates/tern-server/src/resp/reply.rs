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
    /// A bulk string sharing a stored value's buffer, so a large value is
    /// not copied to make the reply.
    Value(bytes::Bytes),
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
    /// A double (a sorted set's score): a bulk string in RESP2, `,` in
    /// RESP3, written as Redis 7.0 writes it ([`format_double`]).
    Double(f64),
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
            Reply::Value(b) => b.len() + 16,
            Reply::Array(items) | Reply::Set(items) => {
                16 + items.iter().map(Reply::size_hint).sum::<usize>()
            }
            Reply::Map(pairs) => {
                16 + pairs
                    .iter()
                    .map(|(k, v)| k.size_hint() + v.size_hint())
                    .sum::<usize>()
            }
            Reply::Ok | Reply::Int(_) | Reply::Nil | Reply::NilArray | Reply::Double(_) => 32,
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
            Reply::Value(b) => bulk(out, b'$', b),
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
            Reply::Double(d) if resp3 => line(out, b',', &format_double(*d)),
            Reply::Double(d) => bulk(out, b'$', format_double(*d).as_bytes()),
        }
    }
}

/// `d` as C's `printf("%.17g")` writes it (what Redis 7.0 replies with for
/// scores), `inf` and `-inf` for the infinities.
pub fn format_double(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d.is_nan() {
        return "nan".into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // 17 significant digits: one before the point, 16 after.
    let e = format!("{d:.16e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if !(-4..17).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let out = if exp < 0 {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    } else {
        let point = exp as usize + 1;
        if digits.len() <= point {
            format!("{digits}{}", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{out}")
}

fn clean(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// Appends `tag`, `s` and CRLF: a simple reply, or an aggregate's or a
/// bulk string's header.
pub(super) fn line(out: &mut Vec<u8>, tag: u8, s: &str) {
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
        assert_eq!(enc(&Reply::Double(1.5), false), "$3\r\n1.5\r\n");
        assert_eq!(enc(&Reply::Double(1.5), true), ",1.5\r\n");
    }

    #[test]
    fn doubles_print_as_printf_17g() {
        for (d, s) in [
            (1.0, "1"),
            (-2.5, "-2.5"),
            (0.1, "0.10000000000000001"),
            (1.1, "1.1000000000000001"),
            (100.0, "100"),
            (1e17, "1e+17"),
            (1.5e17, "1.5e+17"),
            (12345678901234567.0, "12345678901234568"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (0.5e-5, "5.0000000000000004e-06"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (0.0, "0"),
            (3e300, "3.0000000000000002e+300"),
        ] {
            assert_eq!(format_double(d), s, "{d}");
        }
    }
}
