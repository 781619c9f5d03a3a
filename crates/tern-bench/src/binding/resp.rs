//! Any Redis-protocol server (`resp://host:port`): GET, SET, DEL, and scans
//! through Tern's `SCAN`-free range command when the server has one. Each
//! client thread borrows a connection from a pool, so threads never share
//! a socket. Options: `-p resp.scan_command=NAME` (a command taking
//! `start count` and returning a flat array of keys and values; without
//! it scans fail and are counted as failed operations).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Mutex;

use super::{Binding, EngineStats, ReadResult};
use crate::props::Properties;
use crate::{Error, Result};

/// A RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR …`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` bulk string; `None` for a null bulk.
    Bulk(Option<Vec<u8>>),
    /// `*n` array; `None` for a null array.
    Array(Option<Vec<Reply>>),
}

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: &str) -> Result<Conn> {
        let s = TcpStream::connect(addr)
            .map_err(|e| Error(format!("cannot connect to resp://{addr}: {e}")))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            r: BufReader::new(s.try_clone()?),
            w: s,
            buf: Vec::with_capacity(4096),
        })
    }

    fn call(&mut self, args: &[&[u8]]) -> Result<Reply> {
        self.buf.clear();
        encode_command(&mut self.buf, args);
        self.w.write_all(&self.buf)?;
        read_reply(&mut self.r)
    }
}

/// Appends the RESP encoding of a command to `out`.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn read_line(r: &mut impl BufRead) -> Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(Error::msg("server closed the connection"));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// Reads one reply.
pub fn read_reply(r: &mut impl BufRead) -> Result<Reply> {
    let line = read_line(r)?;
    let (tag, rest) = line.split_at(line.len().min(1));
    let int = || {
        rest.parse::<i64>()
            .map_err(|_| Error(format!("bad RESP line {line:?}")))
    };
    Ok(match tag {
        "+" => Reply::Simple(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Int(int()?),
        "$" => {
            let n = int()?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let mut v = vec![0u8; n as usize + 2];
                r.read_exact(&mut v)?;
                v.truncate(n as usize);
                Reply::Bulk(Some(v))
            }
        }
        "*" => {
            let n = int()?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(read_reply(r)?);
                }
                Reply::Array(Some(items))
            }
        }
        _ => return Err(Error(format!("bad RESP reply {line:?}"))),
    })
}

/// A Redis-protocol server.
pub struct RespBinding {
    addr: String,
    label: String,
    pool: Mutex<Vec<Conn>>,
    scan_command: Option<String>,
}

impl std::fmt::Debug for RespBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespBinding")
            .field("addr", &self.addr)
            .finish()
    }
}

impl RespBinding {
    /// Connects to `addr` (`host:port`) and checks it answers PING.
    pub fn connect(addr: &str, props: &Properties) -> Result<Self> {
        let b = RespBinding {
            addr: addr.to_string(),
            label: format!("resp://{addr}"),
            pool: Mutex::new(Vec::new()),
            scan_command: props.get("resp.scan_command").map(str::to_string),
        };
        match b.call(&[b"PING"])? {
            Reply::Simple(_) | Reply::Bulk(_) => Ok(b),
            other => Err(Error(format!("resp://{addr}: PING answered {other:?}"))),
        }
    }

    /// Sends one command on a pooled connection.
    pub fn call(&self, args: &[&[u8]]) -> Result<Reply> {
        let conn = match self.pool.lock() {
            Ok(mut p) => p.pop(),
            Err(p) => p.into_inner().pop(),
        };
        let mut conn = match conn {
            Some(c) => c,
            None => Conn::open(&self.addr)?,
        };
        let reply = conn.call(args)?;
        match self.pool.lock() {
            Ok(mut p) => p.push(conn),
            Err(p) => p.into_inner().push(conn),
        }
        if let Reply::Error(e) = &reply {
            return Err(Error(format!("server error: {e}")));
        }
        Ok(reply)
    }

    fn info_field(&self, name: &str) -> Option<u64> {
        let Ok(Reply::Bulk(Some(text))) = self.call(&[b"INFO"]) else {
            return None;
        };
        String::from_utf8_lossy(&text).lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|r| r.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
        })
    }
}

impl Binding for RespBinding {
    fn name(&self) -> &str {
        &self.label
    }

    fn read(&self, key: &[u8]) -> ReadResult {
        match self.call(&[b"GET", key])? {
            Reply::Bulk(v) => Ok(v),
            other => Err(Error(format!("GET answered {other:?}"))),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.call(&[b"SET", key, value]).map(|_| ())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.call(&[b"DEL", key]).map(|_| ())
    }

    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let Some(cmd) = &self.scan_command else {
            return Err(Error::msg(
                "scans need an ordered server: set -p resp.scan_command=<command start count>",
            ));
        };
        let n = count.to_string();
        match self.call(&[cmd.as_bytes(), start, n.as_bytes()])? {
            Reply::Array(Some(items)) => {
                let mut seen = 0;
                for pair in items.chunks(2) {
                    if let [Reply::Bulk(Some(k)), Reply::Bulk(Some(v))] = pair {
                        visit(k, v);
                        seen += 1;
                    }
                }
                Ok(seen)
            }
            other => Err(Error(format!("{cmd} answered {other:?}"))),
        }
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            engine_disk_bytes: self.info_field("used_memory"),
            ..Default::default()
        }
    }

    fn data_dir(&self) -> Option<&Path> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"SET", b"k", b"v1"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n");
        let mut r = &b"*3\r\n$2\r\nab\r\n$-1\r\n:7\r\n+OK\r\n"[..];
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"ab".to_vec())),
                Reply::Bulk(None),
                Reply::Int(7)
            ]))
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Simple("OK".into()));
    }
}
